"""Plain rows that cross the store boundary: what a partition replica keeps.

The store (SQLite through APSW, or the in-memory twin) only moves these rows; every decision
about them is made by partitions/machine.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Ordering keys of a pending row: fifo sorts by offset alone (k1 = k2 = 0); priority sorts by
# (priority, deliver_at_ms, offset); fair sorts within a fair key as priority does.
ORDER_FIFO = 0
ORDER_PRIORITY = 1
ORDER_FAIR = 2


@dataclass(slots=True)
class RecordRow:
    """One stored record. ``size`` = len(key) + len(value) + len(headers blob)."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: bytes | None  # deterministic serialization of a Record carrying only headers
    priority: int
    deliver_at_ms: int
    idempotency_key: str | None
    producer_id: str | None
    sequence: int | None
    size: int


@dataclass(slots=True)
class PendingRow:
    """A record a group has not acknowledged yet (materialized into the group's timeline).

    ready=True: deliverable now, ordered by (k1, k2, offset).
    ready=False: waiting until ``visible_at_ms`` — a future deliver_at, a nack delay, or a lease
    held by ``owner`` until ``visible_at_ms`` (the lease deadline).
    ``fkey``: the record's fair key on a fair topic (set when materialized), else None. Stores
    read it back only where they need it; ``pending_put`` never changes it.
    """

    offset: int
    k1: int
    k2: int
    visible_at_ms: int
    ready: bool
    owner: str | None
    delivery_count: int
    fkey: bytes | None = None


# One ready record as Lease reads it (PartitionStore.select_ready_records), a plain tuple: a
# lease of thousands of records builds no row object per record. The fields, in order:
# (offset, delivery_count, timestamp_ms, key, value, headers, priority, deliver_at_ms,
#  idempotency_key, size) -- delivery_count from the group's pending row, the rest from the record.
ReadyRecord = tuple[int, int, int, bytes | None, bytes, bytes | None, int, int, str | None, int]


@dataclass(slots=True)
class GroupRow:
    gid: int
    name: str
    materialized_upto: int  # every record below this offset has a pending row or is acked


@dataclass(slots=True)
class OutboxRow:
    """A dead-lettered record waiting to be forwarded to the dead-letter topic."""

    seq: int
    group: str
    offset: int
    reason: str
    delivery_count: int
    dead_at_ms: int
    record: bytes  # a serialized common_pb2.StoredRecord


@dataclass(slots=True)
class Meta:
    """The partition's scalar state, written in the same transaction as every change."""

    applied_index: int = 0
    next_offset: int = 0
    log_start: int = 0
    log_bytes: int = 0
    clock_ms: int = 0  # highest now_ms applied: time inside the state machine never goes back
    outbox_seq: int = 0
    config: bytes = b""  # a serialized common_pb2.TopicConfig ("" = defaults)
    topic: str = ""
    partition: int = 0

    def copy(self) -> Meta:
        return replace(self)
