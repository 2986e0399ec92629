"""``python -m bench disk`` — what one 100 B record costs on disk, file kind by file kind.

Three broker processes (fsync on, default settings), one partition with 3 replicas; one
``Producer`` sends ``--disk-records`` records of 100 B (as ``bench vs_nats`` fills its topic),
then the run waits until every replica applied them all. Reported per record, on the leader
and on a follower: the growth of each kind of file under ``<data>/partitions/`` (the Raft
journal, its meta, the SQLite file, its ``-wal`` and ``-shm``, the snapshot, anything else)
and their sum. With ``--disk-snapshot`` the brokers snapshot every ``snapshot_interval_s`` =
2 s and the run waits, after the fill, for every replica's snapshot at the last entry and its
compacted journal: the steady state of a partition that has been written to for a while. With
``--disk-idle-s`` the files are measured that many seconds after that, nothing sent meanwhile
(an idle partition's WAL is truncated after ``storage.wal_trim_idle_ms``).

    python -m bench disk [--disk-records 20000] [--disk-snapshot] [--disk-idle-s 0]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

from bench.common import Result
from raftq import inspector
from raftq.client import Producer
from tests.cluster import ProcessCluster

NAME = "disk"
KINDS = (".journal", ".journal.meta", ".sqlite", ".sqlite-wal", ".sqlite-shm", ".snapshot")
TOPIC = "fill"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--disk-records", type=int, default=20000, help="100 B records to send")
    group.add_argument(
        "--disk-snapshot", action="store_true", help="measure after every replica's snapshot"
    )
    group.add_argument(
        "--disk-idle-s", type=float, default=0.0, help="measure after this many idle seconds"
    )


def kind_of(name: str) -> str:
    """The file kind of a partition file's name (longest matching suffix), else ``other``."""
    matches = [k for k in KINDS if name.endswith(k)]
    return max(matches, key=len) if matches else "other"


def bytes_by_kind(directory: Path) -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for path in directory.rglob("*"):
        if path.is_file():
            out[kind_of(path.name)] += path.stat().st_size
    return out


def _wait(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench disk: {what} not within {timeout_s} s")
        time.sleep(0.2)


def _snapshotted(partitions: Path, journal_before: int) -> bool:
    """A snapshot exists and the journal shrank below what the fill wrote into it."""
    kinds = bytes_by_kind(partitions)
    return kinds[".snapshot"] > 0 and kinds[".journal"] < journal_before


def run(options: argparse.Namespace) -> list[Result]:
    records = 2000 if options.quick else options.disk_records
    env = {"RAFTQ_RAFT__SNAPSHOT_INTERVAL_S": "2"} if options.disk_snapshot else {}
    label = "after a snapshot" if options.disk_snapshot else "before a snapshot"
    if options.disk_idle_s:
        label += f", {options.disk_idle_s:g} s idle"
    root = Path(tempfile.mkdtemp(prefix="raftq-bench-disk-"))
    with ProcessCluster(root, fast=False, env=env) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        cluster.wait_leaders(TOPIC)
        leader = admin.describe_topic(TOPIC).partitions[0].leader
        dirs = {b: root / f"broker-{b}" / "partitions" for b in (1, 2, 3)}
        before = {b: bytes_by_kind(d) for b, d in dirs.items()}
        with Producer(cluster.bootstrap) as producer:
            for _ in range(records):
                producer.send(TOPIC, b"x" * 100, partition=0)
            producer.flush(600)
        _wait(lambda: _all_applied(cluster, records), 120, "every replica applied the fill")
        if options.disk_snapshot:
            filled = {b: bytes_by_kind(d)[".journal"] for b, d in dirs.items()}
            _wait(
                lambda: all(_snapshotted(dirs[b], filled[b]) for b in dirs),
                120,
                "a snapshot on every replica",
            )
        time.sleep(options.disk_idle_s)  # nothing sent: what the brokers do while idle
        follower = next(b for b in dirs if b != leader)
        results = []
        for role, broker in (("leader", leader), ("follower", follower)):
            after = bytes_by_kind(dirs[broker])
            growth = {k: (after[k] - before[broker][k]) / records for k in after}
            print(f"  {role} (broker {broker}), {label}, per record:", flush=True)
            for kind in sorted(growth):
                print(f"    {kind:14s} {growth[kind]:8.1f} B  ({after[kind]} B)", flush=True)
            total = sum(growth.values())
            notes = ", ".join(f"{k} {v:.0f}" for k, v in sorted(growth.items()) if round(v))
            results.append(
                Result(f"disk per 100 B record, {role}, {label}", round(total), "B", note=notes)
            )
    return results


def _all_applied(cluster: ProcessCluster, records: int) -> bool:
    """Every replica's SQLite file holds the fill (read offline, read-only, as ``raftq
    inspect`` does: a follower applies up to 10 ms after its leader, the commit push)."""
    for broker in (1, 2, 3):
        found = inspector.select(cluster.root / f"broker-{broker}", TOPIC, 0)
        if not found or found[0].end_offset < records:
            return False
    return True
