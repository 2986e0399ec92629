"""The raftq :class:`Producer`: batching, ordering, retries and idempotence.

``Producer.send`` returns a :class:`SendFuture` at once (``result``, ``exception``, ``done``,
``add_done_callback`` as a ``concurrent.futures.Future``; the records of a batch share its
waiting: :mod:`raftq.client.send_future`); ``send_many`` queues many values at once. Records are
batched per partition for up to ``linger_ms`` (or until ``batch_records_max`` /
``batch_bytes_max`` encoded bytes: headers, keys and idempotency keys count, so a batch always
fits the broker's raft entry; a record larger on its own goes alone) and sent to the partition
leader by one background thread, one batch in flight per partition, so records of a partition
are appended in ``send`` order. A batch of bare records only (a value each: no key, headers,
priority, delay or idempotency key) goes as ``SendRequest.values``, with no ``Record`` message
per record, and is answered by one offset range; a batch with any other record goes as
records. A future resolves to :class:`RecordMetadata` once a majority of the partition's
replicas committed the record, or to the typed error.

With ``idempotent=True`` (the default) each batch carries the producer id and a
per-partition sequence; retriable failures (NOT_LEADER: refresh metadata and go to the
new leader; UNAVAILABLE, TIMEOUT: the outcome is unknown) resend the *same* batch with the
*same* sequence, which the broker answers from its dedup state if it already applied it: no
duplicates, no reordering. When the retries (or ``delivery_timeout_ms``, Kafka's
delivery.timeout.ms) run out with the outcome unknown, the future fails and the partition
continues under a fresh producer id (``<id>~<n>``), so later batches neither collide with nor
wait for the lost one. Without idempotence a retry may duplicate.

The records a Producer holds (queued or in flight, counted as ``max_record_bytes`` counts them)
are bounded by ``buffer_memory_bytes`` (Kafka's ``buffer.memory``): ``send``/``send_many`` block
until earlier records are answered, up to ``max_block_ms``, then raise TIMEOUT (retriable: the
brokers are slower than the caller). A record larger than the whole buffer fails at once.

A Producer owns a thread and in-flight batches and refuses to be pickled: create it where it
is used.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from raftq.assignors.partitioner import partition_for
from raftq.client.channels import _DEFAULTS, _OK, DEFAULT_BOOTSTRAP, _Channels, channel_security
from raftq.client.send_future import BatchOutcome, RecordMetadata, SendFuture
from raftq.client.streams import Refused, SendStreams
from raftq.proto import api_pb2, common_pb2, errors
from raftq.proto.common_pb2 import ErrorCode
from raftq.proto.limits import RECORD_FRAMING_BYTES
from raftq.transport.grpc_errors import from_rpc_error

log = logging.getLogger("raftq.client")

RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 2_000
_OUT_OF_ORDER_SEQUENCE = int(ErrorCode.OUT_OF_ORDER_SEQUENCE)


@dataclass
class _TopicMeta:
    partitions: int
    leaders: list[str]  # per partition, the leader's client address ("" = unknown)
    max_record_bytes: int
    stale: bool = False
    fetched_s: float = 0.0  # time.monotonic() of the fetch


class _Batch:
    """Records queued for one partition, in one of two modes: bare values (``items`` are
    bytes, sent as ``SendRequest.values`` and answered by one range) or records (``items`` are
    ``Record`` messages). A batch starts in its first record's mode; a bare record joins a
    records batch as a Record, and a record that is not bare turns a values batch into records
    (``to_records``), so mixing kinds never makes batches smaller. Only a batch not yet sent
    changes: a retry resends the very request the first attempt sent."""

    __slots__ = (
        "address",
        "attempts",
        "bare",
        "buffered",
        "created_s",
        "items",
        "outcome",
        "partition",
        "producer_id",
        "request",
        "retry_at_s",
        "sequence",
        "size",
        "topic",
    )

    def __init__(self, topic: str, partition: int, created_s: float, bare: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.created_s = created_s
        self.bare = bare
        self.items: list[Any] = []  # bytes when bare, else common_pb2.Record
        self.size = 0  # encoded bytes of the items in a SendRequest (_encoded_size)
        self.buffered = 0  # record bytes (as max_record_bytes counts) held in the buffer
        self.outcome = BatchOutcome(topic, partition)  # what the batch's futures wait on
        self.producer_id: str | None = None
        self.sequence: int | None = None
        self.attempts = 0
        self.retry_at_s = 0.0
        self.address = ""  # where the last attempt went
        self.request: api_pb2.SendRequest | None = None  # built once: a retry resends it

    def to_records(self) -> None:
        """The values become Record messages, in order (a record that is not bare joins)."""
        assert self.bare and self.request is None and self.sequence is None, "batch already sent"
        self.items = [common_pb2.Record(value=v) for v in self.items]
        self.bare = False


# What a bare value costs in a SendRequest, either as a value or (joining a records batch)
# as Record(value=...): its bytes, the value field's tag and length, and a repeated element's.
BARE_FRAMING_BYTES = 2 * RECORD_FRAMING_BYTES


def _encoded_size(record: common_pb2.Record) -> int:
    """What a record costs in a SendRequest: its protobuf encoding (value, key, headers,
    priority, delay, idempotency key) and its element framing. Batches are cut by this, so the
    broker's Append fits one raft entry whatever the records carry."""
    return record.ByteSize() + RECORD_FRAMING_BYTES


def _record(
    value: bytes,
    key: bytes | None,
    headers: Mapping[str, bytes] | None,
    priority: int,
    deliver_at_ms: int,
    idempotency_key: str,
    ttl_ms: int = 0,
) -> tuple[common_pb2.Record, int]:
    """The Record message of a non-bare record and its size as max_record_bytes counts it."""
    record = common_pb2.Record(value=value)  # only the fields set: cheaper per record
    size = len(value)
    if key is not None:
        record.key = key
        size += len(key)
    if headers:
        record.headers.update(headers)
        size += sum(len(name.encode()) + len(v) for name, v in headers.items())
    if priority:
        record.priority = priority
    if deliver_at_ms:
        record.deliver_at_ms = deliver_at_ms
    if idempotency_key:
        record.idempotency_key = idempotency_key
    if ttl_ms:
        record.ttl_ms = ttl_ms
    return record, size


DeliveryCallback = Callable[[errors.RaftqError | None, RecordMetadata | None], object]


def _deliver(callback: DeliveryCallback, future: SendFuture) -> None:
    error = future.exception(0)
    callback(error, None if error is not None else future.result(0))


class Producer:
    """Batches records per partition and sends them to partition leaders; see the module
    docstring for batching, ordering, retries and idempotence."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        *,
        linger_ms: int = _DEFAULTS.linger_ms,
        batch_records_max: int = _DEFAULTS.batch_records_max,
        batch_bytes_max: int = _DEFAULTS.batch_bytes_max,
        idempotent: bool = True,
        producer_id: str | None = None,
        retries: int = 10,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
        send_streams: bool = _DEFAULTS.send_streams,
        buffer_memory_bytes: int = _DEFAULTS.buffer_memory_bytes,
        max_block_ms: int = _DEFAULTS.max_block_ms,
        delivery_timeout_ms: int = _DEFAULTS.delivery_timeout_ms,
        metadata_max_age_ms: int = _DEFAULTS.metadata_max_age_ms,
    ) -> None:
        if linger_ms < 0 or batch_records_max < 1 or batch_bytes_max < 1 or retries < 0:
            raise errors.InvalidArgument(
                "need linger_ms >= 0, batch_records_max >= 1, batch_bytes_max >= 1, retries >= 0"
            )
        if buffer_memory_bytes < 1 or max_block_ms < 0:
            raise errors.InvalidArgument("need buffer_memory_bytes >= 1, max_block_ms >= 0")
        if delivery_timeout_ms < 1 or metadata_max_age_ms < 0:
            raise errors.InvalidArgument("need delivery_timeout_ms >= 1, metadata_max_age_ms >= 0")
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)
        self._streams = (
            SendStreams(lambda address: self._channels.stubs(address).producer.SendStream)
            if send_streams
            else None
        )
        self.linger_s = linger_ms / 1000
        self.batch_records_max = batch_records_max
        self.batch_bytes_max = batch_bytes_max
        self.retries = retries
        self.idempotent = idempotent
        self.producer_id = (producer_id or uuid.uuid4().hex) if idempotent else None
        self._lock = threading.Lock()  # not reentrant: nothing calls back in under it
        self._cond = threading.Condition(self._lock)  # the sender waits for work
        self._drained = threading.Condition(self._lock)  # flush() waits for _outstanding == 0
        self._room = threading.Condition(self._lock)  # send() waits for buffer room
        self.buffer_memory_bytes = buffer_memory_bytes
        self.max_block_s = max_block_ms / 1000
        self._buffered = 0  # record bytes of the records counted in _outstanding
        self._queues: dict[tuple[str, int], deque[_Batch]] = {}
        self._in_flight: set[tuple[str, int]] = set()
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._epoch: dict[tuple[str, int], int] = {}
        self._outstanding = 0  # records sent to send() whose future is not yet done
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._request_ids = itertools.count(1)
        self._spread = itertools.count()
        # Replaced whole under _meta_lock, never mutated but for leaders/stale: send() reads
        # it without the lock (one dict read is atomic).
        self._meta: dict[str, _TopicMeta] = {}
        self._meta_lock = threading.Lock()
        self._sender = threading.Thread(target=self._run, name="raftq-producer", daemon=True)
        self._sender.start()

    def __reduce__(self) -> Any:
        raise TypeError("a Producer owns threads and channels: create it where it is used")

    # -- the public API --------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        priority: int = 0,
        deliver_at_ms: int = 0,
        idempotency_key: str = "",
        on_delivery: DeliveryCallback | None = None,
        ttl_ms: int = 0,
    ) -> SendFuture:
        """Queue one record; the future resolves to its RecordMetadata or a typed error
        (UnknownTopic, UnknownPartition, RecordTooLarge, InvalidArgument, or a retriable
        error once retries or the delivery timeout are spent). The first send to a topic
        fetches its metadata, blocking: while no broker answers it retries, up to
        delivery_timeout_ms. Raises RuntimeError after close().

        ``on_delivery(error, metadata)`` (confluent-kafka's callback) is called once the
        outcome is known: ``(None, RecordMetadata)`` when acknowledged, ``(error, None)``
        when not. It runs on the Producer's thread: keep it short, never block in it.

        ``ttl_ms``: the record's time to live from its timestamp (0 = the topic's ttl_ms): a
        record not taken by a group within it is never delivered to that group (dropped or
        dead-lettered with reason "expired", by the topic's ttl_action)."""
        future = self._send(
            topic, value, key, headers, partition, priority, deliver_at_ms, idempotency_key, ttl_ms
        )
        if on_delivery is not None:
            future.add_done_callback(lambda done: _deliver(on_delivery, done))
        return future

    def _send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        partition: int | None,
        priority: int,
        deliver_at_ms: int,
        idempotency_key: str,
        ttl_ms: int = 0,
    ) -> SendFuture:
        meta = self._meta.get(topic)  # stale is fine: see _cached_metadata
        if meta is None:
            try:
                meta = self._first_metadata(topic)
            except errors.RaftqError as exc:
                return SendFuture.failed(topic, exc)
        bare = key is None and not (
            headers or priority or deliver_at_ms or idempotency_key or ttl_ms
        )
        item: bytes | common_pb2.Record
        if bare:  # the fast path: no Record message, a batch of these goes as values
            item, size = value, len(value)
            encoded = size + BARE_FRAMING_BYTES
            if partition is None:
                partition = next(self._spread) % meta.partitions  # partition_for(None, ...)
        else:
            item, size = _record(
                value, key, headers, priority, deliver_at_ms, idempotency_key, ttl_ms
            )
            encoded = _encoded_size(item)
            if partition is None:
                partition = partition_for(key, meta.partitions, next(self._spread))
        if not 0 <= partition < meta.partitions:
            return SendFuture.failed(
                topic,
                errors.UnknownPartition(
                    f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}"
                ),
            )
        if size > meta.max_record_bytes:  # size: as raftq.partitions.machine.record_size counts
            return SendFuture.failed(
                topic,
                errors.RecordTooLarge(
                    f"record is {size} bytes, over topic {topic!r}'s max_record_bytes "
                    f"({meta.max_record_bytes}): split it"
                ),
            )
        if size > self.buffer_memory_bytes:
            return SendFuture.failed(
                topic,
                errors.RecordTooLarge(
                    f"record is {size} bytes, over the producer's buffer_memory_bytes "
                    f"({self.buffer_memory_bytes})"
                ),
            )
        tp = (topic, partition)
        with self._lock:  # the Condition's own lock: `with self._cond` costs two Python calls
            if self._closing:
                raise RuntimeError("send() after close()")
            if self._buffered + size > self.buffer_memory_bytes:
                self._wait_for_room(size)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            batch = queue[-1] if queue else None
            if (
                batch is None
                or batch.sequence is not None
                or batch.attempts
                or len(batch.items) >= self.batch_records_max  # self._full(batch, encoded)
                or batch.size + encoded > self.batch_bytes_max
            ):
                batch = _Batch(topic, partition, time.monotonic(), bare)
                queue.append(batch)
                self._cond.notify_all()  # the sender has a new linger deadline to wait for
            elif batch.bare is not bare:  # mixed kinds share the batch, as records
                if bare:
                    item = common_pb2.Record(value=value)
                else:
                    batch.to_records()
            items = batch.items
            index = len(items)
            items.append(item)
            batch.size += encoded
            batch.buffered += size
            self._buffered += size
            self._outstanding += 1
            if index + 1 >= self.batch_records_max or batch.size > self.batch_bytes_max:
                self._cond.notify_all()  # full: the sender need not wait for the linger
        return SendFuture(batch.outcome, index)

    def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[SendFuture]:
        """Queue bare records (a value each, no key: spread round-robin over the partitions
        unless ``partition`` is given) as ``send(topic, value, partition=partition)`` would
        one after another, but taking the producer's lock once per batch instead of once per
        record. Returns one future per value, in order; errors as for send."""
        values = list(values)
        if not values:
            return []
        try:
            meta = self._cached_metadata(topic)
            if partition is not None and not 0 <= partition < meta.partitions:
                raise errors.UnknownPartition(
                    f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}"
                )
        except errors.RaftqError as exc:
            failed = SendFuture.failed(topic, exc)._outcome
            return [SendFuture(failed, 0) for _ in values]
        if max(map(len, values)) > min(meta.max_record_bytes, self.buffer_memory_bytes):
            # rare: let those fail one by one
            return [self.send(topic, v, partition=partition) for v in values]
        futures: list[SendFuture] = [None] * len(values)  # type: ignore[list-item]
        if partition is not None:
            futures[:] = self._queue_values(topic, partition, values)
            return futures
        first = next(self._spread)
        for j in range(min(meta.partitions, len(values))):  # value i: partition (first+i) % n
            futures[j :: meta.partitions] = self._queue_values(
                topic, (first + j) % meta.partitions, values[j :: meta.partitions]
            )
        return futures

    def _queue_values(self, topic: str, partition: int, values: list[bytes]) -> list[SendFuture]:
        """Append bare values to the partition's queue, one lock hold per batch they fill."""
        futures: list[SendFuture] = []
        # ends[k]: encoded bytes of values[:k] (_Batch.size counts the same)
        ends = list(itertools.accumulate((len(v) + BARE_FRAMING_BYTES for v in values), initial=0))
        i, n = 0, len(values)
        while i < n:
            with self._cond:
                if self._closing:
                    raise RuntimeError("send_many() after close()")
                if self._buffered + len(values[i]) > self.buffer_memory_bytes:
                    self._wait_for_room(len(values[i]))
                queue = self._queues.get((topic, partition))
                if queue is None:
                    queue = self._queues[(topic, partition)] = deque()
                batch = queue[-1] if queue else None
                fit = 0
                if batch is not None and batch.bare and batch.sequence is None:
                    fit = 0 if batch.attempts else self._fit(batch, ends, i)
                if fit == 0:
                    batch = _Batch(topic, partition, time.monotonic(), True)
                    queue.append(batch)
                    fit = max(1, self._fit(batch, ends, i))  # one value over the bytes: alone
                assert batch is not None
                index = len(batch.items)
                batch.items.extend(values[i : i + fit])
                batch.size += ends[i + fit] - ends[i]
                payload = ends[i + fit] - ends[i] - fit * BARE_FRAMING_BYTES
                batch.buffered += payload
                self._buffered += payload
                self._outstanding += fit
                self._cond.notify_all()
            outcome = batch.outcome
            futures.extend(
                map(SendFuture, itertools.repeat(outcome, fit), range(index, index + fit))
            )
            i += fit
        return futures

    def _wait_for_room(self, size: int) -> None:
        """Under the lock: block until ``size`` more bytes fit in the buffer; raises Timeout
        after max_block_ms (nothing queued), RuntimeError if the producer closes meanwhile."""
        self._cond.notify_all()  # what is queued goes now: its answers make the room
        if not self._room.wait_for(
            lambda: self._closing or self._buffered + size <= self.buffer_memory_bytes,
            self.max_block_s,
        ):
            raise errors.Timeout(
                f"producer buffer full: {self._buffered} of buffer_memory_bytes "
                f"{self.buffer_memory_bytes} held for {self.max_block_s:g} s (max_block_ms); "
                "the brokers answer slower than records are sent"
            )
        if self._closing:
            raise RuntimeError("send() after close()")

    def _fit(self, batch: _Batch, ends: list[int], i: int) -> int:
        """How many values from ``i`` on fit in the batch (``ends``: cumulative sizes) and in
        the buffer (at least one value always fits in an empty buffer)."""
        last = min(len(ends) - 1, i + self.batch_records_max - len(batch.items))
        room = self.buffer_memory_bytes - self._buffered
        budget = ends[i] + min(self.batch_bytes_max - batch.size, room)
        return max(0, bisect.bisect_right(ends, budget, i, last + 1) - 1 - i)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until every future so far is done (with a
        result or an error). Raises Timeout if that takes longer than ``timeout_s``."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                if not self._drained.wait_for(lambda: self._outstanding == 0, timeout_s):
                    raise errors.Timeout(f"{self._outstanding} records still unsent")
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender and close the channels. Idempotent."""
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
                self._room.notify_all()
            self._sender.join(timeout_s)
            if self._streams is not None:
                self._streams.close()
            self._channels.close()
            self._closed = True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def buffer_room(self) -> int:
        """Bytes a send could take now without waiting for room (a racy read: a hint)."""
        return self.buffer_memory_bytes - self._buffered

    def statistics(self) -> dict[str, int]:
        with self._cond:
            return {
                "outstanding_records": self._outstanding,
                "buffered_bytes": self._buffered,
                "queued_batches": sum(len(q) for q in self._queues.values()),
                "in_flight_batches": len(self._in_flight),
            }

    # -- metadata --------------------------------------------------------------------------

    def _metadata(self, topic: str) -> _TopicMeta:
        """The topic's metadata, fetched when missing, stale (a leader moved) or older than
        metadata_max_age_s (partitions may have been added). A failed refetch of metadata
        that is only old keeps it for another metadata_max_age_s."""
        with self._meta_lock:
            meta = self._meta.get(topic)
            old = meta is not None and not meta.stale  # right but perhaps old
            if meta is not None and old and not self._aged(meta):
                return meta
        request = api_pb2.DescribeTopicRequest(name=topic)
        try:
            description = self._channels.call_any(
                lambda s, t: s.admin.DescribeTopic(request, timeout=t)
            )
        except errors.RaftqError:
            if meta is None or not old:
                raise
            with self._meta_lock:
                meta.fetched_s = time.monotonic()
            return meta
        leaders = [""] * len(description.partitions)
        for p in description.partitions:
            if 0 <= p.partition < len(leaders):
                leaders[p.partition] = p.leader_addr
        fresh = _TopicMeta(
            len(leaders),
            leaders,
            description.config.max_record_bytes or 2**62,
            fetched_s=time.monotonic(),
        )
        with self._meta_lock:
            self._meta[topic] = fresh
        return fresh

    def _aged(self, meta: _TopicMeta) -> bool:
        return time.monotonic() - meta.fetched_s >= self.metadata_max_age_s

    def _cached_metadata(self, topic: str) -> _TopicMeta:
        """For ``send``: the cached metadata even when stale (partition counts only grow, and
        the sender thread refreshes leaders), so a send never blocks on, or fails with, a
        metadata refresh while the cluster elects new leaders. Fetched on first use."""
        with self._meta_lock:
            meta = self._meta.get(topic)
        return meta if meta is not None else self._first_metadata(topic)

    def _first_metadata(self, topic: str) -> _TopicMeta:
        """A topic's first metadata, retried with backoff while the error is retriable (no
        broker answers yet, no metadata leader) until delivery_timeout_ms: a Producer made
        while the cluster starts or restarts waits for it instead of failing every send.
        Raises UnknownTopic and other definite errors at once."""
        deadline = time.monotonic() + self.delivery_timeout_s
        attempt = 0
        while True:
            try:
                return self._metadata(topic)
            except errors.RaftqError as exc:
                left = deadline - time.monotonic()
                if not exc.retriable or left <= 0 or self._closing:
                    raise
                log.info("[topic=%s] metadata not fetched yet: %s (retrying)", topic, exc)
            pause_ms = min(RETRY_BACKOFF_MS * 2**attempt, RETRY_BACKOFF_MAX_MS)
            attempt += 1
            time.sleep(min(pause_ms / 1000, left))

    def _leader(self, topic: str, partition: int) -> str:
        with self._meta_lock:
            cached = self._meta.get(topic)
            leader = cached.leaders[partition] if cached and partition < cached.partitions else ""
        if leader and self._channels.is_down(leader):
            # The leader's broker did not answer (killed?): any other broker forwards the send
            # to the partition's new leader and waits out the election on the broker side, so
            # neither a metadata refresh nor a backoff stands between the election and the ack.
            return self._channels.other_than(leader)
        meta = self._metadata(topic)
        if partition < len(meta.leaders) and meta.leaders[partition]:
            return meta.leaders[partition]
        return self._channels.bootstrap[self._channels._preferred]

    def _stale(self, topic: str, partition: int, leader_hint: str) -> None:
        with self._meta_lock:
            meta = self._meta.get(topic)
            if meta is None:
                return
            if leader_hint and partition < len(meta.leaders):
                meta.leaders[partition] = leader_hint  # follow the hint at once
            else:
                meta.stale = True

    def _follow_hint(self, batch: _Batch, response: api_pb2.SendResponse) -> None:
        """A broker that forwarded the batch to the leader names it: send there from now on
        (leadership moved since the metadata was fetched, e.g. leaders spread after start-up)."""
        hint = response.results[0].leader_hint if response.results else ""
        if not hint or hint == batch.address:
            return
        with self._meta_lock:
            meta = self._meta.get(batch.topic)
            if meta is not None and batch.partition < len(meta.leaders):
                meta.leaders[batch.partition] = hint

    # -- the sender thread -----------------------------------------------------------------

    def _full(self, batch: _Batch, adding: int) -> bool:
        return (
            len(batch.items) >= self.batch_records_max or batch.size + adding > self.batch_bytes_max
        )

    def _ready(self, now: float) -> tuple[list[_Batch], float | None]:
        """Batches to send now (head of each idle partition's queue that is full, lingered
        long enough, being flushed or retried), and when to look again."""
        ready: list[_Batch] = []
        wake: float | None = None
        for tp, queue in self._queues.items():
            if not queue or tp in self._in_flight:
                continue
            batch = queue[0]
            due_s = batch.retry_at_s if batch.attempts else batch.created_s + self.linger_s
            urgent = self._flushing or self._closing or len(queue) > 1 or self._full(batch, 0)
            if batch.attempts == 0 and urgent:
                due_s = now
            if due_s <= now:
                ready.append(queue.popleft())
            else:
                wake = due_s if wake is None else min(wake, due_s)
        return ready, wake

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closing and not self._outstanding:
                        return
                    now = time.monotonic()
                    ready, wake = self._ready(now)
                    if ready:
                        break
                    self._cond.wait(None if wake is None else max(0.0, wake - now))
                for batch in ready:
                    tp = (batch.topic, batch.partition)
                    self._in_flight.add(tp)
                    if self.producer_id is not None and batch.sequence is None:
                        epoch = self._epoch.get(tp, 0)
                        batch.producer_id = self.producer_id + (f"~{epoch}" if epoch else "")
                        batch.sequence = self._next_sequence.get(tp, 0)
            for batch in ready:
                self._dispatch(batch)

    def _dispatch(self, batch: _Batch) -> None:
        request = batch.request
        if request is None:  # built once: a retry resends the same values and sequence
            if batch.bare:
                request = api_pb2.SendRequest(
                    topic=batch.topic, values=batch.items, partition=batch.partition
                )
            else:
                request = api_pb2.SendRequest(
                    topic=batch.topic, records=batch.items, partition=batch.partition
                )
            if batch.producer_id is not None and batch.sequence is not None:
                request.producer_id, request.sequence = batch.producer_id, batch.sequence
            batch.request = request
        request.request_id = next(self._request_ids)
        try:
            batch.address = self._leader(batch.topic, batch.partition)
        except errors.RaftqError as exc:
            self._settle(batch, None, exc)
            return
        timeout_s = self._channels.request_timeout_s
        if self._streams is not None and self._streams.send(
            batch.address, request, timeout_s, lambda r, e: self._on_answer(batch, r, e)
        ):
            return
        self._send_unary(batch, request)

    def _send_unary(self, batch: _Batch, request: api_pb2.SendRequest) -> None:
        try:
            stubs = self._channels.stubs(batch.address)
            call = stubs.producer.Send.future(request, timeout=self._channels.request_timeout_s)
        except errors.RaftqError as exc:
            self._settle(batch, None, exc)
            return
        call.add_done_callback(lambda done: self._on_sent(batch, done))

    def _on_sent(self, batch: _Batch, call: Any) -> None:
        try:
            self._settle(batch, call.result(), None)
        except grpc.RpcError as exc:
            self._settle(batch, None, from_rpc_error(exc))

    def _on_answer(
        self,
        batch: _Batch,
        response: api_pb2.SendResponse | None,
        error: errors.RaftqError | None,
    ) -> None:
        """A stream's answer: a response (a whole-request error in-band, as SendStream puts
        it), an error, or Refused (the broker holds too many streams: go unary)."""
        if isinstance(error, Refused):
            assert self._streams is not None and batch.request is not None
            self._streams.refused(batch.address)
            self._send_unary(batch, batch.request)
        elif error is not None:
            self._settle(batch, None, error)
        elif response is not None and response.error != _OK:
            hint = response.leader_hint
            failed = errors.error_for(response.error, response.message, leader_hint=hint)
            self._settle(batch, None, failed)
        else:
            self._settle(batch, response, None)

    @staticmethod
    def _range_error(batch: _Batch, response: api_pb2.SendResponse) -> errors.RaftqError | None:
        """A values batch's answer is one SendResult covering them all: its error, or
        Internal when it is not that (a broker that predates SendRequest.values ignores them
        and answers no result at all: nothing was written)."""
        results = response.results
        if len(results) != 1:
            return errors.Internal(
                f"broker answered {len(results)} results for a batch of {len(batch.items)} "
                "values, not one (does it predate SendRequest.values?)"
            )
        result = results[0]
        if result.error != _OK:
            return errors.error_for(result.error, result.message, leader_hint=result.leader_hint)
        if result.count != len(batch.items):
            return errors.Internal(
                f"broker answered a range of {result.count} records for {len(batch.items)} values"
            )
        return None

    def _settle(
        self, batch: _Batch, response: api_pb2.SendResponse | None, error: errors.RaftqError | None
    ) -> None:
        """Resolve the batch's futures, or queue it again (same request) to retry."""
        tp = (batch.topic, batch.partition)
        if response is not None and batch.bare:
            error = self._range_error(batch, response)
        elif response is not None:
            if len(response.results) != len(batch.items):
                error = errors.Internal(
                    f"broker answered {len(response.results)} results for "
                    f"{len(batch.items)} records"
                )
            else:
                failed = [r for r in response.results if r.error != _OK]
                if failed and len(failed) == len(response.results):
                    first = failed[0]
                    if errors.error_class(first.error).kind.retriable:
                        error = errors.error_for(
                            first.error, first.message, leader_hint=first.leader_hint
                        )
        if error is None and response is not None:
            self._follow_hint(batch, response)
        rerouted = False
        if error is not None and error.retriable:
            self._stale(batch.topic, batch.partition, error.leader_hint)  # before any retry
            if isinstance(error, errors.Unavailable) and batch.address:
                rerouted = self._channels.mark_down(batch.address)  # retry elsewhere at once
        # Each record's outcome is built outside the lock (send() contends for it per record);
        # a values batch has one outcome, its records' metadata built when asked for.
        each: list[RecordMetadata | errors.RaftqError] = []
        applied = out_of_order = False
        if error is None and batch.bare:
            applied = True
        elif error is None:
            assert response is not None
            for r in response.results:
                code = r.error
                if code == _OK:
                    applied = True
                    each.append(
                        RecordMetadata(
                            batch.topic, r.partition, r.offset, r.timestamp_ms, r.duplicate
                        )
                    )
                else:
                    each.append(errors.error_for(code, r.message))
                    out_of_order = out_of_order or code == _OUT_OF_ORDER_SEQUENCE
        with self._lock:
            self._in_flight.discard(tp)
            if (
                error is not None
                and error.retriable
                and batch.attempts < self.retries
                and time.monotonic() - batch.created_s < self.delivery_timeout_s
            ):
                batch.attempts += 1
                backoff_ms = min(RETRY_BACKOFF_MS * 2 ** (batch.attempts - 1), RETRY_BACKOFF_MAX_MS)
                backoff_ms = max(backoff_ms, error.retry_after_ms)  # a broker at capacity
                if rerouted:
                    backoff_ms = 0
                batch.retry_at_s = time.monotonic() + backoff_ms / 1000
                self._queues.setdefault(tp, deque()).appendleft(batch)
                self._cond.notify_all()
                log.info("[topic/partition=%s/%d] retrying batch: %s", *tp, error)
                return
            if self._queues.get(tp):
                self._cond.notify_all()  # the partition's next batch can go now
            if error is not None:
                if error.retriable or isinstance(error, errors.OutOfOrderSequence):
                    self._new_epoch(tp)  # outcome unknown: never reuse this sequence
            else:
                if out_of_order:
                    self._new_epoch(tp)
                if applied and batch.sequence is not None:
                    self._next_sequence[tp] = batch.sequence + 1
        outcome = batch.outcome  # resolved unlocked: it runs the users' callbacks
        if error is not None:
            outcome.fail(error)
        elif batch.bare:
            assert response is not None
            first = response.results[0]
            outcome.resolve_range(first.offset, first.timestamp_ms, first.duplicate)
        else:
            outcome.resolve_each(each)
        with self._lock:  # only now: flush() returns with every future done
            self._outstanding -= len(batch.items)
            self._buffered -= batch.buffered
            self._room.notify_all()
            if self._outstanding == 0:
                self._drained.notify_all()
                if self._closing:
                    self._cond.notify_all()

    def _new_epoch(self, tp: tuple[str, int]) -> None:
        self._epoch[tp] = self._epoch.get(tp, 0) + 1
        self._next_sequence[tp] = 0
