"""Quiescence: an idle Raft group stops heartbeating while its brokers are known alive.

After CockroachDB's quiesced ranges. An idle group need not heartbeat while the brokers of its
replicas are known to be alive: the transport (mux or hub) pings every link several times per
election timeout, so "the leader's broker was heard within ``silent_after_s``" is the liveness
signal instead of the group's own heartbeats.

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
  link's pings standing in for the heartbeats; it also sends the leader an ack without the
  offer, so a leader whose broker was only slow wakes and heartbeats before that). The
  leader: any message but a success ack with nothing new, work (a proposal, a queued call),
  a link to a follower silent, closed, opened or replaced; it then counts the followers'
  links as their answers, so the leader-fallback check does not depose it for having been
  quiet, and heartbeats at once.
- Raft's voting is untouched, so safety does not depend on any of this: a follower that
  wakes wrongly only campaigns (a needless election), and a follower stays asleep only
  while the broker of the leader it follows is alive. The driver (driver.py) wakes the
  quiesced groups of a link that falls silent and ticks them only every few seconds.

The leader decides to quiesce in its send round (durability.py); the state lives on the node
(``_quiesced``, ``_quiet_beats``, ... set up in hardened.py).
"""

from __future__ import annotations

import logging
import math
import random
from typing import Any

from pysyncobj.syncobj import _RAFT_STATE, SyncObj

from raftq.transport.raft.pinned import DISCONNECT_ELECTION_SPREAD_S, LEADER, monotonic_time

logger = logging.getLogger(__name__)

# A leader quiesces its group after this many heartbeats in a row found it idle: everything
# committed, applied and acknowledged by every follower.
QUIESCE_AFTER_HEARTBEATS = 3


class Quiescence(SyncObj):
    """The quiescence layer of :class:`~raftq.transport.raft.hardened.HardenedSyncObj` (not
    instantiated alone)."""

    # State (set up in HardenedSyncObj.__init__).
    _quiesce_ok: bool
    _silent_after_s: float
    _quiesced: bool
    _quiet_beats: int  # leader: heartbeats in a row that found the group idle
    _quiet_generation: int  # leader: the transport's link generation when quiesced
    _quiesce_capable: set[Any]  # leader: followers whose acks offer quiescence
    quiesce_count: int
    _SyncObj__raftLeader: Any
    _SyncObj__raftElectionDeadline: float

    # ----------------------------------------------------------------------- links
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
        if self._SyncObj__raftState == LEADER:
            return tuple(sorted(n.id for n in self._SyncObj__otherNodes))
        leader = self._SyncObj__raftLeader
        return () if leader is None else (leader.id,)

    # ---------------------------------------------------------------------- leader
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

    def _count_links_as_answers(self, now: float) -> None:
        """Leader: while quiet, a follower's link being heard stands in for its answers, so
        the leader-fallback check does not depose a leader for having been quiet."""
        last_response = self._SyncObj__lastResponseTime
        for n in self._SyncObj__otherNodes:
            heard = self._link_heard_at(n)
            if heard is not None and heard > last_response.get(n, -math.inf):
                last_response[n] = min(heard, now)

    # --------------------------------------------------------- waking and sleeping
    def _unquiesce(self, why: str, *, heard_at: float | None = None) -> None:
        """Wake this replica. A follower restarts its election timer from `heard_at` (the time
        its leader's broker was last heard, when the link fell silent) or from now."""
        if not self._quiesced:
            return
        self._quiesced = False
        self._quiet_beats = 0
        now = monotonic_time()
        if self._SyncObj__raftState == LEADER:
            self._count_links_as_answers(now)
            self._SyncObj__newAppendEntriesTime = now  # heartbeat at this or the next tick
        else:
            base = now if heard_at is None else heard_at
            deadline = base + self._SyncObj__generateRaftTimeout()
            if deadline <= now:  # late already: campaign soon, spread like a closed link
                deadline = now + DISCONNECT_ELECTION_SPREAD_S * random.random()
            self._SyncObj__raftElectionDeadline = deadline
        logger.debug("[group=%s] awake: %s", self._group, why)

    def _check_quiet_links(self, now: float) -> None:
        """On a quiesced replica's tick: stay asleep only while the links it relies on are
        heard (and, for a leader, no link opened or closed since it quiesced)."""
        if self._SyncObj__raftState == LEADER:
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
            # The leader stays asleep unless told: were its broker only slow (a stalled driver
            # under CPU contention), nothing would reach this replica before its election
            # timer fired. An ack without the quiescence offer wakes the leader, whose
            # heartbeats then resume as soon as its broker runs again.
            self._SyncObj__sendNextNodeIdx(
                leader, nextNodeIdx=self._last_index() + 1, success=True, quiesce=False
            )

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

    def _on_message_while_quiet(self, node: Any, kind: str | None, message: Any) -> None:
        if self._SyncObj__raftState == LEADER:
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

    def _SyncObj__setState(self, newState: int) -> None:
        if newState != self._SyncObj__raftState:
            self._quiesced = False
            self._quiet_beats = 0
        super()._SyncObj__setState(newState)
