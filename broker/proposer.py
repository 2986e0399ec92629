"""Group commit of sends: concurrent appends to one partition leader share one Raft entry.

Every Raft entry costs a journal write, an fsync on a majority, a round trip and an SQLite
transaction per replica. Paying that once for many sends is where a partition's append
throughput comes from (PYSYNCOBJ.md: batched entries reached 152k records/s).

How it works (no linger timer, no thread of its own):

- ``submit`` queues an ``Append`` and *pumps*: while fewer than ``max_inflight_entries`` entries
  are in flight, it takes everything queued (up to ``max_entry_bytes`` and
  ``max_entry_records``) and proposes it as ONE entry: an ``Append`` when alone, else an
  ``AppendBatch`` (each Append keeps its own producer_id/sequence and gets its own result).
- When an entry's outcome is known (on the Raft tick thread) its sends are answered and the
  queue is pumped again: what accumulated while the previous entries were in flight goes out
  together. Light load: one send per entry, no added latency. Heavy load: the cap is reached
  and batches grow by themselves.
- Entries are proposed in queue order under one lock, so one producer's pipelined sequences
  stay in order in the log.

Outcomes reach the caller through ``on_done(result, error)`` exactly once: the Append's own
``CommandResult`` (which may carry a per-Append error code), or a typed error: ``NotLeader``
(not proposed, or overwritten by a new leader: safe to retry), ``Timeout`` (outcome unknown:
retry idempotently), ``Unavailable`` (queue full, closed, replica failed).

Threading: ``submit``, ``maintain`` and ``close`` may be called from any thread; completions
run on the Raft tick thread and must not block (they only set results and propose).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from raftq.proto import errors, partition_pb2

logger = logging.getLogger("raftq.broker.proposer")

# What a batch's framing adds around its Appends: now_ms (11 bytes), clock_skew_ms (at most
# 6), the op tag and length (6), and per Append a tag plus a length varint (at most 6). Checked
# against the real size below.
_ENTRY_OVERHEAD_BYTES = 32
_PER_APPEND_OVERHEAD_BYTES = 6

Done = Callable[[partition_pb2.CommandResult | None, errors.RaftqError | None], None]
# propose(data, callback(result, error)) -> None; raises nothing, calls back exactly once.
ProposeFn = Callable[[bytes, Callable[[object, errors.RaftqError | None], None]], None]


@dataclass(eq=False)
class _Send:
    append: partition_pb2.Append
    size: int
    records: int
    on_done: Done
    finished: bool = False


@dataclass(eq=False)
class _Entry:
    sends: list[_Send]
    proposed_at_s: float
    done: bool = False


@dataclass
class ProposerStats:
    sends: int = 0
    entries: int = 0
    batched_sends: int = 0  # sends that shared their entry with at least one other
    max_sends_per_entry: int = 0
    rejected_queue_full: int = 0
    expired_entries: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class Proposer:
    """Coalesces one partition leader's appends into Raft entries. See the module docstring."""

    def __init__(
        self,
        propose: ProposeFn,
        *,
        stamp: Callable[[partition_pb2.PartitionCommand], None],
        clock_s: Callable[[], float],
        is_leader: Callable[[], bool],
        leader_hint: Callable[[], str],
        max_entry_bytes: int = 1 << 20,
        max_entry_records: int = 100_000,
        max_inflight_entries: int = 4,
        max_queued_sends: int = 10_000,
        max_queued_bytes: int = 64 << 20,
        entry_expiry_s: float = 60.0,
        name: str = "",
    ) -> None:
        if max_inflight_entries < 1 or max_entry_bytes < 1024:
            raise ValueError("need max_inflight_entries >= 1 and max_entry_bytes >= 1024")
        self._propose = propose
        self._stamp = stamp
        self._clock_s = clock_s
        self._is_leader = is_leader
        self._leader_hint = leader_hint
        self.max_entry_bytes = max_entry_bytes
        self.max_entry_records = max_entry_records
        self.max_inflight_entries = max_inflight_entries
        self.max_queued_sends = max_queued_sends
        self.max_queued_bytes = max_queued_bytes
        self.entry_expiry_s = entry_expiry_s
        self.name = name
        self._lock = threading.Lock()  # queue, in-flight set, stats
        self._propose_lock = threading.Lock()  # order of proposals = order of the queue
        self._pumping: int | None = None  # the thread inside pump's loop (under _propose_lock)
        self._queue: collections.deque[_Send] = collections.deque()
        self._queued_bytes = 0
        self._inflight: set[_Entry] = set()
        self._closed: errors.RaftqError | None = None
        self.stats = ProposerStats()

    # -- API ---------------------------------------------------------------------------------

    def max_append_bytes(self) -> int:
        """The largest encoded Append one entry can carry."""
        return self.max_entry_bytes - _ENTRY_OVERHEAD_BYTES - _PER_APPEND_OVERHEAD_BYTES

    def submit(self, append: partition_pb2.Append, on_done: Done) -> None:
        """Queue ``append`` for the next entry; ``on_done`` is called exactly once (possibly
        before this returns). Refuses (via ``on_done``) with ``Unavailable`` when the queue is
        full or closed, ``RecordTooLarge`` when the Append alone exceeds an entry, and
        ``NotLeader`` when this replica does not lead."""
        size = append.ByteSize()
        if size > self.max_append_bytes():
            on_done(
                None,
                errors.RecordTooLarge(
                    f"[{self.name}] send is {size} bytes encoded, over the "
                    f"{self.max_append_bytes()} a Raft entry carries: split it"
                ),
            )
            return
        send = _Send(append, size, len(append.records), on_done)
        refusal: errors.RaftqError | None = None
        with self._lock:
            if self._closed is not None:
                refusal = self._closed
            elif not self._is_leader():
                refusal = errors.NotLeader(
                    f"[{self.name}] not the leader", leader_hint=self._hint()
                )
            elif (
                len(self._queue) >= self.max_queued_sends
                or self._queued_bytes + size > self.max_queued_bytes
            ):
                self.stats.rejected_queue_full += 1
                refusal = errors.Unavailable(
                    f"[{self.name}] too many in flight ({len(self._queue)} sends, "
                    f"{self._queued_bytes} bytes queued): back off and retry"
                )
            else:
                self.stats.sends += 1
                self._queue.append(send)
                self._queued_bytes += size
        if refusal is not None:
            send.finished = True
            on_done(None, refusal)
            return
        self.pump()

    def pump(self) -> None:
        """Propose what is queued while in-flight entries are under the cap.

        A proposal refused at once (not leader, raft queue full) answers through its callback
        inside ``_propose``, and that callback pumps: in the thread already pumping, that
        inner call returns at once and this loop carries on (the lock is not reentrant: it
        used to deadlock the thread, the broker's raft driver included)."""
        if self._pumping == threading.get_ident():
            return
        with self._propose_lock:
            self._pumping = threading.get_ident()
            try:
                self._pump_locked()
            finally:
                self._pumping = None

    def _pump_locked(self) -> None:
        while True:
            with self._lock:
                if not self._queue or len(self._inflight) >= self.max_inflight_entries:
                    return
                sends = self._take_batch()
                if not sends:
                    continue
                entry = _Entry(sends, self._clock_s())
                self._inflight.add(entry)
                self._count_entry(len(sends))
            self._propose(self._encode(sends), functools.partial(self._on_outcome, entry))

    def busy(self) -> bool:
        """Sends queued or entries in flight (read unlocked: a hint for housekeeping)."""
        return bool(self._queue or self._inflight)

    def maintain(self) -> None:
        """Housekeeping a waiting caller (or the simulation) runs now and then: answer queued
        sends with NotLeader when leadership is gone, forget in-flight entries older than
        ``entry_expiry_s`` (their callback was lost, e.g. a snapshot covered them), pump."""
        expired: list[_Entry] = []
        refused: list[_Send] = []
        with self._lock:
            horizon = self._clock_s() - self.entry_expiry_s
            for entry in list(self._inflight):
                if entry.proposed_at_s < horizon:
                    self._inflight.discard(entry)
                    entry.done = True
                    expired.append(entry)
            self.stats.expired_entries += len(expired)
            if self._queue and not self._is_leader():
                refused = list(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
        for entry in expired:
            self._finish(entry.sends, None, errors.Timeout(f"[{self.name}] outcome unknown"))
        if refused:
            hint = self._hint()
            self._finish(
                refused, None, errors.NotLeader(f"[{self.name}] lost leadership", leader_hint=hint)
            )
        self.pump()

    def close(self, reason: errors.RaftqError) -> None:
        """Refuse new sends and answer queued and in-flight ones with ``reason``."""
        with self._lock:
            self._closed = reason
            queued = list(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
            inflight = [s for e in self._inflight for s in e.sends]
            for entry in self._inflight:
                entry.done = True
            self._inflight.clear()
        self._finish(queued + inflight, None, reason)

    def statistics(self) -> dict[str, float]:
        with self._lock:
            s = self.stats
            return {
                "sends": s.sends,
                "entries": s.entries,
                "sends_per_entry": round(s.sends / s.entries, 2) if s.entries else 0.0,
                "batched_sends": s.batched_sends,
                "max_sends_per_entry": s.max_sends_per_entry,
                "queued_sends": len(self._queue),
                "queued_bytes": self._queued_bytes,
                "inflight_entries": len(self._inflight),
                "rejected_queue_full": s.rejected_queue_full,
                "expired_entries": s.expired_entries,
            }

    # -- internals ---------------------------------------------------------------------------

    def _hint(self) -> str:
        try:
            return self._leader_hint()
        except Exception:  # a hint is best effort
            return ""

    def _take_batch(self) -> list[_Send]:
        """Pop queued sends that fit one entry (at least one). Caller holds ``_lock``."""
        budget = self.max_entry_bytes - _ENTRY_OVERHEAD_BYTES
        records = 0
        sends: list[_Send] = []
        while self._queue:
            send = self._queue[0]
            cost = send.size + _PER_APPEND_OVERHEAD_BYTES
            if sends and (cost > budget or records + send.records > self.max_entry_records):
                break
            self._queue.popleft()
            self._queued_bytes -= send.size
            budget -= cost
            records += send.records
            if not send.finished:
                sends.append(send)
        return sends

    def _count_entry(self, n: int) -> None:
        self.stats.entries += 1
        if n > 1:
            self.stats.batched_sends += n
        self.stats.max_sends_per_entry = max(self.stats.max_sends_per_entry, n)

    def _encode(self, sends: list[_Send]) -> bytes:
        command = partition_pb2.PartitionCommand()
        self._stamp(command)  # now_ms and clock_skew_ms (PartitionReplica.stamp)
        if len(sends) == 1:
            command.append.CopyFrom(sends[0].append)
        else:
            batch = command.append_batch
            batch.SetInParent()
            for send in sends:
                batch.appends.append(send.append)
        data = command.SerializeToString()
        assert len(data) <= self.max_entry_bytes, (len(data), self.max_entry_bytes)
        return data

    def _on_outcome(self, entry: _Entry, result: object, error: errors.RaftqError | None) -> None:
        with self._lock:
            if entry.done:
                return
            entry.done = True
            self._inflight.discard(entry)
            key = "ok" if error is None else type(error).__name__
            self.stats.outcomes[key] = self.stats.outcomes.get(key, 0) + 1
        sends = entry.sends
        if error is not None:
            self._finish(sends, None, error)
        elif not isinstance(result, partition_pb2.CommandResult):
            self._finish(sends, None, errors.Internal(f"[{self.name}] apply returned {result!r}"))
        elif result.error or len(sends) == 1:
            # A whole-command error (a malformed batch, a failed replica) answers every send.
            for send in sends:
                self._finish([send], result, None)
        else:
            assert len(result.batch_results) == len(sends), (len(result.batch_results), len(sends))
            for send, one in zip(sends, result.batch_results, strict=True):
                self._finish([send], one, None)
        self.pump()

    def _finish(
        self,
        sends: list[_Send],
        result: partition_pb2.CommandResult | None,
        error: errors.RaftqError | None,
    ) -> None:
        for send in sends:
            if send.finished:
                continue
            send.finished = True
            try:
                send.on_done(result, error)
            except Exception:
                logger.exception("[%s] send completion raised", self.name)
