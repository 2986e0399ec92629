"""Recurring records on three real broker processes (issue 19): a 1 s schedule keeps firing
across a SIGKILLed partition leader, one record per slot (no duplicate, no gap: the slots
during the failover fire late, within the misfire grace), none before its slot by the
partition's clock, and the restarted broker fires nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftq.client import Admin, StoredRecord
from raftq.partitions.schedules import SCHEDULE_HEADER, SLOT_HEADER
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

INTERVAL_MS = 1000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path, 3) as cluster:
        cluster.wait_ready()
        yield cluster


def fired(admin: Admin, topic: str) -> list[StoredRecord]:
    records = list(admin.fetch(topic, 0, 0, max_records=10_000).records)
    return [r for r in records if r.headers.get(SCHEDULE_HEADER) == b"tick"]


def slot(record: StoredRecord) -> int:
    return int(record.headers[SLOT_HEADER])


def test_a_schedule_fires_each_slot_once_across_a_leader_kill(cluster: ProcessCluster) -> None:
    admin = cluster.admin()
    admin.create_topic("ticks", partitions=1, replication_factor=3)
    cluster.wait_leaders("ticks")
    created = admin.create_schedule("ticks", "tick", b"t", interval_ms=INTERVAL_MS)
    wait_until(lambda: len(fired(admin, "ticks")) >= 3, 30, "three firings")

    leader = cluster.leader_of("ticks", 0)
    cluster.kill(leader)
    survivors = cluster.admin(cluster.live_bootstrap())
    count = len(fired(survivors, "ticks"))
    wait_until(
        lambda: len(fired(survivors, "ticks")) >= count + 4,
        60,
        f"firings after the kill of {leader}",
    )
    cluster.start(leader)  # it replays its journal and must fire nothing of its own again
    cluster.wait_leaders("ticks")
    count = len(fired(survivors, "ticks"))
    wait_until(lambda: len(fired(survivors, "ticks")) >= count + 2, 60, "firings after restart")
    survivors.pause_schedule("ticks", "tick")  # committed: no firing applies after it

    records = fired(survivors, "ticks")
    slots = [slot(r) for r in records]
    assert len(set(slots)) == len(slots), f"a slot fired twice: {slots}"
    expected = [created.created_ms + INTERVAL_MS * (i + 1) for i in range(len(slots))]
    assert slots == expected, "every slot from the first on, in order, none missing"
    early = [(slot(r), r.timestamp_ms) for r in records if r.timestamp_ms < slot(r)]
    assert not early, f"records stamped before their slot: {early}"
    (state,) = survivors.list_schedules("ticks")
    assert state.paused and state.fired == len(slots) and state.missed == 0
