"""One contract suite for the partition store Protocol, run against both stores.

Every test that takes the ``store`` fixture runs twice: on ``MemoryStore`` (the readable
reference) and on ``SqliteStore`` (the partition's SQLite file). The differential test at the end
drives both with the same seeded operation sequence and compares every answer and the final
``dump()``. Tests named ``test_sqlite_*`` cover what only a durable store has.
"""

from __future__ import annotations

import array
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.partitions.reader import ProducerState, producer_state
from raftq.partitions.rows import (
    ORDER_FAIR,
    ORDER_FIFO,
    ORDER_PRIORITY,
    Meta,
    OutboxRow,
    PendingRow,
    RecordRow,
)
from raftq.partitions.sqlite_store import TRACKED_RECORDS, SqliteStore
from raftq.partitions.store import MemoryStore, PartitionStore


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    s: PartitionStore = (
        MemoryStore() if request.param == "memory" else SqliteStore(str(tmp_path / "p.db"))
    )
    yield s
    s.close()


def rec(
    offset: int,
    *,
    ts: int = 1000,
    priority: int = 0,
    deliver_at: int = 0,
    value: bytes | None = None,
    key: bytes | None = None,
    headers: bytes | None = None,
    idem: str | None = None,
    producer: str | None = None,
    sequence: int | None = None,
) -> RecordRow:
    value = f"v{offset}".encode() if value is None else value
    size = len(key or b"") + len(value) + len(headers or b"")
    return RecordRow(
        offset, ts, key, value, headers, priority, deliver_at, idem, producer, sequence, size
    )


def pend(
    offset: int,
    *,
    k1: int = 0,
    k2: int = 0,
    visible: int = 0,
    ready: bool = True,
    owner: str | None = None,
    count: int = 0,
) -> PendingRow:
    return PendingRow(offset, k1, k2, visible, ready, owner, count)


def outbox(seq: int, offset: int = 0) -> OutboxRow:
    return OutboxRow(seq, "g", offset, "max_deliveries", 5, 77, b"\x08\x01")


def fill(store: PartitionStore, offsets: list[int], **kw: Any) -> None:
    with store.transaction():
        store.insert_records([rec(o, **kw) for o in offsets])


# -- meta -------------------------------------------------------------------------------------


def test_meta_starts_at_defaults(store: PartitionStore) -> None:
    assert store.load_meta() == Meta()


def test_meta_round_trip(store: PartitionStore) -> None:
    meta = Meta(
        applied_index=41,
        next_offset=7,
        log_start=3,
        log_bytes=2**40,
        clock_ms=1_700_000_000_000,
        outbox_seq=9,
        config=b"\x08\x01\x10\xff\x00",
        topic="orders.eu",
        partition=12,
    )
    with store.transaction():
        store.save_meta(meta)
    assert store.load_meta() == meta
    loaded = store.load_meta()
    loaded.applied_index = 99  # a copy: changing it changes nothing stored
    assert store.load_meta() == meta
    meta.next_offset = 1000  # and the store kept its own copy of what was saved
    assert store.load_meta().next_offset == 7


# -- records ----------------------------------------------------------------------------------


def test_insert_and_get_record_round_trip(store: PartitionStore) -> None:
    rows = [
        rec(0),
        rec(1, key=b"k", headers=b"\x1a\x03\n\x01a", priority=-3, deliver_at=5, idem="i-1"),
        rec(2, key=b"", value=b"", producer="p", sequence=2**40),
        rec(3, value=bytes(range(256)), ts=-1),
    ]
    with store.transaction():
        store.insert_records(rows)
    for row in rows:
        assert store.get_record(row.offset) == row
    assert store.get_record(4) is None
    assert store.get_record(-1) is None
    got = store.get_record(1)
    assert got is not None
    got.value = b"changed"
    assert store.get_record(1) == rows[1]


def test_insert_values_writes_the_rows_insert_records_would(store: PartitionStore) -> None:
    values = [b"a", b"", bytes(range(256))]
    with store.transaction():
        store.insert_values(7, 42, values, "p", 3)
        store.insert_values(10, 43, [b"z"], None, None)
    expected = [
        RecordRow(7 + i, 42, None, v, None, 0, 0, None, "p", 3, len(v))
        for i, v in enumerate(values)
    ]
    expected.append(RecordRow(10, 43, None, b"z", None, 0, 0, None, None, None, 1))
    assert store.records_from(0, 10) == expected
    with pytest.raises(Exception), store.transaction():  # noqa: B017 - AssertionError or apsw's
        store.insert_values(11, 44, [b"ok", b"new"], None, None)  # offsets 11, 12 are free
        store.insert_values(10, 44, [b"again"], None, None)  # offset 10 exists
    assert store.records_from(0, 10) == expected


def test_insert_twice_raises_and_rolls_back(store: PartitionStore) -> None:
    fill(store, [0, 1])
    before = store.dump()
    with pytest.raises(Exception), store.transaction():  # noqa: B017 - AssertionError or apsw's
        store.insert_records([rec(2), rec(1)])
    assert store.dump() == before


def test_records_from_orders_limits_and_skips_holes(store: PartitionStore) -> None:
    fill(store, [5, 0, 3, 1, 9])
    assert [r.offset for r in store.records_from(0, 100)] == [0, 1, 3, 5, 9]
    assert [r.offset for r in store.records_from(2, 2)] == [3, 5]
    assert [r.offset for r in store.records_from(4, 100)] == [5, 9]
    assert [r.offset for r in store.records_from(-10, 1)] == [0]
    assert store.records_from(10, 100) == []
    assert store.records_from(0, 0) == []
    assert store.records_from(0, -1) == []  # a negative limit returns nothing
    assert store.records_from(9, 1) == [rec(9)]


def test_get_records_returns_only_existing(store: PartitionStore) -> None:
    fill(store, [0, 1, 2, 4, 100, 1000])
    assert store.get_records([]) == {}
    assert store.get_records([2, 0, 3, 4]) == {0: rec(0), 2: rec(2), 4: rec(4)}
    # sparse offsets (the store may read them one by one) and duplicates
    assert store.get_records([1000, 1, 555, 1]) == {1: rec(1), 1000: rec(1000)}
    assert store.get_records([7, 8]) == {}


def test_set_record_schedule(store: PartitionStore) -> None:
    fill(store, [0, 1])
    with store.transaction():
        store.set_record_schedule(1, -7, 123)
    row = store.get_record(1)
    assert row is not None
    assert (row.priority, row.deliver_at_ms) == (-7, 123)
    assert store.get_record(0) == rec(0)
    before = store.dump()
    with pytest.raises(AssertionError), store.transaction():
        store.set_record_schedule(2, 1, 1)
    assert store.dump() == before


def test_delete_record(store: PartitionStore) -> None:
    fill(store, [0, 1, 2])
    with store.transaction():
        store.delete_record(1)
    assert store.get_record(1) is None
    assert [r.offset for r in store.records_from(0, 10)] == [0, 2]
    before = store.dump()
    with pytest.raises(AssertionError), store.transaction():
        store.delete_record(1)
    assert store.dump() == before


def test_first_offset_since(store: PartitionStore) -> None:
    assert store.first_offset_since(0) is None
    with store.transaction():
        store.insert_records([rec(0, ts=10), rec(1, ts=20), rec(2, ts=20), rec(3, ts=30)])
    assert store.first_offset_since(-5) == 0
    assert store.first_offset_since(10) == 0
    assert store.first_offset_since(11) == 1
    assert store.first_offset_since(20) == 1
    assert store.first_offset_since(30) == 3
    assert store.first_offset_since(31) is None


def test_sizes_from(store: PartitionStore) -> None:
    with store.transaction():
        store.insert_records([rec(0, value=b"a"), rec(2, value=b"bbb", key=b"kk"), rec(3)])
    assert store.sizes_from(0, 10) == [(0, 1), (2, 5), (3, 2)]
    assert store.sizes_from(1, 1) == [(2, 5)]
    assert store.sizes_from(4, 10) == []
    assert store.sizes_from(0, 0) == []
    assert store.sizes_from(0, -3) == []


def test_delete_records_below(store: PartitionStore) -> None:
    fill(store, [0, 1, 2, 5, 6])
    with store.transaction():
        store.delete_records_below(5)
    assert [r.offset for r in store.records_from(0, 10)] == [5, 6]
    with store.transaction():
        store.delete_records_below(0)  # nothing below
    assert [r.offset for r in store.records_from(0, 10)] == [5, 6]
    with store.transaction():
        store.delete_records_below(100)
    assert store.records_from(0, 10) == []


# -- dedup ------------------------------------------------------------------------------------


def test_idempotency_put_lookup_forget(store: PartitionStore) -> None:
    assert store.idempotency_lookup([]) == {}
    assert store.idempotency_lookup(["a"]) == {}
    with store.transaction():
        store.idempotency_put([("a", 0, 100), ("b", 1, 200), ("c", 2, 300)])
        store.idempotency_put([("b", 5, 250)])  # a key put again: the newer entry wins
    assert store.idempotency_lookup(["a", "b", "x", "a"]) == {"a": (0, 100), "b": (5, 250)}
    with store.transaction():
        assert store.idempotency_forget_before(250) == 1  # strictly before
    assert store.idempotency_lookup(["a", "b", "c"]) == {"b": (5, 250), "c": (2, 300)}
    with store.transaction():
        assert store.idempotency_forget_before(0) == 0
        assert store.idempotency_forget_before(10**12) == 2
    assert store.idempotency_lookup(["b", "c"]) == {}


def test_idempotency_lookup_many_keys(store: PartitionStore) -> None:
    keys = [f"key-{i}" for i in range(1234)]
    with store.transaction():
        store.idempotency_put([(k, i, i) for i, k in enumerate(keys)])
    found = store.idempotency_lookup([*keys, "missing"])
    assert found == {k: (i, i) for i, k in enumerate(keys)}


def test_producer_batches(store: PartitionStore) -> None:
    assert store.producer_batch("p", 0) is None
    assert store.producer_last_sequence("p") is None
    with store.transaction():
        store.producer_put("p", 0, [0, 1, 2], 100, 3)
        store.producer_put("p", 1, [3], 110, 3)
        store.producer_put("q", 7, [-1, 2**40], 120, 3)
    assert store.producer_batch("p", 0) == [0, 1, 2]
    assert store.producer_batch("p", 1) == [3]
    assert store.producer_batch("p", 2) is None
    assert store.producer_batch("q", 7) == [-1, 2**40]
    assert store.producer_last_sequence("p") == 1
    assert store.producer_last_sequence("q") == 7
    batch = store.producer_batch("p", 0)
    assert batch is not None
    batch.append(99)
    assert store.producer_batch("p", 0) == [0, 1, 2]
    with store.transaction():
        store.producer_put("p", 1, [4, 5], 111, 3)  # the same sequence again replaces it
    assert store.producer_batch("p", 1) == [4, 5]


def test_producer_put_keeps_only_the_last_batches(store: PartitionStore) -> None:
    with store.transaction():
        for seq in range(8):
            store.producer_put("p", seq, [seq], 100 + seq, 3)
    assert [s for s in range(8) if store.producer_batch("p", s) is not None] == [5, 6, 7]
    assert store.producer_last_sequence("p") == 7
    # "the last N" counts batches, not sequence numbers: a gap does not cost a batch
    with store.transaction():
        store.producer_put("r", 0, [0], 1, 3)
        store.producer_put("r", 10, [1], 2, 3)
        store.producer_put("r", 20, [2], 3, 3)
        store.producer_put("r", 21, [3], 4, 3)
    assert [s for s in (0, 10, 20, 21) if store.producer_batch("r", s)] == [10, 20, 21]
    with store.transaction():
        store.producer_put("s", 0, [0], 1, 1)
        store.producer_put("s", 1, [1], 2, 1)
    assert (store.producer_batch("s", 0), store.producer_batch("s", 1)) == (None, [1])


def test_producer_forget_before_counts_producers(store: PartitionStore) -> None:
    with store.transaction():
        store.producer_put("old", 0, [0], 100, 5)
        store.producer_put("old", 1, [1], 150, 5)
        store.producer_put("mixed", 0, [2], 100, 5)
        store.producer_put("mixed", 1, [3], 300, 5)  # its newest batch is recent: kept whole
        store.producer_put("new", 0, [4], 400, 5)
    with store.transaction():
        assert store.producer_forget_before(150) == 0  # strictly before
        assert store.producer_forget_before(200) == 1
    assert store.producer_last_sequence("old") is None
    assert store.producer_batch("old", 0) is None
    assert store.producer_batch("mixed", 0) == [2]
    assert store.producer_last_sequence("mixed") == 1
    with store.transaction():
        assert store.producer_forget_before(10**9) == 2
    assert store.dump()["producers"] == []


def test_producer_state_is_the_last_applied_batch(store: PartitionStore) -> None:
    """raftq.partitions.reader.producer_state (Log.ProducerState, the Spark writer's resume point)
    over each store: the newest batch even after older ones were dropped, None once forgotten."""
    assert producer_state(store, "p") is None
    with store.transaction():
        for seq in range(8):  # more than the machine keeps: older batches are dropped
            store.producer_put("p", seq, [10 * seq, 10 * seq + 1], 100 + seq, 5)
        store.producer_put("q", 3, [99], 100, 5)
    assert producer_state(store, "p") == ProducerState(7, [70, 71])
    assert producer_state(store, "q") == ProducerState(3, [99])
    with store.transaction():
        store.producer_forget_before(10**9)
    assert producer_state(store, "p") is None


def test_a_tracked_producer_is_known_from_its_records_after_its_batches_are_forgotten(
    store: PartitionStore,
) -> None:
    """A `spark:` producer's state is read from its records (count, last sequence, that
    batch's offsets): the dedup state forgetting it changes nothing; records of other
    producers and gaps do not count; a retention cut does."""
    pid = "spark:app:4:0"
    assert producer_state(store, pid) is None
    with store.transaction():
        rows = [rec(o, producer=pid, sequence=o // 3) for o in range(10)]  # sequences 0..3
        rows += [rec(o, producer="spark:other:4:0", sequence=0) for o in range(10, 12)]
        rows += [rec(12, producer=pid, sequence=4), rec(13), rec(15, producer=pid, sequence=4)]
        store.insert_records(rows)
        store.producer_put(pid, 4, [12, 15], 100, 5)
        store.producer_forget_before(10**9)
    assert store.producer_last_sequence(pid) is None
    assert producer_state(store, pid) == ProducerState(4, [12, 15], 12)
    with store.transaction():
        store.delete_records_below(6)
    assert producer_state(store, pid) == ProducerState(4, [12, 15], 6)
    with store.transaction():
        store.delete_record(7)  # a cancelled record inside a batch
        store.delete_record(15)
    assert producer_state(store, pid) == ProducerState(4, [12], 4)
    with store.transaction():
        store.delete_record(12)  # batch 4 gone: the last batch still in the log is 3
    assert producer_state(store, pid) == ProducerState(3, [9], 3)
    owned = "alice/spark:app:4:0"  # an authenticated broker prefixes the principal's name
    with store.transaction():
        store.insert_records([rec(o, producer=owned, sequence=0) for o in (20, 21)])
        store.insert_values(22, 1000, [b"a", b"b"], owned, 1)
    assert producer_state(store, owned) == ProducerState(1, [22, 23], 4)
    with store.transaction():
        store.delete_records_below(23)
    assert producer_state(store, owned) == ProducerState(1, [23], 1)
    assert producer_state(store, pid) is None


# -- groups -----------------------------------------------------------------------------------


def test_groups_create_get_list_set_materialized(store: PartitionStore) -> None:
    assert store.groups() == []
    assert store.group_get("a") is None
    with store.transaction():
        a = store.group_create("a", 0)
        b = store.group_create("b", 17)
    assert a.name == "a" and a.materialized_upto == 0
    assert b.name == "b" and b.materialized_upto == 17
    assert a.gid != b.gid
    assert store.group_get("a") == a
    assert store.groups() == [a, b]
    with store.transaction():
        store.group_set_materialized(a.gid, 30)
    got = store.group_get("a")
    assert got is not None and got.materialized_upto == 30
    got.materialized_upto = 0
    assert store.groups()[0].materialized_upto == 30
    assert store.group_get("b") == b
    before = store.dump()
    with pytest.raises(Exception), store.transaction():  # noqa: B017 - AssertionError or apsw's
        store.group_create("a", 5)
    assert store.dump() == before


def group(store: PartitionStore, name: str = "g") -> int:
    with store.transaction():
        return store.group_create(name, 0).gid


def test_materialize_fifo_and_readiness(store: PartitionStore) -> None:
    with store.transaction():
        store.insert_records(
            [rec(0, priority=5), rec(1, deliver_at=200), rec(2, deliver_at=100), rec(4)]
        )
    gid = group(store)
    with store.transaction():
        assert store.materialize(gid, 1, 100, ORDER_FIFO) == 3
    assert store.pending_get(gid, [0, 1, 2, 3, 4]) == {
        1: pend(1, visible=200, ready=False),
        2: pend(2, visible=100, ready=True),  # deliver_at <= now is ready
        4: pend(4, visible=0, ready=True),
    }
    assert store.count_pending(gid) == 3
    assert store.materialize(gid, 5, 100, ORDER_FIFO) == 0


def test_materialize_priority_keys(store: PartitionStore) -> None:
    with store.transaction():
        store.insert_records([rec(0, priority=5), rec(1, priority=-1, deliver_at=300)])
    gid = group(store)
    with store.transaction():
        assert store.materialize(gid, 0, 100, ORDER_PRIORITY) == 2
    assert store.pending_get(gid, [0, 1]) == {
        0: pend(0, k1=5, k2=0, visible=0, ready=True),
        1: pend(1, k1=-1, k2=300, visible=300, ready=False),
    }


def test_materialize_an_offset_twice_raises(store: PartitionStore) -> None:
    fill(store, [0, 1])
    gid = group(store)
    with store.transaction():
        store.materialize(gid, 1, 0, ORDER_FIFO)
    before = store.dump()
    with pytest.raises(Exception), store.transaction():  # noqa: B017 - AssertionError or apsw's
        store.materialize(gid, 0, 0, ORDER_FIFO)
    assert store.dump() == before


def test_materialize_is_per_group(store: PartitionStore) -> None:
    fill(store, [0, 1])
    g1, g2 = group(store, "g1"), group(store, "g2")
    with store.transaction():
        store.materialize(g1, 0, 0, ORDER_FIFO)
    assert store.count_pending(g1) == 2
    assert store.count_pending(g2) == 0
    assert store.select_ready(g2, 10) == []


def test_due_offsets_and_promote(store: PartitionStore) -> None:
    fill(store, [0, 1, 2, 3, 4])
    gid = group(store)
    with store.transaction():
        store.pending_put(
            gid,
            [
                pend(0, ready=True, count=9),  # ready rows are never due
                pend(1, visible=50, ready=False, count=0),
                pend(2, visible=100, ready=False, owner="m", count=2),
                pend(3, visible=101, ready=False, owner="m", count=3),
                pend(4, visible=10, ready=False, count=5),
            ],
        )
    assert store.due_offsets(gid, 100, 0) == [1, 2, 4]
    assert store.due_offsets(gid, 100, 2) == [2, 4]
    assert store.due_offsets(gid, 100, 5) == [4]
    assert store.due_offsets(gid, 100, 6) == []
    assert store.due_offsets(gid, 200, 3) == [3, 4]
    with store.transaction():
        assert store.promote(gid, 100) == 3
    rows = store.pending_get(gid, [0, 1, 2, 3, 4])
    assert rows[2] == pend(2, visible=100, ready=True, owner=None, count=2)  # owner cleared
    assert rows[3] == pend(3, visible=101, ready=False, owner="m", count=3)
    assert [o for o, p in sorted(rows.items()) if p.ready] == [0, 1, 2, 4]
    assert store.promote(gid, 100) == 0
    assert store.due_offsets(gid, 100, 0) == []


def test_select_ready_fifo_orders_by_offset(store: PartitionStore) -> None:
    with store.transaction():
        store.insert_records([rec(o, priority=9 - o, deliver_at=o) for o in range(6)])
    gid = group(store)
    with store.transaction():
        store.materialize(gid, 0, 10, ORDER_FIFO)
    assert [p.offset for p in store.select_ready(gid, 10)] == [0, 1, 2, 3, 4, 5]
    assert [p.offset for p in store.select_ready(gid, 2)] == [0, 1]
    assert store.select_ready(gid, 0) == []
    assert store.select_ready(gid, -1) == []


def test_select_ready_priority_orders_by_priority_deliver_at_offset(
    store: PartitionStore,
) -> None:
    with store.transaction():
        store.insert_records(
            [
                rec(0, priority=2, deliver_at=0),
                rec(1, priority=1, deliver_at=50),
                rec(2, priority=1, deliver_at=10),
                rec(3, priority=-4, deliver_at=90),
                rec(4, priority=1, deliver_at=10),
                rec(5, priority=0, deliver_at=500),  # not ready yet
            ]
        )
    gid = group(store)
    with store.transaction():
        store.materialize(gid, 0, 100, ORDER_PRIORITY)
    assert [p.offset for p in store.select_ready(gid, 10)] == [3, 2, 4, 1, 0]
    assert [p.offset for p in store.select_ready(gid, 3)] == [3, 2, 4]
    with store.transaction():
        store.promote(gid, 500)
    assert [p.offset for p in store.select_ready(gid, 10)] == [3, 5, 2, 4, 1, 0]


def test_select_ready_records_joins_each_ready_row_with_its_record(
    store: PartitionStore,
) -> None:
    with store.transaction():
        store.insert_records(
            [
                rec(0, priority=2, key=b"k0", idem="i0"),
                rec(1, priority=1, deliver_at=50, headers=b"\x1a\x00"),
                rec(2, priority=1, deliver_at=10, ts=7),
                rec(3, priority=0, deliver_at=500),  # not ready yet
            ]
        )
    gid = group(store)
    with store.transaction():
        store.materialize(gid, 0, 100, ORDER_PRIORITY)
        store.lease(gid, [1], "m1", 100)
        store.promote(gid, 100)  # offset 1 is ready again, at delivery 1
    assert store.select_ready_records(gid, 10) == [
        (2, 0, 7, None, b"v2", None, 1, 10, None, 2),
        (1, 1, 1000, None, b"v1", b"\x1a\x00", 1, 50, None, 4),
        (0, 0, 1000, b"k0", b"v0", None, 2, 0, "i0", 4),
    ]
    # the same rows, in the same order, as select_ready and get_records answer separately
    ready = store.select_ready(gid, 10)
    records = store.get_records([p.offset for p in ready])
    assert [r[:2] for r in store.select_ready_records(gid, 10)] == [
        (p.offset, p.delivery_count) for p in ready
    ]
    assert [r[2:] for r in store.select_ready_records(gid, 10)] == [
        (
            records[p.offset].timestamp_ms,
            records[p.offset].key,
            records[p.offset].value,
            records[p.offset].headers,
            records[p.offset].priority,
            records[p.offset].deliver_at_ms,
            records[p.offset].idempotency_key,
            records[p.offset].size,
        )
        for p in ready
    ]
    assert [r[0] for r in store.select_ready_records(gid, 2)] == [2, 1]
    assert store.select_ready_records(gid, 0) == []
    assert store.select_ready_records(gid, -1) == []
    assert store.select_ready_records(gid + 1, 10) == []


def test_lease(store: PartitionStore) -> None:
    fill(store, [0, 1, 2])
    gid = group(store)
    with store.transaction():
        store.materialize(gid, 0, 0, ORDER_FIFO)
        store.lease(gid, [0, 2], "m1", 5000)
    rows = store.pending_get(gid, [0, 1, 2])
    assert rows[0] == pend(0, visible=5000, ready=False, owner="m1", count=1)
    assert rows[1] == pend(1, visible=0, ready=True, owner=None, count=0)
    assert rows[2] == pend(2, visible=5000, ready=False, owner="m1", count=1)
    assert [p.offset for p in store.select_ready(gid, 10)] == [1]
    assert store.count_leased(gid, 4999) == 2
    assert store.count_leased(gid, 5000) == 0  # the deadline itself is expired
    with store.transaction():
        store.promote(gid, 5000)
        store.lease(gid, [0], "m2", 9000)
    assert store.pending_get(gid, [0])[0] == pend(0, visible=9000, ready=False, owner="m2", count=2)
    with store.transaction():
        store.lease(gid, [], "m3", 1)  # nothing to lease is fine
    before = store.dump()
    with pytest.raises(AssertionError), store.transaction():
        store.lease(gid, [1, 7], "m3", 1)  # 7 is not pending
    assert store.dump() == before


def test_pending_get_put_delete(store: PartitionStore) -> None:
    fill(store, [0, 1, 2])
    g1, g2 = group(store, "g1"), group(store, "g2")
    assert store.pending_get(g1, []) == {}
    with store.transaction():
        store.pending_put(g1, [pend(0), pend(1, ready=False, owner="m", visible=9, count=2)])
        store.pending_put(g2, [pend(1, k1=3, k2=4)])
    assert store.pending_get(g1, [0, 1, 2]) == {
        0: pend(0),
        1: pend(1, ready=False, owner="m", visible=9, count=2),
    }
    assert store.pending_get(g2, [0, 1]) == {1: pend(1, k1=3, k2=4)}
    got = store.pending_get(g1, [0])[0]
    got.delivery_count = 42
    assert store.pending_get(g1, [0])[0] == pend(0)
    with store.transaction():
        store.pending_put(g1, [pend(0, count=3)])  # put replaces
        store.pending_delete(g1, [1, 2])  # 2 is not pending: ignored
    assert store.pending_get(g1, [0, 1]) == {0: pend(0, count=3)}
    assert store.pending_get(g2, [1]) == {1: pend(1, k1=3, k2=4)}
    many = list(range(3, 1203))
    with store.transaction():
        store.insert_records([rec(o) for o in many])
        store.pending_put(g2, [pend(o) for o in many])
    assert sorted(store.pending_get(g2, [*many, 5000])) == many


def test_pending_across_groups(store: PartitionStore) -> None:
    fill(store, list(range(6)))
    g1, g2, g3 = group(store, "g1"), group(store, "g2"), group(store, "g3")
    with store.transaction():
        store.materialize(g1, 0, 0, ORDER_FIFO)
        store.materialize(g2, 2, 0, ORDER_FIFO)
        store.lease(g2, [3], "m", 100)
    assert store.pending_for_offset(9) == {}
    assert store.pending_for_offset(1) == {g1: pend(1)}
    assert store.pending_for_offset(3) == {
        g1: pend(3),
        g2: pend(3, ready=False, owner="m", visible=100, count=1),
    }
    with store.transaction():
        assert store.pending_delete_offset(3) == 2
        assert store.pending_delete_offset(3) == 0
    assert store.pending_for_offset(3) == {}
    with store.transaction():
        assert store.pending_delete_below(3) == 4  # g1: 0 1 2, g2: 2
    assert sorted(store.pending_get(g1, list(range(6)))) == [4, 5]
    assert sorted(store.pending_get(g2, list(range(6)))) == [4, 5]
    assert store.count_pending(g3) == 0
    with store.transaction():
        assert store.pending_delete_below(0) == 0


def test_pending_reorder(store: PartitionStore) -> None:
    with store.transaction():
        store.insert_records(
            [rec(0, priority=3, deliver_at=7), rec(1, priority=-2), rec(2, deliver_at=9)]
        )
    g1, g2 = group(store, "g1"), group(store, "g2")
    with store.transaction():
        store.materialize(g1, 0, 100, ORDER_FIFO)
        store.materialize(g2, 1, 100, ORDER_FIFO)
        store.lease(g1, [0], "m", 500)
    assert [p.offset for p in store.select_ready(g1, 10)] == [1, 2]
    with store.transaction():
        store.pending_reorder(ORDER_PRIORITY)
    assert store.pending_get(g1, [0, 1, 2]) == {
        0: pend(0, k1=3, k2=7, visible=500, ready=False, owner="m", count=1),
        1: pend(1, k1=-2, k2=0, visible=0),
        2: pend(2, k1=0, k2=9, visible=9),
    }
    assert store.pending_get(g2, [1, 2]) == {1: pend(1, k1=-2), 2: pend(2, k2=9, visible=9)}
    with store.transaction():
        store.set_record_schedule(2, -5, 9)
        store.pending_reorder(ORDER_PRIORITY)  # reads the records' current schedule
    assert [p.offset for p in store.select_ready(g2, 10)] == [2, 1]
    with store.transaction():
        store.pending_reorder(ORDER_FIFO)
    assert all((p.k1, p.k2) == (0, 0) for p in store.pending_get(g1, [0, 1, 2]).values())
    assert [p.offset for p in store.select_ready(g2, 10)] == [1, 2]


def test_fences_are_per_group_name_and_roll_back(store: PartitionStore) -> None:
    assert store.fence_get("g") == 0  # no group row needed: a fence can come first
    with store.transaction():
        store.fence_set("g", 5)
        store.fence_set("h", 2)
    with store.transaction():
        store.fence_set("g", 9)
    assert (store.fence_get("g"), store.fence_get("h")) == (9, 2)
    with pytest.raises(RuntimeError), store.transaction():
        store.fence_set("g", 11)
        raise RuntimeError("roll back")
    assert store.fence_get("g") == 9
    assert store.dump()["fences"] == [("g", 9), ("h", 2)]
    assert store.groups() == []


def test_group_forget_drops_the_group_its_pending_rows_and_its_fence(
    store: PartitionStore,
) -> None:
    fill(store, list(range(5)))
    g1, g2 = group(store, "g1"), group(store, "g2")
    with store.transaction():
        store.materialize(g1, 0, 0, ORDER_FIFO)
        store.materialize(g2, 0, 0, ORDER_FIFO)
        store.lease(g1, [0, 1], "m", 100)
        store.fence_set("g1", 4)
        store.fence_set("g2", 6)
        store.outbox_put([outbox(1, 3)])
    before = store.dump()
    with pytest.raises(RuntimeError), store.transaction():
        assert store.group_forget("g1") == 5
        raise RuntimeError("roll back")
    assert store.dump() == before
    with store.transaction():
        assert store.group_forget("g1") == 5
        assert store.group_forget("g1") == 0
        assert store.group_forget("never") == 0
    assert store.group_get("g1") is None and store.fence_get("g1") == 0
    assert [g.name for g in store.groups()] == ["g2"] and store.fence_get("g2") == 6
    assert store.count_pending(g2) == 5 and store.pending_for_offset(0) == {g2: pend(0)}
    assert [r.seq for r in store.outbox_list(10)] == [1]  # dead letters still go out
    with store.transaction():  # the name starts afresh, with a gid of its own
        again = store.group_create("g1", 3)
    assert again.gid != g2 and store.count_pending(again.gid) == 0


def test_materialize_can_write_a_visible_prefix_already_leased(store: PartitionStore) -> None:
    with store.transaction():
        store.insert_records([rec(0), rec(1, deliver_at=500), rec(2), rec(3), rec(4)])
    g1 = group(store, "g1")
    fresh = store.fresh_records(0, 100, 3)  # offset 1 is not visible until 500
    assert [(r[0], r[1]) for r in fresh] == [(0, 0), (2, 0), (3, 0)]
    assert store.fresh_records(3, 100, 10)[0][0] == 3 and store.fresh_records(9, 100, 10) == []
    with store.transaction():
        leased = store.materialize(g1, 0, 100, ORDER_FIFO, 4, "m", 900)
        assert leased + store.materialize(g1, 4, 100, ORDER_FIFO) == 5
    rows = store.pending_get(g1, [0, 1, 2, 3, 4])
    assert rows[0] == pend(0, visible=900, ready=False, owner="m", count=1)
    assert rows[1] == pend(1, visible=500, ready=False, count=0)  # waiting: not leased
    assert rows[3] == pend(3, visible=900, ready=False, owner="m", count=1)
    assert rows[4] == pend(4, visible=0, ready=True, count=0)  # materialized unleased: ready
    assert store.pending_leases(g1, [0, 2, 3, 4], "m", 100) == {0: 1, 2: 1, 3: 1}
    # the slim forms answer the same choices as (offset, delivery_count, size)
    assert (
        store.select_ready_offsets(g1, 10)
        == [(r[0], r[1], r[9]) for r in store.select_ready_records(g1, 10)]
        == [(4, 0, store.fresh_records(4, 100, 1)[0][9])]
    )
    assert [r[:2] for r in store.fresh_offsets(0, 100, 3)] == [(0, 0), (2, 0), (3, 0)]
    assert [r[2] for r in store.fresh_offsets(0, 100, 3)] == [
        r[9] for r in store.fresh_records(0, 100, 3)
    ]


def test_fair_rotation_joins_serves_and_leaves(store: PartitionStore) -> None:
    """Fair ordering's rows: keys with ready rows form the rotation, joining at 2*served+1 in
    key order; a key served goes to the back (2*(served+i+1)); a key without ready rows leaves;
    pending_put keeps a row's fair key; group_forget drops the rotation."""
    with store.transaction():
        store.insert_records(
            [
                *(rec(0, key=b"b"), rec(1, key=b"a", priority=1), rec(2, key=b"a"), rec(3)),
                rec(4, key=b"c", deliver_at=500),
            ]
        )
    g1 = group(store, "g1")
    with store.transaction():
        store.materialize(g1, 0, 100, ORDER_FAIR, fair_key="")
    assert store.fair_rotation(g1) == ([(b"", 1, 1), (b"a", 1, 2), (b"b", 1, 1)], 0)
    assert [r[0] for r in store.select_fair_records(g1, 10)] == [3, 2, 0, 1]  # a: by priority
    assert store.select_fair_offsets(g1, 2) == [
        (r[0], r[1], r[9]) for r in store.select_fair_records(g1, 2)
    ]
    with store.transaction():
        store.lease(g1, [3, 2], "m", 900)
        store.fair_served(g1, [3, 2])
    # b"" left (no ready row), a served second: turn 2 * (0 + 1 + 1)
    assert store.fair_rotation(g1) == ([(b"b", 1, 1), (b"a", 4, 1)], 2)
    rows = store.pending_get(g1, [2])
    assert rows[2].fkey == b"a"
    with store.transaction():  # a nack-like change keeps the fair key
        store.pending_put(g1, [pend(2, k1=1, visible=200, ready=False, count=1)])
        store.promote(g1, 600)  # offset 2 and c's offset 4 join, at 2 * 2 + 1
    assert store.pending_get(g1, [2])[2].fkey == b"a"
    assert store.fair_rotation(g1) == ([(b"b", 1, 1), (b"a", 4, 2), (b"c", 5, 1)], 2)
    with store.transaction():
        store.pending_reorder(ORDER_PRIORITY)  # not fair any more: every key leaves
    assert store.fair_rotation(g1) == ([], 2) and store.select_fair_records(g1, 5) == []
    with store.transaction():
        store.pending_reorder(ORDER_FAIR, "")  # fair again: all join together, in key order
    assert [k for k, _, _ in store.fair_rotation(g1)[0]] == [b"a", b"b", b"c"]
    with store.transaction():
        store.group_forget("g1")
    again = group(store, "g1")
    assert store.fair_rotation(again) == ([], 0)


def test_pending_leases_names_only_live_leases_of_the_owner(store: PartitionStore) -> None:
    fill(store, list(range(5)))
    g1 = group(store, "g1")
    with store.transaction():
        store.materialize(g1, 0, 0, ORDER_FIFO)
        store.lease(g1, [0, 1], "a", 1000)
        store.lease(g1, [2], "b", 1000)
        store.lease(g1, [3], "a", 40)  # expires at 40
    assert store.pending_leases(g1, [0, 1, 2, 3, 4, 9], "a", 50) == {0: 1, 1: 1}
    assert store.pending_leases(g1, [3], "a", 39) == {3: 1}
    assert store.pending_leases(g1, [2], "b", 999) == {2: 1}
    assert store.pending_leases(g1, [2], "b", 1000) == {}  # the deadline is exclusive
    assert store.pending_leases(g1, [], "a", 0) == {}
    assert store.pending_leases(g1 + 1, [0], "a", 0) == {}  # no such group


def test_release_by_owner_and_for_all(store: PartitionStore) -> None:
    fill(store, list(range(5)))
    g1, g2 = group(store, "g1"), group(store, "g2")
    with store.transaction():
        store.materialize(g1, 0, 0, ORDER_FIFO)
        store.materialize(g2, 0, 0, ORDER_FIFO)
        store.lease(g1, [0, 1], "a", 1000)
        store.lease(g1, [2], "b", 1000)
        store.lease(g2, [0], "a", 1000)
        store.pending_put(g1, [pend(3, visible=800, ready=False, count=1)])  # nacked: no owner
    with store.transaction():
        assert store.release(g1, "a", 50) == 2
        assert store.release(g1, "a", 50) == 0
        assert store.release(g1, "nobody", 50) == 0
    rows = store.pending_get(g1, [0, 1, 2, 3])
    # a released lease is due now (not ready): the next catch-up decides redelivery or DLQ
    assert rows[0] == pend(0, visible=50, ready=False, owner=None, count=1)
    assert rows[2] == pend(2, visible=1000, ready=False, owner="b", count=1)
    assert rows[3] == pend(3, visible=800, ready=False, count=1)  # not leased: untouched
    assert store.pending_get(g2, [0])[0].owner == "a"  # other groups untouched
    with store.transaction():
        assert store.release(g1, None, 60) == 1
    assert store.pending_get(g1, [2])[2] == pend(2, visible=60, ready=False, count=1)
    assert store.pending_get(g1, [3])[3] == pend(3, visible=800, ready=False, count=1)
    assert store.count_leased(g1, 0) == 0
    assert store.count_leased(g2, 0) == 1
    assert store.due_offsets(g1, 60, 1) == [0, 1, 2]
    with store.transaction():
        assert store.promote(g1, 60) == 3
    assert [p.offset for p in store.select_ready(g1, 10)] == [0, 1, 2, 4]


def test_lowest_count_leased_count_pending(store: PartitionStore) -> None:
    fill(store, list(range(6)))
    gid = group(store)
    assert store.lowest_pending(gid) is None
    assert store.count_pending(gid) == 0
    assert store.count_leased(gid, 0) == 0
    with store.transaction():
        store.materialize(gid, 2, 0, ORDER_FIFO)
        store.lease(gid, [3, 4], "m", 100)
        store.pending_put(gid, [pend(5, visible=500, ready=False)])  # waiting, not leased
    assert store.lowest_pending(gid) == 2
    assert store.count_pending(gid) == 4
    assert store.count_leased(gid, 99) == 2
    assert store.count_leased(gid, 100) == 0
    with store.transaction():
        store.pending_delete(gid, [2, 3])
    assert store.lowest_pending(gid) == 4
    assert store.count_pending(gid) == 2
    assert store.count_leased(gid, 0) == 1
    with store.transaction():
        # a ready row never counts as leased, whatever its owner column says
        store.pending_put(gid, [pend(4, visible=100, ready=True, owner="m", count=1)])
    assert store.count_leased(gid, 0) == 0


def test_reads_of_a_group_without_rows(store: PartitionStore) -> None:
    gid = group(store) + 100  # no such group
    assert store.due_offsets(gid, 0, 0) == []
    assert store.select_ready(gid, 10) == []
    assert store.pending_get(gid, [0]) == {}
    assert store.lowest_pending(gid) is None
    assert store.count_leased(gid, 0) == 0
    assert store.count_pending(gid) == 0
    with store.transaction():
        assert store.promote(gid, 0) == 0
        assert store.release(gid, None, 0) == 0


# -- outbox -----------------------------------------------------------------------------------


def test_outbox_put_list_delete_upto(store: PartitionStore) -> None:
    assert store.outbox_list(10) == []
    with store.transaction():
        store.outbox_put([outbox(3, 30), outbox(1, 10)])
        store.outbox_put([outbox(2, 20), outbox(7, 70)])
    assert [o.seq for o in store.outbox_list(10)] == [1, 2, 3, 7]
    assert store.outbox_list(2) == [outbox(1, 10), outbox(2, 20)]
    assert store.outbox_list(0) == []
    assert store.outbox_list(-1) == []
    with store.transaction():
        assert store.outbox_delete_upto(2) == 2
        assert store.outbox_delete_upto(2) == 0
    assert [o.seq for o in store.outbox_list(10)] == [3, 7]
    before = store.dump()
    with pytest.raises(Exception), store.transaction():  # noqa: B017 - AssertionError or apsw's
        store.outbox_put([outbox(8), outbox(3)])
    assert store.dump() == before
    with store.transaction():
        assert store.outbox_delete_upto(100) == 2
    assert store.outbox_list(10) == []


# -- integers are 64-bit -----------------------------------------------------------------------

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def test_int64_bounds_round_trip(store: PartitionStore) -> None:
    with store.transaction():
        store.save_meta(Meta(applied_index=INT64_MAX, clock_ms=INT64_MAX, log_bytes=INT64_MIN))
        store.insert_records([rec(INT64_MAX, ts=INT64_MIN, deliver_at=INT64_MAX)])
        gid = store.group_create("g", INT64_MAX).gid
        store.pending_put(gid, [pend(INT64_MAX, k2=INT64_MAX, visible=INT64_MAX)])
        store.producer_put("p", INT64_MAX, [INT64_MIN, INT64_MAX], INT64_MAX, 1)
    assert store.load_meta().clock_ms == INT64_MAX
    assert store.get_record(INT64_MAX) == rec(INT64_MAX, ts=INT64_MIN, deliver_at=INT64_MAX)
    assert store.pending_get(gid, [INT64_MAX])[INT64_MAX].visible_at_ms == INT64_MAX
    assert store.producer_batch("p", INT64_MAX) == [INT64_MIN, INT64_MAX]


@pytest.mark.parametrize(
    "write",
    [
        lambda s, g: s.save_meta(Meta(clock_ms=INT64_MAX + 1)),
        lambda s, g: s.insert_records([rec(5, deliver_at=INT64_MAX + 1)]),
        lambda s, g: s.set_record_schedule(0, 0, INT64_MAX + 1),
        lambda s, g: s.idempotency_put([("k", 0, INT64_MIN - 1)]),
        lambda s, g: s.producer_put("p", INT64_MAX + 1, [0], 0, 5),
        lambda s, g: s.group_create("h", INT64_MAX + 1),
        lambda s, g: s.group_set_materialized(g, INT64_MAX + 1),
        lambda s, g: s.lease(g, [0], "m", INT64_MAX + 1),
        lambda s, g: s.pending_put(g, [pend(1, visible=INT64_MAX + 1)]),
        lambda s, g: s.outbox_put([OutboxRow(5, "g", 0, "r", 1, INT64_MAX + 1, b"")]),
    ],
    ids=[
        "meta",
        "record",
        "schedule",
        "idempotency",
        "producer",
        "group",
        "materialized",
        "lease",
        "pending",
        "outbox",
    ],
)
def test_int64_overflow_raises_and_rolls_back(
    store: PartitionStore, write: Callable[[PartitionStore, int], None]
) -> None:
    gid = populate(store)
    before = store.dump()
    with pytest.raises(OverflowError), store.transaction():
        write(store, gid)
    assert store.dump() == before


# -- transactions -----------------------------------------------------------------------------


def populate(store: PartitionStore) -> int:
    """A little of everything, so a rollback has something to restore."""
    with store.transaction():
        store.save_meta(Meta(applied_index=3, next_offset=4, clock_ms=50, config=b"\x08\x01"))
        store.insert_records([rec(0, priority=2), rec(1, deliver_at=90), rec(2), rec(3)])
        store.idempotency_put([("a", 0, 10)])
        store.producer_put("p", 0, [1, 2], 10, 5)
        gid = store.group_create("g", 0)
        store.materialize(gid.gid, 0, 50, ORDER_PRIORITY)
        store.lease(gid.gid, [0], "m", 80)
        store.outbox_put([outbox(1)])
    return gid.gid


class Boom(Exception):
    pass


def mutate_everything(store: PartitionStore, gid: int) -> None:
    store.save_meta(Meta(applied_index=99, topic="changed"))
    store.insert_records([rec(10)])
    store.set_record_schedule(2, 9, 9)
    store.delete_record(3)
    store.delete_records_below(1)
    store.idempotency_put([("b", 10, 20)])
    store.idempotency_forget_before(100)
    store.producer_put("p", 1, [10], 20, 5)
    store.producer_put("q", 0, [10], 20, 5)
    store.group_set_materialized(gid, 11)
    store.group_create("h", 0)
    store.promote(gid, 100)
    store.lease(gid, [2], "x", 500)
    store.pending_put(gid, [pend(10)])
    store.pending_delete(gid, [1])
    store.pending_delete_offset(0)
    store.pending_delete_offset(3)  # a pending row never outlives its record
    store.pending_reorder(ORDER_FIFO)
    store.release(gid, None, 100)
    store.outbox_put([outbox(2)])
    store.outbox_delete_upto(1)


def test_transaction_rollback_leaves_everything_unchanged(store: PartitionStore) -> None:
    gid = populate(store)
    before = store.dump()
    with pytest.raises(Boom), store.transaction():
        mutate_everything(store, gid)
        assert store.dump() != before  # visible inside the transaction
        raise Boom
    assert store.dump() == before
    with store.transaction():
        mutate_everything(store, gid)
    assert store.dump() != before  # and the same block commits without the exception


def test_nested_transaction_is_a_savepoint(store: PartitionStore) -> None:
    gid = populate(store)
    before = store.dump()
    with store.transaction():
        store.insert_records([rec(20)])
        with store.transaction():
            store.insert_records([rec(21)])
        try:
            with store.transaction():
                store.insert_records([rec(22)])
                store.outbox_delete_upto(100)
                raise Boom
        except Boom:
            pass
    assert [r.offset for r in store.records_from(20, 10)] == [20, 21]
    assert store.outbox_list(10) == before["outbox"]
    with pytest.raises(Boom), store.transaction():
        store.insert_records([rec(30)])
        with store.transaction():
            store.pending_delete(gid, [0, 1, 2, 3])
        raise Boom  # the outer block undoes the committed inner block too
    assert store.get_record(30) is None
    assert store.count_pending(gid) == 4


# -- differential: both stores, the same operations -------------------------------------------


def _random_ops(rng: random.Random) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """A seeded stream of plausible store calls (the bugs-only misuses are tested above)."""
    next_offset = 0
    groups: list[int] = []
    outbox_seq = 0
    for _ in range(400):
        kind = rng.random()
        now = rng.randrange(0, 2000)
        if kind < 0.18 or next_offset == 0:
            n = rng.randrange(1, 6)
            rows = [
                rec(
                    next_offset + i,
                    ts=now,
                    priority=rng.randrange(-2, 3),
                    deliver_at=rng.choice([0, 0, rng.randrange(0, 2500)]),
                    key=rng.choice([None, b"", b"k"]),
                )
                for i in range(n)
            ]
            yield "insert_records", (rows,)
            for gid in groups:
                yield "materialize", (gid, next_offset, now, ORDER_PRIORITY)
            next_offset += n
        elif kind < 0.23 and len(groups) < 4:
            name = f"g{len(groups)}"
            groups.append(len(groups) + 1)
            yield "group_create", (name, 0)
            yield "materialize", (groups[-1], 0, now, ORDER_PRIORITY)
            yield "group_set_materialized", (groups[-1], next_offset)
        elif groups:
            gid = rng.choice(groups)
            calls: list[tuple[str, tuple[Any, ...]]] = [
                ("promote", (gid, now)),
                ("release", (gid, rng.choice([None, "a", "b"]), now)),
                ("due_offsets", (gid, now, rng.randrange(0, 3))),
                ("select_ready", (gid, rng.randrange(0, 8))),
                ("select_ready_records", (gid, rng.randrange(0, 8))),
                ("count_leased", (gid, now)),
                ("count_pending", (gid,)),
                ("lowest_pending", (gid,)),
                ("pending_delete", (gid, [rng.randrange(0, next_offset) for _ in range(3)])),
                ("pending_delete_offset", (rng.randrange(0, next_offset),)),
                ("pending_for_offset", (rng.randrange(0, next_offset),)),
                ("first_offset_since", (now,)),
                ("sizes_from", (rng.randrange(0, next_offset), rng.randrange(0, 5))),
                ("records_from", (rng.randrange(0, next_offset), rng.randrange(0, 5))),
                ("idempotency_put", ([(f"i{rng.randrange(20)}", next_offset, now)],)),
                ("idempotency_forget_before", (now,)),
                ("producer_put", (f"p{rng.randrange(3)}", rng.randrange(10), [now], now, 3)),
                ("producer_forget_before", (now - 500,)),
                ("pending_reorder", (ORDER_PRIORITY,)),
            ]
            if rng.random() < 0.05:
                outbox_seq += 1
                calls.append(("outbox_put", ([outbox(outbox_seq)],)))
                calls.append(("outbox_delete_upto", (rng.randrange(0, outbox_seq + 1),)))
            yield rng.choice(calls)
            yield "__lease_ready__", (gid, rng.choice(["a", "b"]), now + rng.randrange(1, 500))


def test_both_stores_answer_the_same_and_dump_equal(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    # synchronous=OFF: this test compares behaviour; a commit per call need not wait for fsync
    memory, sqlite = MemoryStore(), SqliteStore(str(tmp_path / "p.db"), synchronous="OFF")
    stores: list[PartitionStore] = [memory, sqlite]

    def run(s: PartitionStore, name: str, args: tuple[Any, ...]) -> Any:
        if name == "__lease_ready__":
            gid, owner, deadline = args
            chosen = [p.offset for p in s.select_ready(gid, 3)]
            s.lease(gid, chosen, owner, deadline)
            return chosen
        method: Callable[..., Any] = getattr(s, name)
        return method(*args)

    rng = random.Random(seed)
    ops = list(_random_ops(rng))
    for i in range(0, len(ops), 8):  # a batch of calls per transaction, like one command
        batch = ops[i : i + 8]
        # roll some back (not a group's creation: later calls would name a group that is gone)
        roll_back = rng.random() < 0.15 and all(name != "group_create" for name, _ in batch)
        answers: list[list[Any]] = []
        for s in stores:
            answers.append([])
            try:
                with s.transaction():
                    answers[-1] += [run(s, name, args) for name, args in batch]
                    if roll_back:
                        raise Boom
            except Boom:
                pass
        assert answers[0] == answers[1], f"seed={seed}: {batch}"
    assert memory.dump() == sqlite.dump(), f"seed={seed}"
    sqlite.close()


# -- SQLite only ------------------------------------------------------------------------------


def test_sqlite_backup_and_restore_round_trip(tmp_path: Path) -> None:
    source = SqliteStore(str(tmp_path / "a.db"))
    populate(source)
    snapshot = str(tmp_path / "snap.db")
    source.backup_to(snapshot)
    source.backup_to(snapshot)  # overwrites an earlier snapshot
    fresh = SqliteStore(str(tmp_path / "b.db"))
    fresh.restore_from(snapshot)
    assert fresh.dump() == source.dump()
    # restoring replaces whatever was there, and the restored store keeps working
    other = SqliteStore(str(tmp_path / "c.db"))
    with other.transaction():
        other.insert_records([rec(o) for o in range(50, 60)])
        other.group_create("zzz", 3)
    other.restore_from(snapshot)
    assert other.dump() == source.dump()
    with other.transaction():
        other.insert_records([rec(4)])
    assert other.get_record(4) == rec(4)
    assert not os.path.exists(snapshot + ".tmp")
    for s in (source, fresh, other):
        s.close()


def test_sqlite_memory_store_cannot_snapshot(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError):
        MemoryStore().backup_to(str(tmp_path / "x.db"))
    with pytest.raises(NotImplementedError):
        MemoryStore().restore_from(str(tmp_path / "x.db"))


def test_sqlite_data_persists_across_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    store = SqliteStore(path)
    gid = populate(store)
    with pytest.raises(Boom), store.transaction():
        store.insert_records([rec(99)])
        raise Boom
    dumped = store.dump()
    store.close()
    reopened = SqliteStore(path)
    assert reopened.dump() == dumped
    assert reopened.get_record(99) is None
    assert reopened.group_get("g") is not None
    with reopened.transaction():
        assert reopened.group_create("h", 0).gid == gid + 1
    reopened.close()


def test_sqlite_is_wal_and_synchronous_full_by_default(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "p.db"))
    assert store.pragmas() == {"journal_mode": "WAL", "synchronous": "FULL"}
    store.close()
    relaxed = SqliteStore(str(tmp_path / "p.db"), synchronous="NORMAL")
    assert relaxed.pragmas() == {"journal_mode": "WAL", "synchronous": "NORMAL"}
    relaxed.close()
    with pytest.raises(ValueError):
        SqliteStore(str(tmp_path / "q.db"), synchronous="full; DROP TABLE meta")


def test_a_tracked_producers_records_cut_away_are_counted_until_forgotten(
    store: PartitionStore,
) -> None:
    """Retention or a purge (the machine calls tracked_cut_below before delete_records_below)
    cuts records a `spark:` producer wrote: its count keeps them, so a retried task skips
    every row an earlier attempt wrote; the last batch's offsets are those still in the log.
    Untracked producers and other tracked ones are not counted in; a second cut adds up."""
    pid, other = "spark:app:5:0", "spark:app:5:1"
    with store.transaction():
        rows = [rec(o, producer=pid, sequence=o // 4) for o in range(10)]  # sequences 0..2
        rows += [rec(10, producer="plain", sequence=0), rec(11, producer=other, sequence=0)]
        store.insert_records(rows)
    assert producer_state(store, pid) == ProducerState(2, [8, 9], 10)
    with store.transaction():
        store.tracked_cut_below(5, 1_000)  # batch 0 and half of batch 1
        store.delete_records_below(5)
    assert producer_state(store, pid) == ProducerState(2, [8, 9], 10)
    with store.transaction():
        store.tracked_cut_below(9, 2_000)  # all but the last record: the last batch's tail
        store.delete_records_below(9)
    assert producer_state(store, pid) == ProducerState(2, [9], 10)
    assert producer_state(store, other) == ProducerState(0, [11], 1)
    with store.transaction():
        store.tracked_cut_below(12, 3_000)  # everything: known from the cut alone
        store.delete_records_below(12)
    assert producer_state(store, pid) == ProducerState(2, [], 10)
    assert producer_state(store, other) == ProducerState(0, [], 1)
    with store.transaction():
        assert store.tracked_cut_forget_before(3_000) == 0  # both stamped 3_000 by the last cut
        assert store.tracked_cut_forget_before(3_001) == 2
    assert producer_state(store, pid) is None and producer_state(store, other) is None
    with store.transaction():  # a cut rolled back with its transaction
        store.insert_records([rec(12, producer=pid, sequence=3)])
    try:
        with store.transaction():
            store.tracked_cut_below(13, 4_000)
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert producer_state(store, pid) == ProducerState(3, [12], 1)


def test_sqlite_tracked_producer_lookup_reads_its_batches_not_the_log(tmp_path: Path) -> None:
    """The Spark writer's resume lookup must not scan the log: SQLite plans it on the
    producer's rows of tracked_batches (one per batch, not an index entry per record) and
    each batch's offset range of the records table."""
    store = SqliteStore(str(tmp_path / "p.db"))
    try:
        plan = str(
            store._rows(
                f"EXPLAIN QUERY PLAN SELECT count(*), max(b.sequence) FROM {TRACKED_RECORDS}",
                ("spark:a:1:0",),
            )
        )
        assert "tracked_batches_producer" in plan, plan
        assert "SEARCH r USING INTEGER PRIMARY KEY" in plan, plan
        assert "SCAN" not in plan, plan
        indexes = store._rows("SELECT name FROM sqlite_master WHERE tbl_name = 'records'")
        assert indexes == [("records",)], indexes  # no index on the log's rows
    finally:
        store.close()


def test_sqlite_keeps_a_batch_of_consecutive_offsets_in_17_bytes(tmp_path: Path) -> None:
    """A producer's last batches answer its retries with their offsets: a batch of
    consecutive offsets (an Append's new records) is stored as its first offset and count,
    not 8 bytes per record; scattered ones (records an idempotency key matched) and blobs
    written before, 8 bytes each, read back as they were."""
    store = SqliteStore(str(tmp_path / "p.db"))
    try:
        with store.transaction():
            store.producer_put("p", 0, list(range(5, 10_005)), 1, 5)
            store.producer_put("p", 1, range(10_005, 10_008), 1, 5)
            store.producer_put("p", 2, [3, 10_008, 10_009], 1, 5)
            store._cur.execute(
                "INSERT INTO producers VALUES ('old', 0, ?, 1)",
                (array.array("q", [7, 8, 9]).tobytes(),),  # the earlier layout (little-endian)
            )
        sizes = store._rows("SELECT sequence, length(offsets) FROM producers WHERE producer_id='p'")
        assert sorted(sizes) == [(0, 17), (1, 17), (2, 24)]
        assert store.producer_batch("p", 0) == list(range(5, 10_005))
        assert store.producer_batch("p", 1) == [10_005, 10_006, 10_007]
        assert store.producer_batch("p", 2) == [3, 10_008, 10_009]
        assert store.producer_batch("old", 0) == [7, 8, 9]
    finally:
        store.close()


def test_sqlite_opens_a_file_from_before_tracked_batches(tmp_path: Path) -> None:
    """A partition file (or snapshot) written when a partial index on records answered the
    lookup opens with the same answers: its batches are built from the records, the index
    dropped."""
    path = str(tmp_path / "p.db")
    pid, other = "spark:app:1:0", "bob/spark:app:1:1"
    store = SqliteStore(path)
    with store.transaction():
        store.insert_records([rec(o, producer=pid, sequence=o // 4) for o in range(10)])
        store.insert_records([rec(o, producer="raw", sequence=0) for o in (10, 11)])
        store.insert_values(12, 1000, [b"x", b"y", b"z"], other, 0)
        store.insert_records([rec(15, producer=pid, sequence=3)])
        store.delete_record(14)
    want = {p: producer_state(store, p) for p in (pid, other)}
    assert want == {pid: ProducerState(3, [15], 11), other: ProducerState(0, [12, 13], 2)}
    before = store.dump()
    with store.transaction():  # the file as the code before wrote it
        store._cur.execute("DROP TABLE tracked_batches")
        store._cur.execute(
            "CREATE INDEX records_spark_producer ON records(producer_id, sequence) "
            "WHERE instr(producer_id, 'spark:') > 0"
        )
    store.close()
    store = SqliteStore(path)
    try:
        assert {p: producer_state(store, p) for p in (pid, other)} == want
        assert store.dump() == before
        names = {n for (n,) in store._rows("SELECT name FROM sqlite_master")}
        assert "records_spark_producer" not in names and "tracked_batches" in names
    finally:
        store.close()
