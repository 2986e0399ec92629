"""kill -9 of a partition leader process: writes resume, and no acknowledged record is lost.

Real broker processes (tests/cluster.py). The speed of failover is measured by
``python -m bench failover`` (default raft timings); this test only checks that writes resume
within a generous bound after each of 3 leader kills, and that every acknowledged record is in
the partition afterwards, at the offset it was acknowledged with, exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.failover import ContinuousSender, kill_leader
from raftq.client import Producer
from tests.cluster import ProcessCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_writes_resume_after_three_leader_kills_and_no_acknowledged_record_is_lost(
    tmp_path: Path,
) -> None:
    topic = "failover"
    senders: list[ContinuousSender] = []
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(topic, partitions=3, replication_factor=3)
        cluster.wait_leaders(topic)
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            for trial in range(3):  # a different partition, so a different broker, each time
                sender = ContinuousSender(producer, topic, trial).start()
                try:
                    gap = kill_leader(cluster, sender, timeout_s=15)
                finally:
                    sender.stop()
                senders.append(sender)
                print(f"killed broker {gap.victim}, leader of {topic}/{trial}: {gap.send_s:.2f}s")
                cluster.start(gap.victim)
                cluster.wait_ready()
        cluster.wait_leaders(topic)
        for sender in senders:
            assert not sender.failures, sender.failures[:3]
            stored: dict[bytes, int] = {}
            offset = 0
            while True:
                fetched = admin.fetch(topic, sender.partition, offset, 1000)
                if not fetched.records:
                    break
                offsets = [r.offset for r in fetched.records]
                assert offsets == list(range(offset, offset + len(offsets))), "offsets not dense"
                for r in fetched.records:
                    assert r.value not in stored, f"{r.value!r} stored twice"
                    stored[r.value] = r.offset
                offset = offsets[-1] + 1
            lost = {v: o for v, o in sender.acked.items() if stored.get(v) != o}
            assert not lost, f"{len(lost)} acknowledged records lost or moved: {list(lost)[:5]}"
            assert len(sender.acked) > 20
