"""One partition replica: a PartitionMachine over its own SQLite file, driven by a RaftNode.

    send(records) ─► Proposer (group commit) ─► RaftNode.propose ─► journal + majority
                                                                          │ committed
    CommandResult ◄─ Proposer._on_outcome ◄─ PartitionMachine.apply ◄─────┘ (tick thread)

The replica owns three things under ``data_dir``: the partition's SQLite file
(``<group>.sqlite``), and the Raft journal and snapshot of group ``p.<topic_id>.<partition>``.
Only the leader proposes, and it stamps every command first (``stamp``): ``now_ms`` is the
group's quorum clock, the time a majority of the replicas' clocks have reached (the injected
``clock`` is this replica's vote; transport/raft/clocks.py), so one broker's clock, however
wrong, does not move partition time, paced by the leader's monotonic clock so that several
wrong readings at once move it half of ``max_clock_skew_ms`` at most (``now_ms``);
``clock_skew_ms`` is ``max_clock_skew_ms``, the grace the
machine gives leases and retention for the quorum clock's own error (DESIGN.md § Time).
Apply never reads a clock. Reads (``fetch``, ``offsets``, ``lag``) are local
and not linearizable: a deposed leader may serve stale data until it learns of the new term.

Threading. ``apply``, snapshots and restores run on the Raft tick thread (the broker's
RaftDriver thread, or the node's own thread with ``auto_tick``). Every other method is safe from
any thread. ``fetch`` / ``offsets`` / ``lag`` read through a PartitionReader: a second SQLite
connection on the same file (WAL), so they see the last committed apply and never block the
driver thread. ``_state_lock`` guards the machine object itself (apply, snapshot, restore,
``statistics``, and reads when a store is injected, as the tests do with MemoryStore).

Failure. When the machine latches ``failed`` (an I/O error or a bug inside apply; the failing
transaction was rolled back), the replica stops proposing (``Unavailable``), hands leadership to a
peer, refuses to write snapshots (a snapshot must never label stale state with a newer index)
and reports ``healthy: False`` with the reason in ``statistics()``. It keeps acknowledging Raft
appends (its journal is fine), so the group keeps its quorum. What the operator does: fix the
cause (disk full, failing disk), then restart the broker; on start the replica reopens SQLite
at its last committed applied index and replays the journal from there. If the SQLite file
itself is damaged, stop the broker, delete ``<group>.sqlite`` (and ``<group>.snapshot``) and
restart: the replica rebuilds from the journal or from the leader's snapshot.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from raftq.partition_reader import PartitionReader
from raftq.partitions.machine import (
    MAX_CLOCK_SKEW_MS,
    GroupLag,
    Offsets,
    PartitionMachine,
    check_record,
    check_values,
)
from raftq.partitions.reader import FetchResult, ProducerState, might_have_ready, producer_state
from raftq.partitions.rows import OutboxRow
from raftq.partitions.sqlite_store import WAL_SIZE_LIMIT_BYTES, SqliteStore, copy_position
from raftq.partitions.store import PartitionStore
from raftq.proposer import Proposer
from raftq.proto import common_pb2, errors, partition_pb2
from raftq.transport.raft import ApplyError, FailReason, RaftNode, RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.snapshot import remove_paced, remove_retired

logger = logging.getLogger("raftq.broker.replica")

MAX_INFLIGHT_CALLS = 10_000  # outstanding send()/propose() calls per partition
MAX_INFLIGHT_ENTRIES = 4  # Raft entries of one partition proposed and not yet applied
DEFAULT_MAX_CLOCK_SKEW_MS = 2000  # raft.max_clock_skew_ms (broker/config.py says why)


def group_name(topic_id: int, partition: int) -> str:
    return f"p.{topic_id}.{partition}"


class _Waiter:
    """A blocking caller's slot for one outcome."""

    __slots__ = ("error", "event", "result")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.result: Any = None
        self.error: errors.RaftqError | None = None

    def __call__(self, result: Any, error: errors.RaftqError | None) -> None:
        self.result, self.error = result, error
        self.event.set()


class PartitionReplica:
    """One replica of one partition. See the module docstring.

    ``driver``: the broker's RaftDriver; the group registers with it (``auto_tick=False``,
    group commit: one fsync per group per driver round) and its transport comes from the
    driver's endpoint. Without a driver the node ticks on its own thread over
    ``transport_class`` (default: pysyncobj TCP, for tests and tools).

    Raises (constructor): ``errors.Unavailable`` when the transport cannot bind; apsw errors
    when the SQLite file cannot be opened.
    """

    on_applied: Callable[[], None] | None = None  # called on the tick thread after new records
    # Called on the tick thread with each apply's duration in seconds (broker/metrics.py sets
    # it to a histogram's observe). It must not block.
    on_apply_s: Callable[[float], None] | None = None

    def __init__(
        self,
        topic: str,
        partition: int,
        topic_id: int,
        *,
        data_dir: str | Path,
        self_addr: str,
        peers: Sequence[str],
        driver: RaftDriver | None = None,
        transport_class: Callable[..., Any] | None = None,
        secret: str | None = None,
        fsync: bool = True,
        synchronous: str = "FULL",
        timings: RaftTimings | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS,
        max_inflight_entries: int = MAX_INFLIGHT_ENTRIES,
        max_inflight_calls: int = MAX_INFLIGHT_CALLS,
        store: PartitionStore | None = None,
        standby: bool = False,
        cache_kib: int = 2048,
        wal_autocheckpoint_pages: int = 1000,
        wal_size_limit_bytes: int = WAL_SIZE_LIMIT_BYTES,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.name = group_name(topic_id, partition)
        self.where = f"[topic/partition={topic}/{partition}]"
        self._clock = clock
        self._monotonic = monotonic
        if not 0 <= max_clock_skew_ms <= MAX_CLOCK_SKEW_MS:
            raise ValueError(f"max_clock_skew_ms must be 0..{MAX_CLOCK_SKEW_MS}")
        self.max_clock_skew_ms = max_clock_skew_ms
        self._driver = driver
        self.max_inflight_calls = max_inflight_calls
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = str(data_dir / f"{self.name}.sqlite")
        self._sqlite: SqliteStore | None = None
        if store is None:
            remove_retired(path)  # what a crash during a restore's file swap left
            # With a driver, WAL checkpoints run after the driver's round has sent its
            # messages (acks, appends) instead of inside the apply that grew the WAL. A
            # snapshot's restore moves its copy into place; the replaced file is freed in
            # steps off the driver (snapshot.remove_paced).
            store = self._sqlite = SqliteStore(
                path,
                synchronous=synchronous,
                cache_kib=cache_kib,
                wal_autocheckpoint_pages=wal_autocheckpoint_pages,
                wal_size_limit_bytes=wal_size_limit_bytes,
                deferred_checkpoints=driver is not None,
                remove_file=remove_paced,
            )
        self.store: PartitionStore = store
        self._checkpoint_deferred = False
        self._wal_trimmed_at = -1  # entries_applied when the WAL was last truncated to 0
        self.machine = PartitionMachine(self.store)
        # Reads go through a second connection (WAL: committed state, never blocking apply);
        # an injected store (tests) is read under the state lock instead.
        self._reader = None if self._sqlite is None else PartitionReader(SqliteStore(path))
        self._state_lock = threading.Lock()
        self._calls_lock = threading.Lock()
        self._calls = 0
        self._closed = False
        self._failure_handled = False
        self._counters: dict[str, int] = collections.Counter()
        self._apply_s: collections.deque[float] = collections.deque(maxlen=2048)

        timings = timings or RaftTimings()
        if driver is not None:
            if transport_class is not None:
                raise ValueError("give a driver or a transport_class, not both")
            transport_class = driver.endpoint.transport_class(self.name)  # type: ignore[attr-defined]
        self.node = RaftNode(
            self_addr,
            list(peers),
            apply=self._apply,
            snapshot=self._snapshot,
            restore=self._restore,
            capture=self._capture,
            data_dir=data_dir,
            name=self.name,
            fsync=fsync,
            auto_tick=driver is None,
            transport_class=transport_class,
            secret=secret,
            timings=timings,
            group_commit=driver is not None,
            standby=standby,  # joining a running group: no campaigns until its leader calls
            wall_clock=clock,
        )
        self.proposer = Proposer(
            self._propose_bytes,
            stamp=self.stamp,
            clock_s=monotonic,
            is_leader=self.is_leader,
            leader_hint=self.node.hint,
            max_entry_bytes=timings.max_entry_bytes,  # raft.max_entry_bytes: RaftNode's limit
            max_inflight_entries=max_inflight_entries,
            max_queued_sends=max_inflight_calls,
            name=f"{self.where} [group={self.name}]",
        )
        if driver is not None:
            driver.register(self.name, self.node)
        logger.info(
            "%s [group=%s] replica open at applied index %d",
            self.where,
            self.name,
            self.machine.applied_index,
        )

    # -- writes ------------------------------------------------------------------------------

    def send(
        self,
        records: Sequence[common_pb2.Record],
        producer_id: str = "",
        sequence: int = 0,
        *,
        timeout_s: float = 10.0,
    ) -> list[partition_pb2.RecordResult]:
        """Append ``records`` (group-committed with concurrent sends); per record its offset
        (``duplicate`` when answered from dedup state).

        Normal errors: ``NotLeader`` (with ``leader_hint``), ``Unavailable`` (too many in
        flight, replica failed or closed), ``Timeout`` (outcome unknown: retry with the same
        producer_id/sequence), ``InvalidArgument`` / ``RecordTooLarge`` (bad records, checked
        before proposing: nothing was written), ``OutOfOrderSequence``.
        """
        waiter = _Waiter()
        self.send_async(records, waiter, producer_id, sequence)
        result = self._wait(waiter, timeout_s)
        return list(result)

    def send_async(
        self,
        records: Sequence[common_pb2.Record],
        on_done: Callable[
            [list[partition_pb2.RecordResult] | None, errors.RaftqError | None], None
        ],
        producer_id: str = "",
        sequence: int = 0,
    ) -> None:
        """``send`` without blocking: ``on_done(results, error)`` runs exactly once, on this
        thread (refusals) or the Raft tick thread (outcomes). It must not block."""

        def done(
            result: partition_pb2.CommandResult | None, error: errors.RaftqError | None
        ) -> None:
            on_done(None if result is None else list(result.records), error)

        append = partition_pb2.Append(records=records, producer_id=producer_id, sequence=sequence)
        self.append_async(append, done)

    def append(
        self, append: partition_pb2.Append, *, timeout_s: float = 10.0
    ) -> partition_pb2.CommandResult:
        """Append an ``Append`` as it is (records, or bare values: then the result is one
        ``range``), group-committed with concurrent sends. Errors as ``send``."""
        waiter = _Waiter()
        self.append_async(append, waiter)
        result: partition_pb2.CommandResult = self._wait(waiter, timeout_s)
        return result

    def append_async(
        self,
        append: partition_pb2.Append,
        on_done: Callable[[partition_pb2.CommandResult | None, errors.RaftqError | None], None],
    ) -> None:
        """``append`` without blocking: ``on_done(result, error)`` runs exactly once, on this
        thread (refusals) or the Raft tick thread (outcomes). It must not block."""
        try:
            self._check_append(append)
            self._enter()
        except errors.RaftqError as exc:
            on_done(None, exc)
            return

        def done(
            result: partition_pb2.CommandResult | None, error: errors.RaftqError | None
        ) -> None:
            self._leave()
            if error is None and result is not None and result.error:
                error = errors.error_for(result.error, result.message)
            if error is not None or result is None:
                on_done(None, error or errors.Internal("no result"))
                return
            self._count_in(append, result)
            on_done(result, None)

        self.proposer.submit(append, done)

    def _count_in(self, append: partition_pb2.Append, result: partition_pb2.CommandResult) -> None:
        if append.values:
            if result.range.count and not result.range.duplicate:
                self._counters["records_in"] += len(append.values)
                self._counters["bytes_in"] += sum(map(len, append.values))
            return
        for record, outcome in zip(append.records, result.records, strict=False):
            if not outcome.duplicate:
                self._counters["records_in"] += 1
                self._counters["bytes_in"] += len(record.key) + len(record.value)

    def propose(
        self, cmd: partition_pb2.PartitionCommand, timeout_s: float = 10.0
    ) -> partition_pb2.CommandResult:
        """Replicate one command (not group-committed) and return what apply answered; a
        command-level error is in ``result.error``. The leader stamps ``cmd.now_ms``.

        Normal errors: ``NotLeader`` (with ``leader_hint``), ``Unavailable`` (too many in
        flight, replica failed), ``Timeout`` (outcome unknown: retry idempotently),
        ``RecordTooLarge`` (command over the entry size).
        """
        waiter = _Waiter()
        self.propose_async(cmd, waiter)
        result: partition_pb2.CommandResult = self._wait(waiter, timeout_s)
        if result.deliveries:
            self._counters["records_leased"] += len(result.deliveries)
            self._counters["bytes_leased"] += sum(
                len(d.record.record.key) + len(d.record.record.value) for d in result.deliveries
            )
        elif result.HasField("columns"):
            self._counters["records_leased"] += len(result.columns.offsets)
            self._counters["bytes_leased"] += sum(map(len, result.columns.values))
        return result

    def propose_async(
        self,
        cmd: partition_pb2.PartitionCommand,
        on_done: Callable[[Any, errors.RaftqError | None], None],
    ) -> None:
        """``propose`` without blocking: stamps a copy of ``cmd``; ``on_done(result, error)``
        runs exactly once, on this thread (refusals) or the Raft tick thread (outcomes). It
        must not block."""
        try:
            self._check_writable()
            self._enter()
        except errors.RaftqError as exc:
            on_done(None, exc)
            return
        stamped = partition_pb2.PartitionCommand()
        stamped.CopyFrom(cmd)
        self.stamp(stamped)
        data = stamped.SerializeToString()
        if len(data) > self.proposer.max_entry_bytes:
            self._leave()
            on_done(
                None,
                errors.RecordTooLarge(
                    f"{self.where} command is {len(data)} bytes, over the "
                    f"{self.proposer.max_entry_bytes}-byte entry limit"
                ),
            )
            return

        def done(result: object, error: errors.RaftqError | None) -> None:
            self._leave()
            on_done(result, error)

        self._propose_bytes(data, done)

    # -- reads -------------------------------------------------------------------------------

    def fetch(
        self, offset: int, max_records: int = 500, max_bytes: int = 1 << 20
    ) -> list[common_pb2.StoredRecord]:
        """Local read of the log (see ``PartitionMachine.fetch``); not linearizable."""
        if self._reader is not None:
            records = self._reader.fetch(offset, max_records, max_bytes).records
        else:
            with self._state_lock:
                records = self.machine.fetch(offset, max_records, max_bytes)
        self._count_fetched(records)
        return records

    def offsets(self) -> Offsets:
        if self._reader is not None:
            return self._reader.offsets()
        with self._state_lock:
            return self.machine.offsets()

    def lag(self, group: str) -> GroupLag | None:
        if self._reader is not None:
            return self._reader.lags([group])[group]
        with self._state_lock:
            return self.machine.lag(group)

    def producer_state(self, producer_id: str) -> ProducerState | None:
        """An idempotent producer's last applied batch here (None: none remembered)."""
        if self._reader is not None:
            return self._reader.producer_state(producer_id)
        with self._state_lock:
            return producer_state(self.store, producer_id)

    def lags(self) -> list[GroupLag]:
        """The lag of every consumer group that has leased from this partition (one read)."""
        if self._reader is not None:
            return self._reader.all_lags()
        with self._state_lock:
            found = [self.machine.lag(row.name) for row in self.store.groups()]
        return [lag for lag in found if lag is not None]

    @property
    def applied_index(self) -> int:
        """The machine's stored applied index (last entry that changed state)."""
        with self._state_lock:
            return self.machine.applied_index

    def dump(self) -> dict[str, Any]:
        """The whole store, canonical (tests compare replicas with it)."""
        with self._state_lock:
            return self.store.dump()

    def pin_backup(self) -> Callable[[str, threading.Event], None]:
        """Pin the partition's committed state now; the writer copies exactly that state to a
        path from any thread (``SqliteStore.pin_backup``; backups, broker/backup_source.py).
        Normal errors: ``Unavailable`` (replica failed or closed, or a store without files)."""
        with self._state_lock:
            if self.machine.failed is not None or self._closed or self._sqlite is None:
                raise errors.Unavailable(f"{self.where} replica cannot be copied now")
            return self.machine.capture_snapshot()

    @staticmethod
    def copy_position(path: str) -> tuple[int, int]:
        """(applied index, next offset) of a copy written by ``pin_backup``'s writer."""
        return copy_position(path)

    def is_leader(self) -> bool:
        return self.node.is_leader()

    def leader(self) -> str | None:
        return self.node.leader()

    @property
    def healthy(self) -> bool:
        return self.machine.failed is None and not self._closed

    def read_fetch(self, offset: int, max_records: int, max_bytes: int = 0) -> FetchResult:
        """``fetch`` with the log start and end it was read at (one consistent read)."""
        if self._reader is not None:
            fetched = self._reader.fetch(offset, max_records, max_bytes)
        else:
            with self._state_lock:
                offsets = self.machine.offsets()
                records = self.machine.fetch(offset, max_records, max_bytes)
                fetched = FetchResult(records, offsets.log_start, offsets.end)
        self._count_fetched(fetched.records)
        return fetched

    def _count_fetched(self, records: Sequence[common_pb2.StoredRecord]) -> None:
        if records:
            self._counters["records_fetched"] += len(records)
            self._counters["bytes_fetched"] += sum(
                len(r.record.key) + len(r.record.value) for r in records
            )

    def configured(self) -> bool:
        """Whether the partition applied its topic's config (a ``Configure``): before, its
        machine judges commands by the defaults (max_record_bytes, lease_ms, max_deliveries)."""
        return bool(self.machine.meta.config)

    def might_have_ready(self, group: str) -> bool:
        """False only when a Lease for ``group`` stamped now surely returns nothing (long
        polls use it to skip Raft writes). True while appends are in flight here (queued or
        proposed, not yet applied): a Lease proposed now lands behind them in the log and
        applies after them, so a poll woken by an apply also takes the records that follow."""
        if self.proposer.busy():
            return True
        now_ms, grace_ms = self.now_ms(), self.max_clock_skew_ms
        if self._reader is not None:
            return self._reader.might_have_ready(group, now_ms, grace_ms)
        with self._state_lock:
            return might_have_ready(self.store, self.machine.meta, group, now_ms, grace_ms)

    def outbox(self, limit: int) -> list[OutboxRow]:
        """Dead letters waiting to be forwarded, oldest first."""
        if self._reader is not None:
            return self._reader.outbox(limit)
        with self._state_lock:
            return self.machine.outbox(limit)

    def schedules(self) -> list[common_pb2.Schedule]:
        """The recurring records' schedules kept here, by name (their committed state)."""
        if self._reader is not None:
            return self._reader.schedules()
        with self._state_lock:
            return self.machine.schedules()

    def config_bytes(self) -> bytes:
        """The applied topic config (deterministic bytes; b"" before the first Configure)."""
        return self.machine.meta.config

    def statistics(self) -> dict[str, Any]:
        """Counters and state for metrics: records/bytes in (appended here as leader) and out
        (leased, fetched), dead letters (ever, and waiting in the outbox), raft, apply."""
        with self._state_lock:
            offsets = self.machine.offsets()
            outbox = len(self.machine.outbox(MAX_INFLIGHT_CALLS))
            applied = self.machine.applied_index
            failed = self.machine.failed
            dead_lettered = self.machine.meta.outbox_seq  # every record ever dead-lettered here
            expired = self.machine.expired_total  # since this replica started
        latencies = sorted(self._apply_s)

        def pct(p: float) -> float:
            if not latencies:
                return 0.0
            return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 3)

        status = self.node.status()
        return {
            "topic": self.topic,
            "partition": self.partition,
            "group": self.name,
            "healthy": failed is None and not self._closed,
            "failed": repr(failed) if failed is not None else "",
            "records_in": self._counters["records_in"],
            "bytes_in": self._counters["bytes_in"],
            "records_leased": self._counters["records_leased"],
            "bytes_leased": self._counters["bytes_leased"],
            "records_fetched": self._counters["records_fetched"],
            "bytes_fetched": self._counters["bytes_fetched"],
            "dead_lettered": dead_lettered,
            "expired": expired,
            "entries_applied": self._counters["entries_applied"],
            "dead_letter_outbox": outbox,
            "log_start": offsets.log_start,
            "end_offset": offsets.end,
            "applied_index": applied,
            "calls_in_flight": self._calls,
            "raft_state": status["state"],
            "raft_term": status["term"],
            "raft_commit_index": status["commit_index"],
            "raft_applied_index": status["applied_index"],
            "raft_leader": status["leader"] or "",
            "fsync_count": status["fsync_count"],
            "apply_ms_p50": pct(0.5),
            "apply_ms_p99": pct(0.99),
            "apply_ms_max": round(latencies[-1] * 1000, 3) if latencies else 0.0,
            "proposer": self.proposer.statistics(),
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the Raft group (unregister from the driver first) and close the SQLite file.
        Outstanding calls get ``Unavailable``."""
        if self._closed:
            return
        self._closed = True
        self.proposer.close(errors.Unavailable(f"{self.where} replica closed"))
        if self._driver is not None:
            self._driver.unregister(self.name)
        self.node.destroy()
        with self._state_lock:
            self.store.close()
        if self._reader is not None:
            self._reader.close()
        logger.info("%s [group=%s] replica closed", self.where, self.name)

    # -- the Raft side (tick thread) ---------------------------------------------------------

    def _apply(self, data: bytes, index: int) -> partition_pb2.CommandResult:
        started = time.perf_counter()
        with self._state_lock:
            # Only a replica with calls in flight (the leader that proposed) reads results: a
            # follower skips building deliveries and per-ref results (state is the same).
            result = self.machine.apply(data, index, respond=self._calls > 0)
            failed = self.machine.failed
        elapsed_s = time.perf_counter() - started
        self._apply_s.append(elapsed_s)
        if self.on_apply_s is not None:
            self.on_apply_s(elapsed_s)
        self._counters["entries_applied"] += 1
        sqlite = self._sqlite
        if sqlite is not None and sqlite.checkpoint_due and not self._checkpoint_deferred:
            assert self._driver is not None  # deferred checkpoints only with a driver
            self._checkpoint_deferred = True
            self._driver.defer(self._checkpoint)
        if self.on_applied is not None and (
            result.records or result.batch_results or result.range.count
        ):
            self.on_applied()  # new records: wake long polls (must not block)
        if failed is not None and not self._failure_handled:
            self._failure_handled = True
            logger.critical(
                "%s [group=%s] replica FAILED at index %d (%r): it stops proposing and hands "
                "leadership over; fix the disk and restart the broker (see broker/replica.py)",
                self.where,
                self.name,
                index,
                failed,
            )
            if self.node.is_leader():
                self.node.transfer_leadership()
        return result

    def _checkpoint(self) -> None:
        """Driver thread, after its round's flush: the WAL checkpoint the apply put off."""
        self._checkpoint_deferred = False
        with self._state_lock:
            if not self._closed and self._sqlite is not None:
                self._sqlite.checkpoint()

    def entries_applied(self) -> int:
        """How many entries this replica applied since it opened (any thread)."""
        return self._counters["entries_applied"]

    def trim_wal(self) -> Future[bool] | None:
        """Any thread: truncate the SQLite ``-wal`` file to 0 bytes on the driver thread,
        after a checkpoint of all of it (SqliteStore.trim_wal), unless nothing was applied
        since the last trim. The future: True when trimmed or nothing to trim, False when a
        reader was in the way (call again later). None: no SQLite file or no driver here."""
        if self._sqlite is None or self._driver is None:
            return None
        return self._driver.submit(self._trim_wal)

    def _trim_wal(self) -> bool:
        with self._state_lock:
            applied = self._counters["entries_applied"]
            if self._closed or self._sqlite is None or applied == self._wal_trimmed_at:
                return True
            if not self._sqlite.trim_wal():
                return False
            self._wal_trimmed_at = applied
            return True

    def _snapshot(self, path: str) -> None:
        with self._state_lock:
            if self.machine.failed is not None:
                raise RuntimeError(f"{self.where} replica failed: no snapshot of stale state")
            self.machine.snapshot(path)

    def _capture(self) -> Callable[[str, threading.Event], None]:
        """Driver thread: pin the state for a snapshot written off the driver (snapshots.py)."""
        with self._state_lock:
            if self.machine.failed is not None:
                raise RuntimeError(f"{self.where} replica failed: no snapshot of stale state")
            return self.machine.capture_snapshot()

    def _restore(self, path: str) -> None:
        """A snapshot's state copied out to ``path`` (consumed): moved into place while the
        reader's connection is closed (SqliteStore.restore_from)."""
        with self._state_lock:
            if self._closed:
                raise RuntimeError(f"{self.where} replica closed: nothing restored")
            if self._reader is None:
                self.machine.restore(path, take=True)
            else:
                with self._reader.closed():
                    self.machine.restore(path, take=True)
        self._failure_handled = False
        logger.info("%s [group=%s] restored a snapshot", self.where, self.name)

    def _propose_bytes(
        self, data: bytes, on_done: Callable[[object, errors.RaftqError | None], None]
    ) -> None:
        """Propose ``data``; ``on_done(result, error)`` exactly once with a typed error."""
        if self.machine.failed is not None:
            on_done(None, self._failed_error())
            return

        def callback(result: object, err: int) -> None:
            if err == FailReason.SUCCESS:
                if isinstance(result, ApplyError):
                    on_done(None, errors.Internal(f"{self.where} apply raised: {result.message}"))
                elif self.machine.failed is not None and getattr(result, "error", 0) == (
                    errors.ErrorCode.INTERNAL
                ):
                    on_done(None, self._failed_error())
                else:
                    on_done(result, None)
                return
            on_done(None, self._raft_error(err))

        try:
            self.node.propose(data, callback)
        except errors.RaftqError as exc:
            on_done(None, exc)
            return
        if self._driver is not None:
            self._driver.wake(self.name)

    def _raft_error(self, err: int) -> errors.RaftqError:
        where = f"{self.where} [group={self.name}]"
        if err in (FailReason.NOT_LEADER, FailReason.DISCARDED):
            return errors.NotLeader(f"{where} not the leader", leader_hint=self.node.hint())
        if err == FailReason.MISSING_LEADER:
            return errors.Unavailable(f"{where} no leader known")
        if err == FailReason.QUEUE_FULL:
            return errors.Unavailable(f"{where} too many in flight (raft queue full)")
        if err == FailReason.REQUEST_DENIED:
            return errors.Unavailable(f"{where} request denied")
        return errors.Timeout(f"{where} outcome unknown ({FailReason(err).name}): retry")

    def _failed_error(self) -> errors.Unavailable:
        return errors.Unavailable(
            f"{self.where} replica failed ({self.machine.failed!r}); outcome unknown: retry "
            "idempotently against the new leader",
            leader_hint=self.node.hint(),
        )

    # -- helpers -----------------------------------------------------------------------------

    def now_ms(self) -> int:
        """Partition time as this replica would stamp it now (meaningful on the leader): the
        group's quorum clock, on the leader paced by its monotonic clock since its term's first
        stamp and at most half of ``max_clock_skew_ms`` ahead of that pace, so clocks put
        right and jumping at once move it that much at most (RaftNode.stamp_clock_ms,
        transport/raft/clocks.py); while fewer than a majority of the
        replicas have been heard from, the time already applied (no clock unheard by a
        quorum moves it; a partition that never applied a stamp takes its own clock)."""
        quorum_ms = self.node.stamp_clock_ms(headroom_ms=self.max_clock_skew_ms // 2)
        if quorum_ms is not None:
            return quorum_ms
        applied_ms = self.machine.meta.clock_ms
        return applied_ms if applied_ms else int(self._clock() * 1000)

    def stamp(self, command: partition_pb2.PartitionCommand) -> None:
        """Stamp ``command`` for proposing: ``now_ms`` and ``clock_skew_ms``."""
        command.now_ms = self.now_ms()
        command.clock_skew_ms = self.max_clock_skew_ms

    def _check_writable(self) -> None:
        if self._closed:
            raise errors.Unavailable(f"{self.where} replica closed")
        if self.machine.failed is not None:
            raise self._failed_error()
        if not self.node.is_leader():
            raise errors.NotLeader(f"{self.where} not the leader", leader_hint=self.node.hint())

    def _check_append(self, append: partition_pb2.Append) -> None:
        """Refuse, before proposing, what apply would reject record by record."""
        self._check_writable()
        if not append.records and not append.values:
            raise errors.InvalidArgument(f"{self.where} a send needs at least one record")
        if append.records and append.values:
            raise errors.InvalidArgument(f"{self.where} a send carries records or values, not both")
        config = common_pb2.TopicConfig()
        with self._state_lock:
            config.CopyFrom(self.machine.config)
        if append.values:
            problem = check_values(append.values, config)
            if problem is not None:
                raise errors.error_for(problem.code, f"{self.where} {problem.message}")
            return
        for i, record in enumerate(append.records):
            problem = check_record(record, config)
            if problem is not None:
                raise errors.error_for(problem.code, f"{self.where} record {i}: {problem.message}")

    def _enter(self) -> None:
        with self._calls_lock:
            if self._calls >= self.max_inflight_calls:
                raise errors.Unavailable(
                    f"{self.where} too many in flight ({self._calls} calls): back off and retry"
                )
            self._calls += 1

    def _leave(self) -> None:
        with self._calls_lock:
            self._calls -= 1

    def _wait(self, waiter: _Waiter, timeout_s: float) -> Any:
        """Wait for an outcome, doing the proposer's housekeeping every 50 ms."""
        deadline = self._monotonic() + timeout_s
        while not waiter.event.wait(min(0.05, max(0.0, deadline - self._monotonic()))):
            if self._monotonic() >= deadline:
                raise errors.Timeout(f"{self.where} no outcome in {timeout_s:.3g} s: retry")
            self.proposer.maintain()
        if waiter.error is not None:
            raise waiter.error
        return waiter.result
