"""Token authentication and per-topic ACLs for the client gRPC services.

A client sends ``authorization: Bearer <token>`` metadata on every call. The broker knows no
tokens, only their SHA-256 digests (``security.auth_file``): the presented token is hashed and
compared with every principal's digest by ``hmac.compare_digest``. The principal's ACL rules
(topic globs and operations ``produce``, ``consume``, ``admin``) then decide, per topic the
request names, before the request reaches the broker — so a refused call changes nothing.

    missing / malformed / unknown token   UNAUTHENTICATED   (proto.errors.Unauthenticated)
    token without the ACL the call needs  PERMISSION_DENIED (proto.errors.PermissionDenied)

What each RPC needs (`requirements`; any one of the listed operations on every topic named):

    Producer.Send, SendStream (each message)        produce          on the request's topic
    Log.ProducerState                               produce          on the topic
    Consumer.JoinGroup                              consume          on every subscribed topic
    Consumer.Heartbeat, LeaveGroup, Poll,
      PollStream (its start message)                consume          on the member's topics
    Consumer.Ack, Nack, ExtendLease                 consume          on every ref's topic
    Log.Fetch                                       consume          on the topic
    Log.ListOffsets                                 consume | admin  on the topic
    Admin.DescribeTopic                             any operation    on the topic
    Admin.CreateTopic, DeleteTopic, AlterTopicConfig,
      UpdateRecord, CancelRecord                    admin            on the topic
    Admin.RemoveBroker, any RPC not listed here     admin            on every topic ("*" rule)
    Admin.CommitTxn                                 produce          on some topic
    Admin.ListTopics, ListGroups, DescribeGroup,
      DescribeCluster, GetTxn                       an authenticated principal

The broker-to-broker ``raftq.v1.Internal`` service authenticates with its own per-call
credentials (transport/internal_auth.py); health checking and reflection stay open. The
member's topics come from ``member_topics(group, member_id)`` (the broker's metadata table);
an unknown member is UNKNOWN_MEMBER, as the broker would answer anyway.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from proto import errors
from transport.grpc_errors import abort

log = logging.getLogger("raftq.auth")

OPERATIONS = ("produce", "consume", "admin")
AUTH_METADATA_KEY = "authorization"
BEARER = "bearer "
TOKEN_DIGEST_BYTES = 32  # SHA-256

# Services that never need a token: the broker-to-broker service has its own authentication;
# health and reflection reveal nothing a port scan does not.
OPEN_SERVICES = (
    "/raftq.v1.Internal/",
    "/grpc.health.v1.Health/",
    "/grpc.reflection.",
)

ANY = frozenset(OPERATIONS)
CLUSTER = None  # a Need whose topic is CLUSTER needs a rule on every topic ("*")


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token: what ``security.auth_file`` stores instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class AclRule:
    """``operations`` allowed on every topic whose name matches one of ``topics`` (shell
    globs, case-sensitive: ``orders``, ``orders.*``, ``*``)."""

    topics: tuple[str, ...]
    operations: frozenset[str]

    def allows(self, operation: str, topic: str | None) -> bool:
        if operation not in self.operations:
            return False
        if topic is CLUSTER:
            return "*" in self.topics
        return any(fnmatch.fnmatchcase(topic, glob) for glob in self.topics)


@dataclass(frozen=True)
class Principal:
    name: str
    token_sha256: bytes  # 32 bytes
    acls: tuple[AclRule, ...]

    def may(self, operations: frozenset[str], topic: str | None) -> bool:
        return any(rule.allows(op, topic) for rule in self.acls for op in operations)

    def may_somewhere(self, operation: str) -> bool:
        return any(operation in rule.operations for rule in self.acls)


@dataclass(frozen=True)
class Need:
    """One of ``operations`` on ``topic`` (CLUSTER: on every topic)."""

    operations: frozenset[str]
    topic: str | None


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
        if principal.may(need.operations, need.topic):
            continue
        ops = " or ".join(op for op in OPERATIONS if op in need.operations)
        where = "every topic (a '*' rule)" if need.topic is CLUSTER else f"topic {need.topic!r}"
        raise errors.PermissionDenied(
            f"principal {principal.name!r} may not call {method}: it needs {ops} on {where}; "
            "add an ACL rule to its entry in security.auth_file"
        )


# --- what each RPC needs ---------------------------------------------------------------------

MemberTopics = Callable[[str, str], Sequence[str] | None]

_P, _C, _A = frozenset({"produce"}), frozenset({"consume"}), frozenset({"admin"})


def _on(ops: frozenset[str], topics: Iterable[str]) -> list[Need]:
    return [Need(ops, t) for t in sorted(set(topics))]


def _member(group: str, member_id: str, member_topics: MemberTopics) -> list[Need]:
    topics = member_topics(group, member_id)
    if topics is None:
        raise errors.UnknownMember(f"{member_id!r} is not in group {group!r}: join the group again")
    return _on(_C, topics)


def _refs(r: Any) -> list[Need]:
    return _on(_C, (ref.topic for ref in r.refs))


_PUBLIC: list[Need] = []

_NEEDS: dict[str, Callable[[Any, MemberTopics], list[Need]]] = {
    "/raftq.v1.Producer/Send": lambda r, m: [Need(_P, r.topic)],
    "/raftq.v1.Log/ProducerState": lambda r, m: [Need(_P, r.topic)],
    "/raftq.v1.Consumer/JoinGroup": lambda r, m: _on(_C, r.topics),
    "/raftq.v1.Consumer/Heartbeat": lambda r, m: _member(r.group, r.member_id, m),
    "/raftq.v1.Consumer/LeaveGroup": lambda r, m: _member(r.group, r.member_id, m),
    "/raftq.v1.Consumer/Poll": lambda r, m: _member(r.group, r.member_id, m),
    "/raftq.v1.Consumer/Ack": lambda r, m: _refs(r),
    "/raftq.v1.Consumer/Nack": lambda r, m: _refs(r),
    "/raftq.v1.Consumer/ExtendLease": lambda r, m: _refs(r),
    "/raftq.v1.Log/Fetch": lambda r, m: [Need(_C, r.topic)],
    "/raftq.v1.Log/ListOffsets": lambda r, m: [Need(_C | _A, r.topic)],
    "/raftq.v1.Admin/DescribeTopic": lambda r, m: [Need(ANY, r.name)],
    "/raftq.v1.Admin/CreateTopic": lambda r, m: [Need(_A, r.name)],
    "/raftq.v1.Admin/DeleteTopic": lambda r, m: [Need(_A, r.name)],
    "/raftq.v1.Admin/AlterTopicConfig": lambda r, m: [Need(_A, r.name)],
    "/raftq.v1.Admin/UpdateRecord": lambda r, m: [Need(_A, r.topic)],
    "/raftq.v1.Admin/CancelRecord": lambda r, m: [Need(_A, r.topic)],
    "/raftq.v1.Admin/RemoveBroker": lambda r, m: [Need(_A, CLUSTER)],
    "/raftq.v1.Admin/ListTopics": lambda r, m: _PUBLIC,
    "/raftq.v1.Admin/ListGroups": lambda r, m: _PUBLIC,
    "/raftq.v1.Admin/DescribeGroup": lambda r, m: _PUBLIC,
    "/raftq.v1.Admin/DescribeCluster": lambda r, m: _PUBLIC,
    "/raftq.v1.Admin/GetTxn": lambda r, m: _PUBLIC,
}


def requirements(
    method: str, request: Any, principal: Principal, member_topics: MemberTopics
) -> list[Need]:
    """What ``principal`` needs for one request of ``method`` (``/pkg.Service/Method``).
    Streams: SendStream per message, PollStream on its start message. Unknown methods need
    cluster admin (fail closed). Raises PermissionDenied (CommitTxn) or UnknownMember."""
    if method == "/raftq.v1.Admin/CommitTxn":
        if not principal.may_somewhere("produce"):
            raise errors.PermissionDenied(
                f"principal {principal.name!r} may not call {method}: it needs produce on "
                "some topic"
            )
        return []
    if method == "/raftq.v1.Producer/SendStream":
        return [Need(_P, request.topic)]
    if method == "/raftq.v1.Consumer/PollStream":
        if request.WhichOneof("kind") != "start":
            return []  # the servicer refuses a stream that does not begin with start
        return _member(request.start.group, request.start.member_id, member_topics)
    needs = _NEEDS.get(method)
    return [Need(_A, CLUSTER)] if needs is None else needs(request, member_topics)


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
    request before the servicer runs. Counts refusals in ``statistics()``."""

    def __init__(self, policy: AuthPolicy, member_topics: MemberTopics) -> None:
        self.policy = policy
        self.member_topics = member_topics
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
            check(principal, requirements(method, request, principal, self.member_topics), method)
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
            return behavior(request, context)

        return authorized

    def _streaming(self, behavior: Callable[..., Any], method: str, principal: Principal) -> Any:
        every = method != "/raftq.v1.Consumer/PollStream"  # PollStream: the start message only

        def checked(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            first = True
            for request in requests:
                if first or every:
                    self._authorize(method, request, principal, context)
                first = False
                yield request

        def authorized(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            return behavior(checked(requests, context), context)

        return authorized


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return ((AUTH_METADATA_KEY, f"Bearer {token}"),)


__all__ = [
    "ANY",
    "CLUSTER",
    "OPERATIONS",
    "AclRule",
    "AuthInterceptor",
    "AuthPolicy",
    "Need",
    "Principal",
    "bearer_metadata",
    "check",
    "requirements",
    "token_digest",
]
