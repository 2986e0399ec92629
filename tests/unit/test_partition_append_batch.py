"""AppendBatch: group-committed Appends, each in its own savepoint, on both stores.

The property: applying N Appends as ONE AppendBatch entry answers each Append exactly as
applying them one entry each would, and leaves the same records, dedup and producer state.
A rejected Append (out-of-order sequence, a bad record) undoes only itself.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from raftq.partitions.machine import MAX_APPEND_RECORDS, PartitionMachine
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

NOW = 1_000_000


def command(op: str, msg: Any, now_ms: int = NOW) -> bytes:
    cmd = partition_pb2.PartitionCommand(now_ms=now_ms)
    getattr(cmd, op).CopyFrom(msg)
    return cmd.SerializeToString()


def append(pid: str, seq: int, *values: str, key: str = "") -> partition_pb2.Append:
    return partition_pb2.Append(
        records=[common_pb2.Record(value=v.encode(), idempotency_key=key) for v in values],
        producer_id=pid,
        sequence=seq,
    )


def comparable(dump: dict[str, Any]) -> dict[str, Any]:
    """A dump without the applied index and clock: one entry vs many differ there by design
    (a rejected command advances neither; a batch whose Appends were all rejected does)."""
    out = dict(dump)
    out["meta"] = dataclasses.replace(dump["meta"], applied_index=0, clock_ms=0)
    return out


def test_one_bad_append_rolls_back_only_itself(new_store: Any) -> None:
    machine = PartitionMachine(new_store())
    assert not machine.apply(command("append", append("p", 0, "a")), 1).error
    batch = partition_pb2.AppendBatch(
        appends=[
            append("q", 0, "q0", "q0b"),
            append("p", 7, "gap"),  # p's last sequence is 0: a gap
            append("p", 1, "p1"),
            append("", 0, "x" * ((1 << 20) + 1)),  # over max_record_bytes
            append("p", 0, "a"),  # a retry of an applied batch
        ]
    )
    result = machine.apply(command("append_batch", batch), 2)
    assert result.error == ErrorCode.OK
    got = [(r.error, [(x.offset, x.duplicate) for x in r.records]) for r in result.batch_results]
    assert got == [
        (ErrorCode.OK, [(1, False), (2, False)]),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE, []),
        (ErrorCode.OK, [(3, False)]),
        (ErrorCode.RECORD_TOO_LARGE, []),
        (ErrorCode.OK, [(0, True)]),
    ]
    assert machine.offsets().end == 4 and machine.applied_index == 2
    assert [r.record.value for r in machine.fetch(0, 10)] == [b"a", b"q0", b"q0b", b"p1"]
    assert machine.apply(command("append_batch", batch), 2).skipped  # replay skips by index


def test_whole_batch_errors(new_store: Any) -> None:
    machine = PartitionMachine(new_store())
    empty = machine.apply(command("append_batch", partition_pb2.AppendBatch()), 1)
    assert empty.error == ErrorCode.INVALID_ARGUMENT and machine.applied_index == 0
    many = partition_pb2.AppendBatch(
        appends=[append("", 0, *(["v"] * (MAX_APPEND_RECORDS // 2 + 1)))] * 2
    )
    assert machine.apply(command("append_batch", many), 1).error == ErrorCode.INVALID_ARGUMENT
    assert machine.offsets().end == 0


@pytest.mark.parametrize("seed", range(20))
def test_batch_equals_one_entry_per_append(new_store: Any, seed: int) -> None:
    rng = random.Random(seed)
    batched, single = PartitionMachine(new_store()), PartitionMachine(new_store())
    next_seq = {"p1": 0, "p2": 0, "p3": 0}
    index_s = 0
    for index_b, round_ in enumerate(range(8), start=1):
        appends = []
        for _ in range(rng.randint(1, 6)):
            pid = rng.choice(["", "p1", "p2", "p3"])
            seq = 0
            if pid:
                seq = next_seq[pid] + rng.choice([0, 0, 0, -1, 1, 2])  # retries and gaps
                if seq == next_seq[pid]:
                    next_seq[pid] += 1
            key = rng.choice(["", "", f"k{rng.randint(0, 5)}"])
            n = rng.randint(1, 3)
            appends.append(append(pid, seq, *(f"{round_}-{i}" for i in range(n)), key=key))
        now = NOW + round_ * 1000
        batch = batched.apply(
            command("append_batch", partition_pb2.AppendBatch(appends=appends), now), index_b
        )
        assert batch.error == ErrorCode.OK
        for i, one in enumerate(appends):
            index_s += 1
            alone = single.apply(command("append", one, now), index_s)
            assert batch.batch_results[i] == alone, f"seed={seed} round={round_} append={i}"
    assert comparable(batched.store.dump()) == comparable(single.store.dump()), f"seed={seed}"


def test_a_record_row_names_its_producer_only_when_the_producer_is_tracked(
    new_store: Any,
) -> None:
    """An ordinary producer's id and sequence live in its dedup state, once per batch, not
    in each record row (its uuid was a third of a 100 B record's row); a tracked (Spark)
    producer's rows keep them, which its retried writer counts. Retries are answered the
    same either way, on the records path and on the bare values path."""
    machine = PartitionMachine(new_store())
    tracked = "spark:app:1:0"
    bare = partition_pb2.Append(values=[b"v0", b"v1"], producer_id="plain", sequence=1)
    for index, msg in enumerate(
        [
            append("plain", 0, "a", "b"),
            bare,
            append(tracked, 0, "c"),
            partition_pb2.Append(values=[b"d"], producer_id=tracked, sequence=1),
        ],
        start=1,
    ):
        assert not machine.apply(command("append", msg), index).error
    rows = [machine.store.get_record(offset) for offset in range(6)]
    assert [(r.producer_id, r.sequence) for r in rows if r is not None] == [
        (None, None),
        (None, None),
        (None, None),
        (None, None),
        (tracked, 0),
        (tracked, 1),
    ]
    retry = machine.apply(command("append", append("plain", 0, "a", "b")), 5)
    assert [(r.offset, r.duplicate) for r in retry.records] == [(0, True), (1, True)]
    retry = machine.apply(command("append", bare), 6)
    assert (retry.range.first_offset, retry.range.count, retry.range.duplicate) == (2, 2, True)
    assert machine.offsets().end == 6
