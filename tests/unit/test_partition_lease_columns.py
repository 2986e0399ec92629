"""Lease.columns: bare records answered as packed columns instead of Delivery messages.

The property, on both stores: a Lease with ``columns`` changes exactly what the same Lease
without it changes, and answers the same deliveries: as DeliveryColumns when every record it
took is bare (a value only), else as Delivery messages.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from raftq.partitions.machine import PartitionMachine
from raftq.proto import common_pb2, partition_pb2

NOW = 1_000_000


def command(now_ms: int, **op: Any) -> bytes:
    return partition_pb2.PartitionCommand(now_ms=now_ms, **op).SerializeToString()


def as_tuples(result: partition_pb2.CommandResult) -> list[tuple[int, int, int, bytes, int]]:
    """(offset, delivery_count, timestamp_ms, value, lease_deadline_ms) per delivery, from
    either form."""
    if result.HasField("columns"):
        c = result.columns
        return [
            (o, n, t, v, c.lease_deadline_ms)
            for o, n, t, v in zip(
                c.offsets, c.delivery_counts, c.timestamps_ms, c.values, strict=True
            )
        ]
    return [
        (
            d.record.offset,
            d.delivery_count,
            d.record.timestamp_ms,
            d.record.record.value,
            d.lease_deadline_ms,
        )
        for d in result.deliveries
    ]


class Pair:
    """Two replicas fed the same commands; only ``columns`` differs in their Leases."""

    def __init__(self, new_store: Any, ordering: int = common_pb2.FIFO) -> None:
        self.plain, self.columns = PartitionMachine(new_store()), PartitionMachine(new_store())
        self.index = 0
        self.now = NOW
        config = common_pb2.TopicConfig()
        config.CopyFrom(self.plain.config)
        config.ordering = ordering  # type: ignore[assignment]
        self.both(configure=partition_pb2.Configure(config=config))

    def both(self, **op: Any) -> tuple[partition_pb2.CommandResult, partition_pb2.CommandResult]:
        self.index += 1
        self.now += 1
        data = command(self.now, **op)
        return self.plain.apply(data, self.index), self.columns.apply(data, self.index)

    def lease(self, n: int, lease_ms: int = 0) -> tuple[Any, Any]:
        self.index += 1
        self.now += 1
        lease = partition_pb2.Lease(group="g", member="m", max_records=n, lease_ms=lease_ms)
        plain = self.plain.apply(command(self.now, lease=lease), self.index)
        lease.columns = True
        return plain, self.columns.apply(command(self.now, lease=lease), self.index)

    def same_state(self) -> None:
        assert self.plain.store.dump() == self.columns.store.dump()


def bare(*values: bytes) -> partition_pb2.Append:
    return partition_pb2.Append(values=list(values))


def test_bare_records_come_as_columns_with_the_same_deliveries(new_store: Any) -> None:
    pair = Pair(new_store)
    pair.both(append=bare(b"a", b"b", b"c"))
    pair.both(append=partition_pb2.Append(records=[common_pb2.Record(value=b"d")]))
    plain, columns = pair.lease(10, lease_ms=50)
    assert columns.HasField("columns") and not columns.deliveries
    assert as_tuples(columns) == as_tuples(plain)
    assert [t[0] for t in as_tuples(columns)] == [0, 1, 2, 3]
    assert {t[1] for t in as_tuples(columns)} == {1}
    pair.same_state()
    pair.now += 100  # the leases run out: the next Lease redelivers them (delivery 2)
    plain, columns = pair.lease(2)
    assert as_tuples(columns) == as_tuples(plain) != []
    assert {t[1] for t in as_tuples(columns)} == {2}
    pair.same_state()


@pytest.mark.parametrize(
    "record",
    [
        common_pb2.Record(value=b"k", key=b""),  # an empty key is still a key
        common_pb2.Record(value=b"h", headers={"h": b"1"}),
        common_pb2.Record(value=b"p", priority=3),
        common_pb2.Record(value=b"d", deliver_at_ms=NOW - 10),
        common_pb2.Record(value=b"i", idempotency_key="once"),
    ],
    ids=["key", "headers", "priority", "deliver_at", "idempotency_key"],
)
def test_one_record_that_is_not_bare_makes_the_lease_answer_deliveries(
    new_store: Any, record: common_pb2.Record
) -> None:
    pair = Pair(new_store)
    pair.both(append=bare(b"a", b"b"))
    pair.both(append=partition_pb2.Append(records=[record]))
    plain, columns = pair.lease(10)
    assert not columns.HasField("columns")
    assert columns == plain
    assert len(columns.deliveries) == 3
    pair.same_state()


@pytest.mark.parametrize("ordering", [common_pb2.FIFO, common_pb2.PRIORITY])
def test_random_leases_answer_alike_and_change_alike(new_store: Any, ordering: int) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    rng = random.Random(seed)
    pair = Pair(new_store, ordering)
    for _ in range(40):
        step = rng.random()
        if step < 0.4:
            values = [rng.randbytes(rng.randrange(1, 20)) for _ in range(rng.randrange(1, 30))]
            pair.both(append=bare(*values))
        elif step < 0.5:
            record = common_pb2.Record(value=b"x", priority=rng.randrange(2), key=b"k")
            pair.both(append=partition_pb2.Append(records=[record]))
        elif step < 0.6:
            pair.now += rng.choice([10, 1000])  # some leases run out
        else:
            plain, columns = pair.lease(rng.randrange(1, 40), lease_ms=rng.choice([0, 5, 500]))
            assert as_tuples(columns) == as_tuples(plain), f"seed {seed}"
            assert not (columns.deliveries and columns.HasField("columns")), f"seed {seed}"
        pair.same_state()
