"""``raftq inspect DATA_DIR``: read a broker's partition files offline, read-only.

A broker's data directory holds, per partition replica, ``partitions/<topic>-<id>/
p.<id>.<n>.sqlite`` (the partition's state: records, per-group delivery state, producer
state, dead-letter outbox), beside its Raft journal and snapshot. This module opens those
SQLite files read-only through sqlite-utils (the only ``sqlite_utils`` importer), whether the
broker runs or not: SQLite's WAL lets a reader see the last committed transaction while the
broker writes, and a read-only connection never changes a file.

What it shows (a :class:`PartitionReport` per file; ``--json`` for scripts)::

    summary     per partition: applied Raft index, log start/end, records, bytes, groups,
                producers, dead letters waiting, file sizes
    records     a partition's records from an offset: key, value preview, headers, priority,
                deliver_at, idempotency key, producer/sequence
    groups      per partition and group: committed offset, lag, ready, leased, waiting records
    producers   per partition: idempotent producer ids, last sequence, last update
    dlq         per partition: dead letters waiting to be forwarded (group, offset, reason)

The SQLite file is a view of the Raft log (ARCHITECTURE.md, "The partition state machine"):
what it shows is what that replica has applied, which on a follower may trail the leader.
Errors are :class:`InspectError` (no such directory, no partition matches, a file that is
not a raftq partition); they name what to do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from raftq.proto import common_pb2

VALUE_PREVIEW_BYTES = 64


class InspectError(Exception):
    """Expected failures of an inspection: the message says what to do."""


@dataclass(frozen=True)
class GroupState:
    group: str
    committed: int  # lowest unacknowledged offset
    lag: int  # end offset - committed
    ready: int  # can be delivered now (or once deliver_at passes)
    leased: int  # held by a member until its lease deadline (by the partition's clock)
    waiting: int  # nacked or expired, waiting out a redelivery delay
    not_yet_materialized: int  # records above the group's materialized point (all pending)


@dataclass(frozen=True)
class ProducerState:
    producer_id: str
    last_sequence: int
    updated_ms: int


@dataclass(frozen=True)
class DeadLetter:
    seq: int
    group: str
    offset: int
    reason: str
    delivery_count: int
    dead_at_ms: int


@dataclass(frozen=True)
class RecordView:
    offset: int
    timestamp_ms: int
    key: str | None
    value_preview: str
    value_bytes: int
    headers: dict[str, str]
    priority: int
    deliver_at_ms: int
    idempotency_key: str | None
    producer_id: str | None
    sequence: int | None


@dataclass
class PartitionReport:
    path: str
    topic: str
    partition: int
    applied_index: int
    log_start: int
    end_offset: int
    records: int
    record_bytes: int
    clock_ms: int
    groups: list[GroupState] = field(default_factory=list)
    producers: int = 0
    dead_letters_waiting: int = 0
    file_bytes: dict[str, int] = field(default_factory=dict)  # suffix -> size

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary_row(self) -> tuple[Any, ...]:
        """One row under :data:`SUMMARY_HEADERS`."""
        return (
            self.topic,
            self.partition,
            self.applied_index,
            self.log_start,
            self.end_offset,
            self.records,
            self.record_bytes,
            len(self.groups),
            self.producers,
            self.dead_letters_waiting,
            sum(self.file_bytes.values()),
        )


SUMMARY_HEADERS = (
    "TOPIC",
    "PART",
    "APPLIED",
    "START",
    "END",
    "RECORDS",
    "BYTES",
    "GROUPS",
    "PRODUCERS",
    "DLQ_WAITING",
    "FILE_BYTES",
)


def partition_files(data_dir: Path) -> list[Path]:
    """Every partition SQLite file under a broker's data directory, in a stable order."""
    if not data_dir.is_dir():
        raise InspectError(f"{data_dir} is not a directory: pass a broker's data_dir")
    root = data_dir / "partitions" if (data_dir / "partitions").is_dir() else data_dir
    files = sorted(root.glob("**/*.sqlite"))
    if not files:
        raise InspectError(
            f"no partition files (*.sqlite) under {data_dir}: pass a broker's data_dir "
            "(broker.data_dir), which holds partitions/<topic>-<id>/p.<id>.<n>.sqlite"
        )
    return files


def open_readonly(path: Path) -> sqlite_utils.Database:
    """A read-only connection: never writes, never checkpoints, sees the last commit.

    While the broker runs, its connection keeps a ``-wal`` file: the reader shares it to see
    the last commit. Without one no writer is attached and the file is complete, so it is
    opened ``immutable``: SQLite then creates no ``-wal``/``-shm`` beside it either."""
    shared = path.with_name(path.name + "-wal").exists()
    mode = "mode=ro" if shared else "mode=ro&immutable=1"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=5.0)
    db = sqlite_utils.Database(conn)
    if "meta" not in db.table_names() or "records" not in db.table_names():
        conn.close()
        raise InspectError(f"{path} is not a raftq partition file (no meta/records tables)")
    return db


def _one(db: sqlite_utils.Database, sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = db.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _groups(db: sqlite_utils.Database, end: int, log_start: int, clock_ms: int) -> list[GroupState]:
    groups = []
    for gid, name, upto in db.execute(
        "SELECT gid, name, materialized_upto FROM groups ORDER BY name"
    ).fetchall():
        lowest = _one(db, "SELECT MIN(ofs) FROM pending WHERE gid = ?", (gid,))
        committed = upto if lowest is None else min(lowest, upto)
        committed = max(committed, log_start)
        ready = _one(db, "SELECT COUNT(*) FROM pending WHERE gid = ? AND ready = 1", (gid,))
        leased = _one(
            db,
            "SELECT COUNT(*) FROM pending WHERE gid = ? AND ready = 0 AND owner IS NOT NULL "
            "AND visible_at_ms > ?",
            (gid, clock_ms),
        )
        waiting = _one(db, "SELECT COUNT(*) FROM pending WHERE gid = ? AND ready = 0", (gid,))
        groups.append(
            GroupState(
                group=name,
                committed=committed,
                lag=end - committed,
                ready=ready,
                leased=leased,
                waiting=waiting - leased,
                not_yet_materialized=max(0, end - upto),
            )
        )
    return groups


def _file_sizes(path: Path) -> dict[str, int]:
    stem = path.with_suffix("")
    sizes = {}
    for suffix in (".sqlite", ".sqlite-wal", ".journal", ".snapshot"):
        candidate = stem.with_suffix(suffix)
        if candidate.exists():
            sizes[suffix.lstrip(".")] = candidate.stat().st_size
    return sizes


def report(path: Path) -> PartitionReport:
    """The summary of one partition file (records, groups, producers, outbox, sizes)."""
    db = open_readonly(path)
    try:
        meta = db.execute(
            "SELECT applied_index, next_offset, log_start, clock_ms, topic, partition_id "
            "FROM meta WHERE id = 1"
        ).fetchone()
        applied, end, log_start, clock_ms, topic, partition = meta
        count, size = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM records").fetchone()
        return PartitionReport(
            path=str(path),
            topic=topic,
            partition=partition,
            applied_index=applied,
            log_start=log_start,
            end_offset=end,
            records=count,
            record_bytes=size,
            clock_ms=clock_ms,
            groups=_groups(db, end, log_start, clock_ms),
            producers=_one(db, "SELECT COUNT(DISTINCT producer_id) FROM producers") or 0,
            dead_letters_waiting=_one(db, "SELECT COUNT(*) FROM outbox") or 0,
            file_bytes=_file_sizes(path),
        )
    finally:
        db.conn.close()


def select(data_dir: Path, topic: str | None, partition: int | None) -> list[PartitionReport]:
    """Reports of the partition files that match ``topic``/``partition`` (None: all)."""
    reports = [report(path) for path in partition_files(data_dir)]
    chosen = [
        r
        for r in reports
        if (topic is None or r.topic == topic) and (partition is None or r.partition == partition)
    ]
    if not chosen:
        known = sorted({f"{r.topic}/{r.partition}" for r in reports})
        raise InspectError(
            f"no partition {topic or '*'}/{'*' if partition is None else partition} in "
            f"{data_dir}; this broker holds: {', '.join(known)}"
        )
    return sorted(chosen, key=lambda r: (r.topic, r.partition))


def _text(blob: bytes | None) -> str | None:
    if blob is None:
        return None
    return blob.decode("utf-8", "backslashreplace")


def records(path: Path, offset: int, limit: int) -> Iterator[RecordView]:
    """Up to ``limit`` records of one partition file from ``offset`` on, in offset order."""
    db = open_readonly(path)
    try:
        rows = db.execute(
            "SELECT ofs, timestamp_ms, key, value, headers, priority, deliver_at_ms, "
            "idempotency_key, producer_id, sequence FROM records WHERE ofs >= ? "
            "ORDER BY ofs LIMIT ?",
            (offset, limit),
        ).fetchall()
    finally:
        db.conn.close()
    for ofs, ts, key, value, headers, priority, deliver_at, idem, producer, seq in rows:
        carrier = common_pb2.Record()
        if headers:
            carrier.MergeFromString(headers)  # a Record that carries only the headers
        yield RecordView(
            offset=ofs,
            timestamp_ms=ts,
            key=_text(key),
            value_preview=_text(value[:VALUE_PREVIEW_BYTES]) or "",
            value_bytes=len(value),
            headers={k: _text(v) or "" for k, v in carrier.headers.items()},
            priority=priority,
            deliver_at_ms=deliver_at,
            idempotency_key=idem,
            producer_id=producer,
            sequence=seq,
        )


def producers(path: Path) -> list[ProducerState]:
    """The idempotent producers this partition remembers, with their last sequence."""
    db = open_readonly(path)
    try:
        rows = db.execute(
            "SELECT producer_id, MAX(sequence), MAX(updated_ms) FROM producers "
            "GROUP BY producer_id ORDER BY producer_id"
        ).fetchall()
    finally:
        db.conn.close()
    return [ProducerState(pid, seq, updated) for pid, seq, updated in rows]


def dead_letters(path: Path, limit: int) -> list[DeadLetter]:
    """Dead letters waiting in this partition's outbox to be forwarded to the DLQ topic."""
    db = open_readonly(path)
    try:
        rows = db.execute(
            "SELECT seq, grp, ofs, reason, delivery_count, dead_at_ms FROM outbox "
            "ORDER BY seq LIMIT ?",
            (limit,),
        ).fetchall()
    finally:
        db.conn.close()
    return [DeadLetter(*row) for row in rows]


__all__ = [
    "SUMMARY_HEADERS",
    "DeadLetter",
    "GroupState",
    "InspectError",
    "PartitionReport",
    "ProducerState",
    "RecordView",
    "dead_letters",
    "partition_files",
    "producers",
    "records",
    "report",
    "select",
]
