"""Reads of a partition's state over any store: "could a lease find work" and an idempotent
producer's last applied batch (fetch and lag are ``raftq.partitions.machine.fetch_from`` /
``lag_of``, shared with the machine).

Pure functions of (store, meta): the caller decides which store they read — the applier's own,
or a second connection on the same file (broker/partition_reader.py), which sees the last
committed transaction — and passes ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftq.partitions.rows import Meta
from raftq.partitions.store import PartitionStore, is_tracked_producer
from raftq.proto import common_pb2


@dataclass(frozen=True)
class FetchResult:
    records: list[common_pb2.StoredRecord]
    log_start: int
    end: int


@dataclass(frozen=True)
class ProducerState:
    """An idempotent producer's last applied batch on this partition; for a tracked producer
    also how many of its records the log holds (-1: not counted)."""

    last_sequence: int
    last_offsets: list[int]
    records: int = -1


def producer_state(store: PartitionStore, producer_id: str) -> ProducerState | None:
    """The producer's last applied batch, or None when the partition knows none of its
    batches. A tracked producer (ids containing ``spark:``) is read from its records in the
    log and the count of those retention or a purge cut away (kept TRACKED_CUT_KEEP_MS after
    the cut), so it is known that long, dedup window or not; any other from
    the dedup state (forgotten after ``dedup_window_ms``). A writer restarting the producer id
    resumes at ``last_sequence + 1`` (the Spark writer's retried tasks, after ``records``
    rows)."""
    if is_tracked_producer(producer_id):
        written = store.producer_written(producer_id)
        if written is None:
            return None
        count, sequence, written_at = written
        return ProducerState(sequence, written_at, count)
    last = store.producer_last_sequence(producer_id)
    if last is None:
        return None
    offsets = store.producer_batch(producer_id, last)
    assert offsets is not None, f"producer {producer_id!r}: last batch {last} has no offsets"
    return ProducerState(last, list(offsets))


def might_have_ready(
    store: PartitionStore, meta: Meta, group: str, now_ms: int, lease_grace_ms: int = 0
) -> bool:
    """False only when a Lease for ``group`` at ``now_ms`` (with ``clock_skew_ms`` =
    ``lease_grace_ms``) surely returns nothing: no record the group has not seen, nothing
    ready, nothing due. Lets long polls skip Raft writes."""
    row = store.group_get(group)
    if row is None:
        return meta.next_offset > meta.log_start
    if row.materialized_upto < meta.next_offset:
        return True
    if store.select_ready(row.gid, 1):
        return True
    return bool(store.due_offsets(row.gid, now_ms, 0, lease_grace_ms))
