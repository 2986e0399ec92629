"""RaftNode: the hardened pysyncobj node every raftq Raft group runs on.

One :class:`RaftNode` is one replica of one Raft group (the metadata group or a partition).
It replicates opaque command bytes through a single ``apply(data, index)`` callback and fixes
the pysyncobj 0.3.17 defects that break "acknowledged = durable" (see ../shared/PYSYNCOBJ.md):

1. **Durability.** The journal is :class:`~raftq.transport.raft.journal.DurableJournal`: a follower
   fsyncs appended entries before its ``append_entries`` acknowledgement leaves, the leader
   counts itself toward commit only up to its fsync'd index, term and vote are fsync'd before
   any message reflecting them. With ``group_commit=True`` the fsync is deferred to
   :meth:`RaftNode.sync`, which the driver calls after ticking every group and before it
   flushes the buffered outgoing messages (one fsync per group per driver round).
2. **Truncation.** A follower deletes entries only from the first index whose *term* conflicts
   with the leader's (Raft §5.3), never at or below its commit or applied index, and advances
   its commit index only up to the last entry it verified against the leader. The leader never
   moves ``nextIndex`` (or ``matchIndex``) backwards on a success response.
3. **Large entries.** ``appendEntriesBatchSizeBytes`` is set above ``max_entry_bytes`` and
   :meth:`RaftNode.propose` refuses bigger commands, so no entry ever takes pysyncobj's broken
   chunked path (syncobj.py:1275-1296); a 100 KiB command replicates like any other.
4. **One apply(bytes).** Commands are stored as ``REGULAR | b"R" | data`` (no pickle, no
   positional ``@replicated`` method ids); ``apply`` gets the data and its Raft index, and an
   exception from it is logged and turned into an :class:`ApplyError` result instead of
   wedging the group. Snapshots go through the ``serializer``/``deserializer`` hooks with
   ``useFork=False`` and call the user's ``snapshot(path)`` / ``restore(path)``.
5. **Snapshots and restarts.** Loading a snapshot (at start-up or from the leader) keeps the
   journal entries after it whenever the journal holds the snapshot's last (index, term)
   instead of clearing the journal (pysyncobj's ``__loadDumpFile`` cleared it unless it began
   exactly at the snapshot, losing acknowledged entries after a crash between snapshot and
   compaction). Snapshots travel in offset-checked chunks and are made durable before the
   journal changes; the leader's send loop always advances, so a follower that needs a
   snapshot while none can be read (pysyncobj's serializer is busy for one tick after each
   snapshot) gets a heartbeat, not an unbounded loop.
6. **Snapshots off the tick thread.** With ``capture`` a due snapshot only *pins* the state on
   the tick thread (a partition: a WAL read transaction on a second SQLite connection) with
   its (last, prev) entries; a worker (snapshot.BackgroundSnapshot, two per process) writes
   and fsyncs the file while the group keeps applying, and a later tick renames it over the
   snapshot file and compacts the journal to it. A snapshot installed meanwhile (from the
   leader) cancels the job, so an older state never replaces a newer one.
7. **No unpickled entry.** Membership changes are written as protobuf (entries.py) and every
   membership entry is parsed there, never by pysyncobj's ``pickle.loads``; code-version
   entries (pickles too) are never applied. A crafted entry changes nothing.

Threading: everything pysyncobj does (message handling, apply, callbacks, snapshots but the
writing of a captured one) runs on the tick thread: the node's own thread with
``auto_tick=True``, the caller of :meth:`tick` otherwise. ``propose`` / ``propose_sync`` and
the read-only accessors are safe from any thread; ``transfer_leadership`` / ``add_node`` /
``remove_node`` are queued onto the tick thread.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pysyncobj.syncobj as _pso
from pysyncobj.config import FAIL_REASON, SyncObjConf
from pysyncobj.encryptor import HAS_CRYPTO
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE, _RAFT_STATE, SyncObj, SyncObjException
from pysyncobj.transport import TCPTransport, TransportNotReadyError

from raftq.proto import errors
from raftq.transport.raft.clocks import QuorumClock
from raftq.transport.raft.entries import decode_membership, encode_membership, is_membership
from raftq.transport.raft.journal import DurableJournal, fsync_dir
from raftq.transport.raft.snapshot import (
    BackgroundSnapshot,
    SnapshotReceiver,
    SnapshotSender,
    journal_keep_from,
    read_snapshot,
    remove_stale_background_files,
    snapshot_learners,
    write_snapshot,
)

logger = logging.getLogger(__name__)

# The hardening overrides name-mangled internals of exactly this release.
assert _pso.VERSION == "0.3.17", _pso.VERSION


def monotonic_time() -> float:
    """pysyncobj's clock, looked up per call so a simulation's patched clock applies here too."""
    return float(_pso.monotonicTime())


RAW_V1 = b"R"  # command format marker after the pysyncobj type byte; append-only
# Seconds within which a follower campaigns after the link to its leader closed.
DISCONNECT_ELECTION_SPREAD_S = 0.2
_REGULAR = bytes([_COMMAND_TYPE.REGULAR])
_LEADER = _RAFT_STATE.LEADER
_NO_OP = bytes([_COMMAND_TYPE.NO_OP])
SNAPSHOT_CHUNKS_PER_ROUND = 8  # snapshot bytes per follower per heartbeat: 8 chunks at most
# A follower acknowledges a heartbeat that changes nothing at least this many times per
# leaderFallbackTimeout, not after every heartbeat (see _HardenedSyncObj._ack_repeats).
ACKS_PER_LEADER_FALLBACK = 4
# A leader quiesces its group after this many heartbeats in a row found it idle: everything
# committed, applied and acknowledged by every follower (see _HardenedSyncObj, "Quiescence").
QUIESCE_AFTER_HEARTBEATS = 3
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
    last, prev = (_NO_OP, index, SEED_TERM), (_NO_OP, index - 1, SEED_TERM)
    write_snapshot(tmp, (last, prev, list(cluster)), write_state, fsync=fsync)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(Path(path).parent)


class FailReason(enum.IntEnum):
    """pysyncobj's FAIL_REASON codes, as passed to propose callbacks."""

    SUCCESS = FAIL_REASON.SUCCESS
    QUEUE_FULL = FAIL_REASON.QUEUE_FULL
    MISSING_LEADER = FAIL_REASON.MISSING_LEADER
    DISCARDED = FAIL_REASON.DISCARDED
    NOT_LEADER = FAIL_REASON.NOT_LEADER
    LEADER_CHANGED = FAIL_REASON.LEADER_CHANGED
    REQUEST_DENIED = FAIL_REASON.REQUEST_DENIED
    UNKNOWN_OUTCOME = FAIL_REASON.UNKNOWN_OUTCOME


@dataclass(frozen=True)
class ApplyError:
    """The result of an entry whose ``apply`` raised (logged; the group keeps going)."""

    index: int
    message: str


@dataclass(frozen=True)
class RaftTimings:
    """Timing and size knobs of one group; seconds and bytes, units last."""

    election_timeout_min_s: float = 0.4
    election_timeout_max_s: float = 1.4
    heartbeat_s: float = 0.1
    tick_s: float = 0.05
    connection_timeout_s: float = 3.5
    connection_retry_s: float = 1.0
    leader_fallback_s: float = 5.0
    max_entry_bytes: int = 2 << 20
    append_batch_bytes: int = (2 << 20) + 4096
    max_inflight: int = 10_000
    compaction_min_entries: int = 5000
    compaction_min_time_s: float = 300.0
    snapshot_chunk_bytes: int = 1 << 20
    # A commit the followers have not heard of rides on the leader's next append_entries (new
    # entries or a heartbeat), or goes alone once it is this old; 0 pushes it at once (stock
    # pysyncobj with appendEntriesUseBatch off). Only followers' apply waits for it.
    commit_push_s: float = 0.0
    # Idle groups stop heartbeating while their brokers' links are heard (node.py,
    # "Quiescence"); only over a transport with link liveness (mux, hub) and only when the
    # election timeout exceeds the transport's silent_after_s.
    quiesce: bool = True

    @classmethod
    def fast(cls, **overrides: Any) -> RaftTimings:
        """Short timeouts (tests, local dev): ~0.2 s elections after a leader dies."""
        values: dict[str, Any] = {
            "election_timeout_min_s": 0.15,
            "election_timeout_max_s": 0.35,
            "heartbeat_s": 0.04,
            "tick_s": 0.02,
            "connection_timeout_s": 1.0,
            "connection_retry_s": 0.1,
            "leader_fallback_s": 2.0,
        }
        values.update(overrides)
        return cls(**values)

    def validate(self) -> None:
        """Raise ValueError when the knobs contradict each other."""
        checks = [
            (self.heartbeat_s > 0, "heartbeat_s > 0"),
            (
                self.election_timeout_min_s > 3 * self.heartbeat_s,
                "election_timeout_min_s > 3 * heartbeat_s",
            ),
            (
                self.election_timeout_max_s > self.election_timeout_min_s,
                "election_timeout_max_s > election_timeout_min_s",
            ),
            (
                self.connection_timeout_s >= self.election_timeout_max_s,
                "connection_timeout_s >= election_timeout_max_s",
            ),
            (self.leader_fallback_s > self.heartbeat_s, "leader_fallback_s > heartbeat_s"),
            (self.tick_s > 0, "tick_s > 0"),
            (
                0 <= self.commit_push_s <= self.heartbeat_s,
                "0 <= commit_push_s <= heartbeat_s",
            ),
            # pysyncobj chunks a single entry whose stored command (type byte + format byte +
            # data) reaches append_batch_bytes, and that path is broken: never let it happen.
            (
                self.append_batch_bytes > self.max_entry_bytes + 2,
                "append_batch_bytes > max_entry_bytes + 2",
            ),
            (self.max_inflight > 0, "max_inflight > 0"),
            (self.compaction_min_entries >= 2, "compaction_min_entries >= 2"),
        ]
        for ok, rule in checks:
            if not ok:
                raise ValueError(f"RaftTimings: {rule} does not hold: {self}")


class _NoNotifier:
    """Stands in for pysyncobj's PipeNotifier on a driver-run node."""

    def notify(self) -> None:
        pass


class _HardenedSyncObj(SyncObj):
    """pysyncobj's SyncObj with the hardening overrides; driven only by :class:`RaftNode`.

    Methods named ``_SyncObj__*`` replace SyncObj's private (name-mangled) methods of 0.3.17.

    Quiescence (after CockroachDB's quiesced ranges). An idle group need not heartbeat while
    the brokers of its replicas are known to be alive: the transport (mux or hub) pings every
    link several times per election timeout, so "the leader's broker was heard within
    ``silent_after_s``" is the liveness signal instead of the group's own heartbeats.

    - A leader that found its group idle at ``QUIESCE_AFTER_HEARTBEATS`` heartbeats in a row
      (commit = applied = last index, durable, nothing queued, every follower connected, heard,
      at matchIndex = last and offering quiescence in its acks) sends one last heartbeat marked
      ``quiesce`` and stops heartbeating (its tick deadline becomes +inf).
    - A follower that verifies such a heartbeat up to its own last index and commits all of it
      quiesces: it stops its election timer while the link to the leader's broker is heard.
      Otherwise it answers with an ack that does not offer quiescence, which wakes the leader.
    - Anything wakes the group. The follower: any message of the current term or later (the
      leader's next append, a candidate's vote request), the leader's link closing (election
      within ``DISCONNECT_ELECTION_SPREAD_S``) or falling silent (election at the time last
      heard + a fresh election timeout: the same detection time as without quiescence, the
      link's pings standing in for the heartbeats). The leader: any message but a success ack
      with nothing new, work (a proposal, a queued call), a link to a follower silent, closed,
      opened or replaced; it then counts the followers' links as their answers, so the
      leader-fallback check does not depose it for having been quiet, and heartbeats at once.
    - Raft's voting is untouched, so safety does not depend on any of this: a follower that
      wakes wrongly only campaigns (a needless election), and a follower stays asleep only
      while the broker of the leader it follows is alive. The driver (driver.py) wakes the
      quiesced groups of a link that falls silent and ticks them only every few seconds.

    Learners (Raft thesis §4.2.1 non-voting members; pysyncobj has none). A member added with
    a ``learner`` membership entry is replicated to like any follower, but the leader does not
    count it toward commit or toward its leader-fallback quorum, a candidate neither asks nor
    counts its vote, it never campaigns and is never a leadership-transfer target. A
    ``promote`` entry makes it a voter: a single-server change of the voting set, issued only
    once the learner has caught up. The learner set is replicated state: it follows the
    membership entries (appended, applied, truncated) and travels in snapshots.
    """

    _SyncObj__raftLeader: Any
    _SyncObj__raftElectionDeadline: float
    _SyncObj__needLoadDumpFile: bool
    _SyncObj__onReadyCalled: bool
    _SyncObj__forceLogCompaction: bool

    def __init__(
        self,
        owner: RaftNode,
        self_addr: str,
        peers: Sequence[str],
        conf: SyncObjConf,
        journal: DurableJournal,
        transport_class: Callable[..., Any],
        *,
        poll_io: bool = True,
        learners: Sequence[str] = (),
    ) -> None:
        self._raftq = owner
        # Non-voting members (see "Learners" in the class docstring); set for real below.
        self._learners: set[Any] = set()
        self._self_learner = False
        self._votes_from: set[Any] = set()  # candidate: the voters that granted this term
        # The last success ack sent: (leader node, term, verified index, raft time).
        self._last_ack: tuple[Any, int, int, float] | None = None
        # Quiescence (see the class docstring). Set up for real after SyncObj built the transport.
        self._quiesce_ok = False
        self._silent_after_s = math.inf
        self._quiesced = False
        self._quiet_beats = 0  # leader: heartbeats in a row that found the group idle
        self._quiet_generation = -1  # leader: the transport's link generation when quiesced
        self._quiesce_capable: set[Any] = set()  # leader: followers whose acks offer quiescence
        self.quiesce_count = 0
        # False when a driver ticks this node and its transport is not pysyncobj's (mux, hub):
        # nothing then waits in pysyncobj's poller, so a tick does not poll it.
        self._raftq_poll_io = poll_io
        self._raftq_journal = journal
        assert conf.fullDumpFile is not None
        self._snapshot_tx = SnapshotSender(
            conf.fullDumpFile, conf.logCompactionBatchSize, SNAPSHOT_CHUNKS_PER_ROUND
        )
        self._snapshot_rx = SnapshotReceiver(conf.fullDumpFile, fsync=journal.fsync_enabled)
        self._snapshot_job: BackgroundSnapshot | None = None  # being written off the tick thread
        super().__init__(self_addr, list(peers), conf, transportClass=transport_class)
        # SyncObj built a MemoryJournal (conf.journalFile is None); swap in the durable one
        # and redo what SyncObj.__init__ derived from it (syncobj.py:166-176).
        if len(journal) == 0:
            journal.add(_NO_OP, 1, 0)
            journal.sync()
        self._SyncObj__raftLog = journal
        self._SyncObj__raftCurrentTerm = max(journal.getCurrentTerm(), journal[-1][2])
        self._SyncObj__votedForNodeId = journal.getVotedForNodeId()
        self._SyncObj__raftCommitIndex = journal.getRaftCommitIndex()
        self._set_learners(learners)
        self._ack_refresh_s = conf.leaderFallbackTimeout / ACKS_PER_LEADER_FALLBACK
        self._commit_push_s = owner.timings.commit_push_s
        if not poll_io:
            self._drop_pipe_notifier()
        transport = self._SyncObj__transport
        self._stamp_wall_clock(transport, owner.clock)
        silent_after_s = getattr(transport, "silent_after_s", None)
        timings = owner.timings
        if (
            timings.quiesce
            and silent_after_s is not None
            and hasattr(transport, "link_silence_s")
            and timings.election_timeout_min_s > silent_after_s
        ):
            self._quiesce_ok = True
            self._silent_after_s = float(silent_after_s)

    @staticmethod
    def _stamp_wall_clock(transport: Any, clock: QuorumClock) -> None:
        """Every message this replica sends carries its wall clock (``wall_ms``: clocks.py).
        pysyncobj's own code paths (votes, forwarded commands) send through the transport
        object too, so its ``send`` is wrapped on the instance."""
        raw_send = transport.send

        def send(node: Any, message: Any) -> Any:
            if type(message) is dict:
                message["wall_ms"] = clock.wall_ms()
            return raw_send(node, message)

        transport.send = send

    def _drop_pipe_notifier(self) -> None:
        """pysyncobj wakes its own tick thread on a proposal through a pipe in its poller (two
        descriptors per group, never closed, plus a poll() per tick). A driver-run node is woken
        through RaftNode's waker instead: close the pipe and make notify() a no-op."""
        notifier = self.__dict__.get("_SyncObj__pipeNotifier")
        if notifier is None:
            return
        read_fd = notifier._PipeNotifier__pipeR
        self._poller.unsubscribe(read_fd)
        os.close(read_fd)
        os.close(notifier._PipeNotifier__pipeW)
        self._SyncObj__pipeNotifier = _NoNotifier()

    # ------------------------------------------------------------------ helpers
    @property
    def _group(self) -> str:
        return self._raftq.name

    def _last_index(self) -> int:
        return int(self._SyncObj__raftLog[-1][1])

    def _sync_before_reply(self) -> None:
        if not self._raftq.group_commit:
            self._raftq_journal.sync()

    # ------------------------------------------------------------------ learners
    def _set_learners(self, addrs: Iterable[str]) -> None:
        wanted = set(addrs)
        self._learners = {n for n in self._SyncObj__otherNodes if n.id in wanted}
        self._self_learner = self.selfNode.id in wanted

    def _voters(self) -> Collection[Any]:
        """The other members that vote (learners excluded); every tick of a leader asks."""
        learners = self._learners
        if not learners:
            return self._SyncObj__otherNodes
        return [n for n in self._SyncObj__otherNodes if n not in learners]

    def learner_addrs(self) -> list[str]:
        """Every learner of the group as this replica knows it, itself included."""
        addrs = [str(n.id) for n in list(self._learners)]
        if self._self_learner:
            addrs.append(str(self.selfNode.id))
        return sorted(addrs)

    @property
    def hasQuorum(self) -> bool:
        """Open links to a majority of the voters (this replica counted when it votes)."""
        connected = self._SyncObj__connectedNodes
        voters = self._voters()
        linked = sum(1 for n in voters if n in connected)
        total = len(voters)
        if not self._self_learner:
            linked, total = linked + 1, total + 1
        return linked > total / 2

    def _SyncObj__doChangeCluster(self, request: list[Any], reverse: bool = False) -> bool:
        """syncobj.py:1374 plus the learner ops (``entries.encode_membership``)."""
        op, addr = request[0], str(request[1])
        node = self._SyncObj__nodeClass(addr)
        is_self = node == self.selfNode
        if op in ("add", "rem"):
            if (op == "add") != reverse:  # adding a voter
                if is_self:
                    self._self_learner = False
                self._learners.discard(node)
            else:
                self._learners.discard(node)
            return bool(SyncObj._SyncObj__doChangeCluster(self, [op, addr], reverse))
        if op == "learner":
            if reverse:  # undo the addition
                self._learners.discard(node)
                return bool(SyncObj._SyncObj__doChangeCluster(self, ["rem", addr]))
            if is_self:
                self._self_learner = True
                return False
            # The log is authoritative: a replica that started from a stale member list (it
            # took this one for a voter) learns here that it is a learner. A leader never
            # appends such an entry for a voter (_SyncObj__changeCluster).
            present = node in self._SyncObj__otherNodes
            if not present:
                SyncObj._SyncObj__doChangeCluster(self, ["add", addr])
            self._learners.add(node)
            return not present
        if op == "promote":
            if is_self:
                was = self._self_learner
                self._self_learner = reverse
                return was != reverse
            if reverse:
                if node in self._SyncObj__otherNodes:
                    self._learners.add(node)
                return True
            if node in self._learners:
                self._learners.discard(node)
                return True
            return False
        return False

    def _SyncObj__changeCluster(self, request: list[Any]) -> bool:
        """Leader, before appending a change (syncobj.py:1356): a voter is never demoted."""
        if request[0] == "learner":
            node = self._SyncObj__nodeClass(str(request[1]))
            if node in self._SyncObj__otherNodes and node not in self._learners:
                return False
        return bool(SyncObj._SyncObj__changeCluster(self, request))

    def transferLeadership(self, node: Any = None, callback: Any = None) -> None:
        """syncobj.py:408, never to a learner (it would not campaign)."""
        if node is None:
            match = self._SyncObj__raftMatchIndex
            connected = self._SyncObj__connectedNodes
            candidates = [(match.get(n, 0), n.id, n) for n in self._voters() if n in connected]
            if not candidates:
                if callback is not None:
                    callback(None, FAIL_REASON.REQUEST_DENIED)
                return
            node = max(candidates)[2]
        elif not hasattr(node, "id"):
            node = self._SyncObj__nodeClass(node)
        if node in self._learners:
            if callback is not None:
                callback(None, FAIL_REASON.REQUEST_DENIED)
            return
        SyncObj.transferLeadership(self, node, callback)

    def _on_vote(self, node: Any, message: dict[str, Any]) -> None:
        """A granted vote (replaces syncobj.py:1063): counted once per voter, learners never."""
        if (
            self._SyncObj__raftState != _RAFT_STATE.CANDIDATE
            or message.get("term") != self._SyncObj__raftCurrentTerm
            or node not in self._SyncObj__otherNodes
            or node in self._learners
        ):
            return
        self._votes_from.add(node)
        self._SyncObj__votesCount = 1 + len(self._votes_from)
        if self._SyncObj__votesCount > (len(self._voters()) + 1) / 2:
            self._SyncObj__onBecomeLeader()

    # --------------------------------------------------------------- quiescence
    def _link_heard_at(self, node: Any) -> float | None:
        """Raft time `node`'s broker was last heard on its link; None when no link is open."""
        silence = self._SyncObj__transport.link_silence_s(node.id)
        return None if silence is None else monotonic_time() - silence

    def _link_alive(self, node: Any, now: float) -> bool:
        heard = self._link_heard_at(node)
        return heard is not None and now - heard < self._silent_after_s

    def quiesced_peers(self) -> tuple[str, ...]:
        """The peer brokers whose links keep this quiesced replica asleep (empty: awake)."""
        if not self._quiesced:
            return ()
        if self._SyncObj__raftState == _LEADER:
            return tuple(sorted(n.id for n in self._SyncObj__otherNodes))
        leader = self._SyncObj__raftLeader
        return () if leader is None else (leader.id,)

    def _group_idle(self, now: float) -> bool:
        """Leader: nothing to commit, apply, send or fsync, and every follower has everything
        (the condition to quiesce)."""
        last = self._last_index()
        if (
            self._SyncObj__raftCommitIndex != last
            or self.raftLastApplied != last
            or self._raftq_journal.durable_index < last
            or self._SyncObj__commandsQueue._FastQueue__queue
            or self._raftq._calls
            or self._SyncObj__readonlyNodes
        ):
            return False
        connected = self._SyncObj__connectedNodes
        match_index = self._SyncObj__raftMatchIndex
        next_index = self._SyncObj__raftNextIndex
        capable = self._quiesce_capable
        return all(
            n in connected
            and n in capable
            and match_index.get(n) == last
            and next_index.get(n) == last + 1
            and self._link_alive(n, now)
            for n in self._SyncObj__otherNodes
        )

    def _unquiesce(self, why: str, *, heard_at: float | None = None) -> None:
        """Wake this replica. A follower restarts its election timer from `heard_at` (the time
        its leader's broker was last heard, when the link fell silent) or from now."""
        if not self._quiesced:
            return
        self._quiesced = False
        self._quiet_beats = 0
        now = monotonic_time()
        if self._SyncObj__raftState == _LEADER:
            self._count_links_as_answers(now)
            self._SyncObj__newAppendEntriesTime = now  # heartbeat at this or the next tick
        else:
            base = now if heard_at is None else heard_at
            deadline = base + self._SyncObj__generateRaftTimeout()
            if deadline <= now:  # late already: campaign soon, spread like a closed link
                deadline = now + DISCONNECT_ELECTION_SPREAD_S * random.random()
            self._SyncObj__raftElectionDeadline = deadline
        logger.debug("[group=%s] awake: %s", self._group, why)

    def _count_links_as_answers(self, now: float) -> None:
        """Leader: while quiet, a follower's link being heard stands in for its answers, so
        the leader-fallback check does not depose a leader for having been quiet."""
        last_response = self._SyncObj__lastResponseTime
        for n in self._SyncObj__otherNodes:
            heard = self._link_heard_at(n)
            if heard is not None and heard > last_response.get(n, -math.inf):
                last_response[n] = min(heard, now)

    def _check_quiet_links(self, now: float) -> None:
        """On a quiesced replica's tick: stay asleep only while the links it relies on are
        heard (and, for a leader, no link opened or closed since it quiesced)."""
        if self._SyncObj__raftState == _LEADER:
            if self._SyncObj__transport.peer_generation != self._quiet_generation:
                self._unquiesce("a link opened or closed")
                return
            for n in self._SyncObj__otherNodes:
                if not self._link_alive(n, now):
                    self._unquiesce(f"link to {n.id} silent")
                    return
            self._count_links_as_answers(now)
            return
        leader = self._SyncObj__raftLeader
        heard = None if leader is None else self._link_heard_at(leader)
        if heard is None:
            self._unquiesce("no link to the leader")
        elif now - heard >= self._silent_after_s:
            self._unquiesce(f"link to leader {leader.id} silent", heard_at=heard)

    def _on_quiesce_request(self, node: Any, verified: int) -> None:
        """Follower: the leader's heartbeat asked to quiesce; `verified` is what it verified."""
        if (
            self._quiesce_ok
            and self._SyncObj__raftState == _RAFT_STATE.FOLLOWER
            and self._SyncObj__raftLeader is node
            and not self._SyncObj__transferInProgress
            and verified == self._last_index()
            and self._SyncObj__raftCommitIndex == verified
        ):
            self._quiesced = True
            self.quiesce_count += 1
            return
        # Refuse: an ack without the offer wakes the leader.
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=verified + 1, success=True, quiesce=False)

    def _SyncObj__setState(self, newState: int) -> None:
        if newState != self._SyncObj__raftState:
            self._quiesced = False
            self._quiet_beats = 0
        SyncObj._SyncObj__setState(self, newState)

    # -------------------------------------------------------------------- apply
    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        """Replaces syncobj.py:869: stock unpickles VERSION, MEMBERSHIP and REGULAR entries.
        Here nothing is unpickled: membership entries go through entries.decode_membership,
        any other non-REGULAR entry (NO_OP, VERSION, unknown) changes nothing."""
        kind = command[:1]
        if kind == _REGULAR:
            index = self.raftLastApplied + 1
            if command[1:2] == RAW_V1:
                return self._raftq._apply_entry(bytes(command[2:]), index)
            logger.error("[group=%s] entry %d has an unknown command format", self._group, index)
            return ApplyError(index, "unknown command format")
        if is_membership(command):
            # Already done when appended; needed after a restart replays the journal.
            change = self._SyncObj__parseChangeClusterRequest(command)
            if change is not None:
                self._SyncObj__doChangeCluster(change)
        elif kind != _NO_OP:
            logger.error(
                "[group=%s] entry %d of type %r ignored",
                self._group,
                self.raftLastApplied + 1,
                bytes(kind),
            )
        return None

    # ------------------------------------------------------------ membership entries
    def _SyncObj__parseChangeClusterRequest(self, command: bytes) -> list[str] | None:
        """Replaces syncobj.py:1415 (plain pickle.loads): protobuf, or a legacy pickle read
        without globals; an invalid entry is refused (None: it changes nothing)."""
        return decode_membership(command)

    def addNodeToCluster(self, node: Any, callback: Any = None) -> None:
        """Replaces syncobj.py:370 (which pickles the change)."""
        self._applyCommand(encode_membership("add", str(getattr(node, "id", node))), callback)

    def removeNodeFromCluster(self, node: Any, callback: Any = None) -> None:
        """Replaces syncobj.py:386 (which pickles the change)."""
        self._applyCommand(encode_membership("rem", str(getattr(node, "id", node))), callback)

    def setCodeVersion(self, newVersion: int, callback: Any = None) -> None:
        """Refused: stock replicates a pickled VERSION entry; raftq versions its own codecs."""
        if callback is not None:
            callback(None, FAIL_REASON.REQUEST_DENIED)

    # ------------------------------------------------------------- connections
    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:
        """The link to a peer broker closed (on kill -9 the kernel closes its sockets at
        once). If that peer leads this group, stand for election within
        ``DISCONNECT_ELECTION_SPREAD_S`` instead of waiting out the election timeout: a
        follower may campaign at any time without harming safety, and a leader we cannot reach
        cannot keep us anyway. The random spread keeps the surviving followers from splitting
        the vote. A crashed host or a partition (no close seen) still waits for the timeout."""
        self._SyncObj__connectedNodes.discard(node)
        self._raftq.clock.forget(node.id)  # a dead broker's last clock reading is no vote
        if self._quiesced and (
            node == self._SyncObj__raftLeader or self._SyncObj__raftState == _LEADER
        ):
            self._unquiesce(f"link to {node.id} closed")
        if node == self._SyncObj__raftLeader and self._SyncObj__raftState != _RAFT_STATE.LEADER:
            soon = monotonic_time() + DISCONNECT_ELECTION_SPREAD_S * random.random()
            if soon < self._SyncObj__raftElectionDeadline:
                self._SyncObj__raftElectionDeadline = soon
                logger.info(
                    "[group=%s] link to leader %s closed: election within %.0f ms",
                    self._group,
                    node.id,
                    DISCONNECT_ELECTION_SPREAD_S * 1000,
                )

    def _SyncObj__onNodeConnected(self, node: Any) -> None:
        self._SyncObj__connectedNodes.add(node)
        if self._quiesced and self._SyncObj__raftState == _LEADER:
            self._unquiesce(f"link to {node.id} opened")  # its replica may have restarted

    # ----------------------------------------------------------------- messages
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind is not None:
            self._raftq.clock.heard(node.id, message.get("wall_ms"))
        if self._quiesced:
            self._on_message_while_quiet(node, kind, message)
        if kind == "append_entries":
            self.on_append_entries(node, message)
        elif kind == "next_node_idx":
            if self._SyncObj__raftState == _RAFT_STATE.LEADER:
                self.on_next_node_idx(node, message)
        elif kind == "response_vote":
            self._on_vote(node, message)
        else:
            SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _on_message_while_quiet(self, node: Any, kind: str | None, message: Any) -> None:
        if self._SyncObj__raftState == _LEADER:
            if (
                kind == "next_node_idx"
                and message.get("success")
                and message.get("quiesce")
                and message.get("next_node_idx") == self._last_index() + 1
            ):
                return  # a late ack that says nothing new
            self._unquiesce(f"{kind} from {node.id}")
        elif message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
            self._unquiesce(f"{kind} from {node.id}")  # a quiesce heartbeat quiets it again

    def on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        """Follower side of AppendEntries (replaces syncobj.py:945-1035)."""
        term = message["term"]
        if term < self._SyncObj__raftCurrentTerm:
            return
        if term > self._SyncObj__raftCurrentTerm:
            self._SyncObj__transferInProgress = False
        now = monotonic_time()
        if not self._SyncObj__transferInProgress:
            self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        leader = self._SyncObj__raftLeader
        if leader is not node and leader != node:  # `is` first: Node.__ne__ is Python code
            self._SyncObj__onLeaderChanged()
        self._SyncObj__raftLeader = node
        if term > self._SyncObj__raftCurrentTerm:
            self._SyncObj__setCurrentTerm(term, None)
        if self._SyncObj__raftState != _RAFT_STATE.FOLLOWER:
            self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        leader_commit = message["commit_index"]
        self._SyncObj__leaderCommitIndex = leader_commit

        if "prevLogIdx" in message:
            verified = self._append_from_leader(node, message, now)
        elif message.get("serialized") is not None:
            verified = self._on_snapshot_chunk(node, message)
        else:
            return
        if verified is None:
            return
        # Commit only what was verified against this leader: a tail beyond it may be stale.
        new_commit = min(leader_commit, verified)
        if new_commit > self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = new_commit
            self._raftq_journal.setRaftCommitIndex(new_commit)
        if message.get("quiesce"):
            self._on_quiesce_request(node, verified)

    def _append_from_leader(self, node: Any, message: dict[str, Any], now: float) -> int | None:
        """Append the leader's entries; return the last index verified to match the leader."""
        if message.get("transmission") is not None:
            logger.error(
                "[group=%s] chunked append_entries from %s ignored: raftq never chunks entries",
                self._group,
                node,
            )
            return None
        entries = message.get("entries", [])
        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        log = self._SyncObj__raftLog
        first, last = log[0][1], log[-1][1]
        if not first <= prev_idx <= last:  # we do not hold the entry before these
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return None
        if log[prev_idx - first][2] != prev_term:
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_idx, success=False, reset=True)
            return None
        append_from = len(entries)
        for k, entry in enumerate(entries):
            idx = entry[1]
            if idx != prev_idx + 1 + k:
                logger.error("[group=%s] non-contiguous append_entries from %s", self._group, node)
                return None
            if idx > last:
                append_from = k
                break
            if log[idx - first][2] == entry[2]:
                continue  # already have it (Raft §5.3: keep matching entries)
            floor = max(self._SyncObj__raftCommitIndex, self.raftLastApplied)
            if idx <= floor:
                logger.critical(
                    "[group=%s] leader %s conflicts at index %d <= commit/applied %d: refusing",
                    self._group,
                    node,
                    idx,
                    floor,
                )
                return None
            self._truncate_from(idx)
            append_from = k
            break
        dynamic = self._SyncObj__conf.dynamicMembershipChange
        for entry in entries[append_from:]:
            log.add(*entry)
            if dynamic:
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change)
        verified = prev_idx + len(entries)
        self._sync_before_reply()
        if not entries and self._ack_repeats(node, verified, message["commit_index"], now):
            return int(verified)
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=verified + 1, success=True)
        self._last_ack = (node, self._SyncObj__raftCurrentTerm, verified, now)
        return int(verified)

    def _ack_repeats(self, node: Any, verified: int, leader_commit: int, now: float) -> bool:
        """Whether acknowledging this heartbeat would only repeat the ack sent last: same
        leader and term, same verified index, which the leader has already committed, sent less
        than leaderFallbackTimeout / ACKS_PER_LEADER_FALLBACK ago. Such an ack changes nothing
        but the leader's "heard from" time, which only its step-down check reads (at
        leaderFallbackTimeout), so an idle follower answers a few heartbeats per fallback
        period instead of every one: half of an idle group's messages. Any change (new entries,
        a commit the leader has not made, another leader or term, a failure reply) is
        acknowledged at once, so replication and commit never wait for a refresh; an ack lost
        on the way is repeated within the refresh interval."""
        last = self._last_ack
        return (
            last is not None
            and last[0] is node
            and last[1] == self._SyncObj__raftCurrentTerm
            and last[2] == verified
            and leader_commit >= verified
            and now - last[3] < self._ack_refresh_s
        )

    def _SyncObj__sendNextNodeIdx(
        self,
        node: Any,
        reset: bool = False,
        nextNodeIdx: int | None = None,
        success: bool = False,
        quiesce: bool = True,
    ) -> None:
        """syncobj.py:1098, plus ``quiesce``: this follower may be asked to quiesce."""
        self._last_ack = None  # whatever follows is acknowledged afresh
        message = {
            "type": "next_node_idx",
            "next_node_idx": self._last_index() + 1 if nextNodeIdx is None else nextNodeIdx,
            "reset": reset,
            "success": success,
        }
        if quiesce and self._quiesce_ok:
            message["quiesce"] = True
        self._SyncObj__transport.send(node, message)

    def _on_snapshot_chunk(self, node: Any, message: dict[str, Any]) -> int | None:
        """Follower side of a snapshot chunk; returns the snapshot's last index once installed.

        Replaces pysyncobj's receive (serializer.setTransmissionData + ``__loadDumpFile(
        clearJournal=True)``), which wrote chunks blindly, renamed the file without fsync and
        cleared the whole journal.
        """
        data, is_first, is_last = message["serialized"]
        rx = self._snapshot_rx
        try:
            if not rx.add(bytes(data), bool(is_first), bool(is_last), message.get("offset")):
                return None
        except ValueError as exc:
            logger.warning("[group=%s] snapshot from %s restarts: %s", self._group, node, exc)
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return None
        try:
            last, _prev, _cluster = rx.header()
        except (OSError, ValueError):
            logger.exception("[group=%s] snapshot from %s is unreadable", self._group, node)
            rx.discard()
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return None
        if last[1] <= self.raftLastApplied:
            # A stale or duplicate transfer: what it holds is applied (so committed) here, and
            # installing it would move state backwards or drop a journal compacted past it.
            rx.discard()
            logger.info(
                "[group=%s] snapshot at %d from %s is not newer than applied %d: ignored",
                self._group,
                last[1],
                node,
                self.raftLastApplied,
            )
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=last[1] + 1, success=True)
            return int(last[1])
        rx.install()  # durable before the journal or the state machine change
        try:
            self._SyncObj__loadDumpFile(clearJournal=True)
        except Exception:
            logger.exception("[group=%s] cannot load the snapshot from %s", self._group, node)
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return None
        self._sync_before_reply()
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=last[1] + 1, success=True)
        return int(last[1])

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """Load the snapshot file and reconcile the journal with it (replaces syncobj.py:1472).

        Raft §7: journal entries after the snapshot's last entry are kept when the journal holds
        that entry with the same term, whether this is a restart (the crash may have fallen
        between the snapshot's rename and the compaction) or a snapshot from the leader;
        otherwise the journal is replaced by the snapshot's (prev, last). Raises when the
        snapshot cannot be read or restored (at start-up the group then does not run).
        """
        self._cancel_snapshot_job()  # it would rename an older state over this one
        _data, last, prev, cluster = self._SyncObj__serializer.deserialize()
        log = self._raftq_journal
        before = (log[0][1], log[-1][1]) if len(log) else None
        keep_from = journal_keep_from(log.entries(), last)
        if keep_from is None:
            # Catching up (the journal ends before the snapshot) is routine; a journal that
            # starts after it or holds another term there is worth a look.
            routine = before is None or before[1] < last[1]
            logger.log(
                logging.INFO if routine else logging.WARNING,
                "[group=%s] journal %s does not hold snapshot entry (%d, term %d): replaced "
                "by the snapshot",
                self._group,
                before,
                last[1],
                last[2],
            )
            log.clear()
            log.add(*prev)
            log.add(*last)
        elif keep_from > 0:
            log.deleteEntriesTo(keep_from)
        self._SyncObj__raftLastApplied = last[1]
        # The snapshot holds applied (so committed) entries only.
        commit = min(max(self._SyncObj__raftCommitIndex, last[1]), self._last_index())
        if commit != self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = commit
            log.setRaftCommitIndex(commit)
        logger.info(
            "[group=%s] snapshot at (%d, term %d) loaded; journal %s -> (%d, %d), commit %d",
            self._group,
            last[1],
            last[2],
            before,
            log[0][1],
            log[-1][1],
            commit,
        )
        if self._SyncObj__conf.dynamicMembershipChange:
            self._SyncObj__updateClusterConfiguration(
                [n for n in cluster if n != self._SyncObj__selfNode]
            )
            self._set_learners(self._raftq._snapshot_learners)
        self._SyncObj__onSetCodeVersion(0)

    def _truncate_from(self, idx: int) -> None:
        last = self._last_index()
        logger.warning(
            "[group=%s] truncating conflicting entries %d..%d (term mismatch with leader)",
            self._group,
            idx,
            last,
        )
        if self._SyncObj__conf.dynamicMembershipChange:
            for entry in reversed(self._SyncObj__getEntries(idx)):
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change, reverse=True)
        self._SyncObj__deleteEntriesFrom(idx)

    def on_next_node_idx(self, node: Any, message: dict[str, Any]) -> None:
        """Leader side of an append response (replaces syncobj.py:1070-1083)."""
        next_index = self._SyncObj__raftNextIndex
        match_index = self._SyncObj__raftMatchIndex
        if node not in next_index:
            return
        if message.get("quiesce"):
            self._quiesce_capable.add(node)
        else:
            self._quiesce_capable.discard(node)
        # A follower whose log runs past ours reports an index we cannot send from.
        reported = min(message["next_node_idx"], self._last_index() + 1)
        match = match_index.get(node, 0)
        if not message["success"]:
            self._snapshot_tx.cancel(node)  # the follower lost its place: start over
        if message["success"]:
            # A success for an older, pipelined batch must not move either index backwards.
            if reported - 1 > match:
                match_index[node] = reported - 1
            if reported > next_index[node]:
                next_index[node] = reported
        elif message["reset"]:
            if reported - 1 < match:
                logger.error(
                    "[group=%s] %s now lacks entries %d..%d it acknowledged (disk lost?)",
                    self._group,
                    node,
                    reported,
                    match,
                )
                match_index[node] = reported - 1
            next_index[node] = reported
        self._SyncObj__lastResponseTime[node] = monotonic_time()

    # ------------------------------------------------------------------- send
    def _SyncObj__sendAppendEntries(self) -> None:
        """Leader heartbeat / replication round (replaces syncobj.py:1251-1337).

        Stock loops per follower until nextIndex passes the log end, breaking only on wall time;
        when a follower needs a snapshot that cannot be read yet (the serializer reports busy
        for a tick after each snapshot) nextIndex never moves, and on a manual clock the loop
        never ends. Here every iteration advances nextIndex or stops, snapshot chunks per round
        are bounded, and entries are never chunked (``append_batch_bytes`` > max entry).
        """
        conf = self._SyncObj__conf
        now = monotonic_time()
        quiesce = False
        if self._quiesce_ok:
            if not self._group_idle(now):
                self._unquiesce("work to replicate")
                self._quiet_beats = 0
            elif self._quiesced:
                return  # a push while quiet: the group is idle, there is nothing to send
            elif now >= self._SyncObj__newAppendEntriesTime:  # a timed heartbeat, not a push
                self._quiet_beats += 1
                quiesce = self._quiet_beats >= QUIESCE_AFTER_HEARTBEATS
        self._SyncObj__newAppendEntriesTime = now + conf.appendEntriesPeriod
        if quiesce:
            self._quiesced = True
            self._quiet_generation = self._SyncObj__transport.peer_generation
            self._SyncObj__newAppendEntriesTime = math.inf
            self.quiesce_count += 1
        connected = self._SyncObj__connectedNodes
        readonly = self._SyncObj__readonlyNodes  # raftq has none: skip building a union
        first = self._SyncObj__raftLog[0][1]
        next_index = self._SyncObj__raftNextIndex
        for node in (
            (self._SyncObj__otherNodes | readonly) if readonly else self._SyncObj__otherNodes
        ):
            if node not in connected:
                self._snapshot_tx.cancel(node)
                continue
            if next_index[node] <= first:
                self._send_snapshot(node)
            else:
                self._send_entries(node, quiesce=quiesce)

    def _append_message(self, **fields: Any) -> dict[str, Any]:
        return {
            "type": "append_entries",
            "term": self._SyncObj__raftCurrentTerm,
            "commit_index": self._SyncObj__raftCommitIndex,
            **fields,
        }

    def _send_entries(self, node: Any, *, quiesce: bool = False) -> None:
        log = self._SyncObj__raftLog
        first, last = log[0][1], log[-1][1]
        next_index = min(self._SyncObj__raftNextIndex[node], last + 1)
        batch_bytes = self._SyncObj__conf.appendEntriesBatchSizeBytes
        while True:
            prev = log[next_index - 1 - first]  # first < next_index <= last + 1
            entries = []
            if next_index <= last:
                entries = list(self._SyncObj__getEntries(next_index, None, batch_bytes))
            message = self._append_message(entries=entries, prevLogIdx=prev[1], prevLogTerm=prev[2])
            if quiesce and not entries:
                message["quiesce"] = True
            self._SyncObj__transport.send(node, message)
            if not entries or node not in self._SyncObj__connectedNodes:
                return
            next_index = entries[-1][1] + 1
            self._SyncObj__raftNextIndex[node] = next_index
            if next_index > last:
                return

    def _send_snapshot(self, node: Any) -> None:
        chunks, snapshot_last = self._snapshot_tx.chunks(node)
        if not chunks:
            if self._SyncObj__raftLog[0][1] == 1:  # never compacted: index 1 is the same no-op
                self._SyncObj__raftNextIndex[node] = 2  # everywhere; entries can be sent
                self._send_entries(node)
                return
            # No readable snapshot right now: keep the follower's election timer quiet.
            logger.warning("[group=%s] %s needs a snapshot; none to send yet", self._group, node)
            self._SyncObj__transport.send(node, self._append_message(serialized=None))
            return
        for data, is_first, is_last, offset in chunks:
            message = self._append_message(serialized=(data, is_first, is_last), offset=offset)
            self._SyncObj__transport.send(node, message)
            if node not in self._SyncObj__connectedNodes:
                self._snapshot_tx.cancel(node)
                return
        if snapshot_last is not None:
            self._SyncObj__raftNextIndex[node] = max(
                self._SyncObj__raftNextIndex[node], snapshot_last + 1
            )

    # ------------------------------------------------------- local snapshots
    def _SyncObj__tryLogCompaction(self) -> None:
        """SyncObj.__tryLogCompaction (syncobj.py:1421), the snapshot written off this thread
        when the owner gives ``capture`` (see "Snapshots off the tick thread", RaftNode)."""
        if self._raftq._capture is None:
            SyncObj._SyncObj__tryLogCompaction(self)
            return
        now = monotonic_time()
        job = self._snapshot_job
        if job is not None:
            if not job.done():
                return
            self._snapshot_job = None
            if job.install():
                self._SyncObj__lastSerializedTime = now
                self._SyncObj__deleteEntriesTo(job.prev_index)
                self._SyncObj__lastSerializedEntry = job.prev_index
                logger.info("[group=%s] snapshot at %d written", self._group, job.last_index)
            return
        conf = self._SyncObj__conf
        if (
            len(self._SyncObj__raftLog) <= conf.logCompactionMinEntries
            and now - self._SyncObj__lastSerializedTime <= conf.logCompactionMinTime
            and not self._SyncObj__forceLogCompaction
        ):
            return
        entries = self._SyncObj__getEntries(self.raftLastApplied - 1, 2)
        if len(entries) < 2 or entries[0][1] == self._SyncObj__lastSerializedEntry:
            self._SyncObj__forceLogCompaction = False
            self._SyncObj__lastSerializedTime = now
            return
        if not BackgroundSnapshot.room():
            return  # as many snapshots pinned as the process allows: a later tick
        self._SyncObj__forceLogCompaction = False
        try:
            write = self._raftq._capture()
        except Exception:
            logger.exception("[group=%s] cannot pin a snapshot; the log is kept", self._group)
            return
        cluster = self._SyncObj__otherNodes | {self._SyncObj__selfNode}
        self._snapshot_job = BackgroundSnapshot(
            self._SyncObj__conf.fullDumpFile,
            (entries[1], entries[0], cluster),
            write,
            fsync=self._raftq_journal.fsync_enabled,
            learners=self.learner_addrs(),
        )

    def _cancel_snapshot_job(self) -> None:
        if self._snapshot_job is not None:
            self._snapshot_job.cancel()
            self._snapshot_job = None

    def _doDestroy(self) -> None:
        self._cancel_snapshot_job()
        self._snapshot_tx.cancel_all()
        self._snapshot_rx.abort()
        super()._doDestroy()

    # --------------------------------------------------------------------- tick
    def _onTick(self, timeToWait: float = 0.0) -> None:
        """SyncObj._onTick (syncobj.py:611-706) with durable-only self votes for commit."""
        transport = self._SyncObj__transport
        if not transport.ready:
            with contextlib.suppress(TransportNotReadyError):
                transport.tryGetReady()
        conf = self._SyncObj__conf
        if not transport.ready:
            time.sleep(timeToWait)
            if not self._SyncObj__needLoadDumpFile:  # apply nothing before the snapshot
                self._SyncObj__applyLogEntries()
            return

        if self._SyncObj__needLoadDumpFile:
            if conf.fullDumpFile is not None and os.path.isfile(conf.fullDumpFile):
                self._SyncObj__loadDumpFile(clearJournal=False)
            self._SyncObj__needLoadDumpFile = False

        now = monotonic_time()
        if now - self._SyncObj__startTime > self._SyncObj__numOneSecondDumps:
            self._SyncObj__numOneSecondDumps += 1
            self._SyncObj__raftLog.onOneSecondTimer()

        if self._quiesced:
            self._check_quiet_links(now)
        state = self._SyncObj__raftState
        if (
            state != _RAFT_STATE.LEADER
            and not self._quiesced
            and self._SyncObj__raftElectionDeadline < now
            and self.selfNode is not None
            and self._SyncObj__connectedToAnyone()
        ):
            self._start_election()

        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            self._snapshot_tx.cancel_all()
        else:
            self._advance_leader_commit()
            deadline = now - conf.leaderFallbackTimeout
            voters = self._voters()
            alive = 1 + sum(1 for n in voters if self._SyncObj__lastResponseTime[n] > deadline)
            if alive <= (len(voters) + 1) / 2:
                logger.warning("[group=%s] no quorum heard from: stepping down", self._group)
                self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
                self._SyncObj__raftLeader = None

        need_send = self._SyncObj__applyLogEntries()
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            if need_send and self._commit_push_s:
                # Only the new commit index is news here: let it ride on the next
                # append_entries. A follower then applies and appends in one wake-up instead
                # of two, and the leader sends half the messages (one per proposal).
                need_send = False
                self._SyncObj__newAppendEntriesTime = min(
                    self._SyncObj__newAppendEntriesTime, now + self._commit_push_s
                )
            if monotonic_time() > self._SyncObj__newAppendEntriesTime or need_send:
                self._SyncObj__sendAppendEntries()

        if (
            not self._SyncObj__onReadyCalled
            and self.raftLastApplied == self._SyncObj__leaderCommitIndex
        ):
            if conf.onReady:
                conf.onReady()
            self._SyncObj__onReadyCalled = True

        if self._SyncObj__commandsQueue._FastQueue__queue:  # it is a no-op otherwise
            self._checkCommandsToApply()
        self._SyncObj__tryLogCompaction()
        with self._SyncObj__onTickCallbacksLock:
            for callback in self._SyncObj__onTickCallbacks:
                callback()
        self._sync_before_reply()  # the leader's own appends, while followers work on theirs
        if self._raftq_poll_io:
            self._poller.poll(timeToWait)
        elif timeToWait > 0:
            time.sleep(timeToWait)

    def _start_election(self) -> None:
        self._SyncObj__raftElectionDeadline = (
            monotonic_time() + self._SyncObj__generateRaftTimeout()
        )
        if self._self_learner:
            return  # a learner never campaigns (it is not counted either)
        self._SyncObj__transferInProgress = False
        self._SyncObj__raftLeader = None
        self._SyncObj__setState(_RAFT_STATE.CANDIDATE)
        self._SyncObj__setCurrentTerm(self._SyncObj__raftCurrentTerm + 1, self.selfNode.id)
        self._SyncObj__votesCount = 1
        self._votes_from = set()
        last = self._SyncObj__raftLog[-1]
        voters = self._voters()
        for node in voters:
            self._SyncObj__transport.send(
                node,
                {
                    "type": "request_vote",
                    "term": self._SyncObj__raftCurrentTerm,
                    "last_log_index": last[1],
                    "last_log_term": last[2],
                },
            )
        self._SyncObj__onLeaderChanged()
        if self._SyncObj__votesCount > (len(voters) + 1) / 2:
            self._SyncObj__onBecomeLeader()

    def _advance_leader_commit(self) -> None:
        others = self._voters()
        match_index = self._SyncObj__raftMatchIndex
        durable = self._raftq_journal.durable_index
        commit_idx = next_commit = self._SyncObj__raftCommitIndex
        while commit_idx < self._last_index():
            commit_idx += 1
            count = 1 if durable >= commit_idx else 0  # HARDENED: self counts once fsync'd
            count += sum(1 for n in others if match_index[n] >= commit_idx)
            if count <= (len(others) + 1) / 2:
                break
            entries = self._SyncObj__getEntries(commit_idx, 1)
            if entries and entries[0][2] == self._SyncObj__raftCurrentTerm:
                next_commit = commit_idx
        if next_commit != self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = next_commit
            self._raftq_journal.setRaftCommitIndex(next_commit)
        self._SyncObj__leaderCommitIndex = self._SyncObj__raftCommitIndex


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
            self._obj = _HardenedSyncObj(
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
        if self._restore is None:
            raise RuntimeError(f"[group={self.name}] snapshot file without a restore callback")
        try:
            last, prev, cluster = read_snapshot(path, self._restore, fsync=self._fsync)
            self._snapshot_learners = snapshot_learners(path)
        except Exception:
            logger.critical("[group=%s] cannot restore snapshot %s", self.name, path)
            raise
        logger.info("[group=%s] restored snapshot at index %d", self.name, last[1])
        return last, prev, [TCPNode(addr) for addr in cluster]

    # ------------------------------------------------------------ membership
    def _call_soon(self, fn: Callable[[], None]) -> None:
        self._calls.append(fn)
        self._wake()

    def transfer_leadership(self, to: str | None = None, callback: Callback | None = None) -> None:
        """Ask a caught-up follower (``to``, or the most caught-up) to take over. Async.

        ``callback`` gets ``SUCCESS`` once the request is sent, ``NOT_LEADER`` or
        ``REQUEST_DENIED`` (target unknown or not caught up); poll :meth:`leader` to confirm.
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
        for _attempt in range(5):  # per proposal: cheaper than voters()
            try:  # the tick thread may change the set while we copy it
                peers = [str(node.id) for node in list(self._obj._voters())]
                break
            except RuntimeError:
                continue
        else:
            peers = [a for a in self.voters() if a != self.self_addr]
        return self.clock.quorum_ms(peers)

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
        if state["_SyncObj__raftState"] == _LEADER:
            if commit < state["_SyncObj__raftLog"][-1][1]:
                return -math.inf
            at = state["_SyncObj__newAppendEntriesTime"]  # +inf while quiesced
        elif state["_quiesced"]:
            at = math.inf  # asleep until a message, a silent or closed link (driver.py)
        else:
            at = state["_SyncObj__raftElectionDeadline"]
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
        """True while this replica's group is quiesced (no heartbeats; see _HardenedSyncObj)."""
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
