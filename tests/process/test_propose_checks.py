"""Internal.Propose from a hostile or mismatched broker: checked on the receiving side.

The shape check (transport/propose_checks.py) first, pure: every forwarded operation's limits
at, just past and far past. Then a real broker in this process, called over real gRPC with
valid broker credentials (what a broker of another version, or a holder of a leaked cluster
secret, can send): undecodable bytes, operations and fields it does not know, operations only
a leader proposes, values out of range, an Append at, just past and far past the entry and
message limits. Each gets its typed error, nothing reaches the partition's Raft log (its
applied index stays), and the partition keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from raftq.client import Admin, Consumer, Producer
from raftq.config import DEV_CLUSTER_SECRET
from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.proto import errors, internal_pb2, partition_pb2
from raftq.proto.common_pb2 import Record
from raftq.replica import PartitionReplica
from raftq.transport.grpc_errors import from_rpc_error
from raftq.transport.internal import AUTH_KEY, InternalClient
from raftq.transport.propose_checks import FORWARDED, check_propose
from raftq.transport.request_checks import PARTITIONS_MAX, SEND_RECORDS_MAX
from tests.cluster import InProcessCluster, make_cluster

TIMEOUT_S = 10
TOPIC = "forwarded"
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def propose(op: str, body: Any, *, topic: str = TOPIC, partition: int = 0) -> Any:
    command = partition_pb2.PartitionCommand(**{op: body})
    return internal_pb2.ProposeRequest(topic=topic, partition=partition, command=command)


def lease(**fields: Any) -> Any:
    return propose("lease", partition_pb2.Lease(**{"group": "g", "member": "m-1", **fields}))


def refs(n: int) -> list[partition_pb2.DeliveryRef]:
    return [partition_pb2.DeliveryRef(offset=i, delivery_count=1) for i in range(n)]


def settle(op: str, n: int, **fields: Any) -> Any:
    kind = {"ack": partition_pb2.Settle, "nack": partition_pb2.Nack}.get(op)
    body = (kind or partition_pb2.ExtendLease)(group="g", member="m-1", refs=refs(n), **fields)
    return propose(op, body)


# (what, the request, whether the check lets it through): at, just past, far past each limit
EDGES = [
    (
        "partition at the top",
        propose("purge", partition_pb2.Purge(), partition=PARTITIONS_MAX - 1),
        True,
    ),
    (
        "partition just past",
        propose("purge", partition_pb2.Purge(), partition=PARTITIONS_MAX),
        False,
    ),
    ("partition far past", propose("purge", partition_pb2.Purge(), partition=INT32_MAX), False),
    ("partition below", propose("purge", partition_pb2.Purge(), partition=-1), False),
    ("topic name at 249", propose("purge", partition_pb2.Purge(), topic="t" * 249), True),
    ("topic name at 250", propose("purge", partition_pb2.Purge(), topic="t" * 250), False),
    ("topic name empty", propose("purge", partition_pb2.Purge(), topic=""), False),
    ("topic name bad char", propose("purge", partition_pb2.Purge(), topic="a/b"), False),
    ("lease records at max", lease(max_records=MAX_LEASE_RECORDS), True),
    ("lease records just past", lease(max_records=MAX_LEASE_RECORDS + 1), False),
    ("lease records far past", lease(max_records=INT32_MAX), False),
    ("lease records none", lease(max_records=0), False),
    ("lease_ms at max", lease(max_records=1, lease_ms=MAX_LEASE_MS), True),
    ("lease_ms just past", lease(max_records=1, lease_ms=MAX_LEASE_MS + 1), False),
    ("lease_ms far past", lease(max_records=1, lease_ms=INT64_MAX), False),
    ("lease_ms negative", lease(max_records=1, lease_ms=-1), False),
    ("lease max_bytes negative", lease(max_records=1, max_bytes=-1), False),
    ("lease generation negative", lease(max_records=1, generation=-1), False),
    ("lease start_from unknown", lease(max_records=1, start_from=7), False),
    ("lease member empty", lease(max_records=1, member=""), False),
    ("lease group over 249", lease(max_records=1, group="g" * 250), False),
    ("ack refs at max", settle("ack", MAX_REFS), True),
    ("ack refs just past", settle("ack", MAX_REFS + 1), False),
    ("ack refs none", settle("ack", 0), False),
    ("nack delay at max", settle("nack", 1, delay_ms=MAX_DELAY_MS), True),
    ("nack delay just past", settle("nack", 1, delay_ms=MAX_DELAY_MS + 1), False),
    ("nack delay far past", settle("nack", 1, delay_ms=INT64_MAX), False),
    ("nack refs just past", settle("nack", MAX_REFS + 1), False),
    ("extend lease_ms at max", settle("extend_lease", 1, lease_ms=MAX_LEASE_MS), True),
    ("extend lease_ms just past", settle("extend_lease", 1, lease_ms=MAX_LEASE_MS + 1), False),
    ("extend lease_ms zero", settle("extend_lease", 1, lease_ms=0), False),
    (
        "compact ack lengths differ",
        propose(
            "ack", partition_pb2.Settle(group="g", member="m", offsets=[1, 2], delivery_counts=[1])
        ),
        False,
    ),
    (
        "append values at the count",
        propose("append", partition_pb2.Append(values=[b""] * SEND_RECORDS_MAX)),
        True,
    ),
    (
        "append values just past the count",
        propose("append", partition_pb2.Append(values=[b""] * (SEND_RECORDS_MAX + 1))),
        False,
    ),
    ("append empty", propose("append", partition_pb2.Append()), False),
    (
        "append records and values",
        propose("append", partition_pb2.Append(records=[Record(value=b"a")], values=[b"b"])),
        False,
    ),
    (
        "append sequence without producer",
        propose("append", partition_pb2.Append(values=[b"a"], sequence=3)),
        False,
    ),
    (
        "append negative sequence",
        propose("append", partition_pb2.Append(values=[b"a"], producer_id="p", sequence=-1)),
        False,
    ),
    (
        "release undelivered without member",
        propose("release", partition_pb2.Release(group="g", undelivered=refs(1))),
        False,
    ),
    (
        "seek to unknown",
        propose("seek_group", partition_pb2.SeekGroup(group="g", to=9)),  # type: ignore[arg-type]
        False,
    ),
    (
        "cancel negative offset",
        propose("cancel_record", partition_pb2.CancelRecord(offset=-1)),
        False,
    ),
]


@pytest.mark.parametrize(("what", "request_", "passes"), EDGES, ids=[e[0] for e in EDGES])
def test_each_forwarded_operation_is_checked_at_and_past_its_limits(
    what: str, request_: Any, passes: bool
) -> None:
    if passes:
        assert check_propose(request_) is request_
    else:
        with pytest.raises(errors.InvalidArgument):
            check_propose(request_)


def test_operations_a_leader_proposes_itself_and_unknown_ones_are_never_accepted() -> None:
    for op in ("configure", "retain", "dead_letter_done", "append_batch", "fire_schedules"):
        assert op not in FORWARDED
        command = partition_pb2.PartitionCommand()
        getattr(command, op).SetInParent()
        request = internal_pb2.ProposeRequest(topic=TOPIC, command=command)
        with pytest.raises(errors.InvalidArgument, match="never forwarded"):
            check_propose(request)
    ack = settle("ack", 1)
    ack.skip_if_idle = True
    with pytest.raises(errors.InvalidArgument, match="skip_if_idle"):
        check_propose(ack)
    with pytest.raises(errors.MalformedCommand, match="names no operation"):
        check_propose(internal_pb2.ProposeRequest(topic=TOPIC))
    for data in unknown_field_requests():
        with pytest.raises(errors.MalformedCommand, match="does not know"):
            check_propose(internal_pb2.ProposeRequest.FromString(data))


def unknown_field_requests() -> list[bytes]:
    """ProposeRequests as a newer broker might send them: an operation numbered past the
    last one this broker knows (field 29 of PartitionCommand), a field unknown to a known
    operation (Lease field 99), and to the request itself (field 9)."""
    head = internal_pb2.ProposeRequest(topic=TOPIC).SerializeToString()
    newer_op = b"\xea\x01\x00"  # PartitionCommand field 29, length 0
    known = partition_pb2.PartitionCommand(
        lease=partition_pb2.Lease(group="g", member="m-1", max_records=1)
    ).SerializeToString()
    lease_field = known[:1] + bytes([known[1] + 3]) + known[2:] + b"\x98\x06\x01"
    return [
        head + b"\x1a" + bytes([len(newer_op)]) + newer_op,  # command = field 3
        head + b"\x1a" + bytes([len(lease_field)]) + lease_field,
        head + b"\x1a" + bytes([len(known)]) + known + b"\x48\x01",  # field 9 varint
    ]


# --------------------------------------------------------------------------------------------
# A real broker, called as another broker would
# --------------------------------------------------------------------------------------------


@dataclass
class Peer:
    cluster: InProcessCluster
    address: str
    internal: InternalClient
    proposed: list[partition_pb2.PartitionCommand]  # what the partition's leader proposed

    def spy(self) -> None:
        """Record every command the partition's replica hands its Raft node (the real
        proposal goes on): the leader's own duties (retention...) show here too."""
        node = self.replica().node
        real = node.propose

        def propose(data: bytes, *args: Any, **kwargs: Any) -> Any:
            self.proposed.append(partition_pb2.PartitionCommand.FromString(data))
            return real(data, *args, **kwargs)

        node.propose = propose  # type: ignore[method-assign]

    def foreign(self) -> list[partition_pb2.PartitionCommand]:
        """What was proposed but the leader's retention and the releases of the groups
        ``works`` used (a member that left is released twice, the second RELEASE_AGAIN_S
        later)."""
        return [
            c
            for c in self.proposed
            if c.WhichOneof("op") != "retain"
            and not (c.WhichOneof("op") == "release" and c.release.group.startswith("g-"))
        ]

    def replica(self) -> PartitionReplica:
        replica = self.cluster.broker(1).replicas.get((TOPIC, 0))
        assert replica is not None
        return replica

    def raw(self, data: bytes) -> errors.RaftqError:
        """Send ``data`` as an Internal.Propose request's bytes, with a valid credential."""
        credential = self.internal._signer.credential("Propose", self.address)
        with grpc.insecure_channel(self.address) as channel:
            call = channel.unary_unary(
                "/raftq.v1.Internal/Propose",
                request_serializer=lambda b: b,
                response_deserializer=internal_pb2.ProposeResponse.FromString,
            )
            try:
                answer = call(data, timeout=TIMEOUT_S, metadata=((AUTH_KEY, credential),))
            except grpc.RpcError as exc:
                return from_rpc_error(exc)
        raise AssertionError(f"accepted: {answer}")


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    with make_cluster(tmp_path_factory.mktemp("propose")) as cluster:
        cluster.wait_ready()
        with Admin(cluster.client_addr(1)) as admin:
            admin.create_topic(TOPIC, partitions=1, max_record_bytes=1 << 20)
        assert isinstance(cluster, InProcessCluster)
        internal = InternalClient(DEV_CLUSTER_SECRET, broker_id=99)
        try:
            peer = Peer(cluster, cluster.client_addr(1), internal, [])
            peer.spy()
            yield peer
        finally:
            internal.close()


def works(peer: Peer, value: bytes) -> None:
    """The partition still takes a send and a poll: nothing wedged it."""
    with Producer(peer.address, linger_ms=0) as producer:
        producer.send(TOPIC, value, partition=0).result(TIMEOUT_S)
    with Consumer(peer.address, f"g-{value.decode()}", [TOPIC]) as consumer:
        got = consumer.poll(10_000, TIMEOUT_S * 1000)
        assert value in [m.value for m in got]
        consumer.ack(got)


def test_hostile_forwarded_commands_get_typed_errors_and_change_nothing(peer: Peer) -> None:
    works(peer, b"before")
    peer.proposed.clear()
    refused: list[tuple[str, errors.RaftqError]] = []
    for what, request, passes in EDGES:
        if passes:
            continue
        try:
            peer.internal.propose(peer.address, request, TIMEOUT_S)
        except errors.RaftqError as exc:
            refused.append((what, exc))
            continue
        raise AssertionError(f"{what}: proposed")
    for op in ("configure", "retain", "dead_letter_done", "append_batch", "fire_schedules"):
        command = partition_pb2.PartitionCommand()
        getattr(command, op).SetInParent()
        request = internal_pb2.ProposeRequest(topic=TOPIC, command=command)
        with pytest.raises(errors.InvalidArgument, match="never forwarded"):
            peer.internal.propose(peer.address, request, TIMEOUT_S)
    for data in unknown_field_requests():
        assert isinstance(peer.raw(data), errors.MalformedCommand)
    good = propose("purge", partition_pb2.Purge()).SerializeToString()
    for garbage in (b"\xff" * 7, good[:-1], b"\x1a\xff\xff\xff\xff\x0f", b"\x1a" * 5000):
        refusal = peer.raw(garbage)
        assert isinstance(refusal, errors.MalformedCommand), (garbage[:8], refusal)
    assert all(isinstance(e, errors.InvalidArgument) for _, e in refused), refused
    assert not any(e.retriable for _, e in refused)
    assert peer.foreign() == []  # nothing reached the partition's Raft log
    works(peer, b"after")


def test_a_forwarded_append_at_past_and_far_past_the_entry_and_message_limits(
    peer: Peer,
) -> None:
    limit = peer.replica().proposer.max_append_bytes()

    def append_of(size: int) -> partition_pb2.Append:
        """Values of at most 1 MiB each, the Append encoded in exactly ``size`` bytes."""
        values = [b"x" * (1 << 19)] * (size // (1 << 19))
        append = partition_pb2.Append(values=values)
        while append.ByteSize() > size - 8:
            append.values.pop()
        filler = size - append.ByteSize() - 4  # tag + 3-byte length
        append.values.append(b"y" * filler)
        while append.ByteSize() < size:
            append.values[-1] += b"y"
        assert append.ByteSize() == size
        return append

    at = peer.internal.propose(peer.address, propose("append", append_of(limit)), TIMEOUT_S)
    assert at.result.range.count > 0 and not at.result.error
    peer.proposed.clear()
    with pytest.raises(errors.RecordTooLarge):
        peer.internal.propose(peer.address, propose("append", append_of(limit + 1)), TIMEOUT_S)
    one_over = partition_pb2.Append(values=[b"z" * ((1 << 20) + 1)])  # a value over the topic's
    with pytest.raises(errors.RecordTooLarge):
        peer.internal.propose(peer.address, propose("append", one_over), TIMEOUT_S)
    message_max = peer.cluster.broker(1).config.message_bytes_max
    huge = partition_pb2.Append(values=[b"w" * (1 << 20)] * (message_max // (1 << 20) + 2))
    with pytest.raises(errors.RaftqError) as far:  # refused by gRPC before any code ran
        peer.internal.propose(peer.address, propose("append", huge), TIMEOUT_S)
    assert "RESOURCE_EXHAUSTED" in far.value.message or isinstance(
        far.value, errors.ResourceExhausted
    ), far.value
    assert peer.foreign() == []
    works(peer, b"later")
