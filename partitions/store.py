"""The partition store: a small Protocol and its in-memory twin.

The state machine (partitions/machine.py) decides; a store only reads and writes rows. Two stores
implement this Protocol and one contract suite
(tests/contract/test_partition_store_contract.py) runs against both:

- ``SqliteStore`` (partitions/sqlite_store.py): the partition's own SQLite file through APSW.
- ``MemoryStore`` (here): dicts and sorted scans; the twin for unit tests and simulations.

Every mutating call happens inside ``transaction()``; a store rolls the whole transaction back
when the block raises. A nested ``transaction()`` is a savepoint: when only the inner block raises
(and the outer block catches it), only the inner block's changes are undone.

Contract details both stores keep (checked by the contract suite):

- A ``limit`` below 0 is treated as 0 (nothing is returned).
- Calling a method in a way only a bug can (writing an offset, group name or outbox seq that
  exists, materializing an offset the group already has, scheduling, deleting or leasing a row
  that does not exist) raises; inside ``transaction()`` nothing of the call remains.
- Reads of a group id that has no rows answer empty (no rows, 0, None).
- Integers are 64-bit (SQLite's INTEGER): writing one outside that range raises OverflowError.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from raftq.partitions.rows import GroupRow, Meta, OutboxRow, PendingRow, ReadyRecord, RecordRow
from raftq.proto import common_pb2

# Producer ids that contain this mark (the Spark writer's: ``spark:...``, or ``<principal>/spark:``
# once an authenticated broker prefixed it) have their batches tracked (SqliteStore keeps one
# row per batch), so a retried writer can count what an earlier attempt wrote, long after the
# dedup window forgot it.
TRACKED_PRODUCER_MARK = "spark:"


def is_tracked_producer(producer_id: str) -> bool:
    return TRACKED_PRODUCER_MARK in producer_id


class CancelFlag(Protocol):
    """What a backup writer polls between steps (a ``threading.Event`` in the Raft layer)."""

    def is_set(self) -> bool: ...


# writer(path, cancelled): writes a pinned state to path (SqliteStore.pin_backup).
BackupWriter = Callable[[str, CancelFlag], None]


class PartitionStore(Protocol):
    """What a partition replica needs from storage. Errors raised here are I/O failures."""

    def transaction(self) -> contextlib.AbstractContextManager[None]: ...
    def load_meta(self) -> Meta: ...
    def save_meta(self, meta: Meta) -> None: ...

    # records
    def insert_records(self, rows: Sequence[RecordRow]) -> None: ...
    # bare values at first_offset.. (no key, headers, priority, delay or idempotency key): the
    # same rows insert_records would write, without a RecordRow per value
    def insert_values(
        self,
        first_offset: int,
        timestamp_ms: int,
        values: Sequence[bytes],
        producer_id: str | None,
        sequence: int | None,
    ) -> None: ...
    def get_record(self, offset: int) -> RecordRow | None: ...
    def records_from(self, offset: int, limit: int) -> list[RecordRow]: ...
    def get_records(self, offsets: Sequence[int]) -> dict[int, RecordRow]: ...
    def set_record_schedule(self, offset: int, priority: int, deliver_at_ms: int) -> None: ...
    def delete_record(self, offset: int) -> None: ...
    def first_offset_since(self, timestamp_ms: int) -> int | None: ...
    def sizes_from(self, offset: int, limit: int) -> list[tuple[int, int]]: ...
    def delete_records_below(self, offset: int) -> None: ...
    # records' expiry times (offset, expires_at_ms), for those that have a time to live; a
    # record's entry goes with the record (delete_record, delete_records_below)
    def expiry_put(self, entries: Sequence[tuple[int, int]]) -> None: ...
    def expiry_get(self, offsets: Sequence[int]) -> dict[int, int]: ...

    # dedup
    def idempotency_lookup(self, keys: Sequence[str]) -> dict[str, tuple[int, int]]: ...
    def idempotency_put(self, entries: Sequence[tuple[str, int, int]]) -> None: ...
    def idempotency_forget_before(self, timestamp_ms: int) -> int: ...
    def producer_batch(self, producer_id: str, sequence: int) -> list[int] | None: ...
    def producer_last_sequence(self, producer_id: str) -> int | None: ...
    def producer_put(
        self, producer_id: str, sequence: int, offsets: Sequence[int], now_ms: int, keep: int
    ) -> None: ...
    def producer_forget_before(self, timestamp_ms: int) -> int: ...
    # a tracked producer's (is_tracked_producer) records: (how many it wrote, counting those
    # retention or a purge cut away (tracked_cut_below) until they are forgotten, the highest
    # sequence, the offsets of that batch's records still in the log), or None when it has none
    def producer_written(self, producer_id: str) -> tuple[int, int, list[int]] | None: ...
    # before the records below offset go (retention, purge): add each tracked producer's
    # records among them (count, highest sequence) to its cut totals, stamped now_ms
    def tracked_cut_below(self, offset: int, now_ms: int) -> None: ...
    # forget the cut totals last stamped before timestamp_ms; returns how many producers
    def tracked_cut_forget_before(self, timestamp_ms: int) -> int: ...

    # groups and their pending rows
    def group_get(self, name: str) -> GroupRow | None: ...
    def group_create(self, name: str, materialized_upto: int) -> GroupRow: ...
    def group_set_materialized(self, gid: int, upto: int) -> None: ...
    def groups(self) -> list[GroupRow]: ...
    # per group name: the lowest generation a Lease may carry (0 = none); no GroupRow needed
    def fence_get(self, name: str) -> int: ...
    def fence_set(self, name: str, generation: int) -> None: ...
    # recurring records' schedules by name: a common.proto Schedule's bytes each (the machine
    # encodes and decodes them); schedules() in name order
    def schedule_get(self, name: str) -> bytes | None: ...
    def schedule_put(self, name: str, schedule: bytes) -> None: ...
    def schedule_delete(self, name: str) -> None: ...
    def schedules(self) -> list[tuple[str, bytes]]: ...
    def group_forget(self, name: str) -> int:
        """Delete the group's row, its pending rows and its fence; the pending rows dropped."""
        ...

    # Give the group a pending row for every record from from_offset on (up to end_offset,
    # exclusive, when given). With an ``owner``, the rows visible at now_ms are written
    # already leased to it until deadline_ms (delivery 1): a fifo Lease taking fresh records
    # writes each row once. With ``fair_key`` (a fair topic), each row gets its record's fair key
    # (fair_key_of) and joins its group's rotation when ready.
    def materialize(
        self,
        gid: int,
        from_offset: int,
        now_ms: int,
        ordering: int,
        end_offset: int | None = None,
        owner: str | None = None,
        deadline_ms: int = 0,
        fair_key: str | None = None,
    ) -> int: ...
    # records from from_offset on that are visible at now_ms, in offset order, as ReadyRecords
    # with delivery_count 0: what a fifo Lease takes after the group's ready rows
    def fresh_records(self, from_offset: int, now_ms: int, limit: int) -> list[ReadyRecord]: ...
    # the same two choices as (offset, delivery_count, size) only: what a replica nobody waits
    # on needs to apply a Lease and its byte budget (no record columns read into Python)
    def select_ready_offsets(self, gid: int, limit: int) -> list[tuple[int, int, int]]: ...
    def fresh_offsets(
        self, from_offset: int, now_ms: int, limit: int
    ) -> list[tuple[int, int, int]]: ...
    # waiting rows due at now_ms (a leased row, by owner set: lease_grace_ms after its
    # deadline), delivered at least min_count times; promote makes the due rows ready
    def due_offsets(
        self, gid: int, now_ms: int, min_count: int, lease_grace_ms: int = 0
    ) -> list[int]: ...
    def promote(self, gid: int, now_ms: int, lease_grace_ms: int = 0) -> int: ...
    def select_ready(self, gid: int, limit: int) -> list[PendingRow]: ...
    # select_ready joined with the records (rows.ReadyRecord): what a Lease delivers, one read
    def select_ready_records(self, gid: int, limit: int) -> list[ReadyRecord]: ...
    def lease(self, gid: int, offsets: Sequence[int], owner: str, deadline_ms: int) -> None: ...
    def pending_get(self, gid: int, offsets: Sequence[int]) -> dict[int, PendingRow]: ...
    # of ``offsets``, those leased to ``owner`` and live at now_ms: offset -> delivery_count
    def pending_leases(
        self, gid: int, offsets: Sequence[int], owner: str, now_ms: int
    ) -> dict[int, int]: ...
    def pending_put(self, gid: int, rows: Sequence[PendingRow]) -> None: ...
    def pending_delete(self, gid: int, offsets: Sequence[int]) -> None: ...
    def pending_for_offset(self, offset: int) -> dict[int, PendingRow]: ...
    def pending_delete_offset(self, offset: int) -> int: ...
    def pending_delete_below(self, offset: int) -> int: ...
    # ordering (0 fifo, else by (priority, deliver_at_ms)) and fair key (None: not fair) of
    # every pending row, from its record; every fair key leaves its group's rotation and the
    # fair ones join it again (fair_rotation)
    def pending_reorder(self, ordering: int, fair_key: str | None = None) -> None: ...

    # Fair ordering (a fair topic; the section "Fair ordering" below). Per group, the rotation:
    # each fair key with ready rows and its turn. select_fair_* answer what select_ready_* do,
    # in round-robin order over the rotation; fair_served moves the keys of leased offsets
    # (in delivery order) to the back.
    def select_fair_records(self, gid: int, limit: int) -> list[ReadyRecord]: ...
    def select_fair_offsets(self, gid: int, limit: int) -> list[tuple[int, int, int]]: ...
    def fair_served(self, gid: int, offsets: Sequence[int]) -> None: ...
    # (fkey, turn, ready rows) in rotation order, and the group's count of served deliveries
    def fair_rotation(self, gid: int) -> tuple[list[tuple[bytes, int, int]], int]: ...
    def release(self, gid: int, owner: str | None, now_ms: int) -> int: ...
    def lowest_pending(self, gid: int) -> int | None: ...
    def count_leased(self, gid: int, now_ms: int) -> int: ...
    def count_pending(self, gid: int) -> int: ...

    # dead-letter outbox
    def outbox_put(self, rows: Sequence[OutboxRow]) -> None: ...
    def outbox_list(self, limit: int) -> list[OutboxRow]: ...
    def outbox_delete_upto(self, seq: int) -> int: ...

    # whole-store
    def backup_to(self, path: str) -> None: ...
    def pin_backup(self) -> BackupWriter: ...
    def restore_from(self, path: str, *, take: bool = False) -> None: ...
    def dump(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _due(p: PendingRow, now_ms: int, lease_grace_ms: int) -> bool:
    """A waiting row whose wait is over at now_ms; a lease's only lease_grace_ms after it."""
    if p.ready:
        return False
    if p.owner is not None:
        return p.visible_at_ms <= now_ms - lease_grace_ms
    return p.visible_at_ms <= now_ms


def _fits(*values: object) -> None:
    """Refuse what SqliteStore cannot store, as it does: an integer outside 64 bits."""
    for value in values:
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise OverflowError(f"{value} does not fit in a 64-bit integer")


def _fits_row(row: Any) -> None:
    _fits(*(getattr(row, f.name) for f in dataclasses.fields(row)))


def _ready_record(offset: int, delivery_count: int, r: RecordRow) -> ReadyRecord:
    """The columns select_ready_records / fresh_records answer, as SqliteStore's query does."""
    return (
        offset,
        delivery_count,
        r.timestamp_ms,
        r.key,
        r.value,
        r.headers,
        r.priority,
        r.deliver_at_ms,
        r.idempotency_key,
        r.size,
    )


def order_keys(ordering: int, priority: int, deliver_at_ms: int) -> tuple[int, int]:
    """(k1, k2) of a pending row: fifo ignores priority and schedule; priority (and fair, within
    a fair key) sorts by both."""
    return (priority, deliver_at_ms) if ordering else (0, 0)


# -- Fair ordering ------------------------------------------------------------------------------
#
# On a fair topic every pending row carries its record's fair key (fair_key_of). Per group, the
# *rotation* holds each fair key that has ready rows, with a turn; a Lease delivers round-robin
# over the rotation in (turn, fkey) order, each key's rows in (k1, k2, offset) order:
# fair_plan. Turns: a group counts the deliveries served to it (``served``). A key that gains
# its first ready row joins at turn 2 * served + 1: behind every key served so far, keys joining
# together in fkey order. A key delivered as the i-th record (0-based) of a Lease gets turn
# 2 * (served + i + 1) (fair_served; its last delivery counts): the back of the line. A key
# left without ready rows leaves the rotation (a later ready row joins it again, at the back).
# Every store change that makes rows ready or not ready moves keys in one direction only, so
# the rotation is a function of the applied commands alone (the same on every replica).


def fair_key_of(key: bytes | None, headers: bytes | None, fair_key: str) -> bytes:
    """A record's fair key: its key (``fair_key`` ""), else the value of its header named
    ``fair_key``; b"" when it has none (every such record shares the one key b"")."""
    if not fair_key:
        return key or b""
    if not headers:
        return b""
    return common_pb2.Record.FromString(headers).headers.get(fair_key, b"")


def fair_plan(ready_counts: Sequence[int], limit: int) -> list[int]:
    """Round robin over keys in rotation order with these many ready rows each: the key index of
    each of at most ``limit`` deliveries (one per key per round, a key until its rows run out)."""
    order: list[int] = []
    active = [i for i, count in enumerate(ready_counts) if count > 0]
    taken = 0
    while active and len(order) < limit:
        order.extend(active[: limit - len(order)])
        taken += 1
        active = [i for i in active if ready_counts[i] > taken]
    return order


def fair_sequence(order: Sequence[int], rows: Sequence[Sequence[Any]]) -> list[Any]:
    """Deliveries in ``order`` (fair_plan) from each key's rows (its first ones, in order)."""
    cursor = [0] * len(rows)
    out = []
    for i in order:
        out.append(rows[i][cursor[i]])
        cursor[i] += 1
    return out


def fair_turns(fkeys: Sequence[bytes | None], served: int) -> dict[bytes, int]:
    """The turn each key delivered in this order (a Lease's) moves to; ``served`` before it."""
    turns: dict[bytes, int] = {}
    for i, fkey in enumerate(fkeys):
        if fkey is not None:
            turns[fkey] = 2 * (served + i + 1)
    return turns


class MemoryStore:
    """The in-memory twin of SqliteStore: the same behaviour, nothing durable.

    Transactions snapshot the whole state and restore it when the block raises, so a failed
    command leaves the store exactly as it was (as SQLite's rollback does).
    """

    def __init__(self) -> None:
        self._meta = Meta()
        self._records: dict[int, RecordRow] = {}
        self._idem: dict[str, tuple[int, int]] = {}
        self._producers: dict[str, dict[int, tuple[list[int], int]]] = {}
        self._groups: dict[str, GroupRow] = {}
        self._pending: dict[int, dict[int, PendingRow]] = {}
        self._outbox: dict[int, OutboxRow] = {}
        self._fences: dict[str, int] = {}
        self._expiries: dict[int, int] = {}
        self._schedules: dict[str, bytes] = {}
        # fair ordering, per gid: the rotation (fkey -> turn) and the deliveries served
        self._fair_turns: dict[int, dict[bytes, int]] = {}
        self._fair_served: dict[int, int] = {}
        self._fair_used = False  # some row ever had a fair key (else _fair_sync has nothing to do)
        # tracked producers' records cut away: producer -> (records, highest sequence, cut_ms)
        self._cut: dict[str, tuple[int, int, int]] = {}

    # -- transactions -------------------------------------------------------------------------

    def _state(self) -> tuple[Any, ...]:
        return (
            self._meta,
            self._records,
            self._idem,
            self._producers,
            self._groups,
            self._pending,
            self._outbox,
            self._fences,
            self._expiries,
            self._schedules,
            self._fair_turns,
            self._fair_served,
            self._cut,
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        # Every level snapshots (a savepoint, as SQLite nests transactions): an inner block that
        # raises undoes its own changes even when the outer block catches the exception.
        saved = copy.deepcopy(self._state())
        try:
            yield
        except BaseException:
            (
                self._meta,
                self._records,
                self._idem,
                self._producers,
                self._groups,
                self._pending,
                self._outbox,
                self._fences,
                self._expiries,
                self._schedules,
                self._fair_turns,
                self._fair_served,
                self._cut,
            ) = saved
            raise

    def load_meta(self) -> Meta:
        return self._meta.copy()

    def save_meta(self, meta: Meta) -> None:
        _fits_row(meta)
        self._meta = meta.copy()

    # -- records ------------------------------------------------------------------------------

    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        for row in rows:
            _fits_row(row)
            assert row.offset not in self._records, f"offset {row.offset} written twice"
            self._records[row.offset] = copy.copy(row)

    def insert_values(
        self,
        first_offset: int,
        timestamp_ms: int,
        values: Sequence[bytes],
        producer_id: str | None,
        sequence: int | None,
    ) -> None:
        self.insert_records(
            [
                RecordRow(
                    first_offset + i,
                    timestamp_ms,
                    None,
                    value,
                    None,
                    0,
                    0,
                    None,
                    producer_id,
                    sequence,
                    len(value),
                )
                for i, value in enumerate(values)
            ]
        )

    def get_record(self, offset: int) -> RecordRow | None:
        row = self._records.get(offset)
        return copy.copy(row) if row else None

    def records_from(self, offset: int, limit: int) -> list[RecordRow]:
        found = sorted(o for o in self._records if o >= offset)[: max(limit, 0)]
        return [copy.copy(self._records[o]) for o in found]

    def get_records(self, offsets: Sequence[int]) -> dict[int, RecordRow]:
        return {o: copy.copy(self._records[o]) for o in offsets if o in self._records}

    def set_record_schedule(self, offset: int, priority: int, deliver_at_ms: int) -> None:
        _fits(priority, deliver_at_ms)
        assert offset in self._records, f"no record at offset {offset} to schedule"
        row = self._records[offset]
        row.priority, row.deliver_at_ms = priority, deliver_at_ms

    def delete_record(self, offset: int) -> None:
        assert offset in self._records, f"no record at offset {offset} to delete"
        del self._records[offset]
        self._expiries.pop(offset, None)

    def first_offset_since(self, timestamp_ms: int) -> int | None:
        found = [o for o, r in self._records.items() if r.timestamp_ms >= timestamp_ms]
        return min(found) if found else None

    def sizes_from(self, offset: int, limit: int) -> list[tuple[int, int]]:
        found = sorted(o for o in self._records if o >= offset)[: max(limit, 0)]
        return [(o, self._records[o].size) for o in found]

    def delete_records_below(self, offset: int) -> None:
        for o in [o for o in self._records if o < offset]:
            del self._records[o]
        for o in [o for o in self._expiries if o < offset]:
            del self._expiries[o]

    def expiry_put(self, entries: Sequence[tuple[int, int]]) -> None:
        for offset, expires_at_ms in entries:
            _fits(offset, expires_at_ms)
            assert offset in self._records, f"no record at offset {offset} to expire"
            self._expiries[offset] = expires_at_ms

    def expiry_get(self, offsets: Sequence[int]) -> dict[int, int]:
        expiries = self._expiries
        if not expiries:
            return {}
        return {o: expiries[o] for o in offsets if o in expiries}

    # -- dedup --------------------------------------------------------------------------------

    def idempotency_lookup(self, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
        return {k: self._idem[k] for k in keys if k in self._idem}

    def idempotency_put(self, entries: Sequence[tuple[str, int, int]]) -> None:
        for key, offset, ts in entries:
            _fits(offset, ts)
            self._idem[key] = (offset, ts)

    def idempotency_forget_before(self, timestamp_ms: int) -> int:
        old = [k for k, (_, ts) in self._idem.items() if ts < timestamp_ms]
        for k in old:
            del self._idem[k]
        return len(old)

    def producer_batch(self, producer_id: str, sequence: int) -> list[int] | None:
        batch = self._producers.get(producer_id, {}).get(sequence)
        return list(batch[0]) if batch else None

    def producer_last_sequence(self, producer_id: str) -> int | None:
        batches = self._producers.get(producer_id)
        return max(batches) if batches else None

    def producer_written(self, producer_id: str) -> tuple[int, int, list[int]] | None:
        assert is_tracked_producer(producer_id), producer_id
        mine = [r for r in self._records.values() if r.producer_id == producer_id]
        cut_records, cut_last, _ = self._cut.get(producer_id, (0, -1, 0))
        if not mine and not cut_records:
            return None
        last = max([r.sequence or 0 for r in mine] + [cut_last])
        offsets = sorted(r.offset for r in mine if r.sequence == last)
        return len(mine) + cut_records, last, offsets

    def tracked_cut_below(self, offset: int, now_ms: int) -> None:
        _fits(offset, now_ms)
        for r in self._records.values():
            if r.offset < offset and r.producer_id and is_tracked_producer(r.producer_id):
                records, last, _ = self._cut.get(r.producer_id, (0, -1, 0))
                self._cut[r.producer_id] = (records + 1, max(last, r.sequence or 0), now_ms)

    def tracked_cut_forget_before(self, timestamp_ms: int) -> int:
        gone = [p for p, (_, _, cut_ms) in self._cut.items() if cut_ms < timestamp_ms]
        for p in gone:
            del self._cut[p]
        return len(gone)

    def producer_put(
        self, producer_id: str, sequence: int, offsets: Sequence[int], now_ms: int, keep: int
    ) -> None:
        assert keep >= 1, "keep at least the batch being written"
        _fits(sequence, now_ms, *offsets)
        batches = self._producers.setdefault(producer_id, {})
        batches[sequence] = (list(offsets), now_ms)
        for old in sorted(batches)[:-keep]:
            del batches[old]

    def producer_forget_before(self, timestamp_ms: int) -> int:
        gone = [
            p for p, b in self._producers.items() if max(t for _, t in b.values()) < timestamp_ms
        ]
        for p in gone:
            del self._producers[p]
        return len(gone)

    # -- groups -------------------------------------------------------------------------------

    def group_get(self, name: str) -> GroupRow | None:
        row = self._groups.get(name)
        return copy.copy(row) if row else None

    def group_create(self, name: str, materialized_upto: int) -> GroupRow:
        assert name not in self._groups, f"group {name!r} created twice"
        _fits(materialized_upto)
        # SQLite's INTEGER PRIMARY KEY: one above the largest gid in use
        row = GroupRow(
            max((r.gid for r in self._groups.values()), default=0) + 1, name, materialized_upto
        )
        self._groups[name] = row
        self._pending[row.gid] = {}
        return copy.copy(row)

    def group_set_materialized(self, gid: int, upto: int) -> None:
        _fits(upto)
        for row in self._groups.values():
            if row.gid == gid:
                row.materialized_upto = upto

    def groups(self) -> list[GroupRow]:
        return [copy.copy(r) for r in sorted(self._groups.values(), key=lambda r: r.gid)]

    def fence_get(self, name: str) -> int:
        return self._fences.get(name, 0)

    def fence_set(self, name: str, generation: int) -> None:
        _fits(generation)
        self._fences[name] = generation

    def schedule_get(self, name: str) -> bytes | None:
        return self._schedules.get(name)

    def schedule_put(self, name: str, schedule: bytes) -> None:
        self._schedules[name] = bytes(schedule)

    def schedule_delete(self, name: str) -> None:
        del self._schedules[name]  # a KeyError for a name not kept: only a bug deletes one

    def schedules(self) -> list[tuple[str, bytes]]:
        return sorted(self._schedules.items())

    def group_forget(self, name: str) -> int:
        self._fences.pop(name, None)
        row = self._groups.pop(name, None)
        if row is None:
            return 0
        self._fair_turns.pop(row.gid, None)
        self._fair_served.pop(row.gid, None)
        return len(self._pending.pop(row.gid, {}))

    def materialize(
        self,
        gid: int,
        from_offset: int,
        now_ms: int,
        ordering: int,
        end_offset: int | None = None,
        owner: str | None = None,
        deadline_ms: int = 0,
        fair_key: str | None = None,
    ) -> int:
        _fits(deadline_ms)
        pending = self._pending[gid]
        end = INT64_MAX if end_offset is None else end_offset
        offsets = sorted(o for o in self._records if from_offset <= o < end)
        assert not pending.keys() & offsets, f"group {gid} materializes offsets it already has"
        added = 0
        for offset in offsets:
            rec = self._records[offset]
            k1, k2 = order_keys(ordering, rec.priority, rec.deliver_at_ms)
            ready = rec.deliver_at_ms <= now_ms
            fkey = None if fair_key is None else fair_key_of(rec.key, rec.headers, fair_key)
            if ready and owner is not None:
                pending[offset] = PendingRow(offset, k1, k2, deadline_ms, False, owner, 1, fkey)
            else:
                pending[offset] = PendingRow(
                    offset, k1, k2, rec.deliver_at_ms, ready, None, 0, fkey
                )
            added += 1
        self._fair_used = self._fair_used or fair_key is not None
        self._fair_sync()
        return added

    def select_ready_offsets(self, gid: int, limit: int) -> list[tuple[int, int, int]]:
        return [(r[0], r[1], r[9]) for r in self.select_ready_records(gid, limit)]

    def fresh_offsets(
        self, from_offset: int, now_ms: int, limit: int
    ) -> list[tuple[int, int, int]]:
        return [(r[0], r[1], r[9]) for r in self.fresh_records(from_offset, now_ms, limit)]

    def fresh_records(self, from_offset: int, now_ms: int, limit: int) -> list[ReadyRecord]:
        found = sorted(
            o for o, r in self._records.items() if o >= from_offset and r.deliver_at_ms <= now_ms
        )
        out: list[ReadyRecord] = []
        for o in found[: max(limit, 0)]:
            out.append(_ready_record(o, 0, self._records[o]))
        return out

    def due_offsets(
        self, gid: int, now_ms: int, min_count: int, lease_grace_ms: int = 0
    ) -> list[int]:
        return sorted(
            p.offset
            for p in self._pending.get(gid, {}).values()
            if _due(p, now_ms, lease_grace_ms) and p.delivery_count >= min_count
        )

    def promote(self, gid: int, now_ms: int, lease_grace_ms: int = 0) -> int:
        moved = 0
        for p in self._pending.get(gid, {}).values():
            if _due(p, now_ms, lease_grace_ms):
                p.ready, p.owner = True, None
                moved += 1
        self._fair_sync()
        return moved

    def select_ready(self, gid: int, limit: int) -> list[PendingRow]:
        ready = [p for p in self._pending.get(gid, {}).values() if p.ready]
        ready.sort(key=lambda p: (p.k1, p.k2, p.offset))
        return [copy.copy(p) for p in ready[: max(limit, 0)]]

    def select_ready_records(self, gid: int, limit: int) -> list[ReadyRecord]:
        ready = [p for p in self._pending.get(gid, {}).values() if p.ready]
        ready.sort(key=lambda p: (p.k1, p.k2, p.offset))
        out: list[ReadyRecord] = []
        for p in ready:
            if len(out) >= limit:
                break
            r = self._records.get(p.offset)
            if r is not None:  # a pending row always has its record; an inner join, like SQLite
                out.append(_ready_record(p.offset, p.delivery_count, r))
        return out

    def lease(self, gid: int, offsets: Sequence[int], owner: str, deadline_ms: int) -> None:
        pending = self._pending[gid]
        assert len(set(offsets)) == len(offsets) and all(o in pending for o in offsets), (
            f"group {gid} leases offsets it does not have (or twice)"
        )
        _fits(deadline_ms)
        for offset in offsets:
            p = pending[offset]
            p.ready, p.owner, p.visible_at_ms = False, owner, deadline_ms
            p.delivery_count += 1
        self._fair_sync()

    def pending_get(self, gid: int, offsets: Sequence[int]) -> dict[int, PendingRow]:
        pending = self._pending.get(gid, {})
        return {o: copy.copy(pending[o]) for o in offsets if o in pending}

    def pending_leases(
        self, gid: int, offsets: Sequence[int], owner: str, now_ms: int
    ) -> dict[int, int]:
        pending = self._pending.get(gid, {})
        rows = (pending[o] for o in offsets if o in pending)
        return {
            r.offset: r.delivery_count
            for r in rows
            if r.owner == owner and not r.ready and r.visible_at_ms > now_ms and r.delivery_count
        }

    def pending_put(self, gid: int, rows: Sequence[PendingRow]) -> None:
        pending = self._pending[gid]
        for row in rows:
            _fits_row(row)
            earlier = pending.get(row.offset)
            pending[row.offset] = dataclasses.replace(  # the fair key stays the row's own
                row, fkey=None if earlier is None else earlier.fkey
            )
        self._fair_sync()

    def pending_delete(self, gid: int, offsets: Sequence[int]) -> None:
        for offset in offsets:
            self._pending[gid].pop(offset, None)
        self._fair_sync()

    def pending_for_offset(self, offset: int) -> dict[int, PendingRow]:
        return {
            gid: copy.copy(rows[offset]) for gid, rows in self._pending.items() if offset in rows
        }

    def pending_delete_offset(self, offset: int) -> int:
        gone = sum(1 for rows in self._pending.values() if rows.pop(offset, None))
        self._fair_sync()
        return gone

    def pending_delete_below(self, offset: int) -> int:
        gone = 0
        for rows in self._pending.values():
            for o in [o for o in rows if o < offset]:
                del rows[o]
                gone += 1
        self._fair_sync()
        return gone

    def pending_reorder(self, ordering: int, fair_key: str | None = None) -> None:
        for rows in self._pending.values():
            for p in rows.values():
                rec = self._records[p.offset]
                p.k1, p.k2 = order_keys(ordering, rec.priority, rec.deliver_at_ms)
                p.fkey = None if fair_key is None else fair_key_of(rec.key, rec.headers, fair_key)
        for turns in self._fair_turns.values():  # every key leaves; the fair ones join again
            turns.clear()
        self._fair_used = self._fair_used or fair_key is not None
        self._fair_sync()

    def release(self, gid: int, owner: str | None, now_ms: int) -> int:
        released = 0
        for p in self._pending.get(gid, {}).values():
            if p.owner is not None and not p.ready and (owner is None or p.owner == owner):
                p.owner, p.visible_at_ms = None, now_ms  # due now: the next catch-up promotes
                released += 1
        return released

    def lowest_pending(self, gid: int) -> int | None:
        rows = self._pending.get(gid)
        return min(rows) if rows else None

    def count_leased(self, gid: int, now_ms: int) -> int:
        return sum(
            1
            for p in self._pending.get(gid, {}).values()
            if not p.ready and p.owner is not None and p.visible_at_ms > now_ms
        )

    def count_pending(self, gid: int) -> int:
        return len(self._pending.get(gid, {}))

    # -- fair ordering ------------------------------------------------------------------------

    def _fair_sync(self) -> None:
        """Keys without ready rows leave their group's rotation; keys with them that are not in
        it join (what SqliteStore's triggers do row by row)."""
        if not self._fair_used:
            return
        for gid, rows in self._pending.items():
            ready = {p.fkey for p in rows.values() if p.ready and p.fkey is not None}
            turns = self._fair_turns.setdefault(gid, {})
            for fkey in [k for k in turns if k not in ready]:
                del turns[fkey]
            join = 2 * self._fair_served.get(gid, 0) + 1
            for fkey in ready:
                turns.setdefault(fkey, join)
            if not turns:
                del self._fair_turns[gid]

    def _fair_ready(self, gid: int) -> dict[bytes, list[PendingRow]]:
        by_key: dict[bytes, list[PendingRow]] = {}
        for p in self._pending.get(gid, {}).values():
            if p.ready and p.fkey is not None:
                by_key.setdefault(p.fkey, []).append(p)
        for rows in by_key.values():
            rows.sort(key=lambda p: (p.k1, p.k2, p.offset))
        return by_key

    def fair_rotation(self, gid: int) -> tuple[list[tuple[bytes, int, int]], int]:
        turns = self._fair_turns.get(gid, {})
        ready = self._fair_ready(gid)
        rotation = sorted((turn, fkey) for fkey, turn in turns.items())
        return [(k, t, len(ready[k])) for t, k in rotation], self._fair_served.get(gid, 0)

    def select_fair_records(self, gid: int, limit: int) -> list[ReadyRecord]:
        rotation, _ = self.fair_rotation(gid)
        rotation = rotation[: max(limit, 0)]
        order = fair_plan([ready for _, _, ready in rotation], limit)
        ready = self._fair_ready(gid)
        rows = [
            [_ready_record(p.offset, p.delivery_count, self._records[p.offset]) for p in ready[k]]
            for k, _, _ in rotation
        ]
        return fair_sequence(order, rows)

    def select_fair_offsets(self, gid: int, limit: int) -> list[tuple[int, int, int]]:
        return [(r[0], r[1], r[9]) for r in self.select_fair_records(gid, limit)]

    def fair_served(self, gid: int, offsets: Sequence[int]) -> None:
        if not offsets:
            return
        pending = self._pending[gid]
        assert all(o in pending for o in offsets), f"group {gid} served offsets it lacks"
        served = self._fair_served.get(gid, 0)
        turns = self._fair_turns.get(gid, {})
        for fkey, turn in fair_turns([pending[o].fkey for o in offsets], served).items():
            if fkey in turns:
                turns[fkey] = turn
        self._fair_served[gid] = served + len(offsets)

    # -- outbox -------------------------------------------------------------------------------

    def outbox_put(self, rows: Sequence[OutboxRow]) -> None:
        for row in rows:
            _fits_row(row)
            assert row.seq not in self._outbox, f"outbox seq {row.seq} written twice"
            self._outbox[row.seq] = copy.copy(row)

    def outbox_list(self, limit: int) -> list[OutboxRow]:
        return [copy.copy(self._outbox[s]) for s in sorted(self._outbox)[: max(limit, 0)]]

    def outbox_delete_upto(self, seq: int) -> int:
        gone = [s for s in self._outbox if s <= seq]
        for s in gone:
            del self._outbox[s]
        return len(gone)

    # -- whole store --------------------------------------------------------------------------

    def backup_to(self, path: str) -> None:
        raise NotImplementedError("MemoryStore keeps nothing on disk; snapshot SqliteStore")

    def pin_backup(self) -> BackupWriter:
        raise NotImplementedError("MemoryStore keeps nothing on disk; snapshot SqliteStore")

    def restore_from(self, path: str, *, take: bool = False) -> None:
        raise NotImplementedError("MemoryStore keeps nothing on disk; snapshot SqliteStore")

    def dump(self) -> dict[str, Any]:
        return canonical_dump(
            self._meta,
            self._records.values(),
            self._idem.items(),
            (
                (p, s, offsets, ts)
                for p, batches in self._producers.items()
                for s, (offsets, ts) in batches.items()
            ),
            list(self._groups.values()),
            ((gid, row) for gid, rows in self._pending.items() for row in rows.values()),
            self._outbox.values(),
            self._fences.items(),
            self._expiries.items(),
            self._schedules.items(),
            (
                (gid, p.offset, p.fkey)
                for gid, rows in self._pending.items()
                for p in rows.values()
                if p.fkey is not None
            ),
            (
                (gid, fkey, turn, ready)
                for gid in self._fair_turns
                for fkey, turn, ready in self.fair_rotation(gid)[0]
            ),
            self._fair_served.items(),
            ((p, records, last, cut_ms) for p, (records, last, cut_ms) in self._cut.items()),
        )

    def close(self) -> None:
        pass


def canonical_dump(
    meta: Meta,
    records: Iterable[RecordRow],
    idem: Iterable[tuple[str, tuple[int, int]]],
    producers: Iterable[tuple[str, int, Sequence[int], int]],
    groups: Sequence[GroupRow],
    pending: Iterable[tuple[int, PendingRow]],
    outbox: Iterable[OutboxRow],
    fences: Iterable[tuple[str, int]],
    expiries: Iterable[tuple[int, int]],
    schedules: Iterable[tuple[str, bytes]] = (),
    fair_keys: Iterable[tuple[int, int, bytes]] = (),
    fair_rotation: Iterable[tuple[int, bytes, int, int]] = (),
    fair_served: Iterable[tuple[int, int]] = (),
    tracked_cut: Iterable[tuple[str, int, int, int]] = (),
) -> dict[str, Any]:
    """A store's whole state as plain sorted data: equal dumps mean equal replicas."""
    names = {g.gid: g.name for g in groups}
    return {
        "meta": meta.copy(),
        "records": sorted((copy.copy(r) for r in records), key=lambda r: r.offset),
        "idempotency": sorted(idem),
        "producers": sorted((p, s, list(o), t) for p, s, o, t in producers),
        "groups": sorted((g.name, g.materialized_upto) for g in groups),
        "pending": sorted(
            (
                names[g],
                p.offset,
                p.k1,
                p.k2,
                p.visible_at_ms,
                p.ready,
                p.owner or "",
                p.delivery_count,
            )
            for g, p in pending
        ),
        "outbox": sorted((copy.copy(o) for o in outbox), key=lambda o: o.seq),
        "fences": sorted(fences),
        "expiries": sorted(expiries),
        "schedules": sorted(schedules),
        # fair ordering: (group, offset, fair key) of pending rows; (group, fair key, turn,
        # ready rows) of the rotations; (group, deliveries served)
        "fair": (
            sorted((names[g], o, k) for g, o, k in fair_keys),
            sorted((names[g], k, t, r) for g, k, t, r in fair_rotation),
            sorted((names[g], n) for g, n in fair_served),
        ),
        # (tracked producer, records cut away, highest sequence among them, last cut's now_ms)
        "tracked_cut": sorted(tracked_cut),
    }
