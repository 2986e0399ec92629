"""A partition's SQLite WAL after a burst (issue 16, disk): an idle partition's ``-wal`` file
is truncated to 0 bytes on every replica, leader and followers (broker/wal_trim.py), and
nothing is lost. Three real replicas, each with its own Raft driver (tests/process/test_replica.py),
the trimmer's clock the test's; then three broker processes, whose backend steps it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raftq import inspector
from raftq.client import Producer
from raftq.replica import PartitionReplica
from raftq.wal_trim import WalTrimmer
from tests.cluster import ProcessCluster
from tests.helpers import wait_until
from tests.process.test_replica import assert_dense, cluster  # noqa: F401 (the fixture)

VALUE = "v" * 1000


def _burst(c: Any, batches: int, tag: str) -> None:
    for i in range(batches):
        c.send([f"{tag}{i}-{j}-{VALUE}" for j in range(100)])


def _wal_bytes(replicas: list[PartitionReplica]) -> dict[str, int]:
    return {r.node.self_addr: Path(r._sqlite.path + "-wal").stat().st_size for r in replicas}  # type: ignore[union-attr]


def test_an_idle_partitions_wal_is_truncated_on_every_replica_and_nothing_is_lost(
    cluster: Any,  # noqa: F811
) -> None:
    c = cluster()
    _burst(c, 30, "a")  # 3,000 records of 1 KB
    c.converged()
    before = _wal_bytes(c.live())
    print("WAL bytes after the burst:", before)
    assert all(size > 512 * 1024 for size in before.values())
    trimmer = WalTrimmer(idle_s=1.0)
    now_s = [0.0]

    def trimmed() -> bool:
        now_s[0] += 0.5
        trimmer.step(c.live, now_s[0])
        return not trimmer.busy() and all(s == 0 for s in _wal_bytes(c.live()).values())

    wait_until(trimmed, 30.0, "every replica's WAL truncated to 0 bytes")
    c.send(["after"])  # the emptied WAL takes writes again
    c.converged()  # every store equal
    values = assert_dense(c.leader())
    assert len(values) == 3001 and values[-1] == "after"
    for broker in c.brokers:  # a restart reads everything back from the file
        replica = c.replicas[broker.address]
        replica.close()
        c.start(broker)
    c.converged()
    assert len(assert_dense(c.leader())) == 3001


def test_a_partition_written_between_two_looks_keeps_its_wal_until_it_is_idle(
    cluster: Any,  # noqa: F811
) -> None:
    c = cluster()
    _burst(c, 10, "a")
    c.converged()
    trimmer = WalTrimmer(idle_s=1.0)
    trimmer.step(c.live, 1.0)  # the first look: counts applied entries
    _burst(c, 1, "b")
    c.converged()
    trimmer.step(c.live, 2.0)  # every replica applied since: not idle, nothing queued
    assert not trimmer.busy()
    assert all(s > 0 for s in _wal_bytes(c.live()).values())
    trimmer.step(c.live, 2.5)  # before idle_s passed: no look
    assert not trimmer.busy()
    now_s = [2.5]

    def trimmed() -> bool:
        now_s[0] += 0.5
        trimmer.step(c.live, now_s[0])
        return not trimmer.busy() and all(s == 0 for s in _wal_bytes(c.live()).values())

    wait_until(trimmed, 30.0, "every replica's WAL truncated once idle")


def test_broker_processes_truncate_an_idle_partitions_wal_and_keep_every_record(
    tmp_path: Path,
) -> None:
    """The backend steps the trimmer: 3 broker processes, storage.wal_trim_idle_ms = 1 s."""
    records = 1500  # 1.5 MB of 1 KB values per partition
    env = {"RAFTQ_STORAGE__WAL_TRIM_IDLE_MS": "1000"}
    with ProcessCluster(tmp_path, 3, env=env) as brokers:
        brokers.wait_ready()
        admin = brokers.admin()
        admin.create_topic("burst", partitions=2, replication_factor=3)
        brokers.wait_leaders("burst")
        with Producer(brokers.bootstrap) as producer:
            for i in range(records):
                for partition in (0, 1):
                    producer.send("burst", f"{i}-{VALUE}".encode(), partition=partition)
            producer.flush(120)
        wals = [tmp_path / f"broker-{b}" / "partitions" for b in (1, 2, 3)]

        def every_wal_empty() -> bool:
            sizes = [p.stat().st_size for d in wals for p in d.rglob("p.*.sqlite-wal")]
            return len(sizes) == 6 and all(s == 0 for s in sizes)

        wait_until(every_wal_empty, 60.0, "every replica's WAL truncated to 0 bytes")
        for broker in (1, 2, 3):  # every replica's file holds every record (read offline)
            ends = {
                r.partition: r.end_offset
                for r in inspector.select(wals[broker - 1].parent, "burst", None)
            }
            assert ends == {0: records, 1: records}
