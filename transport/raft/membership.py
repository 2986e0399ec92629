"""Membership: learners, who votes and campaigns, and membership entries without pickle.

Learners (Raft thesis §4.2.1 non-voting members; pysyncobj has none). A member added with a
``learner`` membership entry is replicated to like any follower, but the leader does not count
it toward commit or toward its leader-fallback quorum, a candidate neither asks nor counts its
vote, it never campaigns and is never a leadership-transfer target. A ``promote`` entry makes
it a voter: a single-server change of the voting set, issued only once the learner has caught
up. The learner set is replicated state: it follows the membership entries (appended, applied,
truncated) and travels in snapshots.

No unpickled entry. Membership changes are written as protobuf (entries.py) and every
membership entry is parsed there, never by pysyncobj's ``pickle.loads``; code-version entries
(pickles too) are never applied. A crafted entry changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from pysyncobj.config import FAIL_REASON
from pysyncobj.syncobj import _RAFT_STATE, SyncObj

from raftq.transport.raft.entries import decode_membership, encode_membership
from raftq.transport.raft.lag import RECHECK_AFTER_POLL_S, election_grace_s
from raftq.transport.raft.pinned import LEADER, monotonic_time

logger = logging.getLogger(__name__)


# A transfer holds appends only for a target this close to the leader's last entry (a
# healthy follower lags by the entries in flight); one further behind is refused at once, as
# stock pysyncobj refuses any target not caught up, and the caller may ask again later.
TRANSFER_LAG_ENTRIES_MAX = 64


@dataclass
class _Transfer:
    """A leadership transfer under way (the leader holds new appends meanwhile)."""

    node: Any
    until: float  # pysyncobj clock: the hold ends here if leadership has not moved
    callback: Any
    sent: bool = False  # TimeoutNow sent


class Membership(SyncObj):
    """The membership layer of :class:`~raftq.transport.raft.hardened.HardenedSyncObj` (not
    instantiated alone)."""

    # State (set up in HardenedSyncObj.__init__).
    _learners: set[Any]
    _self_learner: bool
    _votes_from: set[Any]  # candidate: the voters that granted this term
    _transfer: _Transfer | None  # leader: a leadership transfer holding new appends
    _leader_heard_at: float | None  # follower: raft time of the leader's last append_entries
    led_since: float  # raft time this replica last became leader
    _grace_base: float  # follower: the election deadline a grace was added to
    _graced_deadline: float | None  # follower: the deadline set with that grace
    _rechecked: bool  # follower: this deadline already waited for a fresh poll
    _SyncObj__connectedNodes: set[Any]
    _SyncObj__raftElectionDeadline: float
    _SyncObj__raftLeader: Any
    _SyncObj__transferInProgress: bool

    # -------------------------------------------------------------------- learners
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
        """Hand leadership to ``node`` (a connected voter; None: the most caught-up one), as
        in Raft thesis §3.10: from now on this leader appends no new command (they wait in its
        queue), lets the target catch up, and only then sends it TimeoutNow. The target then
        campaigns with a log as long as ours, so we and every other voter grant it the vote:
        one term, even under a steady stream of sends (stock pysyncobj sends TimeoutNow only
        if the target is caught up at the call, and keeps appending: under load the target
        lost the vote and the term moved twice). The hold ends when leadership moves, or
        after ``raftMinTimeout`` without it (appends resume; the callback gets
        ``REQUEST_DENIED`` if the target never caught up). Never to a learner (it would not
        campaign) nor to a target more than ``TRANSFER_LAG_ENTRIES_MAX`` entries behind
        (refused at once: holding appends while it catches up would stall the group).
        ``callback(None, SUCCESS)`` once TimeoutNow is sent."""
        if self._SyncObj__raftState != LEADER:
            if callback is not None:
                callback(None, FAIL_REASON.NOT_LEADER)
            return
        connected = self._SyncObj__connectedNodes
        if node is None:
            match = self._SyncObj__raftMatchIndex
            candidates = [(match.get(n, 0), n.id, n) for n in self._voters() if n in connected]
            node = max(candidates)[2] if candidates else None
        elif not hasattr(node, "id"):
            node = self._SyncObj__nodeClass(node)
        last = self._SyncObj__raftLog[-1][1]
        if (
            node is None
            or node in self._learners
            or node not in self._SyncObj__otherNodes
            or self._transfer is not None
            or last - self._SyncObj__raftMatchIndex.get(node, 0) > TRANSFER_LAG_ENTRIES_MAX
        ):
            if callback is not None:
                callback(None, FAIL_REASON.REQUEST_DENIED)
            return
        until = monotonic_time() + self._SyncObj__conf.raftMinTimeout
        self._transfer = _Transfer(node, until, callback)
        self._advance_transfer()

    def _advance_transfer(self) -> None:
        """Leader, each tick while a transfer holds appends: send TimeoutNow once the target
        has every entry; give up (resume appending) at the transfer's deadline."""
        transfer = self._transfer
        if transfer is None:
            return
        now = monotonic_time()
        if self._SyncObj__raftState != LEADER or now > transfer.until:
            self._end_transfer()
            return
        if transfer.sent:
            return
        last = self._SyncObj__raftLog[-1][1]
        if self._SyncObj__raftMatchIndex.get(transfer.node, 0) != last:
            self._SyncObj__newAppendEntriesTime = now  # send it what it lacks on this tick
            return
        self._SyncObj__transport.send(
            transfer.node, {"type": "timeout_now", "term": self._SyncObj__raftCurrentTerm}
        )
        transfer.sent = True
        if transfer.callback is not None:
            transfer.callback(None, FAIL_REASON.SUCCESS)

    def _end_transfer(self) -> None:
        """Stop holding appends; a transfer that never sent TimeoutNow is refused."""
        transfer, self._transfer = self._transfer, None
        if transfer is not None and not transfer.sent and transfer.callback is not None:
            transfer.callback(None, FAIL_REASON.REQUEST_DENIED)

    def _checkCommandsToApply(self) -> None:
        """Append queued commands, except while a leadership transfer holds them."""
        if self._transfer is not None and self._SyncObj__raftState == LEADER:
            return
        SyncObj._checkCommandsToApply(self)

    # ------------------------------------------------------------------- elections
    def _load_lag_s(self, leader: Any) -> float:
        """How starved this broker and the leader's have lately been: the larger of how late
        this broker's driver rounds started and how late the leader broker's frames arrived
        (lag.py; 0 over a transport that measures neither)."""
        link_lag_s = getattr(self._SyncObj__transport, "link_lag_s", None)
        leader_lag_s = 0.0 if link_lag_s is None else float(link_lag_s(leader.id))
        return max(self._raftq.scheduling_lag_s(), leader_lag_s)

    def _waits_for_leader(self) -> bool:
        """A follower with an open link to the leader it follows, not asked by a leadership
        transfer to campaign: only it waits longer under load. Not a candidate (it has no
        leader to wait for), nor a follower whose leader's link closed (its process is gone,
        not slow)."""
        leader = self._SyncObj__raftLeader
        return (
            self._SyncObj__raftState == _RAFT_STATE.FOLLOWER
            and not self._SyncObj__transferInProgress
            and leader is not None
            and leader in self._SyncObj__connectedNodes
        )

    def _election_grace_s(self) -> float:
        """Seconds past its election deadline a follower waits because its own broker or its
        leader's has lately run late (lag.py); 0 unless it :meth:`_waits_for_leader`."""
        if not self._waits_for_leader():
            return 0.0
        leader = self._SyncObj__raftLeader
        return election_grace_s(self._load_lag_s(leader), self._SyncObj__conf.raftMaxTimeout)

    def _election_due(self, now: float) -> bool:
        """Whether this replica's election timer has fired at raft time ``now``.

        A follower whose own rounds run late (the whole machine starved: its leader's broker
        probably ran as late, and what it sent may not have been written or read yet), or
        whose leader's frames have lately come late (its broker starved now and then), waits
        past the deadline by :meth:`_election_grace_s`, judged afresh at every tick from the
        deadline it extended (so the grace never adds up, and shrinks as the lag decays). A
        follower on time, beside a leader whose link was on time until it fell silent (a hung,
        SIGSTOPped, leader on a healthy machine), campaigns at the deadline. A tick that comes
        more than ``RECHECK_AFTER_POLL_S`` after the driver's last poll decides nothing, once
        per deadline: the next poll may hold the leader's messages. Waiting longer only costs
        availability: Raft's safety never depends on a follower's timer, and nothing a leader
        relies on is stretched."""
        deadline = self._SyncObj__raftElectionDeadline
        if deadline >= now:
            return False
        fresh = deadline != self._graced_deadline  # not one we extended: a heartbeat moved it
        if fresh:
            self._grace_base = deadline
            self._rechecked = False
        grace = self._election_grace_s()
        extended = self._grace_base + grace
        if extended < now:
            if (
                self._rechecked
                or self._raftq.since_poll_s() <= RECHECK_AFTER_POLL_S
                or not self._waits_for_leader()
            ):
                return True
            # This tick comes long after the driver read the sockets (the round stalled):
            # what the leader sent meanwhile is unread. Decide after the next read.
            self._rechecked = True
            extended = now
        if fresh:
            logger.debug(
                "[group=%s] election timer deferred %.0f ms: this broker or the leader's runs late",
                self._group,
                grace * 1000,
            )
        self._SyncObj__raftElectionDeadline = self._graced_deadline = extended
        return False

    def _start_election(self) -> None:
        now = monotonic_time()
        late_s = now - self._SyncObj__raftElectionDeadline
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        if self._self_learner:
            return  # a learner never campaigns (it is not counted either)
        # Every term change says why (issue 16: elections under CPU contention).
        leader = self._SyncObj__raftLeader
        heard = self._leader_heard_at
        logger.log(
            logging.INFO if self._SyncObj__transferInProgress else logging.WARNING,
            "[group=%s] %s: standing for term %d (leader %s last heard %s ago; load lag %.0f ms)",
            self._group,
            "asked to take over (leadership transfer)"
            if self._SyncObj__transferInProgress
            else f"election timer fired {late_s * 1000:.0f} ms late",
            self._SyncObj__raftCurrentTerm + 1,
            None if leader is None else leader.id,
            "never" if heard is None else f"{(now - heard) * 1000:.0f} ms",
            0.0 if leader is None else self._load_lag_s(leader) * 1000,
        )
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

    def _SyncObj__setState(self, newState: int) -> None:
        """A leader that steps down (a higher term seen, leader fallback) restarts its
        election timer: the deadline it kept from before it led is long past, and campaigning
        at once would compete with the candidate that deposed it (a transfer's target)."""
        if self._SyncObj__raftState == LEADER and newState != LEADER:
            self._SyncObj__raftElectionDeadline = (
                monotonic_time() + self._SyncObj__generateRaftTimeout()
            )
            self._end_transfer()
        elif newState == LEADER and self._SyncObj__raftState != LEADER:
            self.led_since = monotonic_time()
        SyncObj._SyncObj__setState(self, newState)

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

    # ---------------------------------------------------------- membership entries
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
