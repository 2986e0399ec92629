"""The ``raftq`` PySpark data source: the only module that imports pyspark and pyarrow.

See ``broker/spark/__init__.py`` for usage and the exactly-once design. The engines are
pyspark-free: ``sink.py`` (writing) and ``source.py`` (offsets and reads).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.errors import AnalysisException
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from raftq.proto import errors
from raftq.spark import common, sink, source

SOURCE_SCHEMA = (
    "topic string, partition int, offset long, timestamp timestamp, key binary, value binary, "
    "headers map<string, binary>, priority int, deliver_at timestamp"
)
WRITE_COLUMNS = ("value", "key", "topic", "partition", "headers", "priority", "deliver_at")


class RaftqDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("raftq")``."""

    @classmethod
    def name(cls) -> str:
        return "raftq"

    def schema(self) -> str:
        """Asked by ``load()`` only (a writer brings its own schema): the reader's options are
        checked here, so a misspelled one fails at ``load()``, not at the first action."""
        source.SourceOptions.parse(self._options())
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftqBatchReader(source.SourceOptions.parse(self._options()), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RaftqStreamReader(source.SourceOptions.parse(self._options()), schema)

    # Options a subclass reads itself (tests/spark_faults.py): not refused as unknown.
    extra_options: frozenset[str] = frozenset()

    def _options(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if k.lower() not in self.extra_options}

    def writer(self, schema: StructType, overwrite: bool) -> RaftqBatchWriter:
        """Raises InvalidArgument for mode("overwrite") (a topic is append-only), an unknown
        option, or a column of the wrong type; StaleTxnVersion for a txnVersion below the
        committed watermark of (txnAppId, topic)."""
        if overwrite:
            raise errors.InvalidArgument(
                'raftq topics are append-only: mode("overwrite") is refused; use mode("append")'
            )
        options = sink.SinkOptions.parse(self._options())
        _check_write_schema(schema)
        if options.app_id is not None and options.version is not None:  # fail before any task
            conn = common.connection(
                options.bootstrap, options.request_timeout_ms, options.security
            )
            scope = sink.txn_scope(options)
            sink.check_version(
                options.app_id, scope, options.version, conn.admin.get_txn(options.app_id, scope)
            )
        # Runs once per write job on the driver: every task and task retry shares the job id.
        return RaftqBatchWriter(options, job_id=uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RaftqStreamWriter:
        options = sink.SinkOptions.parse(self._options())
        _check_write_schema(schema)
        return RaftqStreamWriter(options)


# Spark hands a Python writer a task's rows in Arrow batches of at most 10,000 rows or this
# many bytes (spark.sql.execution.arrow.maxBytesPerBatch; Spark's own default is 64 MiB). At
# 64 MiB a task of 10 KB rows gets ONE batch of 100 MB: nothing is sent until Spark has
# converted all of it, and the brokers wait. 4 MiB lets the sends start while Spark converts
# the rest, and costs the JVM less (bench/RESULTS.md, spark_write at 10 KB).
ARROW_BATCH_BYTES = 4 << 20
ARROW_BATCH_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"


def register(spark: Any) -> None:
    """Register the ``raftq`` format with a SparkSession (again is a no-op: sessions of one
    application share it), and cap the session's Arrow batches at ARROW_BATCH_BYTES unless
    it sets ``spark.sql.execution.arrow.maxBytesPerBatch`` itself (a value the session sets
    is kept)."""
    if spark.conf.get(ARROW_BATCH_BYTES_CONF, None) is None:
        spark.conf.set(ARROW_BATCH_BYTES_CONF, str(ARROW_BATCH_BYTES))
    try:
        spark.dataSource.register(RaftqDataSource)
    except AnalysisException as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise


# --- writing ----------------------------------------------------------------------------------


@dataclass
class RaftqCommitMessage(WriterCommitMessage):
    app_id: str | None
    version: int | None
    summary: sink.TaskSummary = field(default_factory=sink.TaskSummary)


_BYTES_TYPES = (BinaryType, StringType)
_INT_TYPES = (ByteType, ShortType, IntegerType, LongType)
# What each writer column may be; other columns are ignored (as Spark's Kafka sink does).
_COLUMN_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "value": (_BYTES_TYPES, "binary or string"),
    "key": (_BYTES_TYPES, "binary or string"),
    "topic": ((StringType,), "string"),
    "partition": (_INT_TYPES, "an integer type"),
    "headers": ((MapType, ArrayType), "map<string, binary|string>"),
    "priority": (_INT_TYPES, "an integer type"),
    "deliver_at": ((TimestampType, TimestampNTZType, *_INT_TYPES), "timestamp or long Unix ms"),
}


def _check_write_schema(schema: StructType) -> None:
    """Raises InvalidArgument naming the first column whose type the writer cannot take."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise errors.InvalidArgument(
            f"raftq writes need a value column; columns: {sorted(fields)}; optional: "
            + ", ".join(WRITE_COLUMNS[1:])
        )
    for name, (types, wanted) in _COLUMN_TYPES.items():
        found = fields.get(name)
        if found is None:
            continue
        ok = isinstance(found, types)
        if ok and name == "headers":
            ok = _headers_type_ok(found)
        if not ok:
            raise errors.InvalidArgument(
                f"column {name!r} has type {found.simpleString()}; the raftq writer takes "
                f"{wanted} (cast it, e.g. cast({name} as string), or drop it)"
            )


def _headers_type_ok(found: Any) -> bool:
    """map<string, binary|string>, or Kafka's array<struct<key: string, value: binary>>."""
    if isinstance(found, MapType):
        return isinstance(found.keyType, StringType) and isinstance(found.valueType, _BYTES_TYPES)
    element = found.elementType
    if not isinstance(element, StructType) or len(element.fields) != 2:
        return False
    key, value = element.fields
    return isinstance(key.dataType, StringType) and isinstance(value.dataType, _BYTES_TYPES)


def _bytes_column(array: pa.Array) -> list[Any]:
    values = array.to_pylist()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return [v.encode() if v is not None else None for v in values]
    return values


def _ms_column(array: pa.Array) -> list[int]:
    if pa.types.is_timestamp(array.type):
        per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[array.type.unit]
        raw = array.cast(pa.int64()).to_pylist()
        return [0 if v is None else int(v // per_ms) for v in raw]
    return [0 if v is None else int(v) for v in array.cast(pa.int64()).to_pylist()]


def _headers_column(array: pa.Array) -> list[dict[str, bytes] | None]:
    out: list[dict[str, bytes] | None] = []
    for entry in array.to_pylist():
        if not entry:
            out.append(None)
            continue
        pairs = entry.items() if isinstance(entry, dict) else entry
        out.append(
            {
                str(k): (v.encode() if isinstance(v, str) else bytes(v or b""))
                for k, v in (tuple(p.values()) if isinstance(p, dict) else p for p in pairs)
            }
        )
    return out


def _feed(task: sink.TaskSink, batch: pa.RecordBatch) -> None:
    """Hand one Arrow batch's rows to the task sink, column-wise conversion first: rows of a
    value and a key only (the other columns absent or all null, or, with the topic option
    set, ignored: the option wins) go through ``add_rows``, the rest row by row."""
    n = batch.num_rows
    if n == 0:
        return
    names = batch.schema.names

    def column(name: str) -> pa.Array | None:
        found = batch.column(names.index(name)) if name in names else None
        return None if found is None or found.null_count == n else found

    none: list[Any] = [None] * n
    arrays = {name: column(name) for name in WRITE_COLUMNS}
    if task.options.topic:
        arrays["topic"] = None
    values = _bytes_column(arrays["value"]) if arrays["value"] is not None else none
    keys = _bytes_column(arrays["key"]) if arrays["key"] is not None else none
    if all(arrays[name] is None for name in WRITE_COLUMNS[2:]):
        task.add_rows(values, keys)
        return
    topics = arrays["topic"].to_pylist() if arrays["topic"] is not None else none
    partitions = arrays["partition"].to_pylist() if arrays["partition"] is not None else none
    headers = _headers_column(arrays["headers"]) if arrays["headers"] is not None else none
    priorities = arrays["priority"].to_pylist() if arrays["priority"] is not None else none
    deliver = _ms_column(arrays["deliver_at"]) if arrays["deliver_at"] is not None else none
    add = task.add
    for value, key, topic, partition, header, priority, at in zip(
        values, keys, topics, partitions, headers, priorities, deliver, strict=True
    ):
        add(
            value if value is not None else b"",
            key=key,
            topic=topic,
            partition=partition,
            headers=header,
            priority=priority or 0,
            deliver_at_ms=at or 0,
        )


def _write_task(
    options: sink.SinkOptions,
    batches: Iterator[pa.RecordBatch],
    *,
    app_id: str | None,
    version: int | None,
    watermark: bool,
) -> RaftqCommitMessage:
    """One Spark task: with ``watermark``, skip it when ``version`` is the committed watermark
    of (app, scope), refuse it below (StaleTxnVersion); exactly-once writes its rows under the
    producer id of (app, scope, version, Spark partition). The message names the app whose
    watermark commit() raises (if any)."""
    context = TaskContext.get()
    spark_partition = context.partitionId() if context is not None else 0
    conn = common.connection(options.bootstrap, options.request_timeout_ms, options.security)
    committed_app = app_id if watermark else None
    scope = sink.txn_scope(options)
    if watermark and app_id is not None and version is not None:
        committed = conn.admin.get_txn(app_id, scope)
        if sink.check_version(app_id, scope, version, committed):
            return RaftqCommitMessage(app_id, version, sink.TaskSummary(skipped_task=True))
    producer_id = None
    if options.guarantee == "exactly_once":
        assert app_id is not None and version is not None
        producer_id = sink.producer_id_for(app_id, version, spark_partition, scope)
    recovery = None
    if watermark and app_id is not None and version is not None:
        recovery = sink.Recovery.for_batch(conn.admin, app_id, scope, version)
    task = sink.TaskSink(
        conn,
        options,
        producer_id=producer_id,
        spark_partition=spark_partition,
        recovery=recovery,
    )
    for batch in batches:
        _feed(task, batch)
    return RaftqCommitMessage(committed_app, version, task.finish())


def _commit(options: sink.SinkOptions, app_id: str | None, version: int | None) -> None:
    if app_id is not None and version is not None:
        conn = common.connection(options.bootstrap, options.request_timeout_ms, options.security)
        conn.admin.commit_txn(app_id, version, sink.txn_scope(options))


class RaftqBatchWriter(DataSourceArrowWriter):
    """``df.write``: one job. Without txnAppId the job's random id names the producers (task
    retries dedupe, a re-run job writes again); with txnAppId/txnVersion a version at or
    below the app's watermark is skipped and commit raises the watermark."""

    def __init__(self, options: sink.SinkOptions, job_id: str) -> None:
        self.options = options
        self.job_id = job_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftqCommitMessage:
        if self.options.app_id is not None:  # foreachBatch: the watermark skips a replay
            app_id, version = self.options.app_id, self.options.version
            return _write_task(
                self.options, iterator, app_id=app_id, version=version, watermark=True
            )
        # job-scoped producer ids: task retries dedupe; nothing to commit
        return _write_task(
            self.options, iterator, app_id=f"job-{self.job_id}", version=0, watermark=False
        )

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _commit(self.options, self.options.app_id, self.options.version)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        return None  # written batches stay; a re-run under the same txn ids dedupes them


class RaftqStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: the app id is txnAppId or the query id (stable across restarts
    from the same checkpoint), the version is the micro-batch id."""

    def __init__(self, options: sink.SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftqCommitMessage:
        context = TaskContext.get()
        assert context is not None, "a streaming write runs in a Spark task"
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or "0")
        query_id = context.getLocalProperty("sql.streaming.queryId")
        app_id = self.options.app_id or f"query-{query_id}"
        if self.options.guarantee == "at_least_once" and self.options.app_id is None:
            return _write_task(self.options, iterator, app_id=None, version=None, watermark=False)
        return _write_task(self.options, iterator, app_id=app_id, version=batch_id, watermark=True)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        apps = {m.app_id for m in messages if isinstance(m, RaftqCommitMessage) and m.app_id}
        assert len(apps) <= 1, f"one app per query, got {apps}"
        for app_id in apps:
            _commit(self.options, app_id, batchId)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        return None  # the replay of this batch id resumes under the same producer ids


# --- reading ----------------------------------------------------------------------------------


@dataclass
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


def _partitions(found: list[source.Range]) -> list[InputPartition]:
    return [RangePartition(r.topic, r.partition, r.start, r.end) for r in found]


READ_BATCH_ROWS = 4096  # rows per Arrow batch a read hands Spark


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks a reader's batches against (as its worker builds it)."""
    return to_arrow_schema(schema, timezone="UTC")


def _us(ms: int) -> int | None:
    return ms * 1000 if ms else None  # 0 = none: a null timestamp


def _read(
    options: source.SourceOptions, partition: InputPartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """One raftq partition's range as Arrow batches, built a column at a time (Spark would
    otherwise convert every cell of every row in Python)."""
    assert isinstance(partition, RangePartition)
    conn = common.connection(options.bootstrap, options.request_timeout_ms, options.security)
    wanted = source.Range(partition.topic, partition.partition, partition.start, partition.end)
    stored = source.read_range(
        conn.admin, wanted, options.fail_on_data_loss, options.fetch_max_bytes
    )
    while chunk := list(itertools.islice(stored, READ_BATCH_ROWS)):
        n = len(chunk)
        columns: list[list[Any]] = [
            [partition.topic] * n,
            [partition.partition] * n,
            [s.offset for s in chunk],
            [_us(s.timestamp_ms) for s in chunk],
            [s.key for s in chunk],
            [s.value for s in chunk],
            [list(s.headers.items()) for s in chunk],
            [s.priority for s in chunk],
            [_us(s.deliver_at_ms) for s in chunk],
        ]
        arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


class RaftqBatchReader(DataSourceReader):
    """``spark.read``: [startingOffsets, endingOffsets) of every partition, one Spark
    partition per raftq partition."""

    def __init__(self, options: source.SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        conn = common.connection(
            self.options.bootstrap, self.options.request_timeout_ms, self.options.security
        )
        bounds = source.list_bounds(conn.admin, self.options.topics)
        start = source.resolve(self.options.starting, bounds)
        end = source.resolve(self.options.ending, bounds)
        return _partitions(source.ranges(start, end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, _arrow_schema(self.schema))


class RaftqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets ``{topic: {partition: next offset}}``; honours
    maxOffsetsPerTrigger and Trigger.AvailableNow (stops at the offsets current when the
    query started, in maxOffsetsPerTrigger steps)."""

    def __init__(self, options: source.SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._target: source.Offsets | None = None

    def _bounds(self) -> dict[str, dict[str, source.PartitionBounds]]:
        conn = common.connection(
            self.options.bootstrap, self.options.request_timeout_ms, self.options.security
        )
        return source.list_bounds(conn.admin, self.options.topics)

    def initialOffset(self) -> dict[str, Any]:
        return source.to_json(source.resolve(self.options.starting, self._bounds()))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = source.resolve("latest", self._bounds())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        latest = source.resolve("latest", self._bounds())
        if self._target is not None:
            latest = source.cap(latest, self._target)
        latest = {
            t: {p: max(o, start.get(t, {}).get(p, o)) for p, o in ps.items()}
            for t, ps in latest.items()
        }
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return source.to_json(source.limit_offsets(start, latest, max_rows))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return _partitions(source.ranges(start, end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, _arrow_schema(self.schema))

    def commit(self, end: dict[str, Any]) -> None:
        return None  # no consumer-group state: the checkpoint holds the offsets
