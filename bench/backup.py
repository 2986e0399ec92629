"""``raftq backup`` and ``raftq restore`` on three real broker processes (broker/backup.py).

A topic of --backup-partitions partitions (RF 3) is filled with --backup-mb MiB of 1 KiB
records; a full backup is taken, then 1 % more records are produced and an incremental backup
taken; then the backup is restored into three new data directories (the offline step only).
Reported: full backup throughput, the incremental backup's share of the bytes that travelled
and its duration, and the restore's duration per broker. Goal: an incremental backup after a
1 % change moves under 10 % of the bytes (page-level diffs, 64 KiB chunks).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import Result
from raftq import backup
from raftq.client import Producer
from tests.cluster import ProcessCluster

NAME = "backup"
TOPIC = "bulk"
RECORD_BYTES = 1024
INCREMENTAL_GOAL = 0.10


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--backup-mb", type=int, default=256, help="MiB produced first (256)")
    group.add_argument("--backup-partitions", type=int, default=4, help="partitions (4)")


def produce(bootstrap: str, count: int, start: int) -> None:
    payload = b"x" * (RECORD_BYTES - 16)
    with Producer(bootstrap, linger_ms=5) as producer:
        for i in range(start, start + count):
            producer.send(TOPIC, b"%015d:" % i + payload)
        producer.flush(600)


def run(options: argparse.Namespace) -> list[Result]:
    mb = 4 if options.quick else options.backup_mb
    partitions = options.backup_partitions
    records = mb * 1024 * 1024 // RECORD_BYTES
    with tempfile.TemporaryDirectory(prefix="raftq-backup-") as tmp:
        root = Path(tmp)
        with ProcessCluster(root / "cluster", 3) as cluster:
            cluster.wait_ready()
            admin = cluster.admin()
            admin.create_topic(TOPIC, partitions=partitions, replication_factor=3)
            cluster.wait_leaders(TOPIC)
            produce(cluster.bootstrap, records, 0)
            started = time.monotonic()
            full = backup.take_backup(admin, root / "backups", timeout_s=3600)
            full_s = time.monotonic() - started
            produce(cluster.bootstrap, max(records // 100, 1), records)
            started = time.monotonic()
            incremental = backup.take_backup(admin, root / "backups", timeout_s=3600)
            incremental_s = time.monotonic() - started
            raft = {i: cluster.raft_addr(i) for i in (1, 2, 3)}
        restore_s = []
        for i in (1, 2, 3):
            started = time.monotonic()
            backup.restore(root / "backups", root / "restored" / f"broker-{i}", i, raft)
            restore_s.append(time.monotonic() - started)
    share = incremental.copied_bytes / max(incremental.total_bytes, 1)
    note = f"{mb} MiB of {RECORD_BYTES} B records, {partitions} partitions, RF 3"
    return [
        Result("backup: full", full.total_bytes / full_s / 2**20, "MiB/s", note=note),
        Result(
            "backup: incremental after +1 %, bytes copied",
            share * 100,
            "%",
            f"< {INCREMENTAL_GOAL * 100:.0f}",
            share < INCREMENTAL_GOAL,
            f"{incremental.copied_bytes} of {incremental.total_bytes} bytes",
        ),
        Result("backup: incremental after +1 %", incremental_s, "s", note=note),
        Result("restore: one broker (offline)", max(restore_s), "s", note="the slowest of 3"),
    ]
