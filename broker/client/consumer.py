"""The raftq :class:`Consumer` and the :class:`Message` it delivers: at-least-once with leases.

A ``Consumer`` joins its group (``JoinGroup``), and a background thread heartbeats every
``heartbeat_interval_ms``. ``poll`` leases ready records of the member's partitions: each
:class:`Message` is this member's until ``lease_deadline_ms`` and no other member of the group
gets it meanwhile. Then:

- ``msg.ack()`` ends it for the group; ``msg.nack(delay_ms)`` gives it back for redelivery
  (no delay given: the topic's exponential backoff); ``msg.extend(lease_ms)`` keeps working.
- A lease that runs out makes the record ready again: it is redelivered (to this member or
  another) with ``delivery_count + 1``, and a late ack of the old delivery fails with
  LEASE_EXPIRED. A record delivered ``max_deliveries`` times goes to the dead-letter topic.
- Rebalance (a member joins, leaves or misses its session): partitions move with the sticky
  assignor, the leases on moved partitions are released and their records redelivered to
  the new owner; this member's poll, heartbeat and acks for them fail with FENCED, after
  which the consumer rejoins on its own (same member id) and carries on with its new
  assignment. Acks for moved partitions are lost work, never lost records.

So every record is processed at least once; process idempotently (``delivery_count > 1``
marks a redelivery). ``close()`` leaves the group at once, releasing its leases. A Consumer
is a live group member and refuses to be pickled: create it where it is used.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker.client.channels import (
    _DEFAULTS,
    _OK,
    DEFAULT_BOOTSTRAP,
    _Channels,
    _Stubs,
    channel_security,
)
from proto import api_pb2, errors, partition_pb2
from proto.common_pb2 import ErrorCode

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


@dataclass
class Message(Delivery):
    """One delivery of a record to this consumer; see the module docstring for leases."""

    _consumer: Consumer | None = field(default=None, repr=False, compare=False, kw_only=True)

    def _owner(self) -> Consumer:
        if self._consumer is None:
            raise errors.InvalidArgument("this message was not received by a Consumer")
        return self._consumer

    def ack(self) -> None:
        """End the record for the group. Raises LeaseExpired, NotLeased, Fenced... if this
        delivery is no longer ours (the record is, or will be, redelivered)."""
        _raise_first(self._owner().ack([self]))

    def nack(self, delay_ms: int | None = None) -> None:
        """Give the record back for redelivery after ``delay_ms`` (None: backoff)."""
        _raise_first(self._owner().nack([self], delay_ms=delay_ms))

    def extend(self, lease_ms: int) -> None:
        """Keep the lease for ``lease_ms`` more from now."""
        _raise_first(self._owner().extend([self], lease_ms))


def _raise_first(results: Sequence[errors.RaftqError | None]) -> None:
    for error in results:
        if error is not None:
            raise error


ITER_POLL_MS = 1_000  # how long `for message in consumer` waits per poll when nothing is ready


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
) -> api_pb2.PollRequest:
    request = api_pb2.PollRequest(
        group=group,
        member_id=member_id,
        generation=generation,
        max_records=max_records,
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


class Consumer:
    """A member of a consumer group; see the module docstring for delivery semantics."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        group: str = "",
        topics: Iterable[str] = (),
        *,
        session_timeout_ms: int = 0,
        heartbeat_interval_ms: int = 0,
        max_poll_records: int = 500,
        lease_ms: int | None = None,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        start_from: str = "earliest",
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        """Joins the group now (raises UnknownTopic, InvalidArgument, Unavailable...).
        ``session_timeout_ms`` 0 takes the broker's; ``heartbeat_interval_ms`` 0 takes the
        interval the broker suggests."""
        self.group = group
        self.topics = tuple(topics)
        self._start_from = start_from_value(start_from)
        self.session_timeout_ms = session_timeout_ms
        self.max_poll_records = max_poll_records
        self.lease_ms = lease_ms
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)
        self._lock = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self.assignment: list[tuple[str, int]] = []
        self._closed = threading.Event()
        self.rejoins = 0
        self._join(None)
        interval_ms = heartbeat_interval_ms or self._suggested_heartbeat_ms
        self.heartbeat_interval_s = interval_ms / 1000
        self._heartbeats = threading.Thread(
            target=self._heartbeat_loop, name=f"raftq-heartbeat-{group}", daemon=True
        )
        self._heartbeats.start()

    def __reduce__(self) -> Any:
        raise TypeError("a Consumer is a live group member: create it where it is used")

    # -- membership ------------------------------------------------------------------------

    def _join(self, member_id: str | None) -> None:
        request = join_request(
            self.group, self.topics, self.session_timeout_ms, self._start_from, member_id
        )
        response = self._channels.call_any(lambda s, t: s.consumer.JoinGroup(request, timeout=t))
        with self._lock:
            self.member_id = response.member_id
            self._adopt(response.generation, response.assignment)
            self._suggested_heartbeat_ms = response.heartbeat_interval_ms or 1000

    def _adopt(self, generation: int, assignment: Iterable[api_pb2.TopicPartitions]) -> None:
        self.generation = generation
        self.assignment = assignment_of(assignment)

    def _rejoin(self, error: errors.RaftqError, seen_generation: int) -> None:
        """After FENCED keep the member id; after UNKNOWN_MEMBER/GROUP join afresh. Only once
        per stale generation, however many threads noticed."""
        with self._lock:
            if self.generation != seen_generation:
                return
            member_id = self.member_id if isinstance(error, errors.Fenced) else None
        log.info("[group=%s] rejoining after %s", self.group, error.kind.name)
        self.rejoins += 1
        try:
            self._join(member_id)
        except errors.UnknownMember:  # the member expired meanwhile: the broker issues a new id
            self._join(None)

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.heartbeat_interval_s):
            with self._lock:
                request = api_pb2.HeartbeatRequest(
                    group=self.group, member_id=self.member_id, generation=self.generation
                )

            def call(s: _Stubs, t: float, r: api_pb2.HeartbeatRequest = request) -> Any:
                return s.consumer.Heartbeat(r, timeout=t)

            try:
                response = self._channels.call_any(call)
                with self._lock:
                    if response.generation != self.generation:
                        self._adopt(response.generation, response.assignment)
            except FENCING as exc:
                if self._closed.is_set():
                    return
                try:
                    self._rejoin(exc, request.generation)
                except errors.RaftqError as again:
                    log.warning("[group=%s] rejoin failed: %s", self.group, again)
            except errors.RaftqError as exc:
                log.warning("[group=%s] heartbeat failed: %s", self.group, exc)

    # -- consuming -------------------------------------------------------------------------

    def poll(self, max_records: int | None = None, timeout_ms: int = 0) -> list[Message]:
        """Lease up to ``max_records`` ready records, waiting up to ``timeout_ms`` for the
        first. Rejoins and tries again on FENCED / UNKNOWN_MEMBER (a rebalance); raises
        Unavailable when no broker answers, Fenced if rejoining keeps failing. A broker at its
        cap of long polls refuses (RESOURCE_EXHAUSTED): the poll backs off its retry hint and
        tries again (another broker first) until ``timeout_ms``, then returns nothing."""
        deadline = time.monotonic() + timeout_ms / 1000
        rejoins = 0
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            with self._lock:
                request = poll_request(
                    self.group,
                    self.member_id,
                    self.generation,
                    max_records or self.max_poll_records,
                    remaining_ms,
                    self.lease_ms,
                )

            def call(s: _Stubs, t: float, r: api_pb2.PollRequest = request) -> Any:
                return s.consumer.Poll(r, timeout=t + r.max_wait_ms / 1000)

            try:
                response = self._channels.call_any(call, deadline_s=deadline)
            except FENCING as exc:
                if rejoins >= 3:
                    raise
                rejoins += 1
                self._rejoin(exc, request.generation)
                continue
            except errors.ResourceExhausted:
                return []  # every broker's long polls are taken: like a poll that found nothing
            if response.batches or response.records or time.monotonic() >= deadline:
                return deliveries(response, self._message)

    def _message(self, *fields: Any) -> Message:
        return Message(*fields, _consumer=self)

    def _settle(
        self,
        method: str,
        messages: Sequence[Message],
        *,
        rejoins: int = 0,
        retried: bool = False,
        **extra: int,
    ) -> list[Any]:
        """One settle call. A call FENCED for its generation rejoins (same member id) and is
        sent again with the new generation (up to 3 times, like poll): the leases on partitions
        this member kept are still its own and would otherwise sit until lease_ms; refs on
        partitions it lost come back FENCED per ref (the broker released those leases to their
        new owner).

        A call sent again after a broker failed UNAVAILABLE (``retried``: that attempt may have
        been applied) does not claim what the retry's answer would: an Ack's RECORD_NOT_FOUND
        is success (it acked the record), and FENCED (and for a Nack NOT_LEASED,
        LEASE_EXPIRED, RECORD_NOT_FOUND: states the nack itself leaves) is OUTCOME_UNKNOWN."""
        if not messages:
            return []
        with self._lock:
            group, member_id, generation = self.group, self.member_id, self.generation
        request = settle_request(method, group, member_id, generation, messages, extra)
        brokers_tried = 0

        def call(s: _Stubs, t: float) -> Any:
            nonlocal brokers_tried
            brokers_tried += 1
            return getattr(s.consumer, method)(request, timeout=t)

        try:
            response = self._channels.call_any(call)
        except (errors.Fenced, errors.UnknownMember) as exc:
            # A rebalance. Rejoin; after UNKNOWN_MEMBER nothing leased is ours any more.
            try:
                self._rejoin(exc, generation)
            except errors.RaftqError:
                return [exc for _ in messages]
            if isinstance(exc, errors.Fenced) and rejoins < 3:
                again = retried or brokers_tried > 1
                return self._settle(method, messages, rejoins=rejoins + 1, retried=again, **extra)
            return [exc for _ in messages]
        return settle_outcomes(method, messages, response, retried or brokers_tried > 1)

    def ack(self, messages: Sequence[Message]) -> list[errors.RaftqError | None]:
        """Acknowledge a batch; one entry per message: None when acked, else the typed error
        (LeaseExpired, NotLeased, RecordNotFound, Fenced...)."""
        return [outcome_error(r) for r in self._settle("Ack", messages)]

    def nack(
        self, messages: Sequence[Message], delay_ms: int | None = None
    ) -> list[errors.RaftqError | None]:
        if delay_ms is None:
            results = self._settle("Nack", messages)
        else:
            results = self._settle("Nack", messages, delay_ms=delay_ms)
        return [outcome_error(r) for r in results]

    def extend(self, messages: Sequence[Message], lease_ms: int) -> list[errors.RaftqError | None]:
        """Extend the leases; updates each extended message's ``lease_deadline_ms``."""
        results = self._settle("ExtendLease", messages, lease_ms=lease_ms)
        extended(messages, results, lease_ms)
        return [outcome_error(r) for r in results]

    def close(self) -> None:
        """Stop heartbeating and leave the group (its leases are released). Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._heartbeats.join(self.heartbeat_interval_s + self._channels.request_timeout_s)
        with self._lock:
            request = api_pb2.LeaveGroupRequest(group=self.group, member_id=self.member_id)
        try:
            self._channels.call_any(lambda s, t: s.consumer.LeaveGroup(request, timeout=t))
        except errors.RaftqError as exc:  # the session will expire instead
            log.info("[group=%s] leave failed: %s", self.group, exc)
        finally:
            self._channels.close()

    def __iter__(self) -> Iterator[Message]:
        """``for message in consumer``: each leased message in turn, polling as needed (up to
        ``max_poll_records`` at a time, long-polling ``ITER_POLL_MS`` when idle); ends when the
        consumer is closed. Ack (or nack) each message; an unsettled one is redelivered when
        its lease expires. Errors of poll propagate, as from :meth:`poll`."""
        while not self._closed.is_set():
            try:
                messages = self.poll(timeout_ms=ITER_POLL_MS)
            except errors.RaftqError:
                if self._closed.is_set():  # close() from another thread cut the poll short
                    return
                raise
            yield from messages

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
