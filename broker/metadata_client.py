"""MetadataClient: the one place a broker's request handlers, backend and membership talk to the
metadata group.

It reads this broker's copy of the table, proposes planned MetaCommand bytes on the metadata
leader (here, or over ``Internal.MetaPropose``), and runs the calls that must run on the leader
(topics, group membership, descriptions that need the leader's in-memory view): a handler
registers each such call once (``register``); ``call`` runs it here when this broker leads the
metadata group, else forwards it once over ``Internal.Forward``, whose receiver runs it with
``run_forwarded`` and never forwards again. While the survivors elect a new leader, a call
looks again until its deadline.

Thread-safe: request handlers call it from many threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from raftq.metadata.table import Table, TopicInfo
from raftq.proto import api_pb2, errors, metadata_pb2
from raftq.router import client_addr_of_raft

if TYPE_CHECKING:
    from raftq.transport.internal import InternalClient

logger = logging.getLogger("raftq.broker.metadata_client")

T = TypeVar("T")

# A broker whose table copy lacks a topic or member the leader knows waits this long for it.
TABLE_CATCH_UP_S = 2.0


class MetadataGroup(Protocol):
    """What the client needs of the local metadata replica (broker/metadata_replica.py)."""

    @property
    def table(self) -> Table: ...

    def is_leader(self) -> bool: ...

    def leader(self) -> str | None: ...

    def now_ms(self) -> int: ...

    def wait_until(self, predicate: Callable[[Table], bool], timeout_s: float) -> bool: ...

    def propose(
        self, command: metadata_pb2.MetaCommand, timeout_s: float
    ) -> metadata_pb2.MetaResult: ...


@dataclass(frozen=True)
class LeaderCall:
    """A call that runs on the metadata leader: ``run(request, timeout_s, principal)``.

    ``check``: a client request's edge check (transport/request_checks.py ``check_<rpc>``),
    run again on a request that arrives forwarded: its bytes come from another broker process,
    perhaps of an older version, and ``run`` takes the checked command and asserts what the
    check guarantees. None for a call only broker code makes (its request is built from
    checked values)."""

    request_type: type[Any]
    response_type: type[Any]
    run: Callable[[Any, float, str], Any]
    on_broker: bool = False  # run by the broker it is sent to, leader or not (never forwarded)
    check: Callable[[Any], Any] | None = None


class MetadataClient:
    """See the module docstring. ``now_ms`` is the wall clock handlers stamp commands with."""

    def __init__(
        self,
        *,
        meta: MetadataGroup,
        internal: InternalClient,
        client_addr: str,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``clock``: the wall clock commands are planned with; ``monotonic`` and ``sleep``:
        how the retry loop of a proposal waits for a metadata leader."""
        self._meta = meta
        self._internal = internal
        self.client_addr = client_addr
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._calls: dict[str, LeaderCall] = {}

    # -- this broker's copy -------------------------------------------------------------------

    @property
    def table(self) -> Table:
        return self._meta.table

    def is_leader(self) -> bool:
        return self._meta.is_leader()

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def leader_addr(self) -> str:
        """The metadata leader's client address ("" while none is known)."""
        return client_addr_of_raft(self._meta.table, self._meta.leader())

    def not_leader(self) -> errors.NotLeader:
        return errors.NotLeader("not the metadata leader", leader_hint=self.leader_addr())

    def wait_until(self, predicate: Callable[[Table], bool], timeout_s: float) -> bool:
        """Block until ``predicate(table)`` holds on this broker's copy; False on timeout."""
        return self._meta.wait_until(predicate, timeout_s)

    def topic(self, name: str) -> TopicInfo:
        """Raises UnknownTopic, Unavailable (this copy is behind: retry); see ``known_topic``."""
        info = self.known_topic(name)
        if info is None:
            raise errors.UnknownTopic(f"topic {name!r} does not exist: create it first")
        return info

    def known_topic(self, name: str) -> TopicInfo | None:
        """The topic from this broker's table copy. A copy may be behind (a restarted broker
        still replaying its metadata log): when the topic is missing here and this broker is
        not the metadata leader, the leader is asked; a topic that exists there is waited for
        (up to TABLE_CATCH_UP_S), else Unavailable (retriable), never UnknownTopic."""
        info = self._meta.table.topic(name)
        if info is not None or self._meta.is_leader():
            return info
        try:
            self.call("describe_topic", api_pb2.DescribeTopicRequest(name=name), TABLE_CATCH_UP_S)
        except errors.UnknownTopic:
            return None
        except errors.RaftqError as exc:
            raise errors.Unavailable(
                f"topic {name!r} is not in this broker's metadata and the metadata leader did "
                f"not confirm it ({exc.message}): retry"
            ) from exc
        if self._meta.wait_until(lambda table: table.topic(name) is not None, TABLE_CATCH_UP_S):
            return self._meta.table.topic(name)
        raise errors.Unavailable(
            f"topic {name!r} exists but this broker's metadata is still catching up: retry"
        )

    # -- on the metadata leader ---------------------------------------------------------------

    def on_leader(
        self,
        timeout_s: float,
        local: Callable[[float], T],
        remote: Callable[[str, float], T],
        retry: tuple[type[errors.RaftqError], ...],
    ) -> T:
        """``local(left_s)`` if this broker leads the metadata group, else ``remote(address,
        left_s)`` at the leader; ``retry`` errors (leadership moved, leader died) look again
        until the deadline while the survivors elect a new metadata leader."""
        deadline = self._monotonic() + timeout_s
        while True:
            left = deadline - self._monotonic()
            if self._meta.is_leader():
                return local(max(left, 0.001))
            target = self.leader_addr()
            if target and target != self.client_addr:
                try:
                    return remote(target, max(left, 0.001))
                except retry:
                    pass
            if left <= 0:
                raise errors.Unavailable("no metadata leader: the cluster has no quorum")
            self._sleep(min(0.05, max(left, 0.0)))

    def propose(self, command_bytes: bytes, timeout_s: float) -> metadata_pb2.MetaResult:
        """Propose planned MetaCommand bytes on the metadata leader (here or forwarded).
        Raises the command's typed rejection, NotLeader, Timeout, Unavailable."""
        command = metadata_pb2.MetaCommand.FromString(command_bytes)
        return self.on_leader(
            timeout_s,
            lambda left: self._meta.propose(command, left),
            lambda target, left: _checked(self._internal.meta_propose(target, command, left)),
            (errors.NotLeader,),
        )

    def propose_here(
        self, command: metadata_pb2.MetaCommand, timeout_s: float
    ) -> metadata_pb2.MetaResult:
        """Internal.MetaPropose: the result travels back with its error code in-band."""
        if not self._meta.is_leader():
            raise self.not_leader()
        try:
            return self._meta.propose(command, timeout_s)
        except errors.RaftqError as exc:
            if isinstance(exc, (errors.NotLeader, errors.Timeout, errors.Unavailable)):
                raise
            return metadata_pb2.MetaResult(error=exc.code, message=exc.message)  # type: ignore[arg-type]

    # -- leader-only calls --------------------------------------------------------------------

    def register(self, method: str, call: LeaderCall) -> None:
        """Name a call that runs on the metadata leader (or, ``on_broker``, on a named
        broker); a handler registers each of its own once, at construction."""
        assert method not in self._calls, f"{method} registered twice"
        self._calls[method] = call

    def call(self, method: str, request: Any, timeout_s: float, principal: str = "") -> Any:
        """Run the registered ``method`` here if this broker leads the metadata group, else
        forward it once (on behalf of ``principal``, the caller the auth interceptor
        authenticated). Raises the call's own errors, Unavailable (no leader), Timeout."""
        call = self._calls[method]

        def remote(target: str, left: float) -> Any:
            raw = self._internal.forward(
                target, method, request.SerializeToString(), left, principal=principal
            )
            return call.response_type.FromString(raw)

        return self.on_leader(
            timeout_s,
            lambda left: call.run(request, left, principal),
            remote,
            (errors.NotLeader, errors.Unavailable),
        )

    def call_on(self, client_addr: str, method: str, request: Any, timeout_s: float) -> Any:
        """Run an ``on_broker`` call on the broker at ``client_addr`` (forwarded)."""
        call = self._calls[method]
        assert call.on_broker, method
        raw = self._internal.forward(client_addr, method, request.SerializeToString(), timeout_s)
        return call.response_type.FromString(raw)

    def run_forwarded(
        self, method: str, request: bytes, timeout_s: float, principal: str = ""
    ) -> bytes:
        """Internal.Forward: run a registered call here or refuse (never forward again).
        Raises InvalidArgument (not a forwardable call, or a request its check refuses),
        NotLeader, the call's own errors."""
        call = self._calls.get(method)
        if call is None:
            raise errors.InvalidArgument(f"{method!r} cannot be forwarded")
        if not call.on_broker and not self._meta.is_leader():
            raise self.not_leader()
        parsed = call.request_type.FromString(request)
        if call.check is not None:
            parsed = call.check(parsed)
        response = call.run(parsed, timeout_s, principal)
        return bytes(response.SerializeToString())


def _checked(result: metadata_pb2.MetaResult) -> metadata_pb2.MetaResult:
    if result.error:
        raise errors.error_for(result.error, result.message)
    return result
