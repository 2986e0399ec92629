"""Server capacity per kind of call, so no kind can starve another.

A gRPC server runs every call on a worker thread of one pool. Before this module, 70 long polls
held enough of a broker's 64 workers that ListTopics waited 19 s and the other brokers'
liveness reports to the metadata leader timed out. Now each call belongs to one *kind* with a
cap of its own; the pool is sized to the sum of the caps plus spare threads (for refusals), so a
call its kind admits always finds a thread at once, whatever the other kinds are doing:

    kind       calls                                                          cap (default)
    control    Internal.Report, MetaMembers, JoinCluster                       8
    internal   Internal.Propose, Read, MetaPropose, Forward of client work    32
    admin      ListTopics, ListGroups, DescribeTopic, DescribeGroup,           8
               DescribeCluster, GetTxn, ListOffsets (and Internal.Forward
               of those); gRPC health Check; reflection
    long_poll  Poll with max_wait_ms > 0; PollStream                         32
    client     every other call                                               48
    (SendStream keeps its own cap: transport/grpc_server.py ProducerServicer)

Control calls come only from brokers (liveness reports must never wait behind a client); a
health Watch holds its thread for as long as it watches, so it is a client call.

A call over its kind's cap is refused at once, never queued: ``RESOURCE_EXHAUSTED`` (typed,
retriable) with ``retry_after_ms`` in the ``raftq-retry-after-ms`` trailer. The Python client
backs off that long (with jitter) and tries again (broker/client/channels.py). A long poll holds
its worker while it waits, so the long-poll cap bounds the threads waiting polls take; the
refused poll's client waits the hint instead, which to it is a long poll that found nothing.

Settings: ``capacity.*`` (broker/config.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from raftq.proto import errors
from raftq.transport.grpc_errors import abort

SPARE_WORKERS = 8  # threads beyond the caps: a refusal must find one at once too
# How long a refused client waits before trying again: a refused long poll about as long as a
# long poll that found nothing; other calls briefly.
LONG_POLL_RETRY_AFTER_MS = 500
CALL_RETRY_AFTER_MS = 100

CONTROL, INTERNAL, ADMIN, LONG_POLL, CLIENT, STREAM = (
    "control",
    "internal",
    "admin",
    "long_poll",
    "client",
    "stream",
)
_API = "/raftq.v1."
_BY_METHOD = {
    "/raftq.v1.Internal/Report": CONTROL,
    "/raftq.v1.Internal/MetaMembers": CONTROL,
    "/raftq.v1.Internal/JoinCluster": CONTROL,
    "/raftq.v1.Internal/Propose": INTERNAL,
    "/raftq.v1.Internal/Read": INTERNAL,
    "/raftq.v1.Internal/MetaPropose": INTERNAL,
    "/raftq.v1.Admin/ListTopics": ADMIN,
    "/raftq.v1.Admin/ListGroups": ADMIN,
    "/raftq.v1.Admin/DescribeTopic": ADMIN,
    "/raftq.v1.Admin/DescribeGroup": ADMIN,
    "/raftq.v1.Admin/DescribeCluster": ADMIN,
    "/raftq.v1.Admin/GetTxn": ADMIN,
    "/raftq.v1.Admin/ListSchedules": ADMIN,
    "/raftq.v1.Log/ListOffsets": ADMIN,
    "/raftq.v1.Consumer/PollStream": LONG_POLL,
    "/raftq.v1.Producer/SendStream": STREAM,  # capped by ProducerServicer itself
}
# Internal.Forward carries a facade method name: the admin reads among them are admin calls.
_ADMIN_FORWARDS = frozenset({"describe_topic", "describe_group", "describe_cluster", "get_txn"})


@dataclass(frozen=True)
class Capacity:
    """Concurrent calls each kind may run (see the module docstring)."""

    control_calls_max: int = 8
    internal_calls_max: int = 32
    admin_calls_max: int = 8
    long_polls_max: int = 32
    client_calls_max: int = 48
    send_streams_max: int = 16

    @property
    def workers(self) -> int:
        """The server's pool: every cap, plus spare threads for refusals."""
        return (
            self.control_calls_max
            + self.internal_calls_max
            + self.admin_calls_max
            + self.long_polls_max
            + self.client_calls_max
            + self.send_streams_max
            + SPARE_WORKERS
        )

    def cap(self, kind: str) -> int:
        return int(getattr(self, f"{kind}_calls_max" if kind != LONG_POLL else "long_polls_max"))


def kind_of(method: str, request: Any) -> str:
    """The kind of a call to ``method`` (full gRPC name) with its parsed ``request`` (None for
    a streaming request)."""
    kind = _BY_METHOD.get(method)
    if kind is not None:
        return kind
    if method == "/raftq.v1.Consumer/Poll":
        return LONG_POLL if getattr(request, "max_wait_ms", 0) > 0 else CLIENT
    if method == "/raftq.v1.Internal/Forward":
        return ADMIN if getattr(request, "method", "") in _ADMIN_FORWARDS else INTERNAL
    if method == "/grpc.health.v1.Health/Check" or method.startswith("/grpc.reflection."):
        return ADMIN
    return CLIENT  # health Watch too: it holds its thread while it watches


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Admits each call under its kind's cap or refuses it RESOURCE_EXHAUSTED at once.
    ``statistics()`` counts admitted and refused calls per kind. Thread-safe."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self._slots = {
            kind: threading.BoundedSemaphore(capacity.cap(kind))
            for kind in (CONTROL, INTERNAL, ADMIN, LONG_POLL, CLIENT)
        }
        self._lock = threading.Lock()
        self._refused = dict.fromkeys(self._slots, 0)
        self._admitted = dict.fromkeys(self._slots, 0)
        self._running = dict.fromkeys(self._slots, 0)

    def statistics(self) -> dict[str, dict[str, int]]:
        """Per kind: calls ``admitted`` and ``refused`` (counts), ``running`` now, ``cap``."""
        with self._lock:
            return {
                "admitted": dict(self._admitted),
                "refused": dict(self._refused),
                "running": dict(self._running),
                "cap": {kind: self.capacity.cap(kind) for kind in self._slots},
            }

    def _admit(self, method: str, request: Any, context: grpc.ServicerContext) -> str:
        """The kind admitted (its slot is taken), or abort with RESOURCE_EXHAUSTED."""
        kind = kind_of(method, request)
        if kind == STREAM:
            return kind
        taken = self._slots[kind].acquire(blocking=False)
        with self._lock:
            (self._admitted if taken else self._refused)[kind] += 1
            self._running[kind] += int(taken)
        if not taken:
            retry_after = LONG_POLL_RETRY_AFTER_MS if kind == LONG_POLL else CALL_RETRY_AFTER_MS
            abort(
                context,
                errors.ResourceExhausted(
                    f"this broker runs its {self.capacity.cap(kind)} {kind.replace('_', ' ')} "
                    f"calls at most at once: retry in {retry_after} ms",
                    retry_after_ms=retry_after,
                ),
            )
        return kind

    def _release(self, kind: str) -> None:
        if kind != STREAM:
            with self._lock:
                self._running[kind] -= 1
            self._slots[kind].release()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        h: Any = handler
        kwargs = {
            "request_deserializer": h.request_deserializer,
            "response_serializer": h.response_serializer,
        }
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, h.unary_unary), **kwargs)
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, h.unary_stream), **kwargs
            )
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, h.stream_unary, streamed=True), **kwargs
            )
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(method, h.stream_stream, streamed=True), **kwargs
        )

    def _unary(
        self, method: str, behavior: Callable[..., Any], *, streamed: bool = False
    ) -> Callable[..., Any]:
        def admitted(request: Any, context: grpc.ServicerContext) -> Any:
            kind = self._admit(method, None if streamed else request, context)
            try:
                return behavior(request, context)
            finally:
                self._release(kind)

        return admitted

    def _streaming(
        self, method: str, behavior: Callable[..., Iterator[Any]], *, streamed: bool = False
    ) -> Callable[..., Iterator[Any]]:
        def admitted(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            kind = self._admit(method, None if streamed else request, context)
            try:
                yield from behavior(request, context)
            finally:
                self._release(kind)

        return admitted


__all__ = ["AdmissionInterceptor", "Capacity", "kind_of"]
