"""A consumer-group member's pure parts, shared by the thread and asyncio consumers.

:class:`Delivery` (the fields of a delivered record), the requests a member sends and how
their answers are read (:func:`deliveries`, :func:`settle_outcomes`), and :class:`Member`:
the member's state and its plans (join, rejoin, heartbeat, poll, settle, leave), which
:class:`raftq.client.consumer.Consumer` runs with threads and
:class:`raftq.client.aio.AsyncConsumer` with asyncio (:mod:`raftq.client.steps`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from raftq.client.channels import _OK
from raftq.client.steps import CallAny, Plan
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

log = logging.getLogger("raftq.client")

POLL_WAIT_MS_MAX = 300_000  # the broker's longest long poll; poll() loops for longer waits


@dataclass
class Delivery:
    """One delivery of a record to a group member (the fields a Message carries)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    priority: int
    delivery_count: int
    lease_deadline_ms: int
    timestamp_ms: int = 0
    deliver_at_ms: int = 0

    @property
    def ref(self) -> api_pb2.RecordRef:
        return api_pb2.RecordRef(
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            delivery_count=self.delivery_count,
        )


# Answers a retried settle gives for a state its own earlier attempt may have made.
_NACK_AMBIGUOUS = frozenset(
    {ErrorCode.FENCED, ErrorCode.LEASE_EXPIRED, ErrorCode.NOT_LEASED, ErrorCode.RECORD_NOT_FOUND}
)


def _after_retry(method: str, outcome: Any) -> None:
    """Rewrite one ref's answer (RefOutcome or FailedRef) to a settle sent again after an
    attempt whose outcome is unknown (see Consumer._settle)."""
    code = outcome.error
    if method == "Ack" and code == ErrorCode.RECORD_NOT_FOUND:
        outcome.error, outcome.message = _OK, ""  # it acked the record: no longer pending
    elif (method == "Ack" and code == ErrorCode.FENCED) or (
        method == "Nack" and code in _NACK_AMBIGUOUS
    ):
        outcome.error = ErrorCode.OUTCOME_UNKNOWN
        outcome.message = f"{errors.OutcomeUnknown.kind.hint}; the retry found: {outcome.message}"


# --- the pure parts of a group member, shared with the asyncio client (aio.py) ----------

FENCING = (errors.Fenced, errors.UnknownMember, errors.UnknownGroup)  # rejoin and try again
D = TypeVar("D", bound=Delivery)


def join_request(
    group: str,
    topics: Sequence[str],
    session_timeout_ms: int,
    start_from: int,
    member_id: str | None,
) -> api_pb2.JoinGroupRequest:
    request = api_pb2.JoinGroupRequest(
        group=group,
        topics=topics,
        session_timeout_ms=session_timeout_ms,
        start_from=start_from,  # type: ignore[arg-type]
    )
    if member_id:
        request.member_id = member_id
    return request


def start_from_value(start_from: str) -> int:
    if start_from.upper() not in ("EARLIEST", "LATEST"):
        raise errors.InvalidArgument(f"start_from {start_from!r}: use earliest or latest")
    return int(partition_pb2.StartFrom.Value(start_from.upper()))


def assignment_of(assignment: Iterable[api_pb2.TopicPartitions]) -> list[tuple[str, int]]:
    return sorted((a.topic, p) for a in assignment for p in a.partitions)


def poll_request(
    group: str,
    member_id: str,
    generation: int,
    max_records: int,
    wait_ms: int,
    lease_ms: int | None,
    max_bytes: int = 0,
) -> api_pb2.PollRequest:
    request = api_pb2.PollRequest(
        group=group,
        member_id=member_id,
        generation=generation,
        max_records=max_records,
        max_bytes=max_bytes,
        max_wait_ms=min(max(0, wait_ms), POLL_WAIT_MS_MAX),
        compact=True,
        columns=True,
    )
    if lease_ms is not None:
        request.lease_ms = lease_ms
    return request


def deliveries(response: api_pb2.PollResponse, make: Callable[..., D]) -> list[D]:
    """The deliveries of a PollResponse, each built by ``make`` (Message, AsyncMessage...)
    with Delivery's fields in order."""
    out = [
        make(
            r.topic,
            r.partition,
            r.offset,
            r.record.key if r.record.HasField("key") else None,
            r.record.value,
            dict(r.record.headers),
            r.record.priority,
            r.delivery_count,
            r.lease_deadline_ms,
            r.timestamp_ms,
            r.record.deliver_at_ms,
        )
        for r in response.records  # a broker without compact answers
    ]
    for batch in response.batches:
        topic, partition = batch.topic, batch.partition
        if batch.HasField("columns"):  # bare records: a value each, nothing else
            c = batch.columns
            deadline = c.lease_deadline_ms
            out += [
                make(topic, partition, offset, None, value, {}, 0, count, deadline, ts, 0)
                for offset, count, ts, value in zip(
                    c.offsets, c.delivery_counts, c.timestamps_ms, c.values, strict=True
                )
            ]
            continue
        for d in batch.deliveries:
            stored = d.record
            record = stored.record
            out.append(
                make(
                    topic,
                    partition,
                    stored.offset,
                    record.key if record.HasField("key") else None,
                    record.value,
                    dict(record.headers) if record.headers else {},
                    record.priority,
                    d.delivery_count,
                    d.lease_deadline_ms,
                    stored.timestamp_ms,
                    record.deliver_at_ms,
                )
            )
    return out


_SETTLE_REQUESTS: dict[str, Any] = {
    "Ack": api_pb2.AckRequest,
    "Nack": api_pb2.NackRequest,
    "ExtendLease": api_pb2.ExtendLeaseRequest,
}


def settle_request(
    method: str,
    group: str,
    member_id: str,
    generation: int,
    messages: Sequence[Delivery],
    extra: dict[str, int],
) -> Any:
    """An Ack (packed offsets per partition: only failures come back), Nack or ExtendLease
    (a ref per message) of ``messages``."""
    request = _SETTLE_REQUESTS[method](
        group=group, member_id=member_id, generation=generation, **extra
    )
    if method == "Ack":
        by_partition: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        for m in messages:
            offsets, counts = by_partition.setdefault((m.topic, m.partition), ([], []))
            offsets.append(m.offset)
            counts.append(m.delivery_count)
        for (topic, partition), (offsets, counts) in by_partition.items():
            request.batches.add(
                topic=topic, partition=partition, offsets=offsets, delivery_counts=counts
            )
    else:
        request.refs.extend(m.ref for m in messages)
    return request


def settle_outcomes(
    method: str, messages: Sequence[Delivery], response: Any, retried: bool
) -> list[Any]:
    """Each message's answer (None: settled) from a settle's response; after a retry
    (``retried``) the answers its own earlier attempt may have caused are rewritten
    (:func:`_after_retry`)."""
    if method == "Ack":
        failed = {(f.ref.topic, f.ref.partition, f.ref.offset): f for f in response.failed}
        if not failed:
            return [None] * len(messages)
        outcomes: list[Any] = [failed.get((m.topic, m.partition, m.offset)) for m in messages]
        if retried:
            for o in outcomes:
                if o is not None:
                    _after_retry(method, o)
            outcomes = [None if o is None or o.error == _OK else o for o in outcomes]
        return outcomes
    results = list(response.results)
    if retried:
        for r in results:
            _after_retry(method, r)
    return results


def outcome_error(r: api_pb2.RefOutcome | errors.RaftqError | None) -> errors.RaftqError | None:
    if isinstance(r, errors.RaftqError):
        return r
    if r is None or r.error == ErrorCode.OK:
        return None
    return errors.error_for(r.error, r.message, leader_hint=r.leader_hint)


def extended(messages: Sequence[Delivery], results: Sequence[Any], lease_ms: int) -> None:
    """Update each extended message's ``lease_deadline_ms`` from ExtendLease's answers."""
    for message, r in zip(messages, results, strict=True):
        if isinstance(r, api_pb2.RefOutcome) and r.error == ErrorCode.OK:
            message.lease_deadline_ms = r.lease_deadline_ms or int(time.time() * 1000 + lease_ms)


class Member:
    """A group member's state (member id, generation, assignment) and its plans: join,
    rejoin, heartbeat, poll, settle, leave (:mod:`raftq.client.steps`). The thread
    :class:`~raftq.client.consumer.Consumer` and the asyncio
    :class:`~raftq.client.aio.AsyncConsumer` run the same plans, so they rejoin, resend and
    read answers alike. The state is guarded by a lock: the thread client's heartbeat thread
    and its callers share it (under asyncio the lock is never contended)."""

    def __init__(
        self,
        group: str,
        topics: Sequence[str],
        *,
        session_timeout_ms: int,
        start_from: int,
        max_poll_records: int,
        lease_ms: int | None,
        max_poll_bytes: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``max_poll_bytes``: the record bytes of one poll (0: the broker's
        ``client.fetch_bytes_max``; a record larger on its own still comes alone). Raises
        InvalidArgument when it is negative."""
        if max_poll_bytes < 0:
            raise errors.InvalidArgument("max_poll_bytes must be >= 0 (0 = the broker's)")
        self.group = group
        self.topics = tuple(topics)
        self.session_timeout_ms = session_timeout_ms
        self.start_from = start_from
        self.max_poll_records = max_poll_records
        self.max_poll_bytes = max_poll_bytes
        self.lease_ms = lease_ms
        self.clock = clock
        self._lock = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self.assignment: list[tuple[str, int]] = []
        self.suggested_heartbeat_ms = 1000
        self.rejoins = 0

    def identity(self) -> tuple[str, int]:
        with self._lock:
            return self.member_id, self.generation

    def _adopt(self, generation: int, assignment: Iterable[api_pb2.TopicPartitions]) -> None:
        self.generation = generation
        self.assignment = assignment_of(assignment)

    def join(self, member_id: str | None) -> Plan[None]:
        """JoinGroup (raises UnknownTopic, InvalidArgument, Unavailable...)."""
        request = join_request(
            self.group, self.topics, self.session_timeout_ms, self.start_from, member_id
        )
        response = yield CallAny(lambda s, t: s.consumer.JoinGroup(request, timeout=t))
        with self._lock:
            self.member_id = response.member_id
            self._adopt(response.generation, response.assignment)
            self.suggested_heartbeat_ms = response.heartbeat_interval_ms or 1000

    def rejoin(self, error: errors.RaftqError, seen_generation: int) -> Plan[None]:
        """After FENCED keep the member id; after UNKNOWN_MEMBER/GROUP join afresh. Only once
        per stale generation, however many callers noticed."""
        with self._lock:
            if self.generation != seen_generation:
                return
            member_id = self.member_id if isinstance(error, errors.Fenced) else None
        log.info("[group=%s] rejoining after %s", self.group, error.kind.name)
        self.rejoins += 1
        try:
            yield from self.join(member_id)
        except errors.UnknownMember:  # the member expired meanwhile: the broker issues a new id
            yield from self.join(None)

    def heartbeat(self, closed: Callable[[], bool]) -> Plan[None]:
        """One Heartbeat: adopt a new generation's assignment; rejoin when fenced (unless
        ``closed``). Raises what the call or the rejoin raised."""
        member_id, generation = self.identity()
        request = api_pb2.HeartbeatRequest(
            group=self.group, member_id=member_id, generation=generation
        )
        try:
            response = yield CallAny(lambda s, t: s.consumer.Heartbeat(request, timeout=t))
        except FENCING as exc:
            if not closed():
                yield from self.rejoin(exc, generation)
            return
        with self._lock:
            if response.generation != self.generation:
                self._adopt(response.generation, response.assignment)

    def poll(self, max_records: int | None, timeout_ms: int) -> Plan[api_pb2.PollResponse]:
        """Lease up to ``max_records`` ready records, waiting up to ``timeout_ms`` for the
        first. Rejoins and tries again on FENCED / UNKNOWN_MEMBER (a rebalance, up to 3
        times); raises Unavailable when no broker answers, Fenced if rejoining keeps failing.
        A broker at its cap of long polls refuses (RESOURCE_EXHAUSTED): the plan backs off its
        retry hint and tries again (another broker first) until ``timeout_ms``, then answers
        an empty response."""
        deadline = self.clock() + timeout_ms / 1000
        rejoins = 0
        while True:
            member_id, generation = self.identity()
            request = poll_request(
                self.group,
                member_id,
                generation,
                max_records or self.max_poll_records,
                int((deadline - self.clock()) * 1000),
                self.lease_ms,
                self.max_poll_bytes,
            )

            def call(s: Any, t: float, r: api_pb2.PollRequest = request) -> Any:
                return s.consumer.Poll(r, timeout=t + r.max_wait_ms / 1000)

            try:
                response = yield CallAny(call, deadline)
            except FENCING as exc:
                if rejoins >= 3:
                    raise
                rejoins += 1
                yield from self.rejoin(exc, generation)
                continue
            except errors.ResourceExhausted:
                return api_pb2.PollResponse()  # every broker's long polls are taken: nothing
            if response.batches or response.records or self.clock() >= deadline:
                return response

    def settle(
        self, method: str, messages: Sequence[Delivery], extra: dict[str, int]
    ) -> Plan[list[Any]]:
        """Ack, Nack or ExtendLease ``messages``; each one's answer (None: settled). A call
        FENCED for its generation rejoins (same member id) and is sent again with the new
        generation (up to 3 times, like poll): the leases on partitions this member kept are
        still its own and would otherwise sit until lease_ms; refs on partitions it lost come
        back FENCED per ref (the broker released those leases to their new owner).

        A call sent again after a broker failed UNAVAILABLE (that attempt may have been
        applied) does not claim what the retry's answer would: see :func:`settle_outcomes`."""
        if not messages:
            return []
        rejoins, retried = 0, False
        while True:
            member_id, generation = self.identity()
            request = settle_request(method, self.group, member_id, generation, messages, extra)
            tried = 0

            def call(s: Any, t: float, r: Any = request) -> Any:
                nonlocal tried
                tried += 1
                return getattr(s.consumer, method)(r, timeout=t)

            try:
                response = yield CallAny(call)
            except (errors.Fenced, errors.UnknownMember) as exc:
                # A rebalance. Rejoin; after UNKNOWN_MEMBER nothing leased is ours any more.
                try:
                    yield from self.rejoin(exc, generation)
                except errors.RaftqError:
                    return [exc for _ in messages]
                if isinstance(exc, errors.Fenced) and rejoins < 3:
                    rejoins, retried = rejoins + 1, retried or tried > 1
                    continue
                return [exc for _ in messages]
            return settle_outcomes(method, messages, response, retried or tried > 1)

    def leave(self) -> Plan[None]:
        member_id, _ = self.identity()
        request = api_pb2.LeaveGroupRequest(group=self.group, member_id=member_id)
        yield CallAny(lambda s, t: s.consumer.LeaveGroup(request, timeout=t))
