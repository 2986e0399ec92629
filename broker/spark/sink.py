"""The Spark writer's engine: one :class:`TaskSink` per Spark task, without pyspark.

The data source (``broker/spark/datasource.py``) turns Spark rows into :class:`Row`s and feeds
them here; this module batches them per raftq partition, numbers the batches and sends them to
partition leaders. The exactly-once design and its limits are in ``broker/spark/__init__.py``.

Resuming is by rows, not batches: each raftq partition's rows from this task are numbered
in the order the task hands them over. A retried attempt learns how many rows of each
partition earlier attempts wrote (``Log.ProducerState`` counts the producer id's records in
the log) and skips exactly that many, comparing the last batch of them with the log, then
sends the rest from the next sequence. How earlier attempts cut their batches does not matter
(an attempt whose input ended early sent short last batches). Batching from a given row is a
pure function of the rows (never of timing): a batch closes at its record cap or
``batch_bytes`` encoded bytes (a lone larger row still goes, alone) or the end of the task's
input, and key-less rows fill one partition's batch before moving to the next; so twins
resuming from the same row cut the same batches.
A lane's record cap grows with its position, so its first rows go out at once instead of
after ``batch_records`` of them: a batch starting at the lane's row ``i`` holds at most
``min(batch_records, max(FIRST_BATCH_RECORDS, i))`` (1,000, 1,000, 2,000, 4,000, ...).
Records are built in the batch's own SendRequest (no Record copied per row) and a row of
a value and a key only is sized without a Record at all (``add_rows``).

Sending: at most one batch in flight per raftq partition (sequences apply in order), all
partitions at once, on the process's SendStream to each broker (``common.Connection``;
unary Sends to a broker with no stream slot free); NOT_LEADER follows the hint,
UNAVAILABLE / TIMEOUT resend the *same* batch and sequence (the broker answers a duplicate
with the original offsets).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc

from raftq.assignors.partitioner import partition_for
from raftq.client import Admin, StoredRecord
from raftq.client.streams import Refused
from raftq.proto import api_pb2, common_pb2, errors
from raftq.proto.common_pb2 import ErrorCode
from raftq.proto.limits import RECORD_FRAMING_BYTES, record_size
from raftq.spark.common import (
    SECURITY_OPTIONS,
    Connection,
    Security,
    bootstrap_option,
    check_known,
    int_option,
)
from raftq.transport.grpc_errors import from_rpc_error

log = logging.getLogger("raftq.spark")

Guarantee = Literal["exactly_once", "at_least_once"]
PRODUCER_ID_CHARS_MAX = 255
SEND_ATTEMPTS_MAX = 12
BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0)
QUEUED_BATCHES_MAX = 4  # per raftq partition, before the task waits for acknowledgements
# A batch is one Append in one partition Raft entry (the brokers' raft.max_entry_bytes, 2 MiB
# by default; refused whole when over: RECORD_TOO_LARGE): batches are cut by encoded size, a
# record's bytes plus its tag and length, with room left for the command around them (topic,
# producer id, sequence, stamps). A record within max_record_bytes always fits an entry on its own.
BATCH_BYTES_MAX = (1 << 20) - 4096
FIRST_BATCH_RECORDS = 1000  # a lane's first batch; its caps double up to batch_records


class NondeterministicInput(errors.InvalidArgument):
    """A retried or replayed task did not produce the rows its earlier attempt wrote."""


class StaleTxnVersion(errors.InvalidArgument):
    """A txnVersion below the app's committed watermark: not a replay, so refused."""


# --- options ----------------------------------------------------------------------------------


SINK_OPTIONS = (
    "bootstrap",
    "bootstrap.servers",
    "topic",
    "deliveryGuarantee",
    "txnAppId",
    "txnVersion",
    "batchRecords",
    "batchBytes",
    "requestTimeoutMs",
    *SECURITY_OPTIONS,
)


@dataclass(frozen=True)
class SinkOptions:
    """The writer's options (Spark lower-cases option names)."""

    bootstrap: str
    topic: str | None  # wins over a topic column (Kafka's rule); None: the column routes
    guarantee: Guarantee = "exactly_once"
    app_id: str | None = None  # txnAppId: the committed-batch watermark's key
    version: int | None = None  # txnVersion (foreachBatch: the batch id)
    batch_records: int = 10_000  # the Producer's batch_records_max: batch_bytes binds first
    batch_bytes: int = BATCH_BYTES_MAX
    request_timeout_ms: int = 30_000
    security: Security = field(default_factory=Security)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Raises InvalidArgument naming the option to fix (an unknown one too)."""
        opts = {k.lower(): v for k, v in options.items()}
        check_known(opts, SINK_OPTIONS, "writer")
        bootstrap = bootstrap_option(opts)
        guarantee = (opts.get("deliveryguarantee") or "exactly_once").lower()
        if guarantee not in ("exactly_once", "at_least_once"):
            raise errors.InvalidArgument(
                f"deliveryGuarantee={guarantee!r}: use exactly_once or at_least_once"
            )
        app_id = opts.get("txnappid") or None
        version = int_option(opts, "txnVersion", -1, 0) if opts.get("txnversion") else None
        if (app_id is None) != (version is None):
            raise errors.InvalidArgument("set txnAppId and txnVersion together (or neither)")
        return cls(
            bootstrap=bootstrap,
            topic=opts.get("topic") or None,
            guarantee=guarantee,  # type: ignore[arg-type]
            app_id=app_id,
            version=version,
            batch_records=int_option(opts, "batchRecords", 10_000, 1),
            batch_bytes=int_option(opts, "batchBytes", BATCH_BYTES_MAX, 1, BATCH_BYTES_MAX),
            request_timeout_ms=int_option(opts, "requestTimeoutMs", 30_000, 1),
            security=Security.parse(opts),
        )


def producer_id_for(app_id: str, version: int, spark_partition: int, scope: str = "") -> str:
    """The idempotent producer id of one Spark task's output: the same for every attempt of
    the task and for a replay of the batch; distinct across apps, scopes (target topics),
    batches and tasks."""
    app = f"{app_id}/{scope}" if scope else app_id
    name = f"spark:{app}:{version}:{spark_partition}"
    if len(name) <= PRODUCER_ID_CHARS_MAX:
        return name
    digest = hashlib.sha256(app.encode()).hexdigest()[:32]
    return f"spark:{digest}:{version}:{spark_partition}"


def txn_scope(options: SinkOptions) -> str:
    """The watermark scope of a write: its topic option, "" when a topic column routes rows.
    Two writes of one batch to different topics are then each exactly-once."""
    return options.topic or ""


def check_version(app_id: str, scope: str, version: int, committed: int | None) -> bool:
    """Whether a write of ``version`` is a replay to skip (True: at the committed watermark),
    or new (False: above it, or nothing committed). Raises StaleTxnVersion below it: that is no
    replay of the last batch (a checkpoint reset, or another query with the same txnAppId),
    and skipping it would silently write nothing."""
    if committed is None or version > committed:
        return False
    if version == committed:
        return True
    where = f"txnAppId {app_id!r}" + (f" for topic {scope!r}" if scope else "")
    raise StaleTxnVersion(
        f"{where} has committed batches up to {committed}; batch {version} is older, so it is "
        "not a replay of the last batch (was the checkpoint reset, or does another query use "
        "this txnAppId?). Use a new txnAppId for a new checkpoint; nothing was written"
    )


# --- rows and batches -------------------------------------------------------------------------


def row_bytes(key: bytes | None, value: bytes) -> int:
    """What a row of ``key`` (None: none) and ``value`` adds to a batch's encoded size: its
    Record as protobuf writes it (key and value fields: one-byte tag, varint length, bytes; an
    empty value is left out) plus RECORD_FRAMING_BYTES. Equal to Record.ByteSize() + framing."""
    size = RECORD_FRAMING_BYTES + (_field_bytes(len(value)) if value else 0)
    return size if key is None else size + _field_bytes(len(key))


def _field_bytes(n: int) -> int:
    return 2 + n if n < 128 else 1 + (n.bit_length() + 6) // 7 + n


@dataclass(frozen=True)
class TopicMeta:
    partitions: int
    leaders: list[str]
    max_record_bytes: int


@dataclass
class _Answer:
    """A sent batch's outcome, filled in by the stream's reader (or the unary call's) thread."""

    address: str
    response: api_pb2.SendResponse | None = None
    error: errors.RaftqError | None = None


def _unary_outcome(call: Any) -> tuple[api_pb2.SendResponse | None, errors.RaftqError | None]:
    try:
        return call.result(), None
    except grpc.RpcError as exc:
        return None, from_rpc_error(exc)


def _answer_error(response: api_pb2.SendResponse | None) -> errors.RaftqError | None:
    """None when every record of the batch was appended (or found applied), else the error:
    a stream's whole-request error (in band), or the first record's."""
    if response is None or not (response.results or response.error):
        return errors.Internal("the broker answered a batch with no results")
    if response.error != ErrorCode.OK:
        hint = response.leader_hint
        return errors.error_for(response.error, response.message, leader_hint=hint)
    bad = next((r for r in response.results if r.error != ErrorCode.OK), None)
    if bad is None:
        return None
    return errors.error_for(bad.error, bad.message, leader_hint=bad.leader_hint)


_REQUEST_IDS = itertools.count(1)  # one process's streams are shared by its tasks


@dataclass
class _Batch:
    topic: str
    partition: int
    sequence: int
    request: api_pb2.SendRequest  # its records; producer id and sequence set when sent
    count: int  # records in it
    attempts: int = 0
    retry_at_s: float = 0.0


@dataclass(frozen=True)
class Resume:
    """What earlier attempts of this producer id wrote to one raftq partition."""

    records: int  # how many of the lane's rows (its first ``records``)
    last_sequence: int
    last_offsets: list[int]  # where its last batch went: the lane's rows just before ``records``


@dataclass
class _Lane:
    """One raftq partition's traffic from this task: its rows are numbered from 0 in the order
    the task hands them over; the first ``resume.records`` were written by an earlier attempt
    and are skipped (the last batch of them compared with what the broker holds)."""

    topic: str
    partition: int
    resume: Resume | None = None
    position: int = 0  # rows handed to this lane so far
    tail: list[tuple[bytes, bytes]] = field(default_factory=list)  # (key, value) to compare
    request: api_pb2.SendRequest | None = None  # the open batch's records
    count: int = 0  # records in the open batch
    size: int = 0  # their encoded bytes
    cap: int = 0  # records the open batch may hold
    next_sequence: int = 0  # after a resume: the earlier attempt's last sequence + 1
    queued: deque[_Batch] = field(default_factory=deque)
    in_flight: tuple[_Batch, _Answer] | None = None


@dataclass
class TaskSummary:
    """What one task did; travels to the driver in the commit message."""

    records_written: int = 0
    records_skipped: int = 0  # an earlier attempt had written them (resumed after them)
    batches_sent: int = 0
    duplicates: int = 0  # records the broker answered from dedup state
    skipped_task: bool = False  # the batch was at or below the app's watermark
    recovered: bool = False  # written at-least-once after `raftq spark recover`


class TaskSink:
    """Writes one Spark task's rows. ``producer_id`` None = at-least-once (no dedup ids)."""

    def __init__(
        self,
        conn: Connection,
        options: SinkOptions,
        *,
        producer_id: str | None,
        spark_partition: int = 0,
        recovery: Recovery | None = None,
    ) -> None:
        self.conn = conn
        self.options = options
        self.producer_id = producer_id
        self.recovery = recovery
        self.spark_partition = spark_partition
        self.summary = TaskSummary()
        self._meta: dict[str, TopicMeta] = {}
        self._lanes: dict[tuple[str, int], _Lane] = {}
        # (topic, partition) -> what earlier attempts of the producer id wrote there
        self._resume: dict[tuple[str, int], Resume] = {}
        self._turn = self._sticky_records = self._sticky_bytes = 0  # key-less rows' partition
        self._done = threading.Condition()
        self._completed: deque[tuple[str, int]] = deque()

    # -- input -------------------------------------------------------------------------------

    def add(
        self,
        value: bytes,
        *,
        key: bytes | None = None,
        topic: str | None = None,
        partition: int | None = None,
        headers: Mapping[str, bytes] | None = None,
        priority: int = 0,
        deliver_at_ms: int = 0,
    ) -> None:
        """Queue one row: to option topic if set, else ``topic``. Raises InvalidArgument (no
        topic, bad partition, record too large),
        UnknownTopic, or the first non-retriable send error."""
        name = self.options.topic or topic  # the option wins, as in Spark's Kafka sink
        if not name:
            raise errors.InvalidArgument("no topic: set option topic, or a topic column value")
        meta = self._topic(name)
        record = common_pb2.Record(value=value, priority=priority, deliver_at_ms=deliver_at_ms)
        if key is not None:
            record.key = key
        if headers:
            record.headers.update(headers)
        size = record_size(record)
        if size > meta.max_record_bytes:
            raise errors.RecordTooLarge(
                f"a row of {size} bytes is over topic {name!r}'s max_record_bytes "
                f"({meta.max_record_bytes})"
            )
        encoded = record.ByteSize() + RECORD_FRAMING_BYTES  # what it adds to the batch
        if partition is None:
            partition = (
                partition_for(key, meta.partitions, 0)
                if key is not None
                else self._sticky_partition(meta.partitions, encoded)
            )
        elif not 0 <= partition < meta.partitions:
            raise errors.InvalidArgument(
                f"partition {partition}: topic {name!r} has partitions 0..{meta.partitions - 1}"
            )
        self._append(name, partition, encoded, key, value, record)

    def add_rows(self, values: Sequence[bytes | None], keys: Sequence[bytes | None]) -> None:
        """Queue rows of a value (None: empty) and a key (None: none) each, to the topic
        option: what ``add`` does row by row, without a Record per row. Raises as ``add``."""
        name = self.options.topic
        if not name:
            raise errors.InvalidArgument("add_rows writes to the topic option; none is set")
        meta = self._topic(name)
        limit, partitions, append = meta.max_record_bytes, meta.partitions, self._append
        # Each distinct key hashed once per call (keys repeat: 10,000 rows of 1,000 customers)
        route = {key: partition_for(key, partitions, 0) for key in set(keys) if key is not None}
        for value, key in zip(values, keys, strict=True):
            if value is None:
                value = b""
            size = len(value) if key is None else len(value) + len(key)
            if size > limit:
                raise errors.RecordTooLarge(
                    f"a row of {size} bytes is over topic {name!r}'s max_record_bytes ({limit})"
                )
            encoded = row_bytes(key, value)
            if key is None:
                append(name, self._sticky_partition(partitions, encoded), encoded, None, value)
            else:
                append(name, route[key], encoded, key, value)

    def _append(
        self,
        topic: str,
        partition: int,
        encoded: int,
        key: bytes | None,
        value: bytes,
        record: common_pb2.Record | None = None,
    ) -> None:
        """Put one row (``record``, or built from ``key`` and ``value``) in its lane's open
        batch, sealing the batch first when the row would take it over its record cap or
        ``batch_bytes``; or skip it, when an earlier attempt wrote it."""
        lane = self._lanes.get((topic, partition)) or self._lane(topic, partition)
        lane.position += 1
        if lane.resume is not None and lane.position <= lane.resume.records:
            self._skip(lane, key, value)
            return
        if lane.count and (
            lane.count >= lane.cap or lane.size + encoded > self.options.batch_bytes
        ):
            self._seal(lane)
        if lane.request is None:  # the row opens a batch: its cap grows with the position
            lane.request = api_pb2.SendRequest(topic=topic, partition=partition)
            lane.cap = min(self.options.batch_records, max(FIRST_BATCH_RECORDS, lane.position - 1))
        if record is not None:
            lane.request.records.append(record)
        elif key is None:
            lane.request.records.add(value=value)
        else:
            lane.request.records.add(key=key, value=value)
        lane.count += 1
        lane.size += encoded

    def _lane(self, topic: str, partition: int) -> _Lane:
        resume = self._resume.get((topic, partition))
        lane = self._lanes[(topic, partition)] = _Lane(topic, partition, resume)
        if resume is not None:
            lane.next_sequence = resume.last_sequence + 1
        return lane

    def _sticky_partition(self, partitions: int, encoded: int) -> int:
        """Key-less rows fill one batch's worth (records or encoded bytes) of a partition, then
        move to the next, as Kafka's sticky partitioner does. Counted over the task's key-less
        rows, whether sent or skipped on a resume, so every attempt routes them alike."""
        if self._sticky_records and (
            self._sticky_records >= self.options.batch_records
            or self._sticky_bytes + encoded > self.options.batch_bytes
        ):
            self._turn += 1
            self._sticky_records = self._sticky_bytes = 0
        self._sticky_records += 1
        self._sticky_bytes += encoded
        return (self.spark_partition + self._turn) % partitions

    def finish(self) -> TaskSummary:
        """Send what is left and wait for every acknowledgement. Raises NondeterministicInput
        when an earlier attempt wrote batches this one did not produce."""
        for lane in self._lanes.values():
            if lane.count:
                self._seal(lane)
        self._drain(lambda: any(lane.queued or lane.in_flight for lane in self._lanes.values()))
        untouched = sorted(tp for tp in self._resume if tp not in self._lanes)
        if untouched:
            raise NondeterministicInput(
                f"an earlier attempt of producer {self.producer_id!r} wrote to {untouched}, "
                "this one did not: the task's input is not deterministic" + self._hint()
            )
        for lane in self._lanes.values():
            if lane.resume is not None and lane.position < lane.resume.records:
                raise NondeterministicInput(
                    f"{lane.topic}/{lane.partition}: an earlier attempt of producer "
                    f"{self.producer_id!r} wrote {lane.resume.records} rows here, this one has "
                    f"only {lane.position}: the task's input is not deterministic" + self._hint()
                )
        return self.summary

    def _hint(self) -> str:
        if self.recovery is None:
            return ". A new write job writes every row again under a new producer id"
        return ". " + self.recovery.hint

    # -- metadata and resume -----------------------------------------------------------------

    def _topic(self, name: str) -> TopicMeta:
        meta = self._meta.get(name)
        if meta is None:
            meta = self._meta[name] = self._describe(name)
            if self.producer_id is not None:
                self._load_resume(name, meta)
        return meta

    def _describe(self, name: str) -> TopicMeta:
        description = self.conn.admin.describe_topic(name)
        leaders = [""] * len(description.partitions)
        for p in description.partitions:
            leaders[p.partition] = p.leader_addr
        max_bytes = description.config.max_record_bytes or 2**62
        return TopicMeta(len(leaders), leaders, max_bytes)

    def _load_resume(self, name: str, meta: TopicMeta) -> None:
        """What earlier attempts of this producer id wrote to each partition of ``name``: one
        ProducerState call per leader broker, all at once, each naming the partitions that
        broker leads (answered from its local state): the task's fixed cost does not grow
        with the partition count. A failed call is retried through any broker."""
        assert self.producer_id is not None
        by_leader: dict[str, list[int]] = {}
        for partition, leader in enumerate(meta.leaders):
            by_leader.setdefault(leader, []).append(partition)
        calls = []
        for address, partitions in by_leader.items():
            request = api_pb2.ProducerStateRequest(
                topic=name, producer_id=self.producer_id, partitions=partitions
            )
            stub = self.conn.log(address or self.conn.bootstrap[0])
            calls.append(
                (partitions, stub.ProducerState.future(request, timeout=self.conn.timeout_s))
            )
        for partitions, call in calls:
            try:
                states = list(call.result().partitions)
            except grpc.RpcError:
                states = list(
                    self.conn.admin.producer_state(name, self.producer_id, partitions).values()
                )
            for state in states:
                if state.known:
                    self._resume[(name, state.partition)] = Resume(
                        state.records, state.last_sequence, list(state.last_offsets)
                    )
        if self._resume and self.recovery is not None and self.recovery.ordered():
            log.warning("%s: recovered batch, written at-least-once", self.producer_id)
            self.producer_id = None  # no resume, no dedup: every row goes (again)
            self._resume.clear()
            self.summary.recovered = True

    # -- batches -----------------------------------------------------------------------------

    def _skip(self, lane: _Lane, key: bytes | None, value: bytes) -> None:
        """A row an earlier attempt wrote: not sent again. The rows of its last batch are kept
        and, once all are in, compared with what the broker holds."""
        assert lane.resume is not None
        self.summary.records_skipped += 1
        if lane.position > lane.resume.records - len(lane.resume.last_offsets):
            lane.tail.append((key or b"", value))
        if lane.position == lane.resume.records:
            self._verify(lane)
            lane.tail = []

    def _seal(self, lane: _Lane) -> None:
        assert lane.request is not None
        batch = _Batch(lane.topic, lane.partition, lane.next_sequence, lane.request, lane.count)
        lane.next_sequence += 1
        lane.request, lane.count, lane.size = None, 0, 0
        lane.queued.append(batch)
        self._pump()
        self._drain(lambda: len(lane.queued) >= QUEUED_BATCHES_MAX)

    def _verify(self, lane: _Lane) -> None:
        """Spot-check: the earlier attempt's last batch must be this attempt's rows at the same
        positions (same keys and values at the offsets the broker holds), else the input is
        not deterministic: raises NondeterministicInput."""
        assert lane.resume is not None
        offsets = lane.resume.last_offsets
        stored: dict[int, StoredRecord] = {}
        if offsets:
            first, last = min(offsets), max(offsets)
            while first <= last:
                response = self.conn.admin.fetch(
                    lane.topic, lane.partition, first, min(10_000, last - first + 1)
                )
                if not response.records:
                    break
                for r in response.records:
                    stored[r.offset] = r
                first = response.records[-1].offset + 1
        found = [stored.get(o) for o in offsets]
        same = len(found) == len(lane.tail) and all(
            s is not None and (s.key or b"") == key and s.value == value
            for s, (key, value) in zip(found, lane.tail, strict=True)
        )
        if not same:
            raise NondeterministicInput(
                f"{lane.topic}/{lane.partition}: rows {lane.resume.records - len(offsets)}.."
                f"{lane.resume.records - 1} of producer {self.producer_id!r} differ from what an "
                "earlier attempt wrote: the task's rows are not in a deterministic order (sort "
                "them, or use at_least_once)" + self._hint()
            )

    def _pump(self) -> None:
        """Dispatch the head batch of every idle lane whose retry time has come."""
        now = time.monotonic()
        for lane in self._lanes.values():
            if lane.in_flight is None and lane.queued and lane.queued[0].retry_at_s <= now:
                self._dispatch(lane, lane.queued.popleft())

    def _dispatch(self, lane: _Lane, batch: _Batch) -> None:
        meta = self._meta[batch.topic]
        address = meta.leaders[batch.partition] or self.conn.bootstrap[0]
        request = batch.request
        if self.producer_id is not None:
            request.producer_id, request.sequence = self.producer_id, batch.sequence
        tp = (batch.topic, batch.partition)

        def done(_: Any) -> None:
            with self._done:
                self._completed.append(tp)
                self._done.notify_all()

        request.request_id = next(_REQUEST_IDS)
        answer = _Answer(address)

        def on_answer(
            response: api_pb2.SendResponse | None, error: errors.RaftqError | None
        ) -> None:
            answer.response, answer.error = response, error
            done(None)

        lane.in_flight = (batch, answer)  # before sending: the answer may come at once
        if self.conn.streams().send(address, request, self.conn.timeout_s, on_answer):
            return
        call = self.conn.producer(address).Send.future(request, timeout=self.conn.timeout_s)
        call.add_done_callback(lambda _: on_answer(*_unary_outcome(call)))

    def _drain(self, busy: Any) -> None:
        """Handle acknowledgements until ``busy()`` is false."""
        while busy():
            with self._done:
                if not self._completed:
                    wake = [
                        lane.queued[0].retry_at_s
                        for lane in self._lanes.values()
                        if lane.in_flight is None and lane.queued
                    ]
                    wait = max(0.0, min(wake) - time.monotonic()) if wake else 1.0
                    self._done.wait(wait)
                completed = list(self._completed)
                self._completed.clear()
            for tp in completed:
                self._settle(self._lanes[tp])
            self._pump()

    def _settle(self, lane: _Lane) -> None:
        assert lane.in_flight is not None
        batch, answer = lane.in_flight
        lane.in_flight = None
        error, response = answer.error, answer.response
        if isinstance(error, Refused):  # no stream slot on that broker: unary, at once
            self.conn.streams().refused(answer.address)
            lane.queued.appendleft(batch)
            return
        if error is None:
            error = _answer_error(response)
            if error is None:
                assert response is not None
                self.summary.batches_sent += 1
                self.summary.records_written += batch.count
                self.summary.duplicates += sum(r.duplicate for r in response.results)
                return
        if isinstance(error, errors.OutOfOrderSequence) and self._applied_by_twin(lane, batch):
            return
        if not error.retriable or batch.attempts >= SEND_ATTEMPTS_MAX:
            raise error
        batch.attempts += 1
        batch.retry_at_s = time.monotonic() + BACKOFF_S[min(batch.attempts, len(BACKOFF_S)) - 1]
        self._follow(batch, error)
        lane.queued.appendleft(batch)
        log.info("[topic/partition=%s/%d] resending batch %d: %s", *self._tp(batch), error)

    @staticmethod
    def _tp(batch: _Batch) -> tuple[str, int, int]:
        return batch.topic, batch.partition, batch.sequence

    def _follow(self, batch: _Batch, error: errors.RaftqError) -> None:
        """Point the partition at the hinted leader, or re-read the topic's metadata."""
        meta = self._meta[batch.topic]
        if error.leader_hint:
            meta.leaders[batch.partition] = error.leader_hint
            return
        try:
            self._meta[batch.topic] = self._describe(batch.topic)
        except errors.RaftqError as exc:
            if not exc.retriable:
                raise
            bootstrap = self.conn.bootstrap
            meta.leaders[batch.partition] = bootstrap[batch.attempts % len(bootstrap)]

    def _applied_by_twin(self, lane: _Lane, batch: _Batch) -> bool:
        """OUT_OF_ORDER_SEQUENCE for an old sequence: another attempt of this task (a zombie
        or speculative twin with the same producer id) applied it already. True when the
        partition's state shows the sequence applied: drop it and what is queued up to it."""
        if self.producer_id is None:
            return False
        state = self.conn.admin.producer_state(
            batch.topic, self.producer_id, [batch.partition]
        ).get(batch.partition)
        if state is None or not state.known or state.last_sequence < batch.sequence:
            return False
        while lane.queued and lane.queued[0].sequence <= state.last_sequence:
            lane.queued.popleft()
        return True


RECOVERY_SCOPE_SUFFIX = "..at-least-once"


def recovery_scope(scope: str) -> str:
    """The watermark scope that marks batches of (app, ``scope``) to write at-least-once."""
    return scope + RECOVERY_SCOPE_SUFFIX


@dataclass(frozen=True)
class Recovery:
    """How a task of (app, scope, version) learns that an operator ran ``raftq spark recover``
    for its batch (``ordered()``, asked only when an earlier attempt wrote something), and the
    command a NondeterministicInput error tells them to run."""

    ordered: Any  # () -> bool
    hint: str

    @classmethod
    def for_batch(cls, admin: Admin, app_id: str, scope: str, version: int) -> Recovery:
        topic = f" --topic {scope}" if scope else ""
        hint = (
            f"To go on, run `raftq spark recover --app {app_id}{topic} --batch {version}` "
            "(this batch is then written at-least-once: rows of the failed attempts stay) and "
            "restart the query"
        )

        def ordered() -> bool:
            marked = admin.get_txn(app_id, recovery_scope(scope))
            return marked is not None and marked >= version

        return cls(ordered, hint)


def summaries_total(parts: Sequence[TaskSummary]) -> TaskSummary:
    total = TaskSummary()
    for part in parts:
        total.records_written += part.records_written
        total.records_skipped += part.records_skipped
        total.batches_sent += part.batches_sent
        total.duplicates += part.duplicates
    return total
