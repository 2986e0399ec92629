"""The raftq :class:`Consumer` and the :class:`Message` it delivers: at-least-once with leases.

A ``Consumer`` joins its group (``JoinGroup``), and a background thread heartbeats every
``heartbeat_interval_ms``. ``poll`` leases ready records of the member's partitions: each
:class:`Message` is this member's until ``lease_deadline_ms`` and no other member of the group
gets it meanwhile. Then:

- ``msg.ack()`` ends it for the group (``consumer.ack_async(messages)``: without waiting, a
  ``concurrent.futures.Future`` of the answers); ``msg.nack(delay_ms)`` gives it back for redelivery
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
marks a redelivery). ``close()`` waits for the acks ``ack_async`` still has to send, then
leaves the group at once, releasing its leases. A Consumer
is a live group member and refuses to be pickled: create it where it is used.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from raftq.client import steps
from raftq.client.channels import _DEFAULTS, DEFAULT_BOOTSTRAP, _Channels, channel_security
from raftq.client.member import (
    Delivery,
    Member,
    deliveries,
    extended,
    outcome_error,
    start_from_value,
)
from raftq.proto import errors

log = logging.getLogger("raftq.client")
T = TypeVar("T")


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
        max_poll_bytes: int = 0,
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
        interval the broker suggests. ``max_poll_bytes`` bounds the record bytes of one poll
        (0: the broker's ``client.fetch_bytes_max``, 4 MiB by default; a record larger on its own
        still comes alone, Kafka's fetch.max.bytes rule)."""
        self.group = group
        self.topics = tuple(topics)
        self._member = Member(
            group,
            self.topics,
            session_timeout_ms=session_timeout_ms,
            start_from=start_from_value(start_from),
            max_poll_records=max_poll_records,
            max_poll_bytes=max_poll_bytes,
            lease_ms=lease_ms,
        )
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)
        self._closed = threading.Event()
        # ack_async's one worker (its thread starts with the first ack) and what it holds.
        self._acks = ThreadPoolExecutor(1, thread_name_prefix=f"raftq-acks-{group}")
        self._acks_lock = threading.Lock()
        self._last_ack: Future[list[errors.RaftqError | None]] | None = None
        self._closing = False
        self._run(self._member.join(None))
        interval_ms = heartbeat_interval_ms or self._member.suggested_heartbeat_ms
        self.heartbeat_interval_s = interval_ms / 1000
        self._heartbeats = threading.Thread(
            target=self._heartbeat_loop, name=f"raftq-heartbeat-{group}", daemon=True
        )
        self._heartbeats.start()

    def __reduce__(self) -> Any:
        raise TypeError("a Consumer is a live group member: create it where it is used")

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def generation(self) -> int:
        return self._member.generation

    @property
    def assignment(self) -> list[tuple[str, int]]:
        return self._member.assignment

    @property
    def rejoins(self) -> int:
        return self._member.rejoins

    @property
    def max_poll_records(self) -> int:
        return self._member.max_poll_records

    @property
    def lease_ms(self) -> int | None:
        return self._member.lease_ms

    def _run(self, plan: steps.Plan[T]) -> T:
        """Perform ``plan``'s calls with this consumer's channels (blocking)."""
        return steps.run(plan, self._perform)

    def _perform(self, step: steps.Step) -> Any:
        assert isinstance(step, steps.CallAny), step  # a member's plans only call any broker
        return self._channels.call_any(step.fn, deadline_s=step.deadline_s)

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.heartbeat_interval_s):
            try:
                self._run(self._member.heartbeat(self._closed.is_set))
            except errors.RaftqError as exc:
                log.warning("[group=%s] heartbeat failed: %s", self.group, exc)

    # -- consuming -------------------------------------------------------------------------

    def poll(self, max_records: int | None = None, timeout_ms: int = 0) -> list[Message]:
        """Lease up to ``max_records`` ready records, waiting up to ``timeout_ms`` for the
        first; see :meth:`Member.poll` for rebalances, outages and refusals."""
        response = self._run(self._member.poll(max_records, timeout_ms))
        if response.leader_hint:  # the partition's leader: poll and ack there from now on
            self._channels.prefer(response.leader_hint)
        return deliveries(response, self._message)

    def _message(self, *fields: Any) -> Message:
        return Message(*fields, _consumer=self)

    def _settle(self, method: str, messages: Sequence[Message], **extra: int) -> list[Any]:
        pending = self._last_ack
        if pending is not None:  # the acks ack_async was given before go first
            wait([pending])
        return self._run(self._member.settle(method, messages, extra))

    def _ack_now(self, messages: Sequence[Message]) -> list[errors.RaftqError | None]:
        results = self._run(self._member.settle("Ack", messages, {}))
        return [outcome_error(r) for r in results]

    def ack(self, messages: Sequence[Message]) -> list[errors.RaftqError | None]:
        """Acknowledge a batch; one entry per message: None when acked, else the typed error
        (LeaseExpired, NotLeased, RecordNotFound, Fenced...). Acks still pending from
        :meth:`ack_async` are sent first."""
        return [outcome_error(r) for r in self._settle("Ack", messages)]

    def ack_async(self, messages: Sequence[Message]) -> Future[list[errors.RaftqError | None]]:
        """Acknowledge a batch without waiting (Kafka's commitAsync): the future resolves to
        what :meth:`ack` returns, one entry per message, or raises what ``ack`` would have
        raised (Unavailable...). Batches are sent one at a time, in call order, by one
        worker thread; ``ack``, ``nack`` and ``extend`` called later wait for them, and
        :meth:`close` sends every pending batch before it leaves the group. Raises
        InvalidArgument once the consumer is closing."""
        batch = list(messages)
        with self._acks_lock:
            if self._closing:
                raise errors.InvalidArgument("ack_async on a closed Consumer")
            future = self._acks.submit(self._ack_now, batch)
            self._last_ack = future
        return future

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
        """Send the acks :meth:`ack_async` holds, stop heartbeating and leave the group (its
        leases are released). Idempotent."""
        with self._acks_lock:
            if self._closing:
                return
            self._closing = True
        self._acks.shutdown(wait=True)  # heartbeats go on meanwhile: the leases stay ours
        self._closed.set()
        self._heartbeats.join(self.heartbeat_interval_s + self._channels.request_timeout_s)
        try:
            self._run(self._member.leave())
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
