"""Every RPC behind its permission, generated from proto/api.proto's descriptors.

A real broker in this process on 127.0.0.1 with tokens and ACLs required (security.auth_file
written from POLICY), one per test: each test's refusals must change nothing it can see. The
generated tests walk every RPC of every service and every string field of its request (nested
and repeated too):

- every RPC has an explicit entry in raftq.transport.auth's table (the fail-closed cluster-admin
  default is for RPCs nobody decided on: a new RPC fails here until someone does);
- every string field is either a resource name (topic, group, txn app, member id) whose value
  the RPC's needs name, or listed here as naming none: a new field fails until decided;
- every RPC, in every wire form (refs and batches, records and values, unary and stream), with
  its resources named after a victim's, is PERMISSION_DENIED for a principal without rights
  and for one with every right on other resources, and changes nothing.

Then the member-id and group rules: ids issued by the broker and bound to the principal that
joined, other principals' ids refused in every call, DescribeGroup hiding them, lists narrowed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from raftq.proto import api_pb2, api_pb2_grpc, errors
from raftq.transport import auth
from raftq.transport.auth import GROUP, TOPIC, TXN_APP, AclRule, AuthPolicy, Principal, token_digest
from raftq.transport.grpc_errors import from_rpc_error
from tests.cluster import Cluster

TIMEOUT_S = 10
ALL = ("produce", "consume", "admin")

# String fields of requests that name a resource, and what the needs must then name.
RESOURCE_FIELDS = {
    "topic": TOPIC,
    "topics": TOPIC,
    "name": TOPIC,
    "dead_letter_topic": TOPIC,
    "group": GROUP,
    "app_id": TXN_APP,
    "member_id": "member",
}
# String fields that name no resource (decided one by one: add a new field to one set).
# scope: CommitTxn/GetTxn's watermark key within a txn app (the right is on the app).
# fair_key: a topic setting naming a record header (ordering=fair), not a resource.
# cron, time_zone: a schedule's timing (CreateSchedule); a schedule's name is under its topic's
# right (the generator fills "name" as a topic name, which the needs name through r.topic).
NOT_RESOURCES = {"producer_id", "idempotency_key", "scope", "fair_key", "cron", "time_zone"}


def _rules(pattern: str) -> tuple[AclRule, ...]:
    return (
        AclRule((pattern,), frozenset(ALL), TOPIC),
        AclRule((pattern,), frozenset({"consume", "admin"}), GROUP),
        AclRule((pattern,), frozenset({"produce", "admin"}), TXN_APP),
    )


def _principal(name: str, acls: tuple[AclRule, ...]) -> Principal:
    return Principal(name, bytes.fromhex(token_digest(f"token-{name}")), acls)


VICTIM = _principal("victim", _rules("victim*"))
ROOT = _principal("root", _rules("*"))
NOBODY = _principal("nobody", ())
STRANGER = _principal("stranger", _rules("other*"))  # every right, elsewhere
# every right on the victim's topics and group, but not the victim's member
RIVAL = _principal("rival", _rules("victim*"))
# a principal with consume (not admin) on the victim's group and topics
PEER = _principal(
    "peer",
    (
        AclRule(("victim*",), frozenset({"consume"}), TOPIC),
        AclRule(("victim*",), frozenset({"consume"}), GROUP),
    ),
)
# produce on the victim's topic, no right on any txn app
WRITER = _principal("writer", (AclRule(("victim*",), frozenset({"produce"}), TOPIC),))
# consume on the victim's topics, no right on any group
TOPICS_ONLY = _principal("topics-only", (AclRule(("victim*",), frozenset({"consume"}), TOPIC),))
POLICY = AuthPolicy([VICTIM, ROOT, NOBODY, STRANGER, RIVAL, PEER, WRITER, TOPICS_ONLY])


def methods() -> Iterator[tuple[str, Any]]:
    for service in api_pb2.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            yield f"/{service.full_name}/{method.name}", method


def _string_fields(d: Descriptor, path: str = "") -> Iterator[tuple[str, FieldDescriptor]]:
    for field in d.fields:
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                continue  # headers: a record's own data, no resource
            yield from _string_fields(field.message_type, f"{path}{field.name}.")
        elif field.type == FieldDescriptor.TYPE_STRING:
            yield f"{path}{field.name}", field


def _fill(message: Any, values: dict[str, str], path: str = "") -> None:
    """Every string field set (resource fields from ``values``, by kind), every repeated
    message field with one element, each oneof's first member only."""
    d = message.DESCRIPTOR
    done_oneofs: set[str] = set()
    for field in d.fields:
        oneof = field.containing_oneof
        if oneof is not None and not oneof.name.startswith("_"):
            if oneof.name in done_oneofs:
                continue
            done_oneofs.add(oneof.name)
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                continue
            sub = getattr(message, field.name)
            _fill(sub.add() if field.is_repeated else sub, values, f"{path}{field.name}.")
        elif field.type == FieldDescriptor.TYPE_STRING:
            kind = RESOURCE_FIELDS.get(field.name)
            value = values.get(kind or "", "not-a-resource")
            if field.is_repeated:
                getattr(message, field.name).append(value)
            else:
                setattr(message, field.name, value)
        elif field.type == FieldDescriptor.TYPE_BYTES:
            if field.is_repeated:
                getattr(message, field.name).append(b"v")
            else:
                setattr(message, field.name, b"v")
        elif field.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64):
            if field.is_repeated:
                getattr(message, field.name).append(1)
            else:
                setattr(message, field.name, 1)


def _request(method: Any, values: dict[str, str]) -> Any:
    request = getattr(api_pb2, method.input_type.name)()
    _fill(request, values)
    return request


def test_every_rpc_has_an_explicit_permission_entry() -> None:
    missing = [path for path, _ in methods() if path not in auth._NEEDS]
    assert not missing, f"decide what these RPCs need in transport/auth.py _NEEDS: {missing}"


def test_every_string_field_of_every_request_is_a_named_resource_or_declared_none() -> None:
    undecided = [
        f"{method.input_type.name}.{path}"
        for _, method in methods()
        for path, field in _string_fields(method.input_type)
        if field.name not in RESOURCE_FIELDS and field.name not in NOT_RESOURCES
    ]
    assert not undecided, (
        f"string fields nobody decided on: {undecided}; if one names a resource, check it in "
        "transport/auth.py and add it to RESOURCE_FIELDS here, else to NOT_RESOURCES"
    )


@dataclass
class _Member:
    topics: tuple[str, ...]
    principal: str


@pytest.mark.parametrize("path", [p for p, _ in methods()])
def test_every_resource_field_of_every_rpc_is_checked(path: str) -> None:
    """With every resource field naming its own value, the needs name every one of them, and
    the member id is checked against the caller."""
    method = dict(methods())[path]
    values = {TOPIC: "t-1", GROUP: "g-1", TXN_APP: "a-1", "member": "m-1"}
    request = _request(method, values)
    seen: list[tuple[str, str]] = []

    def lookup(group: str, member_id: str, wait_s: float) -> _Member:
        seen.append((group, member_id))
        return _Member(("t-member",), ROOT.name)

    needs = auth.requirements(path, request, ROOT, lookup)
    named = {(n.resource, n.name) for n in needs}
    fields = {field.name for _, field in _string_fields(method.input_type)}
    for kind in {RESOURCE_FIELDS[f] for f in fields if f in RESOURCE_FIELDS}:
        if kind == "member":
            if path != "/raftq.v1.Consumer/JoinGroup":  # a rejoin: the service checks it
                assert seen == [("g-1", "m-1")], path
                with pytest.raises(errors.PermissionDenied, match="another principal"):
                    auth.requirements(path, request, ROOT, lambda g, m, w: _Member((), "x"))
        else:
            assert (kind, values[kind]) in named, (path, kind, needs)


# --------------------------------------------------------------------------------------------
# Over the wire
# --------------------------------------------------------------------------------------------


class Wire:
    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)

    def close(self) -> None:
        self.channel.close()

    def call(self, who: Principal, path: str, *requests: Any) -> Any:
        """The response, or raises the typed error."""
        method = dict(methods())[path]
        response_class = getattr(api_pb2, method.output_type.name)
        metadata = auth.bearer_metadata(f"token-{who.name}")
        kwargs = {
            "request_serializer": lambda m: m.SerializeToString(),
            "response_deserializer": response_class.FromString,
        }
        try:
            if method.client_streaming:
                stream = self.channel.stream_stream(path, **kwargs)
                return list(stream(iter(requests), timeout=TIMEOUT_S, metadata=metadata))
            return self.channel.unary_unary(path, **kwargs)(
                requests[0], timeout=TIMEOUT_S, metadata=metadata
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def consumer(self, who: Principal) -> api_pb2_grpc.ConsumerStub:
        return api_pb2_grpc.ConsumerStub(self.channel)


@dataclass
class Setup:
    wire: Wire
    member_id: str
    generation: int
    leased: api_pb2.LeasedRecord

    def state(self) -> list[str]:
        """What a refused call might have changed, read as root."""
        w = self.wire
        out = [str(w.call(ROOT, "/raftq.v1.Admin/ListTopics", api_pb2.ListTopicsRequest()))]
        for topic in ("victim", "victim.dlq"):
            try:
                offsets = w.call(
                    ROOT, "/raftq.v1.Log/ListOffsets", api_pb2.ListOffsetsRequest(topic=topic)
                )
                out.append(str(offsets))
            except errors.UnknownTopic:
                out.append(f"{topic}: none")
        out.append(
            str(
                w.call(
                    ROOT,
                    "/raftq.v1.Admin/DescribeGroup",
                    api_pb2.DescribeGroupRequest(group="victim-g"),
                )
            )
        )
        out.append(
            str(w.call(ROOT, "/raftq.v1.Admin/GetTxn", api_pb2.GetTxnRequest(app_id="victim-app")))
        )
        return out


pytestmark = pytest.mark.cluster(auth=POLICY)  # the `cluster` fixture's knobs


@pytest.fixture
def setup(cluster: Cluster) -> Iterator[Setup]:
    wire = Wire(cluster.client_addr(1))
    try:
        wire.call(
            ROOT,
            "/raftq.v1.Admin/CreateTopic",
            api_pb2.CreateTopicRequest(name="victim", partitions=1),
        )
        wire.call(
            ROOT,
            "/raftq.v1.Admin/CreateTopic",
            api_pb2.CreateTopicRequest(name="other", partitions=1),
        )
        wire.call(
            VICTIM,
            "/raftq.v1.Producer/Send",
            api_pb2.SendRequest(topic="victim", values=[b"a", b"b"]),
        )
        joined = wire.call(
            VICTIM,
            "/raftq.v1.Consumer/JoinGroup",
            api_pb2.JoinGroupRequest(group="victim-g", topics=["victim"]),
        )
        polled = wire.call(
            VICTIM,
            "/raftq.v1.Consumer/Poll",
            api_pb2.PollRequest(
                group="victim-g",
                member_id=joined.member_id,
                generation=joined.generation,
                max_records=1,
            ),
        )
        wire.call(
            VICTIM,
            "/raftq.v1.Admin/CommitTxn",
            api_pb2.CommitTxnRequest(app_id="victim-app", version=3),
        )
        yield Setup(wire, joined.member_id, joined.generation, polled.records[0])
    finally:
        wire.close()


def _wire_forms(method: Any, values: dict[str, str]) -> list[Any]:
    """The request with every field filled, and one per repeated field of the request with
    only that one among its repeated fields: refs or batches, records or values."""
    full = _request(method, values)
    repeated = [f.name for f in full.DESCRIPTOR.fields if f.is_repeated]
    forms = [full]
    for keep in repeated if len(repeated) > 1 else ():
        form = type(full)()
        form.CopyFrom(full)
        for name in repeated:
            if name != keep:
                form.ClearField(name)
        forms.append(form)
    return forms


LISTS = {
    "/raftq.v1.Admin/ListTopics",
    "/raftq.v1.Admin/ListGroups",
    "/raftq.v1.Admin/DescribeCluster",
}


@pytest.mark.parametrize("who", [NOBODY, STRANGER], ids=lambda p: p.name)
def test_every_rpc_in_every_wire_form_is_denied_without_rights_and_changes_nothing(
    setup: Setup, who: Principal
) -> None:
    before = setup.state()
    values = {TOPIC: "victim", GROUP: "victim-g", TXN_APP: "victim-app", "member": setup.member_id}
    tried = 0
    for path, method in methods():
        for request in _wire_forms(method, values):
            tried += 1
            if who is STRANGER and path in LISTS:
                answer = setup.wire.call(who, path, request)  # answered, narrowed: below
                assert "victim" not in str(answer), (path, answer)
                continue
            with pytest.raises(errors.PermissionDenied) as caught:
                setup.wire.call(who, path, request)
            assert f"principal {who.name!r} may not call {path}" in caught.value.message
    assert tried > len(dict(methods()))  # several forms of some RPCs
    assert setup.state() == before


def test_a_send_stream_checks_every_message_not_just_the_first(setup: Setup) -> None:
    before = setup.state()
    allowed = api_pb2.SendRequest(topic="other", values=[b"fine"], request_id=1)
    victim = api_pb2.SendRequest(topic="victim", values=[b"forged"], request_id=2)
    with pytest.raises(errors.PermissionDenied, match="needs produce on topic 'victim'"):
        setup.wire.call(STRANGER, "/raftq.v1.Producer/SendStream", allowed, victim)
    assert setup.state() == before


def test_member_ids_are_issued_by_the_broker_and_bound_to_the_principal_that_joined(
    setup: Setup,
) -> None:
    """Issue 13 item 3: a principal took another's member id, got its assignment and nacked
    its leases; LeaveGroup removed any member."""
    w, mine = setup.wire, setup.member_id
    ref = api_pb2.RecordRef(
        topic="victim",
        partition=setup.leased.partition,
        offset=setup.leased.offset,
        delivery_count=setup.leased.delivery_count,
    )
    batch = api_pb2.PartitionRefs(
        topic="victim",
        partition=ref.partition,
        offsets=[ref.offset],
        delivery_counts=[ref.delivery_count],
    )
    member: dict[str, Any] = {
        "group": "victim-g",
        "member_id": mine,
        "generation": setup.generation,
    }
    start = api_pb2.PollStart(**member)
    calls = [
        ("Consumer/Heartbeat", api_pb2.HeartbeatRequest(**member)),
        ("Consumer/Poll", api_pb2.PollRequest(**member, max_records=1)),
        ("Consumer/PollStream", api_pb2.PollStreamRequest(start=start)),
        ("Consumer/Ack", api_pb2.AckRequest(**member, refs=[ref])),
        ("Consumer/Ack", api_pb2.AckRequest(**member, batches=[batch])),
        ("Consumer/Nack", api_pb2.NackRequest(**member, refs=[ref])),
        ("Consumer/ExtendLease", api_pb2.ExtendLeaseRequest(**member, refs=[ref], lease_ms=9)),
        ("Consumer/LeaveGroup", api_pb2.LeaveGroupRequest(group="victim-g", member_id=mine)),
    ]
    before = setup.state()
    for who in (RIVAL, PEER, ROOT):  # every right on the group and topics, or admin of all
        for name, request in calls:
            with pytest.raises(errors.PermissionDenied, match="issued that member id to another"):
                w.call(who, f"/raftq.v1.{name}", request)
        rejoin = api_pb2.JoinGroupRequest(group="victim-g", topics=["victim"], member_id=mine)
        with pytest.raises(errors.PermissionDenied):
            w.call(who, "/raftq.v1.Consumer/JoinGroup", rejoin)
    assert setup.state() == before
    # a caller cannot choose a member id: one the group does not hold is UNKNOWN_MEMBER
    chosen = api_pb2.JoinGroupRequest(group="victim-g", topics=["victim"], member_id="m-mine")
    with pytest.raises(errors.UnknownMember):
        w.call(RIVAL, "/raftq.v1.Consumer/JoinGroup", chosen)
    assert setup.state() == before
    # the owner still is the member: its lease is its own to settle
    acked = w.call(VICTIM, "/raftq.v1.Consumer/Ack", api_pb2.AckRequest(**member, refs=[ref]))
    assert [r.error for r in acked.results] == [0]
    joined = w.call(
        VICTIM,
        "/raftq.v1.Consumer/JoinGroup",
        api_pb2.JoinGroupRequest(group="victim-g", topics=["victim"], member_id=mine),
    )
    assert joined.member_id == mine


def _describe(setup: Setup, who: Principal) -> api_pb2.GroupDescription:
    request = api_pb2.DescribeGroupRequest(group="victim-g")
    described: api_pb2.GroupDescription = setup.wire.call(
        who, "/raftq.v1.Admin/DescribeGroup", request
    )
    return described


def test_describe_group_shows_member_ids_only_to_group_admins_and_their_own_principal(
    setup: Setup,
) -> None:
    """Issue 13 item 2: DescribeGroup handed every member id and generation to anyone."""
    peer = setup.wire.call(
        PEER,
        "/raftq.v1.Consumer/JoinGroup",
        api_pb2.JoinGroupRequest(group="victim-g", topics=["victim"]),
    )
    for who in (STRANGER, WRITER, NOBODY):
        with pytest.raises(errors.PermissionDenied):
            _describe(setup, who)
    as_admin = _describe(setup, ROOT)
    assert sorted(m.member_id for m in as_admin.members) == sorted(
        [setup.member_id, peer.member_id]
    )
    assert {lag.member_id for lag in as_admin.partitions} <= {setup.member_id, peer.member_id}
    as_peer = _describe(setup, PEER)
    assert sorted(m.member_id for m in as_peer.members) == sorted(
        [peer.member_id, auth.HIDDEN_MEMBER]
    )
    assert setup.member_id not in str(as_peer)
    as_victim = _describe(setup, VICTIM)  # admin of victim* groups: sees them all
    assert peer.member_id in str(as_victim) and setup.member_id in str(as_victim)
    delete = api_pb2.DeleteGroupRequest(group="victim-g")
    with pytest.raises(errors.PermissionDenied, match="needs admin on group 'victim-g'"):
        setup.wire.call(PEER, "/raftq.v1.Admin/DeleteGroup", delete)  # consume is not enough
    assert _describe(setup, ROOT) == as_admin


def test_txn_watermarks_need_a_right_on_the_txn_app(setup: Setup) -> None:
    """Issue 13 item 4: produce on any topic let a principal move any Spark app's watermark."""
    w = setup.wire
    before = setup.state()
    for who in (WRITER, PEER, STRANGER):
        with pytest.raises(errors.PermissionDenied, match="on txn app 'victim-app'"):
            w.call(
                who,
                "/raftq.v1.Admin/CommitTxn",
                api_pb2.CommitTxnRequest(app_id="victim-app", version=1_000_000),
            )
        with pytest.raises(errors.PermissionDenied, match="on txn app 'victim-app'"):
            w.call(who, "/raftq.v1.Admin/GetTxn", api_pb2.GetTxnRequest(app_id="victim-app"))
    assert setup.state() == before
    mine = w.call(
        STRANGER,
        "/raftq.v1.Admin/CommitTxn",
        api_pb2.CommitTxnRequest(app_id="other-app", version=7),
    )
    assert (mine.known, mine.version) == (True, 7)
    got = w.call(VICTIM, "/raftq.v1.Admin/GetTxn", api_pb2.GetTxnRequest(app_id="victim-app"))
    assert got.version == 3


def test_lists_name_only_what_the_caller_has_a_right_on(setup: Setup) -> None:
    w = setup.wire
    w.call(
        STRANGER,
        "/raftq.v1.Consumer/JoinGroup",
        api_pb2.JoinGroupRequest(group="other-g", topics=["other"]),
    )
    topics = {
        who.name: [
            t.name
            for t in w.call(who, "/raftq.v1.Admin/ListTopics", api_pb2.ListTopicsRequest()).topics
        ]
        for who in (ROOT, PEER, STRANGER)
    }
    assert topics == {"root": ["other", "victim"], "peer": ["victim"], "stranger": ["other"]}
    groups = {
        who.name: [
            g.group
            for g in w.call(who, "/raftq.v1.Admin/ListGroups", api_pb2.ListGroupsRequest()).groups
        ]
        for who in (ROOT, PEER, STRANGER, WRITER)
    }
    assert groups == {
        "root": ["other-g", "victim-g"],
        "peer": ["victim-g"],
        "stranger": ["other-g"],
        "writer": [],
    }


def test_settles_check_every_topic_in_refs_and_batches_for_the_members_own_principal(
    setup: Setup,
) -> None:
    """Issue 13 item 2: an Ack carrying only batches needed no permission at all."""
    w = setup.wire
    own = w.call(
        STRANGER,
        "/raftq.v1.Consumer/JoinGroup",
        api_pb2.JoinGroupRequest(group="other-g", topics=["other"]),
    )
    member: dict[str, Any] = {
        "group": "other-g",
        "member_id": own.member_id,
        "generation": own.generation,
    }
    ref = api_pb2.RecordRef(topic="victim", partition=0, offset=0, delivery_count=1)
    ok = api_pb2.PartitionRefs(topic="other", partition=0, offsets=[0], delivery_counts=[1])
    bad = api_pb2.PartitionRefs(topic="victim", partition=0, offsets=[0], delivery_counts=[1])
    calls = [
        ("Consumer/Ack", api_pb2.AckRequest(**member, refs=[ref])),
        ("Consumer/Ack", api_pb2.AckRequest(**member, batches=[bad])),
        ("Consumer/Ack", api_pb2.AckRequest(**member, batches=[ok, bad])),
        ("Consumer/Nack", api_pb2.NackRequest(**member, refs=[ref])),
        ("Consumer/ExtendLease", api_pb2.ExtendLeaseRequest(**member, refs=[ref], lease_ms=9)),
    ]
    before = setup.state()
    for name, request in calls:
        with pytest.raises(errors.PermissionDenied, match="needs consume on topic 'victim'"):
            w.call(STRANGER, f"/raftq.v1.{name}", request)
    assert setup.state() == before


def test_groups_need_their_own_right_checked_before_any_member_is_looked_up(
    setup: Setup,
) -> None:
    w = setup.wire
    join = api_pb2.JoinGroupRequest(group="victim-g", topics=["victim"])
    with pytest.raises(errors.PermissionDenied, match="needs consume on group 'victim-g'"):
        w.call(TOPICS_ONLY, "/raftq.v1.Consumer/JoinGroup", join)
    for member_id in (setup.member_id, "m-no-such-member"):  # no hint which ids exist
        heartbeat = api_pb2.HeartbeatRequest(group="victim-g", member_id=member_id)
        with pytest.raises(errors.PermissionDenied, match="needs consume on group 'victim-g'"):
            w.call(TOPICS_ONLY, "/raftq.v1.Consumer/Heartbeat", heartbeat)
    unknown = api_pb2.HeartbeatRequest(group="victim-g", member_id="m-no-such-member")
    with pytest.raises(errors.UnknownMember):  # with the group right: the usual answer
        w.call(PEER, "/raftq.v1.Consumer/Heartbeat", unknown)


def test_idempotent_producer_ids_are_the_callers_own(setup: Setup) -> None:
    """Two principals with produce on one topic and the same producer id and sequence: each
    batch is written; neither is answered as the other's duplicate (before, the second was
    acknowledged with the first's offsets and never written)."""
    w = setup.wire

    def send(who: Principal, value: bytes, path: str = "/raftq.v1.Producer/Send") -> Any:
        request = api_pb2.SendRequest(
            topic="victim", partition=0, producer_id="etl:0", sequence=0, values=[value]
        )
        answer = w.call(who, path, request)
        return (answer[0] if isinstance(answer, list) else answer).results[0]

    theirs = send(RIVAL, b"rival's")
    mine = send(VICTIM, b"victim's")
    assert not theirs.duplicate and not mine.duplicate and mine.offset != theirs.offset
    again = send(VICTIM, b"victim's", "/raftq.v1.Producer/SendStream")  # every wire form
    assert again.duplicate and again.offset == mine.offset
    fetch = api_pb2.FetchRequest(topic="victim", partition=0, offset=0, max_records=100)
    stored = w.call(VICTIM, "/raftq.v1.Log/Fetch", fetch).records
    assert {r.offset: r.record.value for r in stored}[mine.offset] == b"victim's"
    for who, offset in ((VICTIM, mine.offset), (RIVAL, theirs.offset)):
        state = w.call(
            who,
            "/raftq.v1.Log/ProducerState",
            api_pb2.ProducerStateRequest(topic="victim", producer_id="etl:0", partitions=[0]),
        )
        assert list(state.partitions[0].last_offsets) == [offset], who.name
