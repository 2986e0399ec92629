"""Seek and purge on a broker whose clock jumps (broker/handlers/admin_ops.py).

One real broker in this process (gRPC, Raft, SQLite) built from a Clock whose wall and
monotonic readings the test moves. A call's deadline is the broker's clock's: a monotonic jump
past it mid-purge (or mid-seek) stops before the next partition with UNAVAILABLE "call again",
having purged (sought) exactly the partitions before it; the call again finishes the rest, each
record deleted once. (A monotonic clock never steps back: the broker's timers wait by it.)
What a seek by timestamp finds and what a purge deletes is decided against the records' stamped
timestamps and the log: a wall clock an hour ahead or behind moves neither (partition time goes
on at most half the skew ahead, or stands still), nothing is skipped or replayed, and records
sent after a purge are delivered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from raftq.client import Admin, Consumer, Producer
from raftq.clock import Clock
from raftq.proto import api_pb2, api_pb2_grpc, errors, partition_pb2
from raftq.transport.grpc_errors import from_rpc_error
from tests.cluster import InProcessCluster, make_cluster

TIMEOUT_S = 10
HOUR_S = 3600.0


@dataclass
class Offsets:
    """How far the broker's clock readings are from the machine's (seconds)."""

    wall_s: float = 0.0
    monotonic_s: float = 0.0


@dataclass
class Broker:
    cluster: InProcessCluster
    address: str
    offsets: Offsets
    # per (topic, partition): a function called with each command its replica proposes
    on_propose: dict[tuple[str, int], Callable[[partition_pb2.PartitionCommand], None]] = field(
        default_factory=dict
    )

    def admin(self) -> Admin:
        return self.cluster.admin(self.address)

    def watch(self, topic: str, partition: int) -> None:
        """Route the partition replica's proposals through ``on_propose`` (the real proposal
        goes on)."""
        replica = self.cluster.broker(1).replicas.get((topic, partition))
        assert replica is not None
        node = replica.node
        real = node.propose

        def propose(data: bytes, *args: Any, **kwargs: Any) -> Any:
            hook = self.on_propose.get((topic, partition))
            if hook is not None:
                hook(partition_pb2.PartitionCommand.FromString(data))
            return real(data, *args, **kwargs)

        node.propose = propose  # type: ignore[method-assign]

    def call(self, method: str, request: Any) -> Any:
        """One Admin call, not retried (the Python client would call again on UNAVAILABLE)."""
        with grpc.insecure_channel(self.address) as channel:
            try:
                return getattr(api_pb2_grpc.AdminStub(channel), method)(request, timeout=TIMEOUT_S)
            except grpc.RpcError as exc:
                raise from_rpc_error(exc) from None


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    offsets = Offsets()
    clock = Clock(
        wall_s=lambda: time.time() + offsets.wall_s,
        monotonic_s=lambda: time.monotonic() + offsets.monotonic_s,
    )
    with make_cluster(tmp_path_factory.mktemp("clock"), clock=clock) as cluster:
        cluster.wait_ready()
        assert isinstance(cluster, InProcessCluster)
        yield Broker(cluster, cluster.client_addr(1), offsets)


def produce(broker: Broker, topic: str, partitions: int, values: list[bytes]) -> None:
    with Producer(broker.address, linger_ms=0) as producer:
        sent = [producer.send(topic, v, partition=p) for p in range(partitions) for v in values]
        [f.result(TIMEOUT_S) for f in sent]


def drain(broker: Broker, topic: str, group: str, expect: int) -> list[tuple[int, int, bytes]]:
    """Poll and ack until ``expect`` records came, then check nothing more is ready:
    (partition, offset, value) sorted."""
    got: list[tuple[int, int, bytes]] = []
    with Consumer(broker.address, group, [topic]) as consumer:
        give_up = time.monotonic() + 30
        while len(got) < expect and time.monotonic() < give_up:
            batch = consumer.poll(1000, 500)
            assert consumer.ack(batch) == [None] * len(batch)
            got += [(m.partition, m.offset, m.value) for m in batch]
        assert consumer.poll(1000, 0) == []
    return sorted(got)


def log_starts(broker: Broker, topic: str) -> list[tuple[int, int]]:
    return [(p.log_start, p.end) for p in broker.admin().list_offsets(topic)]


def jump_at_first(
    broker: Broker, topic: str, op: str, seconds: float
) -> Callable[[partition_pb2.PartitionCommand], None]:
    """Move the broker's monotonic clock by ``seconds`` when partition 0 proposes ``op``."""
    jumped: list[bool] = []

    def hook(command: partition_pb2.PartitionCommand) -> None:
        if command.WhichOneof("op") == op and not jumped:
            jumped.append(True)
            broker.offsets.monotonic_s += seconds

    return hook


def test_a_purge_whose_deadline_passes_on_the_brokers_clock_stops_and_a_retry_finishes(
    broker: Broker,
) -> None:
    topic = "purge-jump"
    broker.admin().create_topic(topic, partitions=3)
    produce(broker, topic, 3, [b"a", b"b", b"c", b"d"])
    broker.watch(topic, 0)
    broker.on_propose[(topic, 0)] = jump_at_first(broker, topic, "purge", HOUR_S)
    with pytest.raises(errors.Unavailable, match="call again"):
        broker.call("PurgeTopic", api_pb2.PurgeTopicRequest(topic=topic))
    # partition 0 purged before the time ran out; the others not touched, none skipped silently
    assert log_starts(broker, topic) == [(4, 4), (0, 4), (0, 4)]
    again = broker.call("PurgeTopic", api_pb2.PurgeTopicRequest(topic=topic))
    assert [(p.partition, p.log_start, p.deleted) for p in again.partitions] == [
        (0, 4, 0),
        (1, 4, 4),
        (2, 4, 4),
    ]
    produce(broker, topic, 3, [b"f"])
    assert drain(broker, topic, "purge-jump-g", 3) == [(p, 4, b"f") for p in range(3)]


def test_a_seek_whose_deadline_passes_on_the_brokers_clock_stops_and_a_retry_finishes(
    broker: Broker,
) -> None:
    topic, group = "seek-jump", "seek-jump-g"
    broker.admin().create_topic(topic, partitions=2)
    produce(broker, topic, 2, [b"a", b"b", b"c"])
    assert len(drain(broker, topic, group, 6)) == 6  # the group holds state, all acked
    broker.watch(topic, 0)
    broker.on_propose[(topic, 0)] = jump_at_first(broker, topic, "seek_group", HOUR_S)
    seek = api_pb2.SeekGroupRequest(
        group=group, topic=topic, to=partition_pb2.SEEK_OFFSET, offset=1
    )
    with pytest.raises(errors.Unavailable, match="call again"):
        broker.call("SeekGroup", seek)
    # partition 0 moved back to offset 1; partition 1 not
    assert drain(broker, topic, group, 2) == [(0, 1, b"b"), (0, 2, b"c")]
    again = broker.call("SeekGroup", seek)
    assert [(p.partition, p.offset) for p in again.partitions] == [(0, 1), (1, 1)]
    assert drain(broker, topic, group, 4) == [
        (0, 1, b"b"),
        (0, 2, b"c"),
        (1, 1, b"b"),
        (1, 2, b"c"),
    ]


@pytest.mark.parametrize("wall_s", [HOUR_S, -HOUR_S], ids=["ahead", "behind"])
def test_seek_by_timestamp_and_purge_with_the_wall_clock_an_hour_off(
    broker: Broker, wall_s: float
) -> None:
    topic, group = f"wall-{'ahead' if wall_s > 0 else 'behind'}", "wall-g"
    broker.admin().create_topic(topic, partitions=2)
    produce(broker, topic, 2, [b"a0", b"a1", b"a2"])
    broker.offsets.wall_s = wall_s
    try:
        produce(broker, topic, 2, [b"b0", b"b1"])
        assert len(drain(broker, topic, group, 10)) == 10
        stored = {p: broker.admin().fetch(topic, p, 0).records for p in range(2)}
        stamps = {p: [r.timestamp_ms for r in stored[p]] for p in range(2)}
        assert all(stamps[p] == sorted(stamps[p]) for p in range(2))  # never back
        since = min(stamps[p][3] for p in range(2))  # the first of batch b
        # what the seek must find: the first record stamped at or after it, by the log
        first = {p: next(o for o, ms in enumerate(stamps[p]) if ms >= since) for p in range(2)}
        if wall_s > 0:  # partition time went on past the jump (at most half the skew ahead)
            assert first == {0: 3, 1: 3}
        else:  # partition time stood still while the clock was behind, batch b stamped with a's
            assert all(stamps[p][3] == stamps[p][2] for p in range(2))
        sought = broker.admin().seek_group(group, topic, timestamp_ms=since)
        assert [(p.partition, p.offset) for p in sought] == [(0, first[0]), (1, first[1])]
        redelivered = drain(broker, topic, group, 10 - first[0] - first[1])
        assert redelivered == [
            (p, r.offset, r.value) for p in range(2) for r in stored[p] if r.offset >= first[p]
        ]
        purged = broker.admin().purge_topic(topic)
        assert [(p.log_start, p.deleted) for p in purged] == [(5, 5), (5, 5)]
        produce(broker, topic, 2, [b"c0"])
        assert drain(broker, topic, group, 2) == [(0, 5, b"c0"), (1, 5, b"c0")]
    finally:
        broker.offsets.wall_s = 0.0
