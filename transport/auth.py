"""Token authentication and ACLs on topics, consumer groups and transaction apps for the client
gRPC services.

A client sends ``authorization: Bearer <token>`` metadata on every call. The broker knows no
tokens, only their SHA-256 digests (``security.auth_file``): the presented token is hashed and
compared with every principal's digest by ``hmac.compare_digest``. The principal's ACL rules
then decide, per resource the request names, before the request reaches the broker — so a
refused call changes nothing. A rule names one kind of resource by globs (Kafka's TOPIC, GROUP
and TRANSACTIONAL_ID) and the operations it allows there:

    topics     produce, consume, admin
    groups     consume (join, be a member, describe), admin (see every member, delete)
    txn_apps   produce (commit a Spark app's batch watermark, read it), admin (read it)

    missing / malformed / unknown token   UNAUTHENTICATED   (raftq.proto.errors.Unauthenticated)
    token without the ACL the call needs  PERMISSION_DENIED (raftq.proto.errors.PermissionDenied)

What each RPC needs (`requirements`; any one of the listed operations on every resource named):

    Producer.Send, SendStream (each message)   produce            topic
    Log.ProducerState                          produce            topic
    Consumer.JoinGroup                         consume            group, every subscribed topic
    Consumer.Heartbeat, LeaveGroup, Poll,      consume            group, the member's topics;
      PollStream (its start message)                              the member issued to caller
    Consumer.Ack (refs and batches), Nack,     consume            group, every topic named;
      ExtendLease                                                 the member issued to caller
    Log.Fetch                                  consume            topic
    Log.ListOffsets                            consume | admin    topic
    Admin.DescribeTopic                        any                topic
    Admin.CreateTopic, AlterTopicConfig        admin              topic (and dead_letter_topic)
    Admin.DeleteTopic, UpdateRecord,
      CancelRecord, AddPartitions, MovePartition admin            topic
    Admin.DescribeGroup                        consume | admin    group (member ids: see below)
    Admin.DeleteGroup                          admin              group
    Admin.SeekGroup                            admin              group and topic
    Admin.PurgeTopic                           admin              topic
    Admin.CreateSchedule, PauseSchedule,       admin              topic
      DeleteSchedule
    Admin.ListSchedules                        any                topic
    Admin.CommitTxn                            produce            txn app
    Admin.GetTxn                               produce | admin    txn app
    Admin.ListTopics, ListGroups,              some ACL rule      answers list only what the
      DescribeCluster                                             caller has a right on
    Admin.RemoveBroker, RebalanceLeaders, BackupMetadata, BackupPartition,
      any RPC not listed                       admin              every topic ("*" rule)

Member ids are issued by the broker (JoinGroup without member_id) and bound to the principal
that joined (metadata MemberInfo.principal); every call naming a member id checks it belongs to
the caller, and a rejoin with another principal's id is refused by the metadata leader.
DescribeGroup shows a member's id only to the group's admins and to that member's principal
(others see HIDDEN_MEMBER). The member comes from ``members(group, member_id, wait_s)`` (the
broker's metadata table); an unknown member is UNKNOWN_MEMBER, as the broker would answer.

Idempotent producer ids (Send, SendStream, ProducerState) are namespaced by the caller's name
(`own_producer_id`): principals cannot collide with, or take over, each other's sequences.

The broker-to-broker ``raftq.v1.Internal`` service authenticates with its own per-call
credentials (transport/internal_auth.py) and may act for any principal (Forward names the
caller); health checking and reflection stay open.
"""

from __future__ import annotations

import contextvars
import fnmatch
import hashlib
import hmac
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from raftq.proto import errors
from raftq.transport.grpc_errors import abort
from raftq.transport.tls import AUTH_METADATA_KEY
from raftq.transport.tls import bearer_metadata as bearer_metadata

log = logging.getLogger("raftq.auth")

OPERATIONS = ("produce", "consume", "admin")
BEARER = "bearer "
TOKEN_DIGEST_BYTES = 32  # SHA-256

# Services that never need a token: the broker-to-broker service has its own authentication;
# health and reflection reveal nothing a port scan does not.
OPEN_SERVICES = (
    "/raftq.v1.Internal/",
    "/grpc.health.v1.Health/",
    "/grpc.reflection.",
)

# Resource kinds (Kafka: TOPIC, GROUP, TRANSACTIONAL_ID) and the operations each takes.
TOPIC, GROUP, TXN_APP = "topic", "group", "txn app"
RESOURCE_OPERATIONS: dict[str, tuple[str, ...]] = {
    TOPIC: ("produce", "consume", "admin"),
    GROUP: ("consume", "admin"),
    TXN_APP: ("produce", "admin"),
}
RESOURCE_KEYS = {"topics": TOPIC, "groups": GROUP, "txn_apps": TXN_APP}  # auth-file keys

ANY = frozenset(OPERATIONS)
CLUSTER = None  # a Need whose name is CLUSTER needs a rule on every topic ("*")
HIDDEN_MEMBER = "(hidden)"  # DescribeGroup: another principal's member id

_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("raftq_caller", default="")


def caller() -> str:
    """The authenticated principal of the call this thread is serving ("" when the broker
    requires no token). Set by AuthInterceptor around the servicer of a unary call."""
    return _CALLER.get()


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token: what ``security.auth_file`` stores instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class AclRule:
    """``operations`` allowed on every resource of kind ``resource`` whose name matches one of
    ``names`` (shell globs, case-sensitive: ``orders``, ``orders.*``, ``*``)."""

    names: tuple[str, ...]
    operations: frozenset[str]
    resource: str = TOPIC

    def allows(self, operation: str, name: str | None, resource: str = TOPIC) -> bool:
        if resource != self.resource or operation not in self.operations:
            return False
        if name is CLUSTER:
            return "*" in self.names
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.names)


@dataclass(frozen=True)
class Principal:
    name: str
    token_sha256: bytes  # 32 bytes
    acls: tuple[AclRule, ...]

    def may(self, operations: frozenset[str], name: str | None, resource: str = TOPIC) -> bool:
        return any(rule.allows(op, name, resource) for rule in self.acls for op in operations)


@dataclass(frozen=True)
class Need:
    """One of ``operations`` on the ``resource`` called ``name`` (CLUSTER: every topic)."""

    operations: frozenset[str]
    name: str | None
    resource: str = TOPIC


class Member(Protocol):
    """What the ACL check reads of a group member (raftq.metadata.table.MemberInfo is one)."""

    @property
    def topics(self) -> Collection[str]: ...

    @property
    def principal(self) -> str: ...


# (group, member_id, wait_s) -> the member, or None when it is not in the group (after
# waiting up to wait_s for this broker's copy of the metadata to learn it)
MemberLookup = Callable[[str, str, float], Member | None]
MEMBER_WAIT_S = 2.0


class AuthPolicy:
    """The principals a broker accepts. Immutable; any thread."""

    def __init__(self, principals: Iterable[Principal]) -> None:
        self.principals = tuple(principals)
        names = [p.name for p in self.principals]
        if len(set(names)) != len(names):
            raise ValueError("principal names must be unique")
        if len({p.token_sha256 for p in self.principals}) != len(self.principals):
            raise ValueError("two principals share a token")
        for p in self.principals:
            if len(p.token_sha256) != TOKEN_DIGEST_BYTES:
                raise ValueError(f"principal {p.name!r}: token_sha256 must be 32 bytes")

    def authenticate(self, token: str) -> Principal | None:
        """The principal whose token this is, else None. Compares against every principal in
        constant time per digest (no early exit on a match)."""
        digest = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for principal in self.principals:
            if hmac.compare_digest(digest, principal.token_sha256):
                found = principal
        return found

    def principal_for(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> Principal:
        """The caller, from ``authorization: Bearer <token>``. Raises Unauthenticated."""
        values = [v for k, v in metadata or () if k.lower() == AUTH_METADATA_KEY]
        if not values:
            raise errors.Unauthenticated(
                "no credentials: send 'authorization: Bearer <token>' metadata (Python client "
                "token=..., raftq --token or RAFTQ_TOKEN)"
            )
        value = values[0]
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        if len(values) > 1 or not text.lower().startswith(BEARER) or not text[len(BEARER) :]:
            raise errors.Unauthenticated("authorization metadata must be one 'Bearer <token>'")
        principal = self.authenticate(text[len(BEARER) :].strip())
        if principal is None:
            raise errors.Unauthenticated("unknown token: check --token / RAFTQ_TOKEN / token=")
        return principal


def check(principal: Principal, needs: Iterable[Need], method: str) -> None:
    """Raises PermissionDenied naming the first need ``principal`` does not meet."""
    for need in needs:
        if principal.may(need.operations, need.name, need.resource):
            continue
        ops = " or ".join(op for op in OPERATIONS if op in need.operations)
        where = (
            "every topic (a '*' rule)" if need.name is CLUSTER else f"{need.resource} {need.name!r}"
        )
        raise errors.PermissionDenied(
            f"principal {principal.name!r} may not call {method}: it needs {ops} on {where}; "
            "add an ACL rule to its entry in security.auth_file"
        )


# --- what each RPC needs ---------------------------------------------------------------------

_P, _C, _A = frozenset({"produce"}), frozenset({"consume"}), frozenset({"admin"})


@dataclass(frozen=True)
class _Call:
    method: str
    principal: Principal
    members: MemberLookup

    def member(self, group: str, member_id: str, topics: Iterable[str] = ()) -> list[Need]:
        """consume on the group (checked first: nothing about its members is looked up for a
        principal without it), the member issued to this principal, and consume on ``topics``
        or, when none are named, on the member's subscription."""
        check(self.principal, [Need(_C, group, GROUP)], self.method)
        member = self.members(group, member_id, MEMBER_WAIT_S)
        if member is None:
            raise errors.UnknownMember(
                f"{member_id!r} is not in group {group!r}: join the group again"
            )
        if member.principal != self.principal.name:
            raise errors.PermissionDenied(
                f"principal {self.principal.name!r} may not call {self.method} as member "
                f"{member_id!r} of group {group!r}: the broker issued that member id to another "
                "principal (join the group to get your own)"
            )
        named = sorted(set(topics))
        return [Need(_C, group, GROUP), *_on(_C, named or member.topics)]

    def anything(self) -> list[Need]:
        """A principal with no ACL rule at all may not even list or describe."""
        if not self.principal.acls:
            raise errors.PermissionDenied(
                f"principal {self.principal.name!r} may not call {self.method}: it has no ACL "
                "rule; add one to its entry in security.auth_file"
            )
        return []


def _on(ops: frozenset[str], names: Iterable[str], resource: str = TOPIC) -> list[Need]:
    return [Need(ops, n, resource) for n in sorted(set(names))]


def _settled_topics(r: Any) -> list[str]:
    """Every topic an Ack, Nack or ExtendLease names, in refs and (Ack) in batches."""
    batches = getattr(r, "batches", ())
    return [ref.topic for ref in r.refs] + [b.topic for b in batches]


def _join(r: Any, c: _Call) -> list[Need]:
    return [Need(_C, r.group, GROUP), *_on(_C, r.topics)]  # a member_id: the service checks


def _poll_stream(r: Any, c: _Call) -> list[Need]:
    if r.WhichOneof("kind") != "start":
        return []  # the servicer refuses a stream that does not begin with start
    return c.member(r.start.group, r.start.member_id)


def _topic_config(name: str, config: Any) -> list[Need]:
    """admin on the topic, and on a dead-letter topic it names (the broker may create it)."""
    needs = [Need(_A, name)]
    if config.HasField("dead_letter_topic") and config.dead_letter_topic:
        needs.append(Need(_A, config.dead_letter_topic))
    return needs


_NEEDS: dict[str, Callable[[Any, _Call], list[Need]]] = {
    "/raftq.v1.Producer/Send": lambda r, c: [Need(_P, r.topic)],
    "/raftq.v1.Producer/SendStream": lambda r, c: [Need(_P, r.topic)],
    "/raftq.v1.Log/ProducerState": lambda r, c: [Need(_P, r.topic)],
    "/raftq.v1.Consumer/JoinGroup": _join,
    "/raftq.v1.Consumer/Heartbeat": lambda r, c: c.member(r.group, r.member_id),
    "/raftq.v1.Consumer/LeaveGroup": lambda r, c: c.member(r.group, r.member_id),
    "/raftq.v1.Consumer/Poll": lambda r, c: c.member(r.group, r.member_id),
    "/raftq.v1.Consumer/PollStream": _poll_stream,
    "/raftq.v1.Consumer/Ack": lambda r, c: c.member(r.group, r.member_id, _settled_topics(r)),
    "/raftq.v1.Consumer/Nack": lambda r, c: c.member(r.group, r.member_id, _settled_topics(r)),
    "/raftq.v1.Consumer/ExtendLease": lambda r, c: c.member(
        r.group, r.member_id, _settled_topics(r)
    ),
    "/raftq.v1.Log/Fetch": lambda r, c: [Need(_C, r.topic)],
    "/raftq.v1.Log/ListOffsets": lambda r, c: [Need(_C | _A, r.topic)],
    "/raftq.v1.Admin/DescribeTopic": lambda r, c: [Need(ANY, r.name)],
    "/raftq.v1.Admin/CreateTopic": lambda r, c: _topic_config(r.name, r.config),
    "/raftq.v1.Admin/DeleteTopic": lambda r, c: [Need(_A, r.name)],
    "/raftq.v1.Admin/AlterTopicConfig": lambda r, c: _topic_config(r.name, r.config),
    "/raftq.v1.Admin/UpdateRecord": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/CancelRecord": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/RemoveBroker": lambda r, c: [Need(_A, CLUSTER)],
    "/raftq.v1.Admin/AddPartitions": lambda r, c: [Need(_A, r.name)],
    "/raftq.v1.Admin/RebalanceLeaders": lambda r, c: [Need(_A, CLUSTER)],
    "/raftq.v1.Admin/BackupMetadata": lambda r, c: [Need(_A, CLUSTER)],
    "/raftq.v1.Admin/MovePartition": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/BackupPartition": lambda r, c: [Need(_A, CLUSTER), Need(_A, r.topic)],
    "/raftq.v1.Admin/ListTopics": lambda r, c: c.anything(),  # answer: the topics it may see
    "/raftq.v1.Admin/ListGroups": lambda r, c: c.anything(),  # answer: the groups it may see
    "/raftq.v1.Admin/DescribeCluster": lambda r, c: c.anything(),
    "/raftq.v1.Admin/DescribeGroup": lambda r, c: [Need(_C | _A, r.group, GROUP)],
    "/raftq.v1.Admin/DeleteGroup": lambda r, c: [Need(_A, r.group, GROUP)],
    "/raftq.v1.Admin/SeekGroup": lambda r, c: [Need(_A, r.group, GROUP), Need(_A, r.topic)],
    "/raftq.v1.Admin/PurgeTopic": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/CreateSchedule": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/ListSchedules": lambda r, c: [Need(ANY, r.topic)],
    "/raftq.v1.Admin/PauseSchedule": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/DeleteSchedule": lambda r, c: [Need(_A, r.topic)],
    "/raftq.v1.Admin/CommitTxn": lambda r, c: [Need(_P, r.app_id, TXN_APP)],
    "/raftq.v1.Admin/GetTxn": lambda r, c: [Need(_P | _A, r.app_id, TXN_APP)],
}


def requirements(
    method: str, request: Any, principal: Principal, members: MemberLookup
) -> list[Need]:
    """What ``principal`` needs for one request of ``method`` (``/pkg.Service/Method``).
    Streams: SendStream per message, PollStream on its start message. Unknown methods need
    cluster admin (fail closed). Raises PermissionDenied (a group right it lacks, another
    principal's member id, no rule at all) or UnknownMember."""
    needs = _NEEDS.get(method)
    if needs is None:
        return [Need(_A, CLUSTER)]
    return needs(request, _Call(method, principal, members))


# --- what each answer shows ------------------------------------------------------------------


def _visible_topics(r: Any, principal: Principal, members: MemberLookup) -> None:
    kept = [t for t in r.topics if principal.may(ANY, t.name, TOPIC)]
    del r.topics[:]
    r.topics.extend(kept)


def _visible_groups(r: Any, principal: Principal, members: MemberLookup) -> None:
    kept = [g for g in r.groups if principal.may(_C | _A, g.group, GROUP)]
    del r.groups[:]
    r.groups.extend(kept)


def _visible_members(r: Any, principal: Principal, members: MemberLookup) -> None:
    """Member ids only to the group's admins and to the principal each member was issued to."""
    if principal.may(_A, r.group, GROUP):
        return

    def shown(member_id: str) -> str:
        member = members(r.group, member_id, 0.0) if member_id else None
        own = member is not None and member.principal == principal.name
        return member_id if own or not member_id else HIDDEN_MEMBER

    for m in r.members:
        m.member_id = shown(m.member_id)
    for lag in r.partitions:
        lag.member_id = shown(lag.member_id)


_ANSWERS: dict[str, Callable[[Any, Principal, MemberLookup], None]] = {
    "/raftq.v1.Admin/ListTopics": _visible_topics,
    "/raftq.v1.Admin/ListGroups": _visible_groups,
    "/raftq.v1.Admin/DescribeGroup": _visible_members,
}


def visible(method: str, response: Any, principal: Principal, members: MemberLookup) -> Any:
    """``response`` as ``principal`` may see it: a filtered copy for the list and describe
    calls named in _ANSWERS, else ``response`` itself."""
    narrow = _ANSWERS.get(method)
    if narrow is None:
        return response
    copy = type(response)()
    copy.CopyFrom(response)
    narrow(copy, principal, members)
    return copy


# --- idempotent producer ids are the caller's own ---------------------------------------------

_PRODUCER_ID_METHODS = frozenset(
    {"/raftq.v1.Producer/Send", "/raftq.v1.Producer/SendStream", "/raftq.v1.Log/ProducerState"}
)


def own_producer_id(method: str, request: Any, principal: Principal) -> None:
    """Prefix a request's idempotent producer id with the caller's name (``alice/etl:3:0``), in
    place, so one principal's id can never collide with another's: a producer id and sequence
    sent by someone else would otherwise be answered as a duplicate of the owner's batch (the
    owner's later batch then dropped as already written), or take over its sequence. Clients
    never see the prefix (no answer echoes the id); the id plus prefix must fit the 255
    characters a producer id may have."""
    if method in _PRODUCER_ID_METHODS and request.producer_id:
        request.producer_id = f"{principal.name}/{request.producer_id}"


# --- the interceptor -------------------------------------------------------------------------


def _refusing(handler: Any, error: errors.RaftqError) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that ends the call with ``error``, reading nothing."""

    def refuse(request_or_iterator: Any, context: grpc.ServicerContext) -> Any:
        abort(context, error)

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(refuse, **kwargs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, **kwargs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, **kwargs)
    return grpc.stream_stream_rpc_method_handler(refuse, **kwargs)


class AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates every call to a non-open service and checks its ACL needs on the parsed
    request before the servicer runs; narrows list and describe answers to what the caller may
    see. Counts refusals in ``statistics()``."""

    def __init__(self, policy: AuthPolicy, members: MemberLookup) -> None:
        self.policy = policy
        self.members = members
        self.stats = {"unauthenticated": 0, "permission_denied": 0, "allowed": 0}

    def statistics(self) -> Mapping[str, int]:
        return dict(self.stats)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = str(getattr(handler_call_details, "method", "") or "")
        handler = continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_SERVICES):
            return handler
        h: Any = handler
        metadata = getattr(handler_call_details, "invocation_metadata", None)
        try:
            principal = self.policy.principal_for(metadata)
        except errors.Unauthenticated as exc:
            self.stats["unauthenticated"] += 1
            log.info("refused %s: %s", method, exc.message)
            return _refusing(h, exc)
        kwargs = {
            "request_deserializer": h.request_deserializer,
            "response_serializer": h.response_serializer,
        }
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(h.unary_unary, method, principal), **kwargs
            )
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary(h.unary_stream, method, principal), **kwargs
            )
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._streaming(h.stream_unary, method, principal), **kwargs
            )
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(h.stream_stream, method, principal), **kwargs
        )

    def _authorize(self, method: str, request: Any, principal: Principal, context: Any) -> None:
        try:
            check(principal, requirements(method, request, principal, self.members), method)
        except errors.PermissionDenied as exc:
            self.stats["permission_denied"] += 1
            log.info("refused %s to %s: %s", method, principal.name, exc.message)
            abort(context, exc)
        except errors.RaftqError as exc:
            abort(context, exc)
        self.stats["allowed"] += 1

    def _unary(self, behavior: Callable[..., Any], method: str, principal: Principal) -> Any:
        def authorized(request: Any, context: grpc.ServicerContext) -> Any:
            self._authorize(method, request, principal, context)
            own_producer_id(method, request, principal)
            token = _CALLER.set(principal.name)
            try:
                response = behavior(request, context)
            finally:
                _CALLER.reset(token)
            return visible(method, response, principal, self.members)

        return authorized

    def _streaming(self, behavior: Callable[..., Any], method: str, principal: Principal) -> Any:
        every = method != "/raftq.v1.Consumer/PollStream"  # PollStream: the start message only

        def checked(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            first = True
            for request in requests:
                if first or every:
                    self._authorize(method, request, principal, context)
                    own_producer_id(method, request, principal)
                first = False
                yield request

        def authorized(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            return behavior(checked(requests, context), context)

        return authorized


__all__ = [
    "ANY",
    "CLUSTER",
    "GROUP",
    "HIDDEN_MEMBER",
    "OPERATIONS",
    "RESOURCE_KEYS",
    "RESOURCE_OPERATIONS",
    "TOPIC",
    "TXN_APP",
    "AclRule",
    "AuthInterceptor",
    "AuthPolicy",
    "Member",
    "MemberLookup",
    "Need",
    "Principal",
    "bearer_metadata",
    "caller",
    "check",
    "own_producer_id",
    "requirements",
    "token_digest",
    "visible",
]
