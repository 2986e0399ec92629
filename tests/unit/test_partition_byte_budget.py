"""The partition machine plans a Lease within its byte budget and takes undelivered leases back.

On both stores: a Lease with ``max_bytes`` takes records until the next would go over, and
always at least one (Kafka's rule); a replica nobody waits on (``respond=False``, a follower,
which reads only sizes) takes exactly the same records. ``Release.undelivered`` ends the named
live leases of a member and takes their delivery back: the records are ready again at once
with the delivery_count they had, so an answer that could not be delivered never counts toward
``max_deliveries`` (nothing is dead-lettered that was never delivered).
"""

from __future__ import annotations

from typing import Any

import pytest

from raftq.partitions.machine import PartitionMachine
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

NOW = 1_000_000
KB = 1000


class Replicas:
    """A leader (answers) and a follower (respond=False) fed the same commands."""

    def __init__(self, new_store: Any, ordering: int, max_deliveries: int = 5) -> None:
        self.leader, self.follower = PartitionMachine(new_store()), PartitionMachine(new_store())
        self.index = 0
        self.now = NOW
        config = common_pb2.TopicConfig()
        config.CopyFrom(self.leader.config)
        config.ordering = ordering  # type: ignore[assignment]
        config.max_deliveries = max_deliveries
        config.max_record_bytes = 10 * KB * KB
        self.apply(configure=partition_pb2.Configure(config=config))

    def apply(self, **op: Any) -> partition_pb2.CommandResult:
        self.index += 1
        self.now += 1
        data = partition_pb2.PartitionCommand(now_ms=self.now, **op).SerializeToString()
        result = self.leader.apply(data, self.index)
        follower = self.follower.apply(data, self.index, respond=False)
        assert follower.error == result.error
        assert self.leader.store.dump() == self.follower.store.dump()
        return result

    def lease(self, n: int = 100, max_bytes: int = 0, member: str = "m") -> list[tuple[int, int]]:
        lease = partition_pb2.Lease(group="g", member=member, max_records=n, max_bytes=max_bytes)
        result = self.apply(lease=lease)
        assert result.error == ErrorCode.OK, result.message
        return [(d.record.offset, d.delivery_count) for d in result.deliveries]

    def undeliver(self, refs: list[tuple[int, int]], member: str = "m") -> int:
        release = partition_pb2.Release(
            group="g",
            member=member,
            undelivered=[partition_pb2.DeliveryRef(offset=o, delivery_count=c) for o, c in refs],
        )
        result = self.apply(release=release)
        assert result.error == ErrorCode.OK, result.message
        return result.count


def records(*sizes: int) -> partition_pb2.Append:
    # a key makes each a full record (Delivery messages, not columns)
    return partition_pb2.Append(
        records=[common_pb2.Record(key=b"k", value=b"v" * (size - 1)) for size in sizes]
    )


ORDERINGS = [common_pb2.FIFO, common_pb2.PRIORITY]


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_a_lease_stops_before_the_record_that_would_go_over_the_budget(
    new_store: Any, ordering: int
) -> None:
    replicas = Replicas(new_store, ordering)
    replicas.apply(append=records(100 * KB, 100 * KB, 100 * KB, 100 * KB, 1000 * KB))
    assert replicas.lease(max_bytes=200 * KB) == [(0, 1), (1, 1)]  # at the budget exactly
    assert replicas.lease(max_bytes=200 * KB - 1) == [(2, 1)]  # just under two
    assert replicas.lease(max_bytes=150 * KB) == [(3, 1)]  # the next (1000 KB) would go over
    assert replicas.lease(max_bytes=1) == [(4, 1)]  # alone over the budget: still answered
    assert replicas.lease(max_bytes=1) == []  # nothing left


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_undelivered_leases_are_ready_again_with_their_delivery_taken_back(
    new_store: Any, ordering: int
) -> None:
    replicas = Replicas(new_store, ordering, max_deliveries=1)
    replicas.apply(append=records(*[KB] * 4))
    taken = replicas.lease()
    assert taken == [(0, 1), (1, 1), (2, 1), (3, 1)]
    # another member's refs and a stale delivery count name no lease of m: skipped
    assert replicas.undeliver([(0, 1)], member="other") == 0
    assert replicas.undeliver([(0, 2)]) == 0
    assert replicas.undeliver([(0, 1), (2, 1)]) == 2
    assert replicas.undeliver([(0, 1)]) == 0  # already taken back
    # max_deliveries=1: had the undelivered leases counted, they would be dead-lettered now
    assert sorted(replicas.lease()) == [(0, 1), (2, 1)]
    assert replicas.leader.outbox(10) == []


def test_an_undelivered_release_needs_a_member(new_store: Any) -> None:
    replicas = Replicas(new_store, common_pb2.FIFO)
    replicas.apply(append=records(KB))
    replicas.lease()
    release = partition_pb2.Release(
        group="g", undelivered=[partition_pb2.DeliveryRef(offset=0, delivery_count=1)]
    )
    result = replicas.apply(release=release)
    assert result.error == ErrorCode.INVALID_ARGUMENT
    assert replicas.lease() == []  # unchanged: still leased
