"""Producer sends over one long-lived ``SendStream`` per broker instead of a unary call each.

A unary call costs both ends a call set-up (on the client, a gRPC thread started per call when
none is in flight); a message on an open stream costs neither, which is most of a single
send's latency on a small machine (bench/RESULTS.md). The broker answers a stream's requests
as each completes, in any order (transport/grpc_server.py), so one stream carries all of a
producer's partitions on that broker at once; answers are matched by ``request_id``.

Failure modes, each answered the way the unary call would be:
- the stream breaks (broker gone, cancelled): every request waiting on it fails with the
  mapped error (Unavailable, ...) and the next send opens a new stream;
- an answer is later than ``timeout_s``: the stream is cancelled and its requests fail with
  ``Timeout`` (outcome unknown: the idempotent producer resends the same sequence);
- the broker refuses the stream (RESOURCE_EXHAUSTED: it holds a thread per open stream and
  caps them): the requests are handed back (``Refused``) to go unary, and that broker gets
  no stream for ``REFUSED_BACKOFF_S``.

Streams idle for ``IDLE_CLOSE_S`` are closed, giving the broker its thread back.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from raftq.proto import api_pb2, errors
from raftq.transport.grpc_errors import from_rpc_error

log = logging.getLogger("raftq.client")

IDLE_CLOSE_S = 10.0
REFUSED_BACKOFF_S = 60.0
SWEEP_MAX_S = 1.0


class Refused(errors.Unavailable):
    """The broker refused the stream (no slot free): send this request unary instead."""


Answer = Callable[[api_pb2.SendResponse | None, errors.RaftqError | None], None]
_END = None


class SendStream:
    """One open SendStream to one broker. Thread-safe."""

    def __init__(self, open_call: Callable[[Any], Any], address: str) -> None:
        self.address = address
        self.last_used_s = time.monotonic()
        self._requests: queue.SimpleQueue[api_pb2.SendRequest | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[Answer, float]] = {}  # request_id -> (answer, deadline)
        self._answered = False
        self._timed_out = False
        self.broken = False
        self.error: errors.RaftqError | None = None  # why it broke, once it has
        self._call = open_call(iter(self._requests.get, _END))
        self._reader = threading.Thread(
            target=self._read, name=f"raftq-send-stream-{address}", daemon=True
        )
        self._reader.start()

    def send(self, request: api_pb2.SendRequest, timeout_s: float, answer: Answer) -> bool:
        """Queue ``request``; ``answer(response, error)`` runs once, on the stream's reader
        thread. False (nothing queued) when the stream is already broken."""
        now = time.monotonic()
        with self._lock:
            if self.broken:
                return False
            self._waiting[request.request_id] = (answer, now + timeout_s)
            self.last_used_s = now
        self._requests.put(request)
        return True

    def earliest_deadline(self) -> float | None:
        """When the oldest unanswered request is due; None when none waits (idle)."""
        with self._lock:
            return min((deadline for _, deadline in self._waiting.values()), default=None)

    def expire(self) -> None:
        """An answer is overdue: end the stream; its requests fail with Timeout."""
        self._timed_out = True
        self._call.cancel()

    def close(self) -> None:
        """End the stream once the broker answered what it has (requests first, then EOF);
        later sends find it broken."""
        with self._lock:
            self.broken = True
        self._requests.put(_END)

    def _read(self) -> None:
        error: errors.RaftqError
        try:
            for response in self._call:
                with self._lock:
                    self._answered = True
                    waiting = self._waiting.pop(response.request_id, None)
                if waiting is not None:
                    _run(waiting[0], response, None)
            error = errors.Unavailable(f"send stream to {self.address} ended")
        except grpc.RpcError as exc:
            error = self._error_of(exc)
        with self._lock:
            self.broken, self.error = True, error
            waiting_all = list(self._waiting.values())
            self._waiting.clear()
        self._requests.put(_END)  # lets gRPC's request thread finish
        for answer, _ in waiting_all:
            _run(answer, None, error)

    def _error_of(self, exc: grpc.RpcError) -> errors.RaftqError:
        code = exc.code() if hasattr(exc, "code") else None
        if self._timed_out:
            return errors.Timeout(f"no answer from {self.address} in time: outcome unknown")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not self._answered:
            return Refused(exc.details() if hasattr(exc, "details") else "")
        return from_rpc_error(exc)


def _run(
    answer: Answer, response: api_pb2.SendResponse | None, error: errors.RaftqError | None
) -> None:
    try:
        answer(response, error)
    except Exception:  # a bug in the callback must not stop the reader
        log.exception("send stream answer callback failed")


class SendStreams:
    """A producer's streams, one per broker address, and a sweeper thread for deadlines and
    idle streams. ``open_call(address)`` returns the address's ``SendStream`` stub method."""

    def __init__(self, open_call: Callable[[str], Callable[[Any], Any]]) -> None:
        self._open_call = open_call
        self._lock = threading.Lock()
        self._streams: dict[str, SendStream] = {}
        self._refused_until: dict[str, float] = {}
        self._closed = False
        self._next_sweep_s = 0.0
        self._wake = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep, name="raftq-send-streams", daemon=True)
        self._sweeper.start()

    def send(
        self, address: str, request: api_pb2.SendRequest, timeout_s: float, answer: Answer
    ) -> bool:
        """Send ``request`` on ``address``'s stream (opened if needed). False when there is
        no stream to use (refused lately, or closed): send it unary."""
        for _attempt in range(2):  # a stream found broken is replaced once
            with self._lock:
                if self._closed or self._refused_until.get(address, 0.0) > time.monotonic():
                    return False
                stream = self._streams.get(address)
                if stream is None or stream.broken:
                    stream = SendStream(self._open_call(address), address)
                    self._streams[address] = stream
            if stream.send(request, timeout_s, answer):
                if time.monotonic() + timeout_s < self._next_sweep_s:
                    self._wake.set()  # a deadline before the sweeper's next look
                return True
            if isinstance(stream.error, Refused):  # refused before this request was queued
                self.refused(address)
                return False
        return False

    def refused(self, address: str) -> None:
        """``address`` refused a stream: send to it unary for a while."""
        with self._lock:
            self._refused_until[address] = time.monotonic() + REFUSED_BACKOFF_S
        log.info("broker %s refused a send stream: unary for %.0f s", address, REFUSED_BACKOFF_S)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            stream.close()
        self._wake.set()
        self._sweeper.join(timeout=5)

    def _sweep(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                streams = list(self._streams.items())
            now = time.monotonic()
            wait = SWEEP_MAX_S
            for address, stream in streams:
                deadline = stream.earliest_deadline()
                if deadline is None and now - stream.last_used_s >= IDLE_CLOSE_S:
                    with self._lock:
                        if self._streams.get(address) is stream:
                            del self._streams[address]
                    stream.close()
                elif deadline is not None and deadline <= now:
                    stream.expire()
                elif deadline is not None:
                    wait = min(wait, deadline - now)
            self._next_sweep_s = now + wait
            self._wake.wait(wait)
            self._wake.clear()
