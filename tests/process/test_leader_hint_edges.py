"""PollResponse.leader_hint at its edges: who may learn it, and where a client follows it.

Three real brokers in this process with tokens and ACLs required; a one-replica topic, so
one broker leads it and the other two forward its polls and acks over Internal.Propose. A
principal without consume on the topic, polling or acking through a forwarding broker and on
the leader, is PERMISSION_DENIED: no records, no lease, no leader address in the error, and
nothing reaches the partition. A client follows a hint only to a broker of its bootstrap list:
a hint naming any other address (a real broker it was not given, or one a tampered answer
names) reaches nothing.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from raftq.aio import AsyncConsumer
from raftq.client import Admin, Consumer, Producer
from raftq.proto import api_pb2, errors
from raftq.transport import auth
from raftq.transport.auth import GROUP, TOPIC, AclRule, AuthPolicy, Principal, token_digest
from raftq.transport.grpc_errors import LEADER_KEY, from_rpc_error
from tests.cluster import make_cluster
from tests.wiretap import Journal, Wiretap

TIMEOUT_S = 10
ALL = frozenset({"produce", "consume", "admin"})


def _principal(name: str, *acls: AclRule) -> Principal:
    return Principal(name, bytes.fromhex(token_digest(f"token-{name}")), acls)


ROOT = _principal(
    "root", AclRule(("*",), ALL, TOPIC), AclRule(("*",), frozenset({"consume", "admin"}), GROUP)
)
OWNER = _principal(
    "owner",
    AclRule(("hint*",), frozenset({"produce", "consume"}), TOPIC),
    AclRule(("hint*",), frozenset({"consume"}), GROUP),
)
# consume on the group and on another topic, none on the owner's topic: it can join the
# group (subscribed to "elsewhere") and poll, but may not reach the owner's topic
OUTSIDER = _principal(
    "outsider",
    AclRule(("elsewhere",), frozenset({"produce", "consume"}), TOPIC),
    AclRule(("hint*",), frozenset({"consume"}), GROUP),
)
# consume on the owner's topic, no right on any group
NO_GROUP = _principal("no-group", AclRule(("hint*",), frozenset({"consume"}), TOPIC))
POLICY = AuthPolicy([ROOT, OWNER, OUTSIDER, NO_GROUP])


@dataclass
class Trio:
    addresses: dict[int, str]
    taps: dict[int, Wiretap]
    journal: Journal

    def calls(self, *methods: str) -> list[tuple[int, str]]:
        return [(int(b), m) for b, m in self.journal if m in methods]


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trio]:
    journal: Journal = []
    taps = {i: Wiretap(str(i), journal) for i in (1, 2, 3)}
    root = tmp_path_factory.mktemp("hints")
    # The taps run after the broker's ACL check: a call the journal shows was allowed.
    with make_cluster(
        root,
        brokers=3,
        auth=POLICY,
        client={"token": "token-root"},
        interceptors=lambda i: [taps[i]],
    ) as cluster:
        cluster.wait_ready()
        yield Trio({i: cluster.client_addr(i) for i in (1, 2, 3)}, taps, journal)


def lone_replica(trio: Trio, topic: str) -> tuple[int, list[int]]:
    """Create ``topic`` (one partition, one replica): its leader and the other brokers."""
    with Admin(trio.addresses[1], token="token-root") as admin:
        created = admin.create_topic(topic, partitions=1, replication_factor=1)
    leader = created.partitions[0].leader
    trio.journal.clear()
    return leader, [b for b in trio.addresses if b != leader]


def call(address: str, who: Principal, method: str, request: Any) -> tuple[Any, str]:
    """(the answer, or the typed error it raised; the raftq-leader trailer, "" if none)."""
    path = {
        "Poll": "/raftq.v1.Consumer/Poll",
        "Ack": "/raftq.v1.Consumer/Ack",
        "Nack": "/raftq.v1.Consumer/Nack",
        "ExtendLease": "/raftq.v1.Consumer/ExtendLease",
        "JoinGroup": "/raftq.v1.Consumer/JoinGroup",
    }[method]
    answer_type: Any = {
        "Poll": api_pb2.PollResponse,
        "JoinGroup": api_pb2.JoinGroupResponse,
    }.get(method, api_pb2.SettleResponse)
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(
            path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=answer_type.FromString,
        )
        metadata = auth.bearer_metadata(f"token-{who.name}")
        try:
            answer = stub(request, timeout=TIMEOUT_S, metadata=metadata)
            return answer, ""
        except grpc.RpcError as exc:
            trailers = dict(exc.trailing_metadata() or ())
            return from_rpc_error(exc), str(trailers.get(LEADER_KEY, ""))


def partition_state(trio: Trio, topic: str, group: str) -> list[tuple[int, int, int]]:
    """(committed, pending, leased) of the group on the topic's partition, read as root."""
    with Admin(trio.addresses[1], token="token-root") as admin:
        described = admin.describe_group(group)
    return [(p.committed, p.pending, p.leased) for p in described.partitions if p.topic == topic]


def test_a_principal_without_consume_on_the_topic_gets_no_records_no_lease_and_no_hint(
    trio: Trio,
) -> None:
    topic, group = "hint-denied", "hint-denied-g"
    leader, others = lone_replica(trio, topic)
    with Admin(trio.addresses[1], token="token-root") as admin:
        if "elsewhere" not in {t.name for t in admin.list_topics()}:
            admin.create_topic("elsewhere", partitions=1, replication_factor=1)
    with Producer(trio.addresses[leader], token="token-owner", linger_ms=0) as producer:
        sent = [producer.send(topic, b"r%d" % i, partition=0) for i in range(3)]
        [f.result(TIMEOUT_S) for f in sent]
    forwarder = trio.addresses[others[0]]
    owner = call(
        forwarder,
        OWNER,
        "JoinGroup",
        api_pb2.JoinGroupRequest(group=group, topics=[topic]),
    )[0]
    polled, _ = call(
        forwarder,
        OWNER,
        "Poll",
        api_pb2.PollRequest(
            group=group, member_id=owner.member_id, generation=owner.generation, max_records=1
        ),
    )
    # the owner's own poll through the forwarder: one record and the leader's address
    assert [r.record.value for r in polled.records] == [b"r0"]
    assert polled.leader_hint == trio.addresses[leader]
    held = polled.records[0]
    ref = api_pb2.RecordRef(
        topic=topic, partition=0, offset=held.offset, delivery_count=held.delivery_count
    )
    outsider = call(
        forwarder,
        OUTSIDER,
        "JoinGroup",
        api_pb2.JoinGroupRequest(group=group, topics=["elsewhere"]),
    )[0]
    # the rebalance that admitted the outsider kept the owner's partition with the owner
    owner = call(
        forwarder,
        OWNER,
        "JoinGroup",
        api_pb2.JoinGroupRequest(group=group, topics=[topic], member_id=owner.member_id),
    )[0]
    before = partition_state(trio, topic, group)
    assert before == [(0, 3, 1)]
    trio.journal.clear()

    def as_member(member: Any) -> dict[str, Any]:
        return {"group": group, "member_id": member.member_id, "generation": member.generation}

    batch = api_pb2.PartitionRefs(
        topic=topic, partition=0, offsets=[ref.offset], delivery_counts=[ref.delivery_count]
    )
    attempts = [
        # the owner's member id: another principal's
        (OUTSIDER, "Poll", api_pb2.PollRequest(**as_member(owner), max_records=10)),
        (OUTSIDER, "Ack", api_pb2.AckRequest(**as_member(owner), refs=[ref])),
        # its own member id, naming the owner's topic
        (OUTSIDER, "Ack", api_pb2.AckRequest(**as_member(outsider), refs=[ref])),
        (OUTSIDER, "Ack", api_pb2.AckRequest(**as_member(outsider), batches=[batch])),
        (OUTSIDER, "Nack", api_pb2.NackRequest(**as_member(outsider), refs=[ref])),
        (
            OUTSIDER,
            "ExtendLease",
            api_pb2.ExtendLeaseRequest(**as_member(outsider), refs=[ref], lease_ms=60_000),
        ),
        # consume on the topic but not on the group
        (NO_GROUP, "Poll", api_pb2.PollRequest(**as_member(owner), max_records=10)),
        (NO_GROUP, "Ack", api_pb2.AckRequest(**as_member(owner), refs=[ref])),
    ]
    for broker in [*others, leader]:  # forwarding brokers, then the leader itself
        for who, method, request in attempts:
            refused, hint = call(trio.addresses[broker], who, method, request)
            where = (broker, who.name, method)
            assert isinstance(refused, errors.PermissionDenied), (where, refused)
            assert f"principal {who.name!r} may not call" in refused.message, where
            assert (hint, refused.leader_hint) == ("", ""), where
            assert trio.addresses[leader] not in refused.message, where
    # nothing reached a handler (the taps sit behind the ACL check), nothing was forwarded
    assert trio.calls("Poll", "Ack", "Nack", "ExtendLease", "Propose") == []
    assert partition_state(trio, topic, group) == before
    # its own poll answers its own partition only, and names no leader of the owner's topic
    mine, _ = call(
        trio.addresses[leader],
        OUTSIDER,
        "Poll",
        api_pb2.PollRequest(**as_member(outsider), max_records=10),
    )
    assert [r.topic for r in mine.records] == []
    assert mine.leader_hint == ""
    assert partition_state(trio, topic, group) == before
    # the owner still holds its lease and settles it on the leader
    acked, _ = call(
        trio.addresses[leader], OWNER, "Ack", api_pb2.AckRequest(**as_member(owner), refs=[ref])
    )
    assert [r.error for r in acked.results] == [0]
    assert partition_state(trio, topic, group) == [(1, 2, 0)]


@pytest.fixture
def trap() -> Iterator[socket.socket]:
    """A listening socket no broker serves: a client that dials it shows in its backlog."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        yield listener
    finally:
        listener.close()


def dialed(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


def test_a_client_follows_a_hint_only_to_a_broker_of_its_bootstrap_list(
    trio: Trio, trap: socket.socket
) -> None:
    """The forwarder's real hint names the leader, which the consumer was not given: it keeps
    polling and acking through its bootstrap broker. A hint rewritten to name another address
    (a tampered answer) is not dialed either."""
    topic, group = "hint-bootstrap", "hint-bootstrap-g"
    leader, others = lone_replica(trio, topic)
    forwarder = others[0]
    trap_addr = f"127.0.0.1:{trap.getsockname()[1]}"
    with Producer(trio.addresses[leader], token="token-owner", linger_ms=0) as producer:
        sent = [producer.send(topic, b"r%d" % i, partition=0) for i in range(4)]
        [f.result(TIMEOUT_S) for f in sent]
    bootstrap = ",".join(trio.addresses[b] for b in others)  # the leader is not among them
    with Consumer(bootstrap, group, [topic], token="token-owner") as consumer:
        trio.journal.clear()
        first = consumer.poll(1, TIMEOUT_S * 1000)
        assert [m.value for m in first] == [b"r0"]
        assert consumer.ack(first) == [None]
        trio.taps[forwarder].rewrite("Poll", _hint_to(trap_addr))
        try:
            second = consumer.poll(1, TIMEOUT_S * 1000)
            assert [m.value for m in second] == [b"r1"]
            assert consumer.ack(second) == [None]
        finally:
            trio.taps[forwarder].rewrite("Poll", None)
        calls = trio.calls("Poll", "Ack")
    assert calls == [(forwarder, m) for m in ("Poll", "Ack", "Poll", "Ack")]
    assert not dialed(trap)

    async def async_member() -> list[tuple[int, str]]:
        async with AsyncConsumer(bootstrap, group, [topic], token="token-owner") as consumer:
            trio.journal.clear()
            trio.taps[forwarder].rewrite("Poll", _hint_to(trap_addr))
            try:
                got = await consumer.poll(2, TIMEOUT_S * 1000)
                assert [m.value for m in got] == [b"r2", b"r3"]
                assert await consumer.ack(got) == [None, None]
            finally:
                trio.taps[forwarder].rewrite("Poll", None)
            return trio.calls("Poll", "Ack")

    assert asyncio.run(async_member()) == [(forwarder, "Poll"), (forwarder, "Ack")]
    assert not dialed(trap)


def _hint_to(address: str) -> Any:
    def rewrite(_request: Any, answer: api_pb2.PollResponse) -> api_pb2.PollResponse:
        if answer.records or answer.batches:
            answer.leader_hint = address
        return answer

    return rewrite
