"""The partition state machine: ``apply(command_bytes, raft_index)`` over a PartitionStore.

Pure with respect to the world: what apply does is a function of (store state, command bytes).
No clock (the leader stamps ``now_ms``, its group's quorum clock, into each command; the
machine's clock is the highest ``now_ms`` applied, so time inside the machine never goes
backwards across leader changes), no randomness, no configuration lookups (topic config is
replicated state, set by ``Configure``), no network.

Clock skew (DESIGN.md § Time). The quorum clock may run ahead of true time by up to the
command's ``clock_skew_ms`` (the leader's ``max_clock_skew_ms``), so what would be unsafe to do
early is judged that much late: an expired lease is granted again (or dead-lettered) only once
``now_ms`` passes its deadline plus the skew, and retention and dedup windows end the skew
after their nominal end. The holder's own rights end at the deadline it was given. Delays
(``deliver_at_ms``, nack backoff) are judged at ``now_ms``: early by at most the skew.

apply never raises. A command that does not decode, or that is invalid, returns a
``CommandResult`` with an error code and leaves the store unchanged (its applied index too: a
replay meets the same rejection). An entry at or below the stored applied index is skipped. A
store failure (disk full, I/O error) or a bug is caught, rolled back, reported as INTERNAL and
latches ``failed``: the replica must stop and be rebuilt (replay or snapshot), never continue
with state that differs from its peers.

Shape refusals here (counts, bounds, a group name's length) are not the validation of client
input: that is done once, at the edge (transport/request_checks.py), before anything is
proposed. They stay as the cheap guard every entry meets, because an entry in the log may
predate that check or come from a broker of another version. Their rules never tighten (the
group name rule here is looser than the edge's on purpose): replicas of different versions must
apply the same entry the same way.

Semantics (DESIGN.md § Consuming): per group, every record is pending until acknowledged. A
pending record is *ready* (ordered fifo by offset, or by (priority, deliver_at_ms, offset)) or
*waiting* until ``visible_at_ms`` — a future deliver_at, a nack delay, or a lease deadline. A
lease whose deadline passes makes the record ready again; a record delivered ``max_deliveries``
times that comes back (expiry or nack) goes to the dead-letter outbox and ends in its group.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from raftq.partitions import schedule_ops
from raftq.partitions.rows import GroupRow, Meta, OutboxRow, PendingRow, RecordRow
from raftq.partitions.store import (
    BackupWriter,
    PartitionStore,
    is_tracked_producer,
    order_keys,
)
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode
from raftq.proto.limits import record_size as record_size

log = logging.getLogger("raftq.partition")

MAX_LEASE_RECORDS = 10_000
MAX_REFS = 10_000
MAX_APPEND_RECORDS = 100_000
MAX_NAME_CHARS = 255
MAX_LEASE_MS = 12 * 3600 * 1000  # like SQS's visibility timeout: at most 12 hours
MAX_DELAY_MS = 366 * 24 * 3600 * 1000  # nack delays and deliver_at horizons: at most a year
# How long a tracked (Spark) producer's count of records that retention or a purge cut away is
# kept after its last cut (at least dedup_window_ms): a week, Kafka's transactional.id
# expiration. A task retried within it skips every row an earlier attempt wrote, cut or not.
TRACKED_CUT_KEEP_MS = 7 * 24 * 3600 * 1000
MAX_CLOCK_SKEW_MS = 3600 * 1000  # a stamped clock_skew_ms is clamped to 0..1 hour
EXPIRY_ROUNDS = 4  # a Lease whose choice held expired records chooses again at most this often
PRODUCER_BATCHES_KEPT = 5  # like Kafka: the last five batches of a producer answer retries
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


_OFFSET = operator.itemgetter(0)  # of a ReadyRecord (or a slim row)
_TIMESTAMP = operator.itemgetter(2)  # of a ReadyRecord

# ``ErrorCode.X`` goes through a Python-level ``__getattr__`` on every use: hot loops use this.
_OK = ErrorCode.OK

DEFAULT_CONFIG = common_pb2.TopicConfig(
    ordering=common_pb2.FIFO,
    lease_ms=30_000,
    max_deliveries=5,
    dead_letter_topic="",
    retention_ms=0,
    retention_bytes=0,
    max_record_bytes=1 << 20,
    dedup_window_ms=300_000,
    nack_backoff_base_ms=1_000,
    nack_backoff_max_ms=300_000,
)


class Rejected(Exception):
    """An invalid command: becomes an error result; the transaction is rolled back."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# One incoming record as the append plan uses it, read from the protobuf once:
# (key or None, value, headers blob or None, priority, deliver_at_ms, idempotency_key, size,
#  ttl_ms).
Incoming = tuple[bytes | None, bytes, bytes | None, int, int, str, int, int]


def read_records(
    records: Sequence[common_pb2.Record], config: common_pb2.TopicConfig
) -> list[Incoming]:
    """Check a batch (``check_record``) and read each record's fields once: protobuf field
    access is the cost of a big batch. Raises Rejected naming the first bad record."""
    max_record_bytes = config.max_record_bytes
    out: list[Incoming] = []
    for i, record in enumerate(records):
        if record.headers:  # rare: the general path
            problem = check_record(record, config)
            if problem is not None:
                raise Rejected(problem.code, f"record {i}: {problem.message}")
            key = record.key if record.HasField("key") else None
            out.append(
                (
                    key,
                    record.value,
                    _headers_blob(record),
                    record.priority,
                    record.deliver_at_ms,
                    record.idempotency_key,
                    record_size(record),
                    record.ttl_ms,
                )
            )
            continue
        key = record.key if record.HasField("key") else None
        value = record.value
        deliver_at_ms = record.deliver_at_ms
        idempotency_key = record.idempotency_key
        ttl_ms = record.ttl_ms
        size = len(value) if key is None else len(key) + len(value)
        if (
            size > max_record_bytes
            or deliver_at_ms < 0
            or ttl_ms < 0
            or len(idempotency_key) > MAX_NAME_CHARS
        ):
            problem = check_record(record, config)  # the exact verdict and message
            if problem is not None:
                raise Rejected(problem.code, f"record {i}: {problem.message}")
        out.append(
            (key, value, None, record.priority, deliver_at_ms, idempotency_key, size, ttl_ms)
        )
    return out


def check_record(record: common_pb2.Record, config: common_pb2.TopicConfig) -> Rejected | None:
    """Why a producer's record cannot be appended, or None. Frontends call it before proposing."""
    size = record_size(record)
    if config.max_record_bytes and size > config.max_record_bytes:
        return Rejected(
            ErrorCode.RECORD_TOO_LARGE,
            f"record is {size} bytes, over the topic's max_record_bytes "
            f"({config.max_record_bytes}): split it or raise max_record_bytes",
        )
    if record.deliver_at_ms < 0:
        return Rejected(ErrorCode.INVALID_ARGUMENT, "deliver_at_ms must be >= 0 (0 = now)")
    if record.ttl_ms < 0:
        return Rejected(ErrorCode.INVALID_ARGUMENT, "ttl_ms must be >= 0 (0 = the topic's ttl_ms)")
    if len(record.idempotency_key) > MAX_NAME_CHARS:
        return Rejected(
            ErrorCode.INVALID_ARGUMENT, f"idempotency_key is over {MAX_NAME_CHARS} characters"
        )
    return None


def _pairs(refs: Sequence[partition_pb2.DeliveryRef]) -> list[tuple[int, int]]:
    return [(r.offset, r.delivery_count) for r in refs]


def _no_result(**_: object) -> None:
    """Stands in for ``result.refs.add`` when nobody reads the result (a follower)."""


def check_values(values: Sequence[bytes], config: common_pb2.TopicConfig) -> Rejected | None:
    """Why a batch of bare values cannot be appended, or None (C iterators unless one is bad)."""
    limit = config.max_record_bytes
    if values and limit and max(map(len, values)) > limit:
        i = next(i for i, value in enumerate(values) if len(value) > limit)
        problem = check_record(common_pb2.Record(value=values[i]), config)
        assert problem is not None
        return Rejected(problem.code, f"record {i}: {problem.message}")
    return None


def check_config(config: common_pb2.TopicConfig) -> Rejected | None:
    """Why a topic config cannot be used, or None."""
    problems = []
    if config.ordering not in (common_pb2.FIFO, common_pb2.PRIORITY, common_pb2.FAIR):
        problems.append("ordering must be fifo, priority or fair")
    if config.fair_key and config.ordering != common_pb2.FAIR:
        problems.append('fair_key applies to ordering=fair only (set it to "" or use fair)')
    if len(config.fair_key) > MAX_NAME_CHARS:
        problems.append(f"fair_key (a header name) is over {MAX_NAME_CHARS} characters")
    if not 0 < config.lease_ms <= MAX_LEASE_MS:
        problems.append(f"lease_ms must be 1..{MAX_LEASE_MS} (12 h)")
    if config.max_deliveries < 0:
        problems.append("max_deliveries must be >= 0 (0 = unlimited)")
    for name in ("retention_ms", "retention_bytes", "dedup_window_ms", "ttl_ms"):
        if getattr(config, name) < 0:
            problems.append(f"{name} must be >= 0")
    if config.max_record_bytes <= 0:
        problems.append("max_record_bytes must be > 0")
    if config.nack_backoff_base_ms < 0 or config.nack_backoff_max_ms < config.nack_backoff_base_ms:
        problems.append("need 0 <= nack_backoff_base_ms <= nack_backoff_max_ms")
    if config.ttl_action not in (common_pb2.TTL_DROP, common_pb2.TTL_DEAD_LETTER):
        problems.append("ttl_action must be drop or dead_letter")
    if problems:
        return Rejected(ErrorCode.INVALID_ARGUMENT, "; ".join(problems))
    return None


def _fair_key(config: common_pb2.TopicConfig) -> str | None:
    """What the store takes as a record's fair key: None (not a fair topic), "" (the record's
    key) or a header name."""
    return config.fair_key if config.ordering == common_pb2.FAIR else None


def nack_backoff_ms(config: common_pb2.TopicConfig, delivery_count: int) -> int:
    """Redelivery delay of a nack without delay_ms: base * 2^(count-1), capped."""
    exponent = min(max(delivery_count - 1, 0), 40)
    return int(min(config.nack_backoff_base_ms * (1 << exponent), config.nack_backoff_max_ms))


@dataclass(frozen=True)
class Offsets:
    log_start: int
    end: int  # the next offset to be assigned


@dataclass(frozen=True)
class GroupLag:
    group: str
    committed: int  # lowest unacknowledged offset
    end: int
    lag: int
    pending: int
    leased: int
    committed_timestamp_ms: int = 0  # the oldest unacknowledged record's timestamp; 0: none


def _headers_blob(record: common_pb2.Record) -> bytes | None:
    if not record.headers:
        return None
    carrier = common_pb2.Record()
    carrier.headers.update(record.headers)
    return carrier.SerializeToString(deterministic=True)


def stored_record(row: RecordRow) -> common_pb2.StoredRecord:
    stored = common_pb2.StoredRecord()
    fill_stored_record(stored, row)
    return stored


def fill_stored_record(stored: common_pb2.StoredRecord, row: RecordRow) -> None:
    """Write ``row`` into an empty StoredRecord in place (e.g. one just added to a repeated
    field): building nested messages and copying them in costs several times more."""
    stored.offset = row.offset
    stored.timestamp_ms = row.timestamp_ms
    record = stored.record
    record.SetInParent()
    record.value = row.value
    if row.priority:  # proto3 scalars: leaving a zero unset is the same message, and cheaper
        record.priority = row.priority
    if row.deliver_at_ms:
        record.deliver_at_ms = row.deliver_at_ms
    if row.idempotency_key:
        record.idempotency_key = row.idempotency_key
    if row.key is not None:
        record.key = row.key
    if row.headers:
        record.MergeFromString(row.headers)  # a Record that carries only the headers


def _error(code: int, message: str) -> partition_pb2.CommandResult:
    return partition_pb2.CommandResult(error=code, message=message)  # type: ignore[arg-type]


def lag_of(store: PartitionStore, meta: Meta, group: str) -> GroupLag | None:
    """A group's committed offset (lowest unacknowledged), lag, pending and leased counts."""
    row = store.group_get(group)
    if row is None:
        return None
    lowest = store.lowest_pending(row.gid)
    committed = row.materialized_upto if lowest is None else min(lowest, row.materialized_upto)
    committed = max(committed, meta.log_start)
    end = meta.next_offset
    oldest = store.records_from(committed, 1) if committed < end else []
    return GroupLag(
        group,
        committed,
        end,
        end - committed,
        # Records retention or a purge deleted before the group materialized them are not pending.
        store.count_pending(row.gid) + max(0, end - max(row.materialized_upto, meta.log_start)),
        store.count_leased(row.gid, meta.clock_ms),
        oldest[0].timestamp_ms if oldest else 0,
    )


def fetch_from(
    store: PartitionStore, meta: Meta, offset: int, max_records: int, max_bytes: int = 0
) -> list[common_pb2.StoredRecord]:
    """Records from ``offset`` (or the log start, if later) in offset order; at least one record
    when any exists, however small ``max_bytes``."""
    if max_records <= 0:
        return []
    out: list[common_pb2.StoredRecord] = []
    total = 0
    for row in store.records_from(max(offset, meta.log_start), max_records):
        if max_bytes and out and total + row.size > max_bytes:
            break
        total += row.size
        out.append(stored_record(row))
    return out


def _fill_columns(
    out: common_pb2.DeliveryColumns, chosen: Sequence[Sequence[Any]], deadline_ms: int
) -> bool:
    """Fill ``out`` with ``chosen`` (ReadyRecord tuples, delivery_count before this lease) when
    every record is bare (a value only); False, ``out`` untouched, otherwise. Each column is
    checked and copied by C-level calls: no Python frame per record."""
    offsets, counts, stamps, keys, values, headers, priorities, at_ms, idems, _ = zip(
        *chosen, strict=True
    )
    n = len(offsets)
    if keys.count(None) != n or any(headers) or any(priorities) or any(at_ms) or any(idems):
        return False
    out.offsets.extend(offsets)
    out.delivery_counts.extend(map((1).__add__, counts))
    out.timestamps_ms.extend(stamps)
    out.values.extend(values)
    out.lease_deadline_ms = deadline_ms
    return True


class PartitionMachine:
    """One partition replica's state machine. Not thread-safe: one applier thread owns it."""

    def __init__(self, store: PartitionStore) -> None:
        self.store = store
        self.failed: BaseException | None = None
        self._respond = True  # see apply()
        self._skew_ms = 0  # the applying command's clock_skew_ms, clamped (module docstring)
        # Records this replica found expired and ended in a group since it started: an
        # observation for metrics (it never steers apply), counted by every replica alike.
        self.expired_total = 0
        self._reload()
        self._handlers: dict[str, Callable[[Any, int], partition_pb2.CommandResult]] = {
            "append": self._on_append,
            "append_batch": self._on_append_batch,
            "lease": self._on_lease,
            "ack": self._on_ack,
            "nack": self._on_nack,
            "extend_lease": self._on_extend_lease,
            "release": self._on_release,
            "update_record": self._on_update_record,
            "cancel_record": self._on_cancel_record,
            "configure": self._on_configure,
            "retain": self._on_retain,
            "dead_letter_done": self._on_dead_letter_done,
            "forget_group": self._on_forget_group,
            "seek_group": self._on_seek_group,
            "purge": self._on_purge,
            "create_schedule": self._schedule_op(schedule_ops.on_create),
            "pause_schedule": self._schedule_op(schedule_ops.on_pause),
            "delete_schedule": self._schedule_op(schedule_ops.on_delete),
            "fire_schedules": self._schedule_op(schedule_ops.on_fire),
        }
        self._index = 0  # the raft index being applied (a schedule's revision)
        # Schedules kept here: the leader plans firings only when there are some (read
        # without a lock by the broker's backend; kept by schedule_ops, set again on restore).
        self.schedule_count = len(self.store.schedules())

    def _reload(self) -> None:
        self.meta = self.store.load_meta()
        self.config = common_pb2.TopicConfig()
        if self.meta.config:
            self.config.ParseFromString(self.meta.config)
        else:
            self.config.CopyFrom(DEFAULT_CONFIG)

    # -- the replicated entry point -----------------------------------------------------------

    def apply(
        self, data: bytes, raft_index: int, *, respond: bool = True
    ) -> partition_pb2.CommandResult:
        """Apply one committed command. Never raises; see the module docstring.

        ``respond=False`` (a replica nobody waits on: a follower) changes the state exactly
        as ``respond=True`` does but leaves out what only a caller reads: a Lease's deliveries
        and the per-ref results of Ack, Nack and ExtendLease (errors and counts stay)."""
        self._respond = respond
        if raft_index <= self.meta.applied_index:
            return partition_pb2.CommandResult(skipped=True)
        if self.failed is not None:
            return _error(ErrorCode.INTERNAL, f"replica failed earlier: {self.failed!r}")
        try:
            command = partition_pb2.PartitionCommand.FromString(data)
        except (DecodeError, ValueError) as exc:
            return _error(ErrorCode.MALFORMED_COMMAND, f"command does not decode: {exc}")
        op = command.WhichOneof("op")
        if op is None:
            return _error(ErrorCode.MALFORMED_COMMAND, "command names no operation")
        before = self.meta.copy()
        try:
            with self.store.transaction():
                now_ms = max(command.now_ms, self.meta.clock_ms)
                self._index = raft_index
                self._skew_ms = min(max(command.clock_skew_ms, 0), MAX_CLOCK_SKEW_MS)
                result = self._handlers[op](getattr(command, op), now_ms)
                self.meta.clock_ms = now_ms
                self.meta.applied_index = raft_index
                self.store.save_meta(self.meta)
            return result
        except Rejected as rejected:
            self._reload()
            return _error(rejected.code, rejected.message)
        except Exception as exc:  # a bug or a storage failure: stop this replica, never diverge
            self.failed = exc
            log.exception(
                "[topic/partition=%s/%d] apply of index %d failed; replica stopped",
                self.meta.topic,
                self.meta.partition,
                raft_index,
            )
            self.meta = before
            return _error(ErrorCode.INTERNAL, f"apply failed: {exc!r}")

    def _schedule_op(
        self, op: Callable[[PartitionMachine, Any, int, int], partition_pb2.CommandResult]
    ) -> Callable[[Any, int], partition_pb2.CommandResult]:
        """A handler of partitions/schedule_ops.py, given this machine and the raft index."""
        return lambda cmd, now_ms: op(self, cmd, now_ms, self._index)

    def schedules(self) -> list[common_pb2.Schedule]:
        """The schedules kept here, by name."""
        return [common_pb2.Schedule.FromString(blob) for _, blob in self.store.schedules()]

    # -- append -------------------------------------------------------------------------------

    def _on_append(self, cmd: partition_pb2.Append, now_ms: int) -> partition_pb2.CommandResult:
        if cmd.values:
            return self._on_append_values(cmd, now_ms)
        if not cmd.records:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "append carries no records")
        if len(cmd.records) > MAX_APPEND_RECORDS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"over {MAX_APPEND_RECORDS} records")
        incoming = read_records(cmd.records, self.config)
        result = partition_pb2.CommandResult()
        if cmd.producer_id:
            earlier = self._producer_duplicate(cmd.producer_id, cmd.sequence)
            if earlier is not None:
                for o in earlier:
                    result.records.add(offset=o, duplicate=True)
                return result
        offsets, rows, idem, expiries = self._plan_append(incoming, now_ms)
        # Only a tracked producer's rows carry its id and sequence (a retried Spark writer
        # counts what it wrote from its records); any other producer's batch is known by its
        # dedup state alone (producer_put), not by 32 bytes of uuid in every row.
        if is_tracked_producer(cmd.producer_id):
            for row in rows:
                row.producer_id, row.sequence = cmd.producer_id, cmd.sequence
        self.store.insert_records(rows)
        if idem:
            self.store.idempotency_put(idem)
        if expiries:
            self.store.expiry_put(expiries)
        if cmd.producer_id:
            self.store.producer_put(
                cmd.producer_id,
                cmd.sequence,
                [offset for offset, _ in offsets],
                now_ms,
                PRODUCER_BATCHES_KEPT,
            )
        self.meta.next_offset += len(rows)
        self.meta.log_bytes += sum(r.size for r in rows)
        add = result.records.add
        for offset, duplicate in offsets:
            if duplicate:
                add(offset=offset, duplicate=True)
            else:
                add(offset=offset)
        return result

    def _on_append_values(
        self, cmd: partition_pb2.Append, now_ms: int
    ) -> partition_pb2.CommandResult:
        """The fast path: bare values, checked and written without a Python object per value
        (C iterators end to end), answered by one RecordRange."""
        values = cmd.values
        count = len(values)
        if cmd.records:
            raise Rejected(
                ErrorCode.INVALID_ARGUMENT, "an append carries records or values, not both"
            )
        if count > MAX_APPEND_RECORDS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"over {MAX_APPEND_RECORDS} records")
        problem = check_values(values, self.config)
        if problem is not None:
            raise problem
        result = partition_pb2.CommandResult()
        if cmd.producer_id:
            earlier = self._producer_duplicate(cmd.producer_id, cmd.sequence)
            if earlier is not None:
                if earlier == list(range(earlier[0], earlier[0] + len(earlier))):
                    result.range.first_offset, result.range.count = earlier[0], len(earlier)
                    result.range.duplicate = True
                else:  # the batch was written as records: answer as records
                    for o in earlier:
                        result.records.add(offset=o, duplicate=True)
                return result
        first = self.meta.next_offset
        tracked = is_tracked_producer(cmd.producer_id)
        self.store.insert_values(
            first,
            now_ms,
            values,
            cmd.producer_id if tracked else None,
            cmd.sequence if tracked else None,
        )
        if cmd.producer_id:
            self.store.producer_put(
                cmd.producer_id,
                cmd.sequence,
                range(first, first + count),
                now_ms,
                PRODUCER_BATCHES_KEPT,
            )
        self.meta.next_offset += count
        self.meta.log_bytes += sum(map(len, values))
        result.range.first_offset, result.range.count = first, count
        return result

    def _on_append_batch(
        self, cmd: partition_pb2.AppendBatch, now_ms: int
    ) -> partition_pb2.CommandResult:
        """Group-committed Appends: each in its own savepoint, with its own result. A rejected
        Append undoes only itself; the batch as a whole fails only when malformed."""
        if not cmd.appends:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "append_batch carries no appends")
        total = sum(len(append.records) + len(append.values) for append in cmd.appends)
        if total > MAX_APPEND_RECORDS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"over {MAX_APPEND_RECORDS} records")
        result = partition_pb2.CommandResult()
        for append in cmd.appends:
            before = self.meta.copy()
            try:
                with self.store.transaction():  # nested: a savepoint
                    one = self._on_append(append, now_ms)
            except Rejected as rejected:
                self.meta = before
                one = _error(rejected.code, rejected.message)
            result.batch_results.append(one)
        return result

    def _producer_duplicate(self, producer_id: str, sequence: int) -> list[int] | None:
        """Offsets of an already-applied batch, None for the next batch; Rejected otherwise."""
        last = self.store.producer_last_sequence(producer_id)
        if last is None or sequence == last + 1:
            return None
        earlier = self.store.producer_batch(producer_id, sequence)
        if earlier is not None:
            return earlier
        if sequence > last:
            raise Rejected(
                ErrorCode.OUT_OF_ORDER_SEQUENCE,
                f"producer {producer_id!r} sent sequence {sequence} after {last}: a batch is "
                "missing; resend it, or restart with a new producer id",
            )
        raise Rejected(
            ErrorCode.OUT_OF_ORDER_SEQUENCE,
            f"producer {producer_id!r} sequence {sequence} is older than the batches "
            f"remembered (last {last}); it cannot be deduplicated",
        )

    def _plan_append(
        self, incoming: Sequence[Incoming], now_ms: int
    ) -> tuple[
        list[tuple[int, bool]], list[RecordRow], list[tuple[str, int, int]], list[tuple[int, int]]
    ]:
        """Decide offsets and dedup for a batch: per record (offset, duplicate), the rows to
        insert, the idempotency keys to remember and the (offset, expires_at_ms) of each record
        with its own ttl_ms (the topic's is judged at lease time). Reads the store; writes
        nothing."""
        keys = [r[5] for r in incoming if r[5]]
        window_start = now_ms - self._skew_ms - self.config.dedup_window_ms
        known: dict[str, int] = {}
        if keys:
            for key, (offset, ts) in self.store.idempotency_lookup(keys).items():
                if ts >= window_start:
                    known[key] = offset
        offsets: list[tuple[int, bool]] = []
        rows: list[RecordRow] = []
        idem: list[tuple[str, int, int]] = []
        expiries: list[tuple[int, int]] = []
        offset = self.meta.next_offset
        for rkey, value, headers, priority, deliver_at_ms, key, size, ttl_ms in incoming:
            if key and key in known:
                offsets.append((known[key], True))
                continue
            rows.append(
                RecordRow(
                    offset,
                    now_ms,
                    rkey,
                    value,
                    headers,
                    priority,
                    deliver_at_ms,
                    key or None,
                    None,
                    None,
                    size,
                )
            )
            offsets.append((offset, False))
            if key:
                known[key] = offset
                idem.append((key, offset, now_ms))
            if ttl_ms:
                expiries.append((offset, min(now_ms + ttl_ms, INT64_MAX)))
            offset += 1
        return offsets, rows, idem, expiries

    # -- leasing ------------------------------------------------------------------------------

    def _group(self, name: str, start_from: int = partition_pb2.EARLIEST) -> GroupRow:
        if not name or len(name) > MAX_NAME_CHARS:
            raise Rejected(
                ErrorCode.INVALID_ARGUMENT, f"group name must be 1-{MAX_NAME_CHARS} characters"
            )
        group = self.store.group_get(name)
        if group is None:
            start = self.meta.log_start if start_from == partition_pb2.EARLIEST else None
            group = self.store.group_create(name, self.meta.next_offset if start is None else start)
        return group

    def _catch_up(self, group: GroupRow, now_ms: int, *, materialize: bool = True) -> None:
        """Materialize new records into the group's timeline; expire due waits (DLQ first).
        The order does not matter: a new row is never due-waiting nor delivered yet."""
        if materialize:
            self._materialize(group, now_ms)
        if self.config.max_deliveries:
            exhausted = self.store.due_offsets(
                group.gid, now_ms, self.config.max_deliveries, self._skew_ms
            )
            if exhausted:
                rows = self.store.pending_get(group.gid, exhausted)
                self._dead_letter(group, list(rows.values()), "max_deliveries", now_ms)
        self.store.promote(group.gid, now_ms, self._skew_ms)

    def _materialize(
        self,
        group: GroupRow,
        now_ms: int,
        end_offset: int | None = None,
        owner: str | None = None,
        deadline_ms: int = 0,
    ) -> None:
        """Give ``group`` its pending rows up to ``end_offset`` (exclusive; the end of the log
        when None), the visible ones leased to ``owner`` when given."""
        end = self.meta.next_offset if end_offset is None else end_offset
        if group.materialized_upto < end:
            start = max(group.materialized_upto, self.meta.log_start)
            self.store.materialize(
                group.gid,
                start,
                now_ms,
                self.config.ordering,
                end,
                owner,
                deadline_ms,
                _fair_key(self.config),
            )
            group.materialized_upto = end
            self.store.group_set_materialized(group.gid, group.materialized_upto)

    def _dead_letter(
        self, group: GroupRow, rows: list[PendingRow], reason: str, now_ms: int
    ) -> None:
        rows = sorted(rows, key=lambda p: p.offset)
        records = self.store.get_records([p.offset for p in rows])
        outbox = []
        for p in rows:
            record = records.get(p.offset)
            if record is None:
                continue
            self.meta.outbox_seq += 1
            outbox.append(
                OutboxRow(
                    self.meta.outbox_seq,
                    group.name,
                    p.offset,
                    reason,
                    p.delivery_count,
                    now_ms,
                    stored_record(record).SerializeToString(deterministic=True),
                )
            )
        self.store.outbox_put(outbox)
        self.store.pending_delete(group.gid, [p.offset for p in rows])

    def _on_lease(self, cmd: partition_pb2.Lease, now_ms: int) -> partition_pb2.CommandResult:
        if not cmd.member:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "member must be set")
        if not 1 <= cmd.max_records <= MAX_LEASE_RECORDS:
            raise Rejected(
                ErrorCode.INVALID_ARGUMENT, f"max_records must be 1..{MAX_LEASE_RECORDS}"
            )
        if not 0 <= cmd.lease_ms <= MAX_LEASE_MS or cmd.max_bytes < 0 or cmd.generation < 0:
            raise Rejected(
                ErrorCode.INVALID_ARGUMENT,
                f"lease_ms must be 0..{MAX_LEASE_MS} (0 = the topic's), max_bytes and generation"
                " >= 0",
            )
        if cmd.generation and cmd.generation < self.store.fence_get(cmd.group):
            raise Rejected(
                ErrorCode.FENCED,
                f"generation {cmd.generation} is older than group {cmd.group!r}'s fence on this "
                "partition: a rebalance revoked it; rejoin to get the current assignment",
            )
        group = self._group(cmd.group, cmd.start_from)
        # fifo: the group's ready rows come first (lower offsets), then fresh records straight
        # from the log, whose pending rows are then written already leased (one write each,
        # not a ready row updated); priority: fresh records may outrank ready rows, so they are
        # materialized first and everything is chosen from the ready rows.
        fifo = self.config.ordering == common_pb2.FIFO
        self._catch_up(group, now_ms, materialize=not fifo)
        deadline = min(now_ms + (cmd.lease_ms or self.config.lease_ms), INT64_MAX)
        # A replica nobody waits on needs only (offset, delivery_count, size): no record
        # columns read into Python. The size (row[-1] in both forms) is what max_bytes counts.
        # A topic ttl_ms is judged by each record's timestamp: not slim then.
        slim = not self._respond and not self.config.ttl_ms
        chosen = self._choose(group, cmd, now_ms, slim=slim, fifo=fifo)
        for rounds in range(1, EXPIRY_ROUNDS + 1):  # expired records are ended, never leased
            expired = self._expire(group, chosen, now_ms)
            if not expired:
                break
            if rounds == EXPIRY_ROUNDS:
                chosen = [row for row in chosen if row[0] not in expired]
            else:
                chosen = self._choose(group, cmd, now_ms, slim=slim, fifo=fifo)
        fresh_from = max(group.materialized_upto, self.meta.log_start)
        max_bytes = cmd.max_bytes
        if max_bytes:  # at least one record; stop before the one that would go over
            total, cut = 0, len(chosen)
            for i, row in enumerate(chosen):
                if i and total + row[-1] > max_bytes:
                    cut = i
                    break
                total += row[-1]
            chosen = chosen[:cut]
        taken = [row[0] for row in chosen]
        if fifo:
            # Only the log up to the last fresh record taken gets pending rows: the rest stays
            # "fresh" (not materialized) until a Lease takes it, so draining a backlog writes
            # each row once (leased) instead of once ready and again leased.
            fresh = [o for o in taken if o >= fresh_from]
            if fresh:
                self._materialize(group, now_ms, fresh[-1] + 1, cmd.member, deadline)
            self.store.lease(group.gid, taken[: len(taken) - len(fresh)], cmd.member, deadline)
        else:
            self.store.lease(group.gid, taken, cmd.member, deadline)
            if self.config.ordering == common_pb2.FAIR:
                self.store.fair_served(group.gid, taken)  # the keys served go to the back
        result = partition_pb2.CommandResult()
        if not self._respond:  # the same records taken, no Delivery built
            return result
        if cmd.columns and chosen and _fill_columns(result.columns, chosen, deadline):
            return result
        add = result.deliveries.add
        # One Delivery per record, initialised from a dict in one call: setting the nested
        # fields one by one costs about 1.6x more (the lease's largest Python cost).
        for offset, count, ts, key, value, headers, priority, at_ms, idem, _ in chosen:
            record: dict[str, Any] = {"value": value}
            if priority:  # proto3 scalars: a zero left unset is the same message
                record["priority"] = priority
            if at_ms:
                record["deliver_at_ms"] = at_ms
            if idem:
                record["idempotency_key"] = idem
            if key is not None:
                record["key"] = key
            delivery = add(
                record={"offset": offset, "timestamp_ms": ts, "record": record},
                delivery_count=count + 1,
                lease_deadline_ms=deadline,
            )
            if headers:
                delivery.record.record.MergeFromString(headers)  # a Record of only the headers
        return result

    def _choose(
        self, group: GroupRow, cmd: partition_pb2.Lease, now_ms: int, *, slim: bool, fifo: bool
    ) -> list[Any]:
        """The records a Lease would take, in delivery order: the group's ready rows (fair:
        round robin over its rotation of fair keys), then (fifo) fresh records from the log.
        Dead-letters the ready rows already at max_deliveries (after it was lowered) instead of
        choosing them."""
        if self.config.ordering == common_pb2.FAIR:
            return self._choose_fair(group, cmd.max_records, now_ms, slim=slim)
        chosen: list[Any] = (
            self.store.select_ready_offsets(group.gid, cmd.max_records)
            if slim
            else self.store.select_ready_records(group.gid, cmd.max_records)
        )
        limit = self.config.max_deliveries
        if limit:  # only after max_deliveries was lowered
            spent = [r[0] for r in chosen if r[1] >= limit]
            if spent:
                rows = self.store.pending_get(group.gid, spent)
                self._dead_letter(group, list(rows.values()), "max_deliveries", now_ms)
                chosen = [r for r in chosen if r[1] < limit]
        fresh_from = max(group.materialized_upto, self.meta.log_start)
        if fifo and len(chosen) < cmd.max_records and fresh_from < self.meta.next_offset:
            more = cmd.max_records - len(chosen)
            chosen += (
                self.store.fresh_offsets(fresh_from, now_ms, more)
                if slim
                else self.store.fresh_records(fresh_from, now_ms, more)
            )
        return chosen

    def _choose_fair(self, group: GroupRow, n: int, now_ms: int, *, slim: bool) -> list[Any]:
        """_choose of a fair topic. Rows already at max_deliveries are dead-lettered and the
        choice made again, so the order stays the rotation's (each round removes rows)."""
        limit = self.config.max_deliveries
        while True:
            chosen: list[Any] = (
                self.store.select_fair_offsets(group.gid, n)
                if slim
                else self.store.select_fair_records(group.gid, n)
            )
            spent = [r[0] for r in chosen if limit and r[1] >= limit]
            if not spent:
                return chosen
            rows = self.store.pending_get(group.gid, spent)
            self._dead_letter(group, list(rows.values()), "max_deliveries", now_ms)

    def _expire(self, group: GroupRow, chosen: list[Any], now_ms: int) -> set[int]:
        """End in ``group`` those ``chosen`` records (not yet leased; ReadyRecords, or slim
        rows when the topic has no ttl_ms) whose time to live ran out: dropped (acknowledged)
        or dead-lettered with reason "expired", by the topic's ttl_action. A record's own
        ttl_ms was fixed when appended; else the topic's current ttl_ms counts from the
        record's timestamp. Judged like retention, ``clock_skew_ms`` late: a record expires
        once ``now_ms - clock_skew_ms`` reaches its ``timestamp_ms + ttl_ms``, never early by
        a true clock. Returns the offsets ended."""
        if not chosen:
            return set()
        topic_ttl_ms = self.config.ttl_ms
        expiries = self.store.expiry_get(list(map(_OFFSET, chosen)))
        cutoff = now_ms - self._skew_ms
        if not expiries and (
            not topic_ttl_ms or min(map(_TIMESTAMP, chosen)) > cutoff - topic_ttl_ms
        ):
            return set()  # the usual case, decided by C-level calls
        expired = []
        for row in chosen:
            at_ms = expiries.get(row[0])
            if at_ms is None and topic_ttl_ms:
                at_ms = row[2] + topic_ttl_ms  # the record's timestamp
            if at_ms is not None and at_ms <= cutoff:
                expired.append(row[0])
        expired.sort()
        if not expired:
            return set()
        if expired[-1] >= group.materialized_upto:  # fresh records get their pending rows
            self._materialize(group, now_ms, expired[-1] + 1)
        rows = self.store.pending_get(group.gid, expired)
        if self.config.ttl_action == common_pb2.TTL_DEAD_LETTER:
            self._dead_letter(group, list(rows.values()), "expired", now_ms)
        else:
            self.store.pending_delete(group.gid, expired)
        self.expired_total += len(rows)
        return set(expired)

    def _check_refs(
        self,
        group_name: str,
        member: str,
        refs: Sequence[tuple[int, int]],
        now_ms: int,
        result: partition_pb2.CommandResult,
        *,
        failures_only: bool = False,
    ) -> tuple[GroupRow, dict[int, PendingRow]]:
        """Which (offset, delivery_count) refs name a live lease of ``member``; adds one
        RefResult per ref to ``result`` (with an error for the others), or with
        ``failures_only`` one per ref that failed."""
        if not member:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "member must be set")
        if not 1 <= len(refs) <= MAX_REFS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"name 1..{MAX_REFS} records")
        group = self.store.group_get(group_name)
        if group is None:
            raise Rejected(ErrorCode.UNKNOWN_GROUP, f"group {group_name!r} has leased nothing here")
        rows = self.store.pending_get(group.gid, [offset for offset, _ in refs])
        held: dict[int, PendingRow] = {}
        add = result.refs.add if self._respond else _no_result
        add_ok = _no_result if failures_only else add
        for offset, count in refs:
            row = rows.get(offset)
            if (  # the usual case, tested inline: _ref_error would answer OK
                row is not None
                and row.owner == member
                and row.delivery_count == count != 0
                and not row.ready
                and row.visible_at_ms > now_ms
                and offset not in held
            ):
                held[offset] = row
                add_ok(offset=offset)
                continue
            error, message = self._ref_error(count, row, member, now_ms)
            if error == _OK and offset in held:
                error, message = ErrorCode.INVALID_ARGUMENT, "offset named twice"
            if error == _OK:
                held[offset] = rows[offset]
                add_ok(offset=offset)
            else:
                add(offset=offset, error=error, message=message)
        return group, held

    def _ref_error(
        self, count: int, row: PendingRow | None, member: str, now_ms: int
    ) -> tuple[int, str]:
        if row is None or row.delivery_count == 0:
            return (
                ErrorCode.RECORD_NOT_FOUND,
                "no delivery of this record to the group is pending (acked, never delivered, "
                "or gone)",
            )
        if row.delivery_count != count:
            return (
                ErrorCode.LEASE_EXPIRED,
                f"delivery {count} is over; the record is at delivery {row.delivery_count}",
            )
        if row.ready or row.visible_at_ms <= now_ms:
            return ErrorCode.LEASE_EXPIRED, "the lease ended; the record will be redelivered"
        if row.owner != member:
            return ErrorCode.NOT_LEASED, "the record is not leased to this member"
        return _OK, ""

    def _on_ack(self, cmd: partition_pb2.Settle, now_ms: int) -> partition_pb2.CommandResult:
        """Acks are idempotent: acking a record the group has already finished (acked, or
        dead-lettered) succeeds again, so a retry whose first attempt applied — a leader that
        died after committing it — is not answered RECORD_NOT_FOUND.

        The compact form (``offsets``/``delivery_counts``) is answered with only the refs
        that failed."""
        result = partition_pb2.CommandResult()
        compact = bool(cmd.offsets or cmd.delivery_counts)
        if compact and cmd.refs:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "name refs or offsets, not both")
        if compact and len(cmd.offsets) != len(cmd.delivery_counts):
            raise Rejected(
                ErrorCode.INVALID_ARGUMENT, "offsets and delivery_counts differ in length"
            )
        refs = (
            list(zip(cmd.offsets, cmd.delivery_counts, strict=True))
            if compact
            else [(r.offset, r.delivery_count) for r in cmd.refs]
        )
        if compact and cmd.member and 1 <= len(refs) <= MAX_REFS:
            # The usual case in one query and C-level dict compares: every ref names a live
            # lease of this member, once. Anything else takes the per-ref path below.
            group = self.store.group_get(cmd.group)
            wanted = dict(refs)
            if group is not None and len(wanted) == len(refs):
                offsets = list(wanted)
                if self.store.pending_leases(group.gid, offsets, cmd.member, now_ms) == wanted:
                    self.store.pending_delete(group.gid, offsets)
                    result.count = len(offsets)
                    return result
        group, held = self._check_refs(
            cmd.group, cmd.member, refs, now_ms, result, failures_only=compact
        )
        self.store.pending_delete(group.gid, list(held))
        result.count = len(held)
        missing = [r for r in result.refs if r.error == ErrorCode.RECORD_NOT_FOUND]
        if missing:
            start = self.meta.log_start
            upto = group.materialized_upto
            candidates = [r.offset for r in missing if start <= r.offset < upto]
            finished = set(self.store.get_records(candidates)) if candidates else set()
            pending = self.store.pending_get(group.gid, candidates) if candidates else {}
            for ref in missing:
                if ref.offset in finished and ref.offset not in pending:
                    ref.error = _OK
                    ref.message = "already acknowledged or dead-lettered for this group"
            if compact:  # only failures are answered
                failed = [r for r in result.refs if r.error != _OK]
                del result.refs[:]
                result.refs.extend(failed)
        return result

    def _on_nack(self, cmd: partition_pb2.Nack, now_ms: int) -> partition_pb2.CommandResult:
        if cmd.HasField("delay_ms") and not 0 <= cmd.delay_ms <= MAX_DELAY_MS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"delay_ms must be 0..{MAX_DELAY_MS}")
        result = partition_pb2.CommandResult()
        group, held = self._check_refs(cmd.group, cmd.member, _pairs(cmd.refs), now_ms, result)
        limit = self.config.max_deliveries
        spent = [p for p in held.values() if limit and p.delivery_count >= limit]
        if spent:
            self._dead_letter(group, spent, "max_deliveries", now_ms)
            dead = {p.offset for p in spent}
            for ref in result.refs:
                ref.dead_lettered = ref.offset in dead and ref.error == _OK
        retry = []
        for p in held.values():
            if limit and p.delivery_count >= limit:
                continue
            delay = cmd.delay_ms if cmd.HasField("delay_ms") else None
            if delay is None:
                delay = nack_backoff_ms(self.config, p.delivery_count)
            p.ready, p.owner, p.visible_at_ms = False, None, min(now_ms + delay, INT64_MAX)
            retry.append(p)
        self.store.pending_put(group.gid, retry)
        result.count = len(held)
        return result

    def _on_extend_lease(
        self, cmd: partition_pb2.ExtendLease, now_ms: int
    ) -> partition_pb2.CommandResult:
        if not 0 < cmd.lease_ms <= MAX_LEASE_MS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"lease_ms must be 1..{MAX_LEASE_MS}")
        result = partition_pb2.CommandResult()
        group, held = self._check_refs(cmd.group, cmd.member, _pairs(cmd.refs), now_ms, result)
        deadline = min(now_ms + cmd.lease_ms, INT64_MAX)
        for p in held.values():
            p.visible_at_ms = deadline
        self.store.pending_put(group.gid, list(held.values()))
        result.count = len(held)
        result.lease_deadline_ms = deadline  # by partition time, not a broker's clock
        return result

    def _on_release(self, cmd: partition_pb2.Release, now_ms: int) -> partition_pb2.CommandResult:
        if cmd.generation > self.store.fence_get(cmd.group):  # fences only rise
            self.store.fence_set(cmd.group, cmd.generation)
        group = self.store.group_get(cmd.group)
        if group is None:
            return partition_pb2.CommandResult(count=0)
        if cmd.undelivered:
            return partition_pb2.CommandResult(count=self._undeliver(group, cmd, now_ms))
        released = self.store.release(group.gid, cmd.member or None, now_ms)
        return partition_pb2.CommandResult(count=released)

    def _undeliver(self, group: GroupRow, cmd: partition_pb2.Release, now_ms: int) -> int:
        """End the named live leases of ``cmd.member`` and take their delivery back: due now,
        delivery_count one lower (nothing leased that was not delivered counts as a delivery).
        A ref that names no live lease of the member (acked, expired, redelivered) is skipped."""
        if not cmd.member:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "member must be set to name deliveries")
        if len(cmd.undelivered) > MAX_REFS:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, f"name 1..{MAX_REFS} records")
        refs = _pairs(cmd.undelivered)
        rows = self.store.pending_get(group.gid, [offset for offset, _ in refs])
        back: dict[int, PendingRow] = {}
        for offset, count in refs:
            row = rows.get(offset)
            if (
                row is not None
                and row.owner == cmd.member
                and row.delivery_count == count != 0
                and not row.ready
                and row.visible_at_ms > now_ms
            ):
                back[offset] = dataclasses.replace(
                    row, visible_at_ms=now_ms, owner=None, delivery_count=count - 1
                )
        self.store.pending_put(group.gid, list(back.values()))
        return len(back)

    def _on_forget_group(
        self, cmd: partition_pb2.ForgetGroup, now_ms: int
    ) -> partition_pb2.CommandResult:
        """A deleted group's state goes (proto/partition.proto ForgetGroup); the outbox stays."""
        if not cmd.group:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "name the group to forget")
        return partition_pb2.CommandResult(count=self.store.group_forget(cmd.group))

    def _on_seek_group(
        self, cmd: partition_pb2.SeekGroup, now_ms: int
    ) -> partition_pb2.CommandResult:
        """Move the group's committed offset to the resolved target (proto SeekGroup): its
        pending rows here are replaced by fresh ones from the target on (materialized lazily)."""
        if not cmd.group or len(cmd.group) > MAX_NAME_CHARS:
            raise Rejected(
                ErrorCode.INVALID_ARGUMENT, f"group name must be 1-{MAX_NAME_CHARS} characters"
            )
        target = self._seek_target(cmd)
        fence = self.store.fence_get(cmd.group)
        dropped = self.store.group_forget(cmd.group)
        self.store.group_create(cmd.group, target)
        if fence:
            self.store.fence_set(cmd.group, fence)
        return partition_pb2.CommandResult(count=dropped, offset=target)

    def _seek_target(self, cmd: partition_pb2.SeekGroup) -> int:
        start, end = self.meta.log_start, self.meta.next_offset
        if cmd.to == partition_pb2.SEEK_EARLIEST:
            return start
        if cmd.to == partition_pb2.SEEK_LATEST:
            return end
        if cmd.to == partition_pb2.SEEK_OFFSET:
            if cmd.offset < 0:
                raise Rejected(ErrorCode.INVALID_ARGUMENT, "seek offset must be >= 0")
            return min(max(cmd.offset, start), end)
        if cmd.to == partition_pb2.SEEK_TIMESTAMP:
            if cmd.timestamp_ms < 0:
                raise Rejected(ErrorCode.INVALID_ARGUMENT, "seek timestamp_ms must be >= 0")
            found = self.store.first_offset_since(cmd.timestamp_ms)
            return end if found is None else max(found, start)
        raise Rejected(ErrorCode.INVALID_ARGUMENT, f"unknown seek target {cmd.to}")

    # -- moving records on the timeline -------------------------------------------------------

    def _on_update_record(
        self, cmd: partition_pb2.UpdateRecord, now_ms: int
    ) -> partition_pb2.CommandResult:
        if not cmd.HasField("priority") and not cmd.HasField("deliver_at_ms"):
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "set priority, deliver_at_ms or both")
        if cmd.HasField("deliver_at_ms") and cmd.deliver_at_ms < 0:
            raise Rejected(ErrorCode.INVALID_ARGUMENT, "deliver_at_ms must be >= 0")
        row = self.store.get_record(cmd.offset)
        if row is None:
            raise Rejected(ErrorCode.RECORD_NOT_FOUND, f"no record at offset {cmd.offset}")
        priority = cmd.priority if cmd.HasField("priority") else row.priority
        deliver_at = cmd.deliver_at_ms if cmd.HasField("deliver_at_ms") else row.deliver_at_ms
        self.store.set_record_schedule(cmd.offset, priority, deliver_at)
        k1, k2 = order_keys(self.config.ordering, priority, deliver_at)
        changed = []
        for gid, p in self.store.pending_for_offset(cmd.offset).items():
            p.k1, p.k2 = k1, k2
            # A lease keeps its deadline until it may be granted again (its deadline + skew).
            leased = p.owner is not None and p.visible_at_ms > now_ms - self._skew_ms
            if cmd.HasField("deliver_at_ms") and not leased:
                p.owner, p.visible_at_ms, p.ready = None, deliver_at, False  # catch-up decides
            changed.append((gid, p))
        for gid, p in changed:
            self.store.pending_put(gid, [p])
        return partition_pb2.CommandResult(count=len(changed))

    def _on_cancel_record(
        self, cmd: partition_pb2.CancelRecord, now_ms: int
    ) -> partition_pb2.CommandResult:
        row = self.store.get_record(cmd.offset)
        if row is None:
            raise Rejected(ErrorCode.RECORD_NOT_FOUND, f"no record at offset {cmd.offset}")
        self.store.delete_record(cmd.offset)
        self.meta.log_bytes -= row.size
        return partition_pb2.CommandResult(count=self.store.pending_delete_offset(cmd.offset))

    # -- configuration, retention, outbox -----------------------------------------------------

    def _on_configure(
        self, cmd: partition_pb2.Configure, now_ms: int
    ) -> partition_pb2.CommandResult:
        problem = check_config(cmd.config)
        if problem is not None:
            raise problem
        if (cmd.config.ordering, _fair_key(cmd.config)) != (
            self.config.ordering,
            _fair_key(self.config),
        ):
            self.store.pending_reorder(
                int(cmd.config.ordering != common_pb2.FIFO), _fair_key(cmd.config)
            )
        self.config.CopyFrom(cmd.config)
        self.meta.config = cmd.config.SerializeToString(deterministic=True)
        if cmd.topic:
            self.meta.topic, self.meta.partition = cmd.topic, cmd.partition
        return partition_pb2.CommandResult()

    def _on_retain(self, cmd: partition_pb2.Retain, now_ms: int) -> partition_pb2.CommandResult:
        start = self.meta.log_start
        safe_now_ms = now_ms - self._skew_ms  # nothing goes before its time by a true clock
        if self.config.retention_ms:
            since = self.store.first_offset_since(safe_now_ms - self.config.retention_ms)
            start = max(start, self.meta.next_offset if since is None else since)
        dropped_bytes = 0
        if self.config.retention_bytes and self.meta.log_bytes > self.config.retention_bytes:
            excess = self.meta.log_bytes - self.config.retention_bytes
            cursor = self.meta.log_start
            while dropped_bytes < excess:
                sizes = self.store.sizes_from(cursor, 1000)
                if not sizes:
                    break
                for offset, size in sizes:
                    if dropped_bytes >= excess:
                        break
                    dropped_bytes += size
                    cursor = offset + 1
            start = max(start, cursor)
        dropped = self._drop_below(start, now_ms)
        window_start = safe_now_ms - self.config.dedup_window_ms
        self.store.idempotency_forget_before(window_start)
        self.store.producer_forget_before(window_start)
        self.store.tracked_cut_forget_before(
            safe_now_ms - max(self.config.dedup_window_ms, TRACKED_CUT_KEEP_MS)
        )
        return partition_pb2.CommandResult(count=dropped)

    def _drop_below(self, start: int, now_ms: int) -> int:
        """Move the log start up to ``start``: delete the records below it and every group's
        pending rows for them (a tracked producer's are counted on: ``tracked_cut_below``).
        Returns the number of records deleted."""
        if start <= self.meta.log_start:
            return 0
        gone = self.store.sizes_from(self.meta.log_start, start - self.meta.log_start)
        gone_bytes = sum(size for offset, size in gone if offset < start)
        dropped = sum(1 for offset, _ in gone if offset < start)
        self.store.tracked_cut_below(start, now_ms)
        self.store.delete_records_below(start)
        self.store.pending_delete_below(start)
        self.meta.log_start = start
        self.meta.log_bytes -= gone_bytes
        return dropped

    def _on_purge(self, cmd: partition_pb2.Purge, now_ms: int) -> partition_pb2.CommandResult:
        """Every record goes: the log start moves to the end offset (proto Purge)."""
        dropped = self._drop_below(self.meta.next_offset, now_ms)
        return partition_pb2.CommandResult(count=dropped, offset=self.meta.log_start)

    def _on_dead_letter_done(
        self, cmd: partition_pb2.DeadLetterDone, now_ms: int
    ) -> partition_pb2.CommandResult:
        return partition_pb2.CommandResult(count=self.store.outbox_delete_upto(cmd.up_to_seq))

    # -- reads that need no Raft --------------------------------------------------------------

    @property
    def applied_index(self) -> int:
        return self.meta.applied_index

    def offsets(self) -> Offsets:
        return Offsets(self.meta.log_start, self.meta.next_offset)

    def fetch(
        self, offset: int, max_records: int, max_bytes: int = 0
    ) -> list[common_pb2.StoredRecord]:
        """Records from ``offset`` (or the log start, if later) in offset order; cancelled
        records leave gaps. At least one record is returned when any exists."""
        return fetch_from(self.store, self.meta, offset, max_records, max_bytes)

    def lag(self, group: str) -> GroupLag | None:
        return lag_of(self.store, self.meta, group)

    def groups(self) -> list[str]:
        return [g.name for g in self.store.groups()]

    def outbox(self, limit: int = 100) -> list[OutboxRow]:
        return self.store.outbox_list(limit)

    def statistics(self) -> dict[str, Any]:
        return {
            "applied_index": self.meta.applied_index,
            "log_start": self.meta.log_start,
            "end_offset": self.meta.next_offset,
            "log_bytes": self.meta.log_bytes,
            "clock_ms": self.meta.clock_ms,
            "dead_letter_outbox": len(self.store.outbox_list(INT32_MAX)),
            "failed": self.failed is not None,
            "groups": {g: self.lag(g) for g in self.groups()},
        }

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self, path: str) -> None:
        """A consistent copy of the partition at the current applied index."""
        self.store.backup_to(path)

    def capture_snapshot(self) -> BackupWriter:
        """Pin the partition at the current applied index (cheap); the returned writer copies
        it to a path later, from any thread (``SqliteStore.pin_backup``)."""
        return self.store.pin_backup()

    def restore(self, path: str, *, take: bool = False) -> None:
        """Replace the state with a snapshot written by ``snapshot``; clears ``failed``.
        ``take``: the file at ``path`` may be moved into place (``restore_from``)."""
        self.store.restore_from(path, take=take)
        self.failed = None
        self._reload()
        self.schedule_count = len(self.store.schedules())
