"""Reads of a partition's state over any store: "could a lease find work" and an idempotent
producer's last applied batch (fetch and lag are ``partitions.machine.fetch_from`` /
``lag_of``, shared with the machine).

Pure functions of (store, meta): the caller decides which store they read — the applier's own,
or a second connection on the same file (broker/partition_reader.py), which sees the last
committed transaction — and passes ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

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
