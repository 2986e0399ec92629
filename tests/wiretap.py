"""A gRPC server interceptor for tests on real brokers: it records what a broker was asked and
injects faults at its client port (tests only; ``make_cluster(..., interceptors=[tap])``).

    tap = Wiretap()
    tap.requests("Send")                      # every Send request, SendStream's messages too
    tap.lose_answers(2)                       # the next 2 sends are applied, then answered
                                              # TIMEOUT (as if the answer was lost)
    gate = tap.stall("orders")                # the next send to "orders" waits for gate.set()
    tap.answer("Send", lambda request: ...)   # unary Sends answered by the function instead of
                                              # the broker (raise a RaftqError to refuse)
    tap.rewrite("DescribeTopic", fn)          # the broker's answers, as fn(request, answer)
                                              # rewrites them (stale metadata)

Taps of several brokers can share a ``journal``: (label, method) in the order calls arrived.

Sends are counted per request message, unary or streamed; a stalled message in a SendStream
does not hold the ones behind it (the broker answers a stream's requests in any order).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from raftq.proto import api_pb2, errors
from raftq.transport import grpc_errors

STALL_MAX_S = 30.0  # a stalled send goes on after this even if the test never releases it
_END = object()


@dataclass
class _Answer:
    method: str
    where: Callable[[Any], bool]
    make: Callable[[Any], Any]
    times: int


Journal = list[tuple[str, str]]


class Wiretap(grpc.ServerInterceptor):
    """Records every request message by method name (``Send``, ``Poll``...) and injects the
    faults set on it. Thread-safe; ``reset()`` forgets the log and every pending fault."""

    def __init__(self, label: str = "", journal: Journal | None = None) -> None:
        self.label = label
        self.journal = journal if journal is not None else []
        self._lock = threading.Lock()
        self._log: list[tuple[str, Any]] = []
        self._lose = 0
        self._stalls: dict[str, threading.Event] = {}
        self._answers: list[_Answer] = []
        self._rewrites: dict[str, Callable[[Any, Any], Any]] = {}

    # -- the test's side ---------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self._log.clear()
            self._lose = 0
            for gate in self._stalls.values():
                gate.set()
            self._stalls.clear()
            self._answers.clear()
            self._rewrites.clear()

    def requests(self, method: str, where: Callable[[Any], bool] = lambda _: True) -> list[Any]:
        """Request messages of ``method`` received so far (``Send`` counts SendStream's)."""
        names = {method, f"{method}Stream"} if method == "Send" else {method}
        with self._lock:
            return [r for m, r in self._log if m in names and where(r)]

    def methods(self) -> list[str]:
        with self._lock:
            return [m for m, _ in self._log]

    def lose_answers(self, count: int) -> None:
        """The next ``count`` sends are applied, then answered TIMEOUT."""
        with self._lock:
            self._lose = count

    def stall(self, topic: str) -> threading.Event:
        """The next send to ``topic`` reaches the broker once the returned event is set."""
        gate = threading.Event()
        with self._lock:
            self._stalls[topic] = gate
        return gate

    def answer(
        self,
        method: str,
        make: Callable[[Any], Any],
        *,
        where: Callable[[Any], bool] = lambda _: True,
        times: int = -1,
    ) -> None:
        """Unary calls of ``method`` matching ``where`` get ``make(request)`` (or the RaftqError
        it raises) instead of reaching the broker, ``times`` times (-1: always)."""
        with self._lock:
            self._answers.append(_Answer(method, where, make, times))

    def rewrite(self, method: str, change: Callable[[Any, Any], Any] | None) -> None:
        """Unary answers of ``method`` become ``change(request, answer)`` (None: as they are)."""
        with self._lock:
            if change is None:
                self._rewrites.pop(method, None)
            else:
                self._rewrites[method] = change

    # -- the broker's side -------------------------------------------------------------------

    def _record(self, method: str, request: Any) -> threading.Event | None:
        """Log the request; the gate it must wait for when it is a stalled send."""
        with self._lock:
            self._log.append((method, request))
            self.journal.append((self.label, method))
            if method in ("Send", "SendStream"):
                return self._stalls.pop(request.topic, None)
            return None

    def _instead(self, method: str, request: Any) -> _Answer | None:
        with self._lock:
            for rule in self._answers:
                if rule.method == method and rule.times != 0 and rule.where(request):
                    rule.times -= 1 if rule.times > 0 else 0
                    return rule
            return None

    def _take_loss(self) -> bool:
        with self._lock:
            if self._lose > 0:
                self._lose -= 1
                return True
            return False

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(method, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(self, method: str, inner: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            gate = self._record(method, request)
            if gate is not None:
                gate.wait(STALL_MAX_S)
            rule = self._instead(method, request)
            if rule is not None:
                try:
                    return rule.make(request)
                except errors.RaftqError as exc:
                    grpc_errors.abort(context, exc)
            response = inner(request, context)
            if method == "Send" and self._take_loss():
                grpc_errors.abort(context, errors.Timeout("the answer was lost"))
            with self._lock:
                change = self._rewrites.get(method)
            return response if change is None else change(request, response)

        return call

    def _stream(
        self, method: str, inner: Callable[[Iterator[Any], Any], Iterator[Any]]
    ) -> Callable[[Iterator[Any], Any], Iterator[Any]]:
        def call(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            for response in inner(self._feed(method, requests), context):
                if method == "SendStream" and not response.error and self._take_loss():
                    response = api_pb2.SendResponse(
                        request_id=response.request_id,
                        error=errors.Timeout.kind.code,  # type: ignore[arg-type]
                        message="the answer was lost",
                    )
                yield response

        return call

    def _feed(self, method: str, requests: Iterator[Any]) -> Iterator[Any]:
        """The stream's requests, logged; a stalled one is passed on when released, while the
        ones behind it go on at once."""
        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        held: list[threading.Thread] = []

        def release_later(request: Any, gate: threading.Event) -> None:
            gate.wait(STALL_MAX_S)
            out.put(request)

        def read() -> None:
            try:
                for request in requests:
                    gate = self._record(method, request)
                    if gate is None:
                        out.put(request)
                        continue
                    thread = threading.Thread(target=release_later, args=(request, gate))
                    thread.daemon = True
                    thread.start()
                    held.append(thread)
            except Exception:
                pass
            finally:
                for thread in held:
                    thread.join(STALL_MAX_S)
                out.put(_END)

        threading.Thread(target=read, daemon=True, name="wiretap-feed").start()
        while (item := out.get()) is not _END:
            yield item
