"""Channels to the brokers, shared by :class:`Admin`, :class:`Producer` and :class:`Consumer`.

:func:`parse_bootstrap` reads ``"host:port[,host:port...]"``. :class:`_Channels` holds one
channel (and set of stubs) per address, created on first use and never at import; it turns
gRPC errors into the typed :mod:`raftq.proto.errors` (:func:`raftq.transport.grpc_errors.
from_rpc_error`),
tries the bootstrap brokers in turn for calls any broker can answer (``call_any``: UNAVAILABLE
and RESOURCE_EXHAUSTED move on, starting with the last broker that answered; when brokers
refused for capacity it backs off their retry hint, with jitter, and tries again), and
remembers brokers that did not answer so sends avoid them for ``DOWN_S``. Its channels carry
messages up to ``CLIENT_MESSAGE_BYTES_MAX``, the largest answer any broker's limits allow
(broker/config.py). It pickles as its bootstrap and security only: channels never travel.

Security: every client takes ``tls_ca_file`` (TLS, verifying the brokers' certificates against
that CA; their certificates must name the bootstrap hosts), ``tls_cert_file`` and
``tls_key_file`` (mutual TLS), and ``token`` (sent as ``authorization: Bearer <token>`` on
every call); :func:`channel_security` reads them. A broker refuses a missing or unknown token
with Unauthenticated and a call the token's ACL does not allow with PermissionDenied; neither
is retried.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from raftq.client import steps
from raftq.client.defaults import CLIENT_DEFAULTS
from raftq.proto import api_pb2_grpc, errors
from raftq.proto.common_pb2 import ErrorCode
from raftq.proto.limits import CLIENT_MESSAGE_BYTES_MAX
from raftq.transport.grpc_errors import from_rpc_error
from raftq.transport.tls import ChannelSecurity, open_channel

T = TypeVar("T")
_DEFAULTS = CLIENT_DEFAULTS
DEFAULT_BOOTSTRAP = "127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072"  # raftq dev up's brokers
# Seconds a broker that did not answer (UNAVAILABLE) is avoided as a partition leader: sends
# go to another broker, which forwards them to the partition's (new) leader.
DOWN_S = 2.0
RETRY_AFTER_DEFAULT_MS = 100  # a refusal for capacity without a hint
_OK = int(ErrorCode.OK)  # enum attribute lookups are slow per record


def parse_bootstrap(bootstrap: str | Sequence[str]) -> tuple[str, ...]:
    """``"a:1,b:2"`` (or a list) → ``("a:1", "b:2")``; InvalidArgument when empty or malformed."""
    parts = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = tuple(p.strip() for p in parts if p.strip())
    if not addresses:
        raise errors.InvalidArgument("bootstrap names no broker: give host:port[,host:port]")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise errors.InvalidArgument(f"bootstrap address {address!r} is not host:port")
    return addresses


class _Stubs:
    def __init__(self, channel: grpc.Channel) -> None:
        self.producer = api_pb2_grpc.ProducerStub(channel)
        self.consumer = api_pb2_grpc.ConsumerStub(channel)
        self.log = api_pb2_grpc.LogStub(channel)
        self.admin = api_pb2_grpc.AdminStub(channel)


class AnyBroker:
    """The policy of a call any broker can answer, shared by the thread and asyncio clients.

    A round tries each bootstrap broker once, starting with the one that answered last; each
    attempt gets the time left of the request timeout. After a round in which every broker
    was unavailable the caller pauses (50 ms doubling to 1 s) and starts another, until the
    request timeout has passed (Kafka's admin client retries until its API timeout)."""

    PAUSE_FIRST_S = 0.05
    PAUSE_MAX_S = 1.0

    def __init__(
        self,
        count: int,
        preferred: int,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count, self.preferred = count, preferred
        self.clock = clock
        self.deadline = clock() + timeout_s
        self._pause_s = self.PAUSE_FIRST_S

    def attempts(self) -> Iterator[tuple[int, float]]:
        """(bootstrap index, timeout) of each attempt of one round; at least one attempt."""
        for i in range(self.count):
            remaining = self.deadline - self.clock()
            if remaining <= 0 and i > 0:
                return
            yield (self.preferred + i) % self.count, max(remaining, 0.001)

    def pause_s(self) -> float | None:
        """How long to wait before the next round; None: the request timeout has passed."""
        pause = self._pause_s
        if self.clock() + pause >= self.deadline:
            return None
        self._pause_s = min(pause * 2, self.PAUSE_MAX_S)
        return pause

    def refused_pause_s(
        self, error: errors.RaftqError, until_s: float | None = None
    ) -> float | None:
        """How long to wait before the next round after brokers refused for capacity: the
        refusal's retry hint with jitter (:func:`retry_pause_s`); None when that would pass
        ``until_s`` (monotonic) or the request timeout."""
        pause = retry_pause_s(error)
        limit = self.deadline if until_s is None else min(until_s, self.deadline)
        return None if self.clock() + pause >= limit else pause


class _Channels:
    """One channel (and set of stubs) per address, created on first use. Pickles as its
    bootstrap list only: channels never travel."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        request_timeout_ms: int,
        security: ChannelSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.request_timeout_s = request_timeout_ms / 1000
        self.security = security
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, _Stubs]] = {}
        self._preferred = 0  # index into bootstrap of the last broker that answered
        self._down: dict[str, float] = {}  # address -> monotonic time it is avoided until
        self._rotation = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "request_timeout_ms": self.request_timeout_s * 1000,
            "security": self.security,  # PEM bytes and token travel: executors need no files
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["bootstrap"], state["request_timeout_ms"], state.get("security")
        )

    def stubs(self, address: str) -> _Stubs:
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                channel = open_channel(
                    address, self.security, message_bytes_max=CLIENT_MESSAGE_BYTES_MAX
                )
                entry = (channel, _Stubs(channel))
                self._channels[address] = entry
            return entry[1]

    def call(
        self, address: str, fn: Callable[[_Stubs, float], T], timeout_s: float | None = None
    ) -> T:
        """``fn(stubs, timeout_s)`` against one address (``timeout_s`` defaults to the request
        timeout); grpc errors become typed errors."""
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            return fn(self.stubs(address), timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def mark_down(self, address: str) -> bool:
        """Avoid ``address`` as a send target for DOWN_S; False if it already was."""
        now = time.monotonic()
        with self._lock:
            fresh = self._down.get(address, 0.0) <= now
            self._down[address] = now + DOWN_S
        return fresh

    def is_down(self, address: str) -> bool:
        with self._lock:
            return self._down.get(address, 0.0) > time.monotonic()

    def other_than(self, address: str) -> str:
        """A bootstrap broker that is neither ``address`` nor marked down (rotating), else
        ``address``."""
        with self._lock:
            now = time.monotonic()
            up = [a for a in self.bootstrap if a != address and self._down.get(a, 0.0) <= now]
        return up[next(self._rotation) % len(up)] if up else address

    def prefer(self, address: str) -> None:
        """Start ``call_any``'s next round at ``address`` (a leader a broker named) when it is
        one of the bootstrap brokers; any other address is not reached by ``call_any``."""
        if address in self.bootstrap:
            self._preferred = self.bootstrap.index(address)

    def call_any(self, fn: Callable[[_Stubs, float], T], *, deadline_s: float | None = None) -> T:
        """``fn`` against each bootstrap broker in turn until one answers: the
        :func:`raftq.client.steps.any_broker` plan (which broker next, when to pause and
        when to give up, shared with the asyncio client), performed with blocking calls.
        ``deadline_s`` (monotonic) bounds the retries after capacity refusals."""
        rounds = AnyBroker(len(self.bootstrap), self._preferred, self.request_timeout_s)
        plan = steps.any_broker(rounds, self.bootstrap, fn, deadline_s)
        index, answer = steps.run(plan, self._perform)
        self._preferred = index
        result: T = answer
        return result

    def _perform(self, step: steps.Step) -> Any:
        if isinstance(step, steps.Attempt):
            return self.call(step.address, step.fn, step.timeout_s)
        assert isinstance(step, steps.Pause), step
        time.sleep(step.seconds)
        return None

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            channel.close()


def retry_pause_s(error: errors.RaftqError) -> float:
    """How long to wait before trying again after ``error``'s refusal: its retry hint (100 ms
    without one) times a random factor in [0.5, 1.5)."""
    hint_ms = error.retry_after_ms or RETRY_AFTER_DEFAULT_MS
    return hint_ms / 1000 * (0.5 + random.random())


def channel_security(
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    token: str | None = None,
) -> ChannelSecurity | None:
    """None for plaintext without a token; raises InvalidArgument for unreadable files."""
    if not (tls_ca_file or tls_cert_file or tls_key_file or token):
        return None
    return ChannelSecurity.from_files(
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        token=token,
    )
