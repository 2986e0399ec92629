"""Reads of a partition's state over any store: fetch, lag, "could a lease find work", and an
idempotent producer's last applied batch.

Pure functions of (store, meta): the caller decides which store they read — the applier's own,
or a second connection on the same file (broker/partition_reader.py), which sees the last
committed transaction — and passes ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from partitions.machine import GroupLag, stored_record
from partitions.rows import Meta
from partitions.store import PartitionStore
from proto import common_pb2


@dataclass(frozen=True)
class FetchResult:
    records: list[common_pb2.StoredRecord]
    log_start: int
    end: int


@dataclass(frozen=True)
class ProducerState:
    """An idempotent producer's last applied batch on this partition."""

    last_sequence: int
    last_offsets: list[int]


def producer_state(store: PartitionStore, producer_id: str) -> ProducerState | None:
    """The producer's last applied batch, or None when the partition remembers none of its
    batches (never seen, or forgotten after ``dedup_window_ms``). A writer restarting the
    producer id resumes at ``last_sequence + 1`` (the Spark writer's retried tasks)."""
    last = store.producer_last_sequence(producer_id)
    if last is None:
        return None
    offsets = store.producer_batch(producer_id, last)
    assert offsets is not None, f"producer {producer_id!r}: last batch {last} has no offsets"
    return ProducerState(last, list(offsets))


def lag_of(store: PartitionStore, meta: Meta, group: str) -> GroupLag | None:
    """A group's committed offset (lowest unacknowledged), lag, pending and leased counts."""
    row = store.group_get(group)
    if row is None:
        return None
    lowest = store.lowest_pending(row.gid)
    committed = row.materialized_upto if lowest is None else min(lowest, row.materialized_upto)
    committed = max(committed, meta.log_start)
    end = meta.next_offset
    return GroupLag(
        group,
        committed,
        end,
        end - committed,
        store.count_pending(row.gid) + max(0, end - row.materialized_upto),
        store.count_leased(row.gid, meta.clock_ms),
    )


def fetch_from(
    store: PartitionStore, meta: Meta, offset: int, max_records: int, max_bytes: int = 0
) -> list[common_pb2.StoredRecord]:
    """Records from ``offset`` (or the log start, if later) in offset order; at least one record
    when any exists, however small ``max_bytes``."""
    if max_records <= 0:
        return []
    out: list[common_pb2.StoredRecord] = []
    total = 0
    for row in store.records_from(max(offset, meta.log_start), max_records):
        if max_bytes and out and total + row.size > max_bytes:
            break
        total += row.size
        out.append(stored_record(row))
    return out


def might_have_ready(store: PartitionStore, meta: Meta, group: str, now_ms: int) -> bool:
    """False only when a Lease for ``group`` at ``now_ms`` surely returns nothing: no record
    the group has not seen, nothing ready, nothing due. Lets long polls skip Raft writes."""
    row = store.group_get(group)
    if row is None:
        return meta.next_offset > meta.log_start
    if row.materialized_upto < meta.next_offset:
        return True
    if store.select_ready(row.gid, 1):
        return True
    return bool(store.due_offsets(row.gid, now_ms, 0))
