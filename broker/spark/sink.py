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
pure function of the rows (never of timing): a batch closes at ``batch_records`` records or
``batch_bytes`` encoded bytes (a lone larger row still goes, alone) or the end of the task's
input, and key-less rows fill one partition's
batch before moving to the next; so twins resuming from the same row cut the same batches.

Sending: at most one batch in flight per raftq partition (sequences apply in order), all
partitions at once; NOT_LEADER follows the hint, UNAVAILABLE / TIMEOUT resend the *same*
batch and sequence (the broker answers a duplicate with the original offsets).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc

from raftq.assignors.partitioner import partition_for
from raftq.client import Admin, parse_bootstrap
from raftq.proto import api_pb2, api_pb2_grpc, common_pb2, errors
from raftq.proto.common_pb2 import ErrorCode
from raftq.proto.limits import CLIENT_MESSAGE_BYTES_MAX, RECORD_FRAMING_BYTES, record_size
from raftq.transport.grpc_errors import from_rpc_error
from raftq.transport.tls import ChannelSecurity, open_channel

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


class NondeterministicInput(errors.InvalidArgument):
    """A retried or replayed task did not produce the rows its earlier attempt wrote."""


class StaleTxnVersion(errors.InvalidArgument):
    """A txnVersion below the app's committed watermark: not a replay, so refused."""


# --- options ----------------------------------------------------------------------------------


def int_option(
    options: Mapping[str, str], name: str, default: int, low: int, high: int | None = None
) -> int:
    """Option ``name`` as an int in [low, high]; raises InvalidArgument naming it."""
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise errors.InvalidArgument(f"option {name}={raw!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise errors.InvalidArgument(f"option {name}={value} must be {bound}")
    return value


# Kafka-connector option names a user may bring along, and what raftq calls them.
KAFKA_EQUIVALENTS = {
    "kafka.bootstrap.servers": "bootstrap",
    "subscribepattern": "topic (a comma-separated list; no patterns)",
    "assign": "startingOffsets / endingOffsets JSON naming the partitions",
    "includeheaders": "nothing: the headers column is always there",
    "startingoffset": "startingOffsets",
    "endingoffset": "endingOffsets",
    "startingtimestamp": "startingOffsets (offsets, not timestamps)",
    "kafka.security.protocol": "tlsCaFile / tlsCertFile / tlsKeyFile",
    "kafka.sasl.jaas.config": "token",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "kafka.max.partition.fetch.bytes": "fetchMaxBytes",
    "kafka.fetch.max.bytes": "fetchMaxBytes",
    "kafka.request.timeout.ms": "requestTimeoutMs",
    "kafka.batch.size": "batchBytes / batchRecords",
}
# Options Spark itself passes to every data source; not ours to refuse.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})
SECURITY_OPTIONS = ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "token")


def check_known(opts: Mapping[str, str], valid: Sequence[str], what: str) -> None:
    """Raise InvalidArgument naming every option of (lower-cased) ``opts`` that is not one of
    ``valid`` (or Spark's own), with the valid list and the raftq name of a Kafka option."""
    allowed = {v.lower() for v in valid} | SPARK_OPTIONS
    unknown = sorted(k for k in opts if k not in allowed)
    if not unknown:
        return
    hints = [
        f"{k} (raftq: {KAFKA_EQUIVALENTS[k]})" if k in KAFKA_EQUIVALENTS else k for k in unknown
    ]
    raise errors.InvalidArgument(
        f"unknown raftq {what} option(s): {', '.join(hints)}; valid: {', '.join(valid)}"
    )


def bootstrap_option(opts: Mapping[str, str]) -> str:
    """The ``bootstrap`` (or Kafka's ``bootstrap.servers``) option of lower-cased ``opts``,
    checked; raises InvalidArgument saying what to fix."""
    bootstrap = opts.get("bootstrap") or opts.get("bootstrap.servers") or ""
    parse_bootstrap(bootstrap)
    return bootstrap


@dataclass(frozen=True)
class Security:
    """How workers reach the brokers: options tlsCaFile, tlsCertFile, tlsKeyFile, token (all
    optional; the files must be readable on every executor). Never printed with the token."""

    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    token: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Security:
        return cls(
            tls_ca_file=opts.get("tlscafile") or None,
            tls_cert_file=opts.get("tlscertfile") or None,
            tls_key_file=opts.get("tlskeyfile") or None,
            token=opts.get("token") or None,
        )

    def channel_security(self) -> ChannelSecurity:
        """Raises InvalidArgument for an unreadable file or a certificate without its key."""
        return ChannelSecurity.from_files(
            tls_ca_file=self.tls_ca_file,
            tls_cert_file=self.tls_cert_file,
            tls_key_file=self.tls_key_file,
            token=self.token,
        )


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


# --- connections, one per process and bootstrap -----------------------------------------------


class Connection:
    """Admin calls plus one Producer stub per broker address. Created inside a Spark worker,
    reused by every task that worker runs (``connection()``); never pickled."""

    def __init__(
        self, bootstrap: str, request_timeout_ms: int, security: Security | None = None
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.timeout_s = request_timeout_ms / 1000
        security = security or Security()
        self._security = security.channel_security()
        self.admin = Admin(
            bootstrap,
            request_timeout_ms=request_timeout_ms,
            tls_ca_file=security.tls_ca_file,
            tls_cert_file=security.tls_cert_file,
            tls_key_file=security.tls_key_file,
            token=security.token,
        )
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, api_pb2_grpc.ProducerStub] = {}
        self._logs: dict[str, api_pb2_grpc.LogStub] = {}

    def _channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(
                address, self._security, message_bytes_max=CLIENT_MESSAGE_BYTES_MAX
            )
        return channel

    def producer(self, address: str) -> api_pb2_grpc.ProducerStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = api_pb2_grpc.ProducerStub(self._channel(address))
            return stub

    def log(self, address: str) -> api_pb2_grpc.LogStub:
        """The Log service of one broker (a read it does not lead is forwarded)."""
        with self._lock:
            stub = self._logs.get(address)
            if stub is None:
                stub = self._logs[address] = api_pb2_grpc.LogStub(self._channel(address))
            return stub

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels, self._stubs, self._logs = {}, {}, {}
        for channel in channels:
            channel.close()
        self.admin.close()


_CONNECTIONS: dict[tuple[int, str, int, Security], Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def connection(
    bootstrap: str, request_timeout_ms: int = 30_000, security: Security | None = None
) -> Connection:
    """This process's connection to ``bootstrap`` (PySpark forks and reuses workers: keyed by
    pid, so a forked child never uses its parent's channels)."""
    security = security or Security()
    key = (os.getpid(), bootstrap, request_timeout_ms, security)
    with _CONNECTIONS_LOCK:
        found = _CONNECTIONS.get(key)
        if found is None:
            found = _CONNECTIONS[key] = Connection(bootstrap, request_timeout_ms, security)
        return found


# --- rows and batches -------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicMeta:
    partitions: int
    leaders: list[str]
    max_record_bytes: int


@dataclass
class _Batch:
    topic: str
    partition: int
    sequence: int
    records: list[common_pb2.Record]
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
    tail: list[common_pb2.Record] = field(default_factory=list)  # rows the resume compares
    records: list[common_pb2.Record] = field(default_factory=list)
    size: int = 0  # encoded bytes of ``records``
    next_sequence: int = 0  # after a resume: the earlier attempt's last sequence + 1
    queued: deque[_Batch] = field(default_factory=deque)
    in_flight: tuple[_Batch, Any] | None = None


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
        lane = self._lanes.get((name, partition))
        if lane is None:
            resume = self._resume.get((name, partition))
            lane = self._lanes[(name, partition)] = _Lane(name, partition, resume)
            if resume is not None:
                lane.next_sequence = resume.last_sequence + 1
        lane.position += 1
        if lane.resume is not None and lane.position <= lane.resume.records:
            self._skip(lane, record)
            return
        if lane.records and (
            len(lane.records) >= self.options.batch_records
            or lane.size + encoded > self.options.batch_bytes
        ):
            self._seal(lane)
        lane.records.append(record)
        lane.size += encoded

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
            if lane.records:
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

    def _skip(self, lane: _Lane, record: common_pb2.Record) -> None:
        """A row an earlier attempt wrote: not sent again. The rows of its last batch are kept
        and, once all are in, compared with what the broker holds."""
        assert lane.resume is not None
        self.summary.records_skipped += 1
        if lane.position > lane.resume.records - len(lane.resume.last_offsets):
            lane.tail.append(record)
        if lane.position == lane.resume.records:
            self._verify(lane)
            lane.tail = []

    def _seal(self, lane: _Lane) -> None:
        batch = _Batch(lane.topic, lane.partition, lane.next_sequence, lane.records)
        lane.next_sequence += 1
        lane.records, lane.size = [], 0
        lane.queued.append(batch)
        self._pump()
        self._drain(lambda: len(lane.queued) >= QUEUED_BATCHES_MAX)

    def _verify(self, lane: _Lane) -> None:
        """Spot-check: the earlier attempt's last batch must be this attempt's rows at the same
        positions (same keys and values at the offsets the broker holds), else the input is
        not deterministic: raises NondeterministicInput."""
        assert lane.resume is not None
        offsets = lane.resume.last_offsets
        stored: dict[int, common_pb2.Record] = {}
        if offsets:
            first, last = min(offsets), max(offsets)
            while first <= last:
                response = self.conn.admin.fetch(
                    lane.topic, lane.partition, first, min(10_000, last - first + 1)
                )
                if not response.records:
                    break
                for r in response.records:
                    stored[r.offset] = r.record
                first = response.records[-1].offset + 1
        found = [stored.get(o) for o in offsets]
        same = len(found) == len(lane.tail) and all(
            s is not None and s.key == b.key and s.value == b.value
            for s, b in zip(found, lane.tail, strict=True)
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
        request = api_pb2.SendRequest(
            topic=batch.topic, records=batch.records, partition=batch.partition
        )
        if self.producer_id is not None:
            request.producer_id, request.sequence = self.producer_id, batch.sequence
        tp = (batch.topic, batch.partition)

        def done(_: Any) -> None:
            with self._done:
                self._completed.append(tp)
                self._done.notify_all()

        call = self.conn.producer(address).Send.future(request, timeout=self.conn.timeout_s)
        lane.in_flight = (batch, call)
        call.add_done_callback(done)

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
        batch, call = lane.in_flight
        lane.in_flight = None
        error: errors.RaftqError | None = None
        try:
            response: api_pb2.SendResponse = call.result()
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
        else:
            codes = {r.error for r in response.results}
            if codes == {ErrorCode.OK}:
                self.summary.batches_sent += 1
                self.summary.records_written += len(batch.records)
                self.summary.duplicates += sum(r.duplicate for r in response.results)
                return
            bad = next(r for r in response.results if r.error != ErrorCode.OK)
            error = errors.error_for(bad.error, bad.message, leader_hint=bad.leader_hint)
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
