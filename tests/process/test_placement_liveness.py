"""A fresh metadata leader judges liveness for placement without waiting for broker reports.

Real broker processes (tests/cluster.py). The metadata leader is killed; right after the
survivors elect a new one (which has no broker reports yet: they come twice a second), topics
are created at the replication factor the survivors can hold. Every attempt either waits out
the election (a retriable error) or succeeds: none is refused INVALID_ARGUMENT for "exceeding
the live brokers" while they are up.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(180)


def test_a_fresh_metadata_leader_places_replicas_on_every_live_broker(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        for trial in range(2):
            old = admin.describe_cluster().metadata_leader
            cluster.kill(old, signal.SIGKILL)
            survivors = cluster.admin(cluster.live_bootstrap())
            created = 0
            deadline = time.monotonic() + 30
            # Create topics back to back from the moment the survivors answer: the first
            # ones land in the new leader's first second, before any report reached it.
            while created < 5:
                assert time.monotonic() < deadline, "topics not created within 30 s"
                try:
                    described = survivors.create_topic(
                        f"t{trial}-{created}", partitions=1, replication_factor=2
                    )
                except errors.RaftqError as exc:
                    assert exc.retriable, f"a valid CreateTopic refused: {exc}"
                    continue
                assert described.replication_factor == 2
                assert old not in described.partitions[0].replicas
                created += 1
            cluster.start(old)
            cluster.wait_ready()
            wait_until(lambda: admin.describe_cluster().metadata_leader, 30, "a metadata leader")
