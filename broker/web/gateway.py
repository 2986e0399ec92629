"""The gateway between HTTP callers and the cluster: clients held per caller, and the operations.

Every operation runs with the caller's own bearer token (or, when a request carries none, the
console's ``default_token``, None by default), so the brokers authorise it exactly as the same
call over gRPC; the gateway itself holds no rights. Per token (keyed by its SHA-256, the token
kept only inside its clients) it keeps an :class:`Admin` and a :class:`Producer`, at most
``clients_max`` tokens (the least recently used are closed).

Dequeue (``dequeue``) needs a group member: the gateway keeps one :class:`Consumer` per
(token, group, topic), joined on first use and heartbeating while it lives, closed after
``consumer_idle_s`` without a dequeue or ack (it leaves the group: its leases are released and
their records redelivered; a thread looks every ``consumer_idle_s / 4``, at most 10 s), at most
``members_max`` at once (a new one beyond is refused RESOURCE_EXHAUSTED). An ack or nack by id
goes through the member that dequeued it, so it must reach the same console process; another
token's ids are refused (UNKNOWN_MEMBER), as the brokers refuse a member id issued to another
principal.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftq.client import Admin, Consumer, GroupInfo, Message, Producer
from raftq.client.redrive import REDRIVE_GROUP, redrive
from raftq.proto import errors
from raftq.web import views

DEQUEUE_RECORDS_MAX = 1_000
DEQUEUE_WAIT_MS_MAX = 30_000
ENQUEUE_RECORDS_MAX = 1_000
BROWSE_RECORDS_MAX = 1_000
REDRIVE_IDLE_EXIT_MS = 1_000
# Dequeues (long polls) at once: each holds one of the server's worker threads (THREADS_MAX,
# set by raftq.web.app) for up to wait_ms; the rest stay free for every other request.
DEQUEUES_MAX = 32
THREADS_MAX = 64
# Refusals of the caller or the topic rather than of a record: answered for the whole request.
REQUEST_WIDE = (errors.Unauthenticated, errors.PermissionDenied, errors.UnknownTopic)


@dataclass
class OutgoingRecord:
    """One record to enqueue, already decoded from the request."""

    value: bytes
    key: bytes | None = None
    headers: dict[str, bytes] = field(default_factory=dict)
    partition: int | None = None
    priority: int = 0
    deliver_at_ms: int = 0
    idempotency_key: str = ""
    ttl_ms: int = 0


@dataclass
class _Clients:
    admin: Admin
    producer: Producer | None = None


@dataclass
class _Member:
    consumer: Consumer
    used_s: float


class Gateway:
    """Clients for HTTP callers; thread-safe (routes run on a thread pool)."""

    def __init__(
        self,
        bootstrap: str,
        client_options: Mapping[str, Any] | None = None,
        *,
        default_token: str | None = None,
        consumer_idle_s: float = 300.0,
        clients_max: int = 64,
        members_max: int = 1_024,
        dequeues_max: int = DEQUEUES_MAX,
        clock: Callable[[], float] = time.monotonic,
        reap: bool = True,
    ) -> None:
        """``reap``: a thread closes idle members (else only the next dequeue or ack does)."""
        self.bootstrap = bootstrap
        self.options = {k: v for k, v in dict(client_options or {}).items() if k != "token"}
        self.default_token = default_token
        self.consumer_idle_s = consumer_idle_s
        self.clients_max = clients_max
        self.members_max = members_max
        self.dequeues_max = dequeues_max
        self._dequeues = 0  # under way now
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: OrderedDict[str, _Clients] = OrderedDict()
        self._members: dict[tuple[str, str, str], _Member] = {}
        self._closed = threading.Event()
        if reap:
            threading.Thread(target=self._reap, name="raftq-web-reaper", daemon=True).start()

    def statistics(self) -> dict[str, int]:
        """Tokens with clients held, dequeue members held, dequeues under way."""
        with self._lock:
            return {
                "clients": len(self._clients),
                "members": len(self._members),
                "dequeues": self._dequeues,
            }

    # -- clients ---------------------------------------------------------------------------

    def _token(self, token: str | None) -> str | None:
        return token if token else self.default_token

    @staticmethod
    def _digest(token: str | None) -> str:
        return hashlib.sha256((token or "").encode()).hexdigest()

    def _client_kwargs(self, token: str | None) -> dict[str, Any]:
        return {**self.options, "token": self._token(token)}

    def _entry(self, token: str | None) -> _Clients:
        key = self._digest(self._token(token))
        evicted: list[_Clients] = []
        with self._lock:
            entry = self._clients.pop(key, None)
            if entry is None:
                entry = _Clients(Admin(self.bootstrap, **self._client_kwargs(token)))
                while len(self._clients) >= self.clients_max:
                    evicted.append(self._clients.popitem(last=False)[1])
            self._clients[key] = entry
        for old in evicted:
            _close_clients(old)
        return entry

    def admin(self, token: str | None) -> Admin:
        return self._entry(token).admin

    def producer(self, token: str | None) -> Producer:
        entry = self._entry(token)
        with self._lock:
            if entry.producer is None:
                entry.producer = Producer(self.bootstrap, linger_ms=1, **self._client_kwargs(token))
            return entry.producer

    def _member(self, token: str | None, group: str, topic: str, join: bool) -> _Member:
        key = (self._digest(self._token(token)), group, topic)
        self._close_idle()
        with self._lock:
            member = self._members.get(key)
        if member is None:
            if not join:
                raise errors.UnknownMember(
                    f"no dequeue of group {group!r} from topic {topic!r} by this caller is held "
                    "here: ack and nack through the console process (and token) that dequeued"
                )
            with self._lock:
                full = len(self._members) >= self.members_max
            if full:
                raise errors.ResourceExhausted(
                    f"this console holds {self.members_max} dequeue members (token, group, "
                    "topic): they close after consumer_idle_s unused",
                    retry_after_ms=int(self.consumer_idle_s * 1000),
                )
            self.admin(token).describe_topic(topic)  # a group may join a topic not yet made
            consumer = Consumer(self.bootstrap, group, [topic], **self._client_kwargs(token))
            with self._lock:
                member = self._members.setdefault(key, _Member(consumer, self._clock()))
            if member.consumer is not consumer:  # another request joined meanwhile
                consumer.close()
        member.used_s = self._clock()
        return member

    def _reap(self) -> None:
        while not self._closed.wait(min(10.0, max(0.5, self.consumer_idle_s / 4))):
            self._close_idle()

    def _close_idle(self) -> None:
        now = self._clock()
        with self._lock:
            idle = [k for k, m in self._members.items() if now - m.used_s > self.consumer_idle_s]
            closing = [self._members.pop(k).consumer for k in idle]
        for consumer in closing:
            consumer.close()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
            members, self._members = list(self._members.values()), {}
        for member in members:
            member.consumer.close()
        for entry in clients:
            _close_clients(entry)

    # -- queue operations ------------------------------------------------------------------

    def enqueue(
        self, token: str | None, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[dict[str, Any]]:
        """Send ``records`` and wait for each; one result per record: partition and offset,
        or the typed error (RecordTooLarge, UnknownPartition...). UnknownTopic, Unavailable
        and InvalidArgument (no record, too many) raise for the whole request."""
        if not 1 <= len(records) <= ENQUEUE_RECORDS_MAX:
            raise errors.InvalidArgument(f"send 1..{ENQUEUE_RECORDS_MAX} records")
        producer = self.producer(token)
        futures = [
            producer.send(
                topic,
                r.value,
                key=r.key,
                headers=r.headers,
                partition=r.partition,
                priority=r.priority,
                deliver_at_ms=r.deliver_at_ms,
                idempotency_key=r.idempotency_key,
                ttl_ms=r.ttl_ms,
            )
            for r in records
        ]
        results: list[dict[str, Any]] = []
        for future in futures:
            error = future.exception()
            if isinstance(error, REQUEST_WIDE):
                raise error  # the caller's rights or the topic: every record of it has this
            if error is not None:
                results.append({"ok": False, **views.error_dict(_typed(error))})
                continue
            meta = future.result()
            results.append(
                {
                    "ok": True,
                    "partition": meta.partition,
                    "offset": meta.offset,
                    "timestamp_ms": meta.timestamp_ms,
                    "duplicate": meta.duplicate,
                }
            )
        return results

    def dequeue(
        self,
        token: str | None,
        group: str,
        topic: str,
        max_records: int,
        wait_ms: int,
        auto_ack: bool,
    ) -> list[dict[str, Any]]:
        """Lease up to ``max_records`` ready records of ``topic`` for ``group`` (waiting up to
        ``wait_ms`` for the first). With ``auto_ack`` each is acknowledged before it is
        returned (at most once: a record whose ack failed is returned with ``acked`` false and
        will be redelivered). Raises UnknownTopic, PermissionDenied, InvalidArgument,
        ResourceExhausted (``dequeues_max`` dequeues already waiting: retry)..."""
        if not 1 <= max_records <= DEQUEUE_RECORDS_MAX:
            raise errors.InvalidArgument(f"max_records must be 1..{DEQUEUE_RECORDS_MAX}")
        if not 0 <= wait_ms <= DEQUEUE_WAIT_MS_MAX:
            raise errors.InvalidArgument(f"wait_ms must be 0..{DEQUEUE_WAIT_MS_MAX}")
        with self._lock:
            full = self._dequeues >= self.dequeues_max
            if not full:
                self._dequeues += 1
        if full:
            raise errors.ResourceExhausted(
                f"{self.dequeues_max} dequeues are waiting on this console: retry",
                retry_after_ms=max(100, min(wait_ms, 1_000)),
            )
        try:
            member = self._member(token, group, topic, join=True)
            messages = member.consumer.poll(max_records, timeout_ms=wait_ms)
        finally:
            with self._lock:
                self._dequeues -= 1
        member.used_s = self._clock()  # leased now: idle from here
        out = [views.delivery_dict(m) for m in messages]
        if auto_ack and messages:
            for row, error in zip(out, member.consumer.ack(messages), strict=True):
                row["acked"] = error is None
                if error is not None:
                    row["error"] = views.error_dict(error)
        return out

    def settle(
        self,
        token: str | None,
        group: str,
        ids: Sequence[str],
        method: str,
        delay_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        """Ack or nack (``method``) the deliveries ``ids`` name; one result per id, in order:
        ok, or the typed error (LEASE_EXPIRED, NOT_LEASED, UNKNOWN_MEMBER: not dequeued here
        by this caller...). InvalidArgument (a malformed id, no id, one record named twice)
        raises for the request."""
        if not 1 <= len(ids) <= DEQUEUE_RECORDS_MAX:
            raise errors.InvalidArgument(f"name 1..{DEQUEUE_RECORDS_MAX} message ids")
        refs = [views.parse_message_id(i) for i in ids]
        if len({(r.topic, r.partition, r.offset) for r in refs}) != len(refs):
            raise errors.InvalidArgument("name each record once per request")
        results: list[dict[str, Any] | None] = [None] * len(ids)
        by_topic: dict[str, list[int]] = {}
        for i, ref in enumerate(refs):
            by_topic.setdefault(ref.topic, []).append(i)
        for topic, positions in by_topic.items():
            try:
                member = self._member(token, group, topic, join=False)
            except errors.UnknownMember as exc:
                for i in positions:
                    results[i] = {"id": ids[i], "ok": False, **views.error_dict(exc)}
                continue
            consumer = member.consumer
            messages = [_message(refs[i], consumer) for i in positions]
            if method == "ack":
                outcomes = consumer.ack(messages)
            else:
                outcomes = consumer.nack(messages, delay_ms=delay_ms)
            for i, error in zip(positions, outcomes, strict=True):
                row: dict[str, Any] = {"id": ids[i], "ok": error is None}
                if error is not None:
                    row.update(views.error_dict(error))
                results[i] = row
        return [r for r in results if r is not None]

    # -- reading ---------------------------------------------------------------------------

    def browse(
        self, token: str | None, topic: str, partition: int, offset: int | None, limit: int
    ) -> dict[str, Any]:
        """Up to ``limit`` records of one partition from ``offset`` (None: the last ``limit``
        records), without touching any group's state (Fetch)."""
        if not 1 <= limit <= BROWSE_RECORDS_MAX:
            raise errors.InvalidArgument(f"limit must be 1..{BROWSE_RECORDS_MAX}")
        if offset is not None and offset < 0:
            raise errors.InvalidArgument("offset must be >= 0")
        admin = self.admin(token)
        if offset is None:
            bounds = {p.partition: p for p in admin.list_offsets(topic)}
            if partition not in bounds:
                raise errors.UnknownPartition(f"topic {topic!r} has no partition {partition}")
            offset = max(bounds[partition].log_start, bounds[partition].end - limit)
        answer = admin.fetch(topic, partition, offset, max_records=limit)
        return {
            "topic": topic,
            "partition": partition,
            "log_start": answer.log_start,
            "end": answer.end,
            "records": [views.record_dict(r) for r in answer.records],
        }

    def dead_letter_topic(self, token: str | None, topic: str) -> str:
        return self.admin(token).describe_topic(topic).config.dead_letter_topic

    def dead_letters(self, token: str | None, dlq_topic: str, limit: int) -> list[dict[str, Any]]:
        """The records of a dead-letter topic (up to ``limit`` per partition, oldest first),
        each with its reason and origin; ``redriven`` below the redrive group's committed
        offset. An absent dead-letter topic has none."""
        if not 1 <= limit <= BROWSE_RECORDS_MAX:
            raise errors.InvalidArgument(f"limit must be 1..{BROWSE_RECORDS_MAX}")
        admin = self.admin(token)
        try:
            bounds = admin.list_offsets(dlq_topic)
        except errors.UnknownTopic:
            return []
        committed = self._redrive_committed(admin, dlq_topic)
        rows: list[dict[str, Any]] = []
        for p in bounds:
            if p.end <= p.log_start:
                continue
            answer = admin.fetch(dlq_topic, p.partition, p.log_start, max_records=limit)
            below = committed.get(p.partition, 0)
            rows.extend(views.dead_letter_dict(r, p.partition, below) for r in answer.records)
        return rows

    @staticmethod
    def _redrive_committed(admin: Admin, dlq_topic: str) -> dict[int, int]:
        try:
            described = admin.describe_group(REDRIVE_GROUP)
        except (errors.UnknownGroup, errors.PermissionDenied):
            return {}
        return {p.partition: p.committed for p in described.partitions if p.topic == dlq_topic}

    def redrive(
        self, token: str | None, dlq_topic: str, rate: float, limit: int | None
    ) -> dict[str, Any]:
        """Move ``dlq_topic``'s dead letters back to their origins (broker/client/redrive.py:
        resumable, nothing lost or doubled); returns when nothing new came for a second or
        ``limit`` moved. UnknownTopic, PermissionDenied, Unavailable (call again)."""
        if rate < 0 or (limit is not None and limit < 1):
            raise errors.InvalidArgument("rate must be >= 0 and limit >= 1")
        self.admin(token).describe_topic(dlq_topic)  # UnknownTopic before joining a group
        progress = redrive(
            self.bootstrap,
            dlq_topic,
            rate=rate,
            limit=limit,
            idle_exit_ms=REDRIVE_IDLE_EXIT_MS,
            client=self._client_kwargs(token),
        )
        return {
            "moved": progress.moved,
            "skipped": progress.skipped,
            "by_origin": progress.by_origin,
            "seconds": round(progress.seconds, 3),
        }

    def group_lag(self, token: str | None, group: str) -> tuple[GroupInfo, int]:
        described = self.admin(token).describe_group(group)
        return described, sum(p.lag for p in described.partitions)


def _message(ref: views.MessageRef, consumer: Consumer) -> Message:
    return Message(
        ref.topic, ref.partition, ref.offset, None, b"", {}, 0, ref.delivery_count, 0,
        _consumer=consumer,
    )  # fmt: skip


def _typed(error: BaseException) -> errors.RaftqError:
    if isinstance(error, errors.RaftqError):
        return error
    return errors.Internal(f"{type(error).__name__}: {error}")


def _close_clients(entry: _Clients) -> None:
    if entry.producer is not None:
        entry.producer.close()
    entry.admin.close()
