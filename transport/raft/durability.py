"""Durability and log matching: what a replica acknowledges is on disk and matches its leader.

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
4. **A bounded send round.** The leader's round advances ``nextIndex`` every iteration or
   stops (stock spun until wall-clock time moved); a follower that needs a snapshot gets its
   chunks from snapshots.py.

A follower acknowledges a heartbeat that changes nothing only a few times per leader-fallback
period (``_ack_repeats``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from pysyncobj.syncobj import _RAFT_STATE, SyncObj

from raftq.transport.raft.pinned import monotonic_time
from raftq.transport.raft.quiescence import QUIESCE_AFTER_HEARTBEATS

logger = logging.getLogger(__name__)

# A follower acknowledges a heartbeat that changes nothing at least this many times per
# leaderFallbackTimeout, not after every heartbeat (see DurableLog._ack_repeats).
ACKS_PER_LEADER_FALLBACK = 4


class DurableLog(SyncObj):
    """The replication layer of :class:`~raftq.transport.raft.hardened.HardenedSyncObj`: the
    follower's AppendEntries, the leader's send round, acks and commit (not instantiated
    alone)."""

    # State (set up in HardenedSyncObj.__init__).
    _last_ack: tuple[Any, int, int, float] | None  # leader node, term, verified index, time
    _leader_heard_at: float | None  # raft time of the leader's last append_entries
    _ack_refresh_s: float
    _commit_push_s: float
    _SyncObj__raftLeader: Any
    _SyncObj__raftCommitIndex: int
    _SyncObj__newAppendEntriesTime: float
    _install_job: Any  # snapshots.py: a received snapshot being restored
    _quiesced: bool  # quiescence.py
    _quiet_beats: int
    _quiet_generation: int
    quiesce_count: int

    # -------------------------------------------------------------------- follower
    def _sync_before_reply(self) -> None:
        if not self._raftq.group_commit:
            self._raftq_journal.sync()

    def on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        """Follower side of AppendEntries (replaces syncobj.py:945-1035)."""
        term = message["term"]
        if term < self._SyncObj__raftCurrentTerm:
            return
        if term > self._SyncObj__raftCurrentTerm:
            self._SyncObj__transferInProgress = False
        now = monotonic_time()
        self._leader_heard_at = now
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
        if self._install_job is not None:
            # Restoring a received snapshot (snapshots.py): append nothing until it is done.
            # An ack at the commit index (entries the leader holds) keeps the leader from
            # stepping down or sending the snapshot again.
            commit = self._SyncObj__raftCommitIndex
            self._SyncObj__sendNextNodeIdx(
                node, nextNodeIdx=commit + 1, success=True, quiesce=False
            )
            return

        if "prevLogIdx" in message:
            verified = self._append_from_leader(node, message, now)
        elif message.get("serialized") is not None:
            verified = self._on_snapshot_chunk(node, message)
        elif "serialized" in message and self._snapshot_rx.receiving:
            # The leader's heartbeat while the window is full: say where the writes are.
            verified = self._snapshot_progress(node, always_ack=True)
        else:
            return
        if verified is None:
            return
        self._commit_verified(verified)
        if message.get("quiesce"):
            self._on_quiesce_request(node, verified)

    def _commit_verified(self, verified: int) -> None:
        """Commit up to the leader's commit index, but only what was verified against this
        leader (``verified``): a tail beyond it may be stale."""
        new_commit = min(self._SyncObj__leaderCommitIndex, verified)
        if new_commit > self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = new_commit
            self._raftq_journal.setRaftCommitIndex(new_commit)

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
        snapshot: tuple[Any, int] | None = None,
    ) -> None:
        """syncobj.py:1098, plus ``quiesce``: this follower may be asked to quiesce, and
        ``snapshot``: the (transfer id, bytes written) of a snapshot being received."""
        self._last_ack = None  # whatever follows is acknowledged afresh
        message = {
            "type": "next_node_idx",
            "next_node_idx": self._last_index() + 1 if nextNodeIdx is None else nextNodeIdx,
            "reset": reset,
            "success": success,
        }
        if quiesce and self._quiesce_ok:
            message["quiesce"] = True
        if snapshot is not None:
            message["snapshot"] = snapshot
        self._SyncObj__transport.send(node, message)

    # ---------------------------------------------------------------------- leader
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
        elif "snapshot" in message:
            self._on_snapshot_ack(node, message["snapshot"])
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
