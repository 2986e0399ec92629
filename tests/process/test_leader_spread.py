"""Partition leaders are spread: after settling no broker leads more than ceil(P/N)+1 partitions,
and after a broker restarts its leaderships come back (real broker processes).

Placement spreads the preferred leaders (a partition's first replica) evenly; each partition
leader's backend hands leadership to the preferred leader once that broker is alive and
connected (broker/backend.py ``_prefer_leader``). Settled = every partition led by its preferred
leader, which meets the bound.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOPICS = ("spread-a", "spread-b")
PARTITIONS = 12


def leaders(cluster: ProcessCluster) -> dict[tuple[str, int], tuple[int, int]] | None:
    """(topic, partition) -> (leader, preferred leader), once every partition has a live
    leader."""
    admin = cluster.admin(cluster.live_bootstrap())
    found = {}
    for topic in TOPICS:
        try:
            described = admin.describe_topic(topic)
        except errors.RaftqError:
            return None
        for p in described.partitions:
            if not p.leader or not cluster.alive(p.leader):
                return None
            found[(topic, p.partition)] = (p.leader, p.replicas[0])
    return found


def settled(cluster: ProcessCluster) -> dict[int, int] | None:
    """Leaderships per broker once every partition is led by its preferred leader."""
    found = leaders(cluster)
    if found is None or any(leader != preferred for leader, preferred in found.values()):
        return None
    counts = dict.fromkeys(cluster.procs, 0)
    for leader, _ in found.values():
        counts[leader] += 1
    return counts


def test_leaders_spread_and_return_after_a_restart(tmp_path: Path) -> None:
    total = len(TOPICS) * PARTITIONS
    cap = math.ceil(total / 3) + 1
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        for topic in TOPICS:
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        counts = wait_until(lambda: settled(cluster), 60, "leaders on preferred leaders")
        assert counts is not None
        print("settled leaders per broker:", counts)
        assert max(counts.values()) <= cap, counts
        assert min(counts.values()) >= 1, counts

        cluster.kill(1)  # its leaderships move to brokers 2 and 3
        wait_until(lambda: leaders(cluster), 30, "every partition led by a live broker")
        cluster.start(1)
        cluster.wait_ready()
        counts = wait_until(lambda: settled(cluster), 60, "leaderships back after the restart")
        assert counts is not None
        print("after restarting broker 1:", counts)
        assert max(counts.values()) <= cap, counts
        assert counts[1] >= 1, counts
