"""RaftNode: the hardened pysyncobj node every raftq Raft group runs on.

One :class:`RaftNode` is one replica of one Raft group (the metadata group or a partition).
It replicates opaque command bytes through a single ``apply(data, index)`` callback and fixes
the pysyncobj 0.3.17 defects that break "acknowledged = durable" (see ../shared/PYSYNCOBJ.md).
This file is the facade other threads call; the hardened SyncObj it drives is
:class:`~raftq.transport.raft.hardened.HardenedSyncObj`, stacked from layers in files of their own:

- durability.py: fsync'd acknowledgements, durable-only self votes, §5.3 truncation, no
  chunked entries, the leader's bounded send round;
- snapshots.py: snapshots through ``snapshot(path)`` / ``restore(path)`` (``useFork=False``),
  written off the tick thread with ``capture``, sent and received in offset-checked chunks,
  loaded without dropping journal entries after them;
- quiescence.py: idle groups stop heartbeating while their brokers' links are heard;
- membership.py: learners, elections, membership entries as protobuf (never unpickled);
- hardened.py: the node's state, one ``apply(bytes)``, links, message dispatch, the tick;
- pinned.py: the pysyncobj release (asserted), its clock and constants; FailReason, ApplyError.

Threading: everything pysyncobj does (message handling, apply, callbacks, snapshots but the
writing of a captured one) runs on the tick thread: the node's own thread with
``auto_tick=True``, the caller of :meth:`tick` otherwise. ``propose`` / ``propose_sync`` and
the read-only accessors are safe from any thread; ``transfer_leadership`` / ``add_node`` /
``remove_node`` are queued onto the tick thread.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pysyncobj.config import SyncObjConf
from pysyncobj.encryptor import HAS_CRYPTO
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE, _RAFT_STATE, SyncObjException
from pysyncobj.transport import TCPTransport

from raftq.proto import errors
from raftq.transport.raft import snapshot as snapshot_file
from raftq.transport.raft.clocks import QuorumClock
from raftq.transport.raft.entries import encode_membership
from raftq.transport.raft.hardened import HardenedSyncObj
from raftq.transport.raft.journal import DurableJournal, fsync_dir
from raftq.transport.raft.lag import LoadProbe
from raftq.transport.raft.pinned import (
    LEADER,
    NO_OP,
    RAW_V1,
    ApplyError,
    FailReason,
    monotonic_time,
)
from raftq.transport.raft.snapshot import (
    SnapshotReceiver,
    read_snapshot,
    remove_stale_background_files,
    snapshot_learners,
    write_snapshot,
)
from raftq.transport.raft.timings import RaftTimings

logger = logging.getLogger(__name__)

__all__ = ["ApplyError", "FailReason", "RaftNode"]

_STATE_NAMES = {
    _RAFT_STATE.FOLLOWER: "follower",
    _RAFT_STATE.CANDIDATE: "candidate",
    _RAFT_STATE.LEADER: "leader",
}


SEED_TERM = 1  # the term of a seeded snapshot's entries: never a fresh journal's (0)


def seed_snapshot(
    path: str | Path,
    index: int,
    cluster: Sequence[str],
    write_state: Callable[[str], None],
    *,
    fsync: bool = True,
) -> None:
    """Write the snapshot file (``<data_dir>/<name>.snapshot``) of a group that starts at
    ``index`` with the state ``write_state(path)`` writes (``raftq restore``, broker/backup.py).

    Every replica of the group is seeded with the same file before it first starts: each loads
    it, applies nothing at or below ``index`` and continues the log after it, as after a
    compaction; a replica that joins later, or lost its files, gets the snapshot from the leader.
    ``cluster``: the raft addresses of every member (voters). Its entries are no-ops of term
    ``SEED_TERM`` (a fresh journal's only entry has term 0, so an unseeded replica never looks
    caught up). Raises ValueError when ``index`` < 2, OSError on I/O failure."""
    if index < 2:
        raise ValueError(f"a seeded snapshot starts at index 2 or later, not {index}")
    path = str(path)
    tmp = path + ".seed.tmp"
    last, prev = (NO_OP, index, SEED_TERM), (NO_OP, index - 1, SEED_TERM)
    write_snapshot(tmp, (last, prev, list(cluster)), write_state, fsync=fsync)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(Path(path).parent)


Callback = Callable[[object, int], None]
_UNCOMMITTED = -1  # change_membership: the leader's log has uncommitted entries; retry


class RaftNode:
    """One replica of one Raft group, replicating bytes through ``apply(data, index)``.

    ``apply`` runs on the tick thread, in log order, once per committed entry per process
    lifetime; after a restart entries after the last snapshot are applied again with the same
    indexes, so ``apply`` must store ``index`` with its change and skip ``index <= stored``.
    It must be a pure function of (state, data) and should not raise: an exception is logged
    and the proposer gets an :class:`ApplyError` result.

    ``wall_clock`` (seconds, like ``time.time``) is stamped on every message the replica sends;
    :meth:`quorum_clock_ms` reads the voters' clocks from them (clocks.py).

    Files under ``data_dir``: ``<name>.journal``, ``<name>.journal.meta``, ``<name>.snapshot``.

    Raises (constructor): ``ValueError`` for contradictory arguments or timings;
    ``errors.Unavailable`` when the default TCP transport cannot bind ``self_addr``;
    ``ImportError`` when ``secret`` is set for the default TCP transport without the
    ``cryptography`` module.
    """

    def __init__(
        self,
        self_addr: str,
        peers: Sequence[str],
        *,
        apply: Callable[[bytes, int], object],
        data_dir: str | Path,
        name: str,
        snapshot: Callable[[str], None] | None = None,
        restore: Callable[[str], None] | None = None,
        capture: Callable[[], Callable[[str, threading.Event], None]] | None = None,
        fsync: bool = True,
        auto_tick: bool = True,
        transport_class: Callable[..., Any] | None = None,
        secret: str | None = None,
        timings: RaftTimings | None = None,
        group_commit: bool = False,
        standby: bool = False,
        learners: Sequence[str] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``learners``: the members of ``peers`` (or ``self_addr``) that do not vote, as last
        known (the journal's membership entries and snapshots keep it current).

        ``capture`` (with ``snapshot``/``restore``): called on the tick thread when a snapshot
        is due, it pins the state cheaply and returns ``write(path, cancelled)``, which a worker
        thread then runs to write exactly that state (it stops, raising, once ``cancelled`` is
        set). Without it ``snapshot(path)`` writes the state on the tick thread."""
        if (snapshot is None) != (restore is None):
            raise ValueError("snapshot and restore callbacks go together")
        if capture is not None and snapshot is None:
            raise ValueError("capture needs the snapshot and restore callbacks")
        if group_commit and auto_tick:
            raise ValueError("group_commit needs a driver: auto_tick=False and sync() per round")
        if secret is not None and transport_class is None and not HAS_CRYPTO:
            raise ImportError("secret= with the default TCP transport needs 'cryptography'")
        self.name = name
        self.self_addr = self_addr
        self.group_commit = group_commit
        self.timings = timings or RaftTimings()
        self.timings.validate()
        self._apply = apply
        self._snapshot = snapshot
        self._restore = restore
        self._capture = capture
        self._fsync = fsync
        self._lock = threading.Lock()
        self._inflight = 0
        self._apply_errors = 0
        self._calls: collections.deque[Callable[[], None]] = collections.deque()
        self._waker: Callable[[], None] | None = None
        self._load_probe: LoadProbe | None = None
        self._tick_ident: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._destroyed = False
        # A joining replica does not campaign until a leader has contacted it (see tick()).
        self._standby = standby
        self._membership_lock = threading.Lock()
        self._snapshot_learners: list[str] = []  # of the snapshot last read (_deserialize)
        self.clock = QuorumClock(wall_clock, monotonic_time)

        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.journal = DurableJournal(data_dir / f"{name}.journal", fsync=fsync, group=name)
        remove_stale_background_files(str(data_dir / f"{name}.snapshot"))
        conf = self._conf(data_dir / f"{name}.snapshot", secret, transport_class)
        try:
            self._obj = HardenedSyncObj(
                self,
                self_addr,
                [p for p in peers if p != self_addr],
                conf,
                self.journal,
                transport_class or TCPTransport,
                poll_io=auto_tick or transport_class is None,
                learners=learners,
            )
        except SyncObjException as exc:
            self.journal._destroy()
            raise errors.Unavailable(f"[group={name}] cannot bind {self_addr}: {exc}") from exc
        self._obj_state: dict[str, Any] = self._obj.__dict__
        self._commands: Any = self._obj._SyncObj__commandsQueue
        self._tick_thread_name = f"raft-{name}"
        if auto_tick:
            self._thread = threading.Thread(target=self._run, name=self._tick_thread_name)
            self._thread.daemon = True
            self._thread.start()

    def _conf(
        self, dump: Path, secret: str | None, transport_class: Callable[..., Any] | None
    ) -> SyncObjConf:
        t = self.timings
        compaction: dict[str, Any] = {}
        if self._snapshot is None:
            # No user snapshot: never compact, or a lagging replica could not catch up.
            compaction = {"logCompactionMinEntries": 2**62, "logCompactionMinTime": 10**12}
        else:
            compaction = {
                "logCompactionMinEntries": t.compaction_min_entries,
                "logCompactionMinTime": t.compaction_min_time_s,
            }
        return SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            raftMinTimeout=t.election_timeout_min_s,
            raftMaxTimeout=t.election_timeout_max_s,
            appendEntriesPeriod=t.heartbeat_s,
            connectionTimeout=t.connection_timeout_s,
            connectionRetryTime=t.connection_retry_s,
            leaderFallbackTimeout=t.leader_fallback_s,
            appendEntriesBatchSizeBytes=t.append_batch_bytes,
            commandsQueueSize=t.max_inflight,
            logCompactionBatchSize=t.snapshot_chunk_bytes,
            journalFile=None,  # DurableJournal is swapped in (always with fullDumpFile)
            fullDumpFile=str(dump),
            serializer=self._serialize,
            deserializer=self._deserialize,
            useFork=False,
            dynamicMembershipChange=True,
            bindAddress=self.self_addr,
            bindRetryTime=0.2,
            maxBindRetries=5,
            password=secret if transport_class is None else None,
            **compaction,
        )

    # ------------------------------------------------------------ tick thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick(self.timings.tick_s)
            except Exception:
                logger.exception("[group=%s] tick failed", self.name)
                self._stop.wait(self.timings.tick_s)
        self._obj._doDestroy()

    def tick(self, timeout: float = 0.0) -> None:
        """Run one pysyncobj tick (for ``auto_tick=False``), waiting up to ``timeout`` for I/O.

        Without group commit, the journal is fsync'd before the tick's poll; with it, call
        :meth:`sync` after the tick and before outgoing messages are flushed.
        """
        self._tick_ident = threading.get_ident()
        if self._calls:
            self._obj._unquiesce("a queued call")  # leadership transfer, membership change
        while self._calls:
            self._calls.popleft()()
        if self._standby:
            self._hold_election()
        if not self.group_commit:
            self.journal.sync()
        self._obj.doTick(timeout)

    def _hold_election(self) -> None:
        """Standby (a replica joining a running group): members drop a non-member's messages,
        so its campaigns would only inflate its term, and once added that higher term would
        depose the leader that added it. Hold the election timer until a leader has spoken."""
        obj = self._obj
        if obj._SyncObj__raftLeader is not None:
            self._standby = False
            logger.info("[group=%s] joined: leader %s reached us", self.name, self.leader())
            return
        obj._SyncObj__raftElectionDeadline = monotonic_time() + self.timings.election_timeout_max_s

    @property
    def standby(self) -> bool:
        """True while this joining replica waits for a leader's first message."""
        return self._standby

    def sync(self) -> None:
        """fsync journal (and due meta) if anything changed since the last call: group commit."""
        self.journal.sync()

    # -------------------------------------------------------------- proposing
    def propose(self, data: bytes, callback: Callback | None = None) -> None:
        """Replicate ``data``; ``callback(result, err)`` runs on the tick thread when known.

        ``err`` is a :class:`FailReason`: ``SUCCESS`` with ``apply``'s result (an
        :class:`ApplyError` if it raised); ``NOT_LEADER`` when this node does not lead (no
        forwarding); ``QUEUE_FULL`` over ``max_inflight``; ``DISCARDED`` when a new leader
        overwrote the entry; ``LEADER_CHANGED`` / ``UNKNOWN_OUTCOME`` when it may or may not
        have been applied (retry idempotently). Callbacks must not block.
        Raises ``errors.RecordTooLarge`` when ``data`` exceeds ``max_entry_bytes``.
        """
        if len(data) > self.timings.max_entry_bytes:
            raise errors.RecordTooLarge(
                f"[group={self.name}] raft entry of {len(data)} bytes over "
                f"max_entry_bytes={self.timings.max_entry_bytes}: split the batch"
            )
        if not self._obj._isLeader():
            self._call_back(callback, None, FailReason.NOT_LEADER)
            return
        with self._lock:
            if self._inflight >= self.timings.max_inflight:
                full = True
            else:
                full = False
                self._inflight += 1
        if full:
            self._call_back(callback, None, FailReason.QUEUE_FULL)
            return

        def done(result: object, err: int) -> None:
            with self._lock:
                self._inflight -= 1
            self._call_back(callback, result, err)

        self._obj._applyCommand(RAW_V1 + bytes(data), done, _COMMAND_TYPE.REGULAR)
        self._wake()

    def propose_sync(self, data: bytes, timeout: float) -> object:
        """Replicate ``data`` and wait for ``apply``'s result. Must not run on the tick thread.

        Normal errors: ``errors.NotLeader`` (with ``leader_hint``; the entry was not appended
        or was overwritten), ``errors.Unavailable`` (no leader known, queue full, request
        denied), ``errors.Timeout`` (outcome unknown: retry idempotently),
        ``errors.RecordTooLarge``; ``errors.Internal`` when ``apply`` raised.
        """
        assert threading.get_ident() != self._tick_ident, "propose_sync on the tick thread"
        if not self._obj._isLeader():
            raise errors.NotLeader(f"[group={self.name}] not the leader", leader_hint=self.hint())
        done = threading.Event()
        box: list[Any] = []

        def callback(result: object, err: int) -> None:
            box.append((result, err))
            done.set()

        self.propose(data, callback)
        if not done.wait(timeout):
            raise errors.Timeout(f"[group={self.name}] no outcome in {timeout:.3g} s")
        result, err = box[0]
        if err == FailReason.SUCCESS:
            if isinstance(result, ApplyError):
                raise errors.Internal(f"[group={self.name}] apply failed: {result.message}")
            return result
        raise self._error_for(err)

    def _error_for(self, err: int) -> errors.RaftqError:
        where = f"[group={self.name}]"
        if err in (FailReason.NOT_LEADER, FailReason.DISCARDED):
            return errors.NotLeader(f"{where} not the leader", leader_hint=self.hint())
        if err == FailReason.MISSING_LEADER:
            return errors.Unavailable(f"{where} no leader known")
        if err == FailReason.QUEUE_FULL:
            return errors.Unavailable(f"{where} too many proposals in flight")
        if err == FailReason.REQUEST_DENIED:
            return errors.Unavailable(f"{where} request denied")
        return errors.Timeout(f"{where} outcome unknown ({FailReason(err).name})")

    def _call_back(self, callback: Callback | None, result: object, err: int) -> None:
        if callback is None:
            return
        try:
            callback(result, err)
        except Exception:
            # pysyncobj bumps lastApplied after callbacks: a raise here would re-apply.
            logger.exception("[group=%s] propose callback raised", self.name)

    def _apply_entry(self, data: bytes, index: int) -> object:
        try:
            return self._apply(data, index)
        except Exception as exc:
            self._apply_errors += 1
            logger.exception("[group=%s] apply of entry %d raised", self.name, index)
            return ApplyError(index, f"{type(exc).__name__}: {exc}")

    # -------------------------------------------------------------- snapshots
    def _serialize(self, tmp_path: str, data: tuple[Any, ...]) -> None:
        assert self._snapshot is not None
        try:
            write_snapshot(
                tmp_path,
                data,
                self._snapshot,
                fsync=self._fsync,
                learners=self._obj.learner_addrs(),
            )
        except Exception:
            logger.exception("[group=%s] snapshot failed; the log is kept", self.name)
            raise

    def _deserialize(self, path: str) -> tuple[Any, ...]:
        last, prev, cluster, self._snapshot_learners = self._read_snapshot(path)
        return last, prev, cluster

    def _restore_received(
        self, received: SnapshotReceiver, cancelled: threading.Event
    ) -> tuple[Any, ...]:
        """Snapshot worker: install the snapshot ``received`` from the leader (snapshots.py,
        "Installing off the tick thread"; the group applies nothing meanwhile): its state
        copied out at ``INSTALL_BYTES_PER_S``, the file renamed over the group's snapshot
        (the commit point), the state restored. Returns (last, prev, cluster nodes,
        learners); raises when it cannot, or was cancelled before it began (nothing changed
        then)."""
        if cancelled.is_set():
            raise RuntimeError(f"[group={self.name}] install cancelled")
        return self._read_snapshot(
            received.tmp_path,
            commit=received.install,
            bytes_per_s=snapshot_file.INSTALL_BYTES_PER_S,
        )

    def _read_snapshot(
        self,
        path: str,
        commit: Callable[[], None] | None = None,
        bytes_per_s: float = 0,
    ) -> tuple[Any, ...]:
        if self._restore is None:
            raise RuntimeError(f"[group={self.name}] snapshot file without a restore callback")
        try:
            learners = snapshot_learners(path)
            last, prev, cluster = read_snapshot(
                path, self._restore, fsync=self._fsync, commit=commit, bytes_per_s=bytes_per_s
            )
        except Exception:
            logger.critical("[group=%s] cannot restore snapshot %s", self.name, path)
            raise
        logger.info("[group=%s] restored snapshot at index %d", self.name, last[1])
        return last, prev, [TCPNode(addr) for addr in cluster], learners

    # ------------------------------------------------------------ membership
    def _call_soon(self, fn: Callable[[], None]) -> None:
        self._calls.append(fn)
        self._wake()

    def transfer_leadership(self, to: str | None = None, callback: Callback | None = None) -> None:
        """Ask a caught-up follower (``to``, or the most caught-up) to take over. Async.

        The leader appends no new command until the target has every entry (at most
        ``election_timeout_min_s``; then it resumes), so the target wins the vote in one term
        (membership.py). ``callback`` gets ``SUCCESS`` once TimeoutNow is sent, ``NOT_LEADER``
        or ``REQUEST_DENIED`` (target unknown, a learner, a transfer already under way, or not
        caught up in time); poll :meth:`leader` to confirm.
        """
        self._call_soon(lambda: self._obj.transferLeadership(to, self._safe(callback)))

    def members(self) -> list[str]:
        """The group's voters as this replica knows them (itself included), sorted. On the
        leader this includes a change that is appended but not yet committed."""
        for _attempt in range(5):
            try:  # the tick thread may change the set while we copy it
                others = [str(node.id) for node in list(self._obj._SyncObj__otherNodes)]
                break
            except RuntimeError:
                continue
        else:
            others = [str(node.id) for node in self._obj.otherNodes]
        return sorted({self.self_addr, *others})

    def learners(self) -> list[str]:
        """The members of ``members()`` that do not vote, sorted (this replica too, if so)."""
        for _attempt in range(5):
            try:  # the tick thread may change the set while we copy it
                return list(self._obj.learner_addrs())
            except RuntimeError:
                continue
        return list(self._obj.learner_addrs())

    def voters(self) -> list[str]:
        """The voting members, sorted."""
        learners = set(self.learners())
        return [m for m in self.members() if m not in learners]

    @property
    def is_learner(self) -> bool:
        return bool(self._obj._self_learner)

    def quorum_clock_ms(self) -> int | None:
        """The highest wall-clock time a majority of the group's voters (learners do not
        count) have reached, from the clocks their messages carry (clocks.py); None while
        fewer than a majority of them have been heard from. Any thread."""
        return self.clock.quorum_ms(self._voting_peers())

    def stamp_clock_ms(self, headroom_ms: int) -> int | None:
        """The time this replica may stamp into a command: on the leader, the quorum clock
        paced by the leader's monotonic clock since its term's first stamp, at most
        ``headroom_ms`` ahead of that pace (QuorumClock.stamp_ms); elsewhere the quorum clock.
        None while fewer than a majority of the voters have been heard from. Any thread."""
        peers = self._voting_peers()
        term = self.term
        if not self.is_leader():
            return self.clock.quorum_ms(peers)
        fresh_s = self.timings.election_timeout_max_s  # this term's votes arrived within it
        return self.clock.stamp_ms(term, peers, headroom_ms=headroom_ms, fresh_s=fresh_s)

    def _voting_peers(self) -> list[str]:
        for _attempt in range(5):  # per proposal: cheaper than voters()
            try:  # the tick thread may change the set while we copy it
                return [str(node.id) for node in list(self._obj._voters())]
            except RuntimeError:
                continue
        return [a for a in self.voters() if a != self.self_addr]

    def caught_up(self, addr: str, slack: int = 0, *, index: int | None = None) -> bool:
        """On the leader: ``addr``'s replica has acknowledged every entry up to ``index``
        (default: the commit index minus ``slack``). A replica that has acknowledged nothing
        yet is never caught up."""
        status = self.status()
        match = status["match_index"].get(addr)
        if match is None or int(match) <= 0:
            return False
        target = int(status["commit_index"]) - slack if index is None else index
        return int(match) >= target

    def change_membership(self, op: str, addr: str, timeout_s: float) -> bool:
        """Add a voter (``op="add"``), add a learner (``"learner"``), make a learner a voter
        (``"promote"``) or remove a member (``"remove"``), and wait until the change is
        committed. Blocking; never on the tick thread. Returns False when there was nothing to
        do (already a member / not a member / not a learner).

        One change at a time (Raft's single-server changes; pysyncobj's own guard is dead
        code): changes through this method are serialized per node, and a change is issued
        only once everything in the leader's log is committed — which also covers a change a
        previous leader appended and did not commit.

        Normal errors: ``NotLeader``; ``Timeout`` (the change may still commit: check
        ``members()`` and retry); ``Unavailable`` (refused, e.g. removing the leader itself:
        transfer leadership first).
        """
        assert op in ("add", "remove", "learner", "promote"), op
        assert threading.get_ident() != self._tick_ident, "change_membership on the tick thread"
        deadline = time.monotonic() + timeout_s
        where = f"[group={self.name}]"
        with self._membership_lock:
            while True:
                if not self.is_leader():
                    raise errors.NotLeader(f"{where} not the leader", leader_hint=self.hint())
                if not self._change_needed(op, addr):
                    return False
                done = threading.Event()
                box: list[int] = []

                def callback(
                    _result: object, err: int, box: list[int] = box, done: threading.Event = done
                ) -> None:
                    box.append(err)
                    done.set()

                def issue(callback: Callback = callback) -> None:
                    obj = self._obj
                    if not obj._isLeader():
                        callback(None, FailReason.NOT_LEADER)
                    elif obj.raftCommitIndex < obj._SyncObj__raftLog[-1][1]:
                        callback(None, _UNCOMMITTED)  # an earlier entry (or change) is pending
                    else:
                        stored = "rem" if op == "remove" else op
                        obj._applyCommand(encode_membership(stored, addr), self._safe(callback))

                self._call_soon(issue)
                if not done.wait(max(0.0, deadline - time.monotonic())):
                    raise errors.Timeout(f"{where} {op} {addr}: no outcome in {timeout_s:.3g} s")
                err = box[0]
                if err == FailReason.SUCCESS:
                    logger.info("%s membership: %s %s committed", where, op, addr)
                    return True
                if err == _UNCOMMITTED:
                    if time.monotonic() >= deadline:
                        raise errors.Timeout(f"{where} {op} {addr}: earlier entries uncommitted")
                    time.sleep(0.02)
                    continue
                if err == FailReason.REQUEST_DENIED:
                    raise errors.Unavailable(f"{where} {op} {addr} refused")
                raise self._error_for(err)

    def _change_needed(self, op: str, addr: str) -> bool:
        present = addr in self.members()
        if op == "promote":
            return addr in self.learners()
        return present == (op == "remove")

    def add_node(self, addr: str, callback: Callback | None = None) -> None:
        """Add a voter (one change at a time: wait for the callback). Async."""
        self._call_soon(lambda: self._obj.addNodeToCluster(addr, self._safe(callback)))

    def remove_node(self, addr: str, callback: Callback | None = None) -> None:
        """Remove a voter; stop the removed node's RaftNode afterwards. Async."""
        self._call_soon(lambda: self._obj.removeNodeFromCluster(addr, self._safe(callback)))

    def _safe(self, callback: Callback | None) -> Callback:
        return lambda result, err: self._call_back(callback, result, err)

    def tick_deadline(self) -> float:
        """The raft time after which this node needs a tick: the leader's next heartbeat, a
        follower's or candidate's election deadline, or ``-inf`` when a tick has work at once.
        Lets a driver leave idle groups alone until then (transport/raft/driver.py)."""
        state = self._obj_state  # the SyncObj's __dict__: this runs for every group many times a
        commit = state["_SyncObj__raftCommitIndex"]  # second, attribute lookups add up
        if state["_SyncObj__raftState"] == LEADER:
            if commit < state["_SyncObj__raftLog"][-1][1]:
                return -math.inf
            at = state["_SyncObj__newAppendEntriesTime"]  # +inf while quiesced
        elif state["_quiesced"]:
            at = math.inf  # asleep until a message, a silent or closed link (driver.py)
        else:
            at = state["_SyncObj__raftElectionDeadline"]
        install = state["_install_job"]
        if install is not None:  # restoring a snapshot: nothing to apply until it is done
            return -math.inf if self._calls or install.done() else float(at)
        if (
            self._calls
            or commit > state["_SyncObj__raftLastApplied"]
            or self._commands._FastQueue__queue
            or not state["_SyncObj__onReadyCalled"]
        ):
            return -math.inf
        return float(at)

    @property
    def quiesced(self) -> bool:
        """True while this replica's group is quiesced (no heartbeats; see quiescence.py)."""
        return bool(self._obj._quiesced)

    def quiesced_peers(self) -> tuple[str, ...]:
        """Driver thread: the peer brokers whose links keep this quiesced replica asleep (a
        follower: its leader's; a leader: its followers'); empty when awake. The driver ticks
        these replicas when one of those links falls silent."""
        return self._obj.quiesced_peers()

    def before_unregister(self) -> None:
        """Driver thread, as the driver stops running this replica: a quiesced leader sends
        one plain heartbeat, so its followers run their election timers again instead of
        sleeping on a live link for a leader that is gone."""
        obj = self._obj
        if obj._quiesced and obj._isLeader():
            obj._unquiesce("stopping")
            obj._SyncObj__sendAppendEntries()

    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """Install the driver's "tick me soon" hook (None removes it): called from any thread
        after a command or a queued call arrives, so the driver need not poll for them."""
        self._waker = waker

    def set_load_probe(self, probe: LoadProbe | None) -> None:
        """Install the driver that ticks this node as its load probe (None removes it): a
        follower whose own broker runs late waits that much longer for its leader (lag.py)."""
        self._load_probe = probe

    def scheduling_lag_s(self) -> float:
        """Tick thread: how late the rounds that tick this node have been running lately, in
        seconds (0 without a driver)."""
        probe = self._load_probe
        return 0.0 if probe is None else probe.lag_s()

    def since_poll_s(self) -> float:
        """Tick thread: seconds since the driver that ticks this node last read the sockets
        (0 without a driver)."""
        probe = self._load_probe
        return 0.0 if probe is None else probe.since_poll_s()

    def _wake(self) -> None:
        waker = self._waker
        if waker is not None:
            waker()

    # -------------------------------------------------------------- accessors
    def is_leader(self) -> bool:
        return bool(self._obj._isLeader())

    def leader(self) -> str | None:
        node = self._obj._getLeader()
        return None if node is None else str(node.id)

    def led_for_s(self) -> float:
        """Seconds this replica has led its group (0 when it does not lead)."""
        if not self._obj._isLeader():
            return 0.0
        return max(0.0, monotonic_time() - self._obj.led_since)

    def hint(self) -> str:
        return self.leader() or ""

    def has_quorum(self) -> bool:
        """Whether this replica has open links to a majority of its group (itself included)."""
        for _attempt in range(5):
            try:  # the tick thread may change the sets while we count
                return bool(self._obj.hasQuorum)
            except RuntimeError:
                continue
        return False

    @property
    def term(self) -> int:
        return int(self._obj.raftCurrentTerm)

    @property
    def commit_index(self) -> int:
        return int(self._obj.raftCommitIndex)

    @property
    def applied_index(self) -> int:
        return int(self._obj.raftLastApplied)

    @property
    def transport(self) -> Any:
        """The pysyncobj Transport instance this node's SyncObj created."""
        return self._obj._SyncObj__transport

    @property
    def syncobj(self) -> Any:
        """The underlying SyncObj (tests and tooling inside transport/raft only)."""
        return self._obj

    def status(self) -> dict[str, Any]:
        """A snapshot of the node's state and counters (safe from any thread)."""
        for _attempt in range(3):
            try:  # the tick thread may resize pysyncobj's dicts while we iterate them
                raw = self._obj.getStatus()
                break
            except RuntimeError:
                continue
        else:
            raw = self._obj.getStatus()
        return {
            "group": self.name,
            "self": self.self_addr,
            "state": _STATE_NAMES.get(raw["state"], str(raw["state"])),
            "leader": self.leader(),
            "term": raw["raft_term"],
            "commit_index": raw["commit_idx"],
            "applied_index": raw["last_applied"],
            "log_len": raw["log_len"],
            "durable_index": self.journal.durable_index,
            "has_quorum": raw["has_quorum"],
            "quiesced": self.quiesced,
            "next_index": {
                k.removeprefix("next_node_idx_server_"): v
                for k, v in raw.items()
                if k.startswith("next_node_idx_server_")
            },
            "match_index": {
                k.removeprefix("match_idx_server_"): v
                for k, v in raw.items()
                if k.startswith("match_idx_server_")
            },
            **self.statistics(),
        }

    def statistics(self) -> dict[str, int]:
        return {
            "fsync_count": self.journal.fsync_count,
            "journal_bytes_written": self.journal.bytes_written,
            "inflight": self._inflight,
            "apply_errors": self._apply_errors,
            "quiesce_count": self._obj.quiesce_count,
        }

    # -------------------------------------------------------------- lifecycle
    def destroy(self) -> None:
        """Stop ticking, close connections and the journal (fsyncing what is pending)."""
        if self._destroyed:
            return
        self._destroyed = True
        if self._thread is not None:
            self._stop.set()
            if self._thread is not threading.current_thread():
                self._thread.join()
        else:
            self._obj._doDestroy()
