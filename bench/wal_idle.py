"""``python -m bench wal_idle`` — a partition replica's SQLite ``-wal`` after a burst, then idle.

Three broker processes (fsync on, default settings), a topic of ``--wal-partitions``
partitions with 3 replicas each; one ``Producer`` sends ``--wal-mb`` MiB of 1 KiB records to
every partition; once every replica applied them, the mean and largest ``-wal`` file per
partition, on the replica that leads it and on one that follows, right then and after
``--wal-idle-s`` seconds with nothing sent (``storage.wal_trim_idle_ms`` is 10 s by default;
extra broker settings through ``RAFTQ_*`` variables, e.g. ``RAFTQ_STORAGE__WAL_TRIM_IDLE_MS=0
RAFTQ_STORAGE__WAL_SIZE_LIMIT_BYTES=-1`` for the behaviour before them). Then, in this
process, what a trim costs the thread that runs it (the driver in a broker): a WAL of
``--wal-mb`` MiB never checkpointed, checkpointed and truncated (``SqliteStore.trim_wal``),
against a PASSIVE checkpoint of the same WAL (what the driver already does every
``wal_autocheckpoint_pages``), median of 5 each.

    python -m bench wal_idle [--wal-partitions 1,48] [--wal-mb 2] [--wal-idle-s 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import Result
from raftq import inspector
from raftq.client import Producer
from raftq.partitions.machine import PartitionMachine
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import partition_pb2
from tests.cluster import ProcessCluster

NAME = "wal_idle"
TOPIC = "burst"
RECORD_BYTES = 1024


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--wal-partitions", default="1,48", help="partition counts, one run each")
    group.add_argument("--wal-mb", type=float, default=2.0, help="MiB sent to each partition")
    group.add_argument("--wal-idle-s", type=float, default=40.0, help="idle seconds, then measure")


def _wal_sizes(root: Path, broker: int) -> dict[int, int]:
    """partition -> its -wal file's bytes on ``broker`` (0 when there is none)."""
    out = {}
    for path in (root / f"broker-{broker}" / "partitions").rglob("p.*.sqlite-wal"):
        out[int(path.name.split(".")[2])] = path.stat().st_size
    return out


def _roles(root: Path, leaders: dict[int, int]) -> dict[str, list[int]]:
    """The -wal bytes of each partition on its leader and on one follower."""
    sizes = {b: _wal_sizes(root, b) for b in (1, 2, 3)}
    out: dict[str, list[int]] = {"leader": [], "follower": []}
    for partition, leader in leaders.items():
        follower = next(b for b in (1, 2, 3) if b != leader)
        out["leader"].append(sizes[leader].get(partition, 0))
        out["follower"].append(sizes[follower].get(partition, 0))
    return out


def _applied(root: Path, partitions: int, records: int) -> bool:
    for broker in (1, 2, 3):
        found = {
            p.partition: p.end_offset
            for p in inspector.select(root / f"broker-{broker}", TOPIC, None)
        }
        if any(found.get(p, 0) < records for p in range(partitions)):
            return False
    return True


def _wait(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench wal_idle: {what} not within {timeout_s} s")
        time.sleep(0.2)


def _cluster_run(partitions: int, mib: float, idle_s: float) -> list[Result]:
    records = max(1, int(mib * 1024 * 1024 / RECORD_BYTES))
    root = Path(tempfile.mkdtemp(prefix="raftq-bench-wal-"))
    with ProcessCluster(root, fast=False) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=partitions, replication_factor=3)
        cluster.wait_leaders(TOPIC)
        with Producer(cluster.bootstrap) as producer:
            for i in range(records):
                for p in range(partitions):
                    producer.send(TOPIC, os.urandom(RECORD_BYTES), partition=p)
                if i % 200 == 199:
                    producer.flush(600)
            producer.flush(600)
        _wait(lambda: _applied(root, partitions, records), 600, "every replica applied the burst")
        leaders = {p.partition: p.leader for p in admin.describe_topic(TOPIC).partitions}
        burst = _roles(root, leaders)
        time.sleep(idle_s)  # nothing is sent: what the brokers do with an idle partition
        idle = _roles(root, leaders)
    results = []
    for when, sizes in (("after the burst", burst), (f"after {idle_s:g} s idle", idle)):
        for role in ("leader", "follower"):
            mean_kib = statistics.mean(sizes[role]) / 1024
            note = f"{partitions} x {mib:g} MiB; largest {max(sizes[role]) / 1024:.0f} KiB"
            print(f"  {partitions} partitions, {role}, {when}: mean {mean_kib:.0f} KiB, {note}")
            results.append(
                Result(
                    f"-wal per partition, {partitions} partitions, {role}, {when}",
                    round(mean_kib),
                    "KiB",
                    note=note,
                )
            )
    return results


def _fill(machine: PartitionMachine, first: int, mib: float) -> int:
    appends = max(1, int(mib * 1024 * 1024 / (10 * RECORD_BYTES)))
    for i in range(first, first + appends):
        append = partition_pb2.Append(values=[os.urandom(RECORD_BYTES) for _ in range(10)])
        machine.apply(
            partition_pb2.PartitionCommand(append=append, now_ms=1000).SerializeToString(),
            i,
            respond=False,
        )
    return first + appends


def _trim_cost(mib: float) -> list[Result]:
    """Seconds of a TRUNCATE checkpoint (the idle trim) and of a PASSIVE one, same WAL."""
    times: dict[str, list[float]] = {
        "trim (checkpoint + truncate to 0)": [],
        "PASSIVE checkpoint": [],
    }
    directory = Path(tempfile.mkdtemp(prefix="raftq-bench-wal-trim-"))
    store = SqliteStore(
        str(directory / "p.sqlite"), synchronous="NORMAL", deferred_checkpoints=True
    )
    machine = PartitionMachine(store)
    index = 1
    for _ in range(5):
        for kind, run in times.items():
            index = _fill(machine, index, mib)
            started = time.perf_counter()
            if kind.startswith("trim"):
                store.trim_wal()
            else:
                store.checkpoint()
            run.append(time.perf_counter() - started)
    store.close()
    return [
        Result(
            f"{kind} of a {mib:g} MiB WAL",
            round(statistics.median(run) * 1000, 2),
            "ms",
            note="median of 5, synchronous NORMAL, one thread",
        )
        for kind, run in times.items()
    ]


def run(options: argparse.Namespace) -> list[Result]:
    counts = [1] if options.quick else [int(n) for n in options.wal_partitions.split(",")]
    mib = 0.5 if options.quick else options.wal_mb
    idle_s = 40.0 if options.quick else options.wal_idle_s
    results = []
    for partitions in counts:
        results += _cluster_run(partitions, mib, idle_s)
    return results + _trim_cost(mib)
