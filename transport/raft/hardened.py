"""HardenedSyncObj: pysyncobj's SyncObj with raftq's overrides, composed from its layers.

Each layer is a SyncObj subclass in a file of its own; this class stacks them and holds what
they share: the node's state (set up in ``__init__``), apply, the links to peers, the dispatch
of received messages and the tick.

- durability.py: fsync'd acks, durable-only self votes, §5.3 truncation, the send round;
- snapshots.py: snapshots taken off the tick thread, sent in chunks, received and loaded;
- quiescence.py: idle groups stop heartbeating while their brokers are heard;
- membership.py: learners, elections, membership entries without pickle.

**One apply(bytes).** Commands are stored as ``REGULAR | b"R" | data`` (no pickle, no
positional ``@replicated`` method ids); the owner's ``_apply_entry`` gets the data and its Raft
index (an exception from the user's ``apply`` becomes an :class:`ApplyError` result instead of
wedging the group). Any other non-membership entry (NO_OP, VERSION, unknown) changes nothing.

Methods named ``_SyncObj__*`` replace SyncObj's private (name-mangled) methods of 0.3.17
(pinned.py). Everything here runs on the tick thread (node.py, "Threading").
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pysyncobj.config import SyncObjConf
from pysyncobj.syncobj import _RAFT_STATE, SyncObj
from pysyncobj.transport import TransportNotReadyError

from raftq.transport.raft.clocks import QuorumClock
from raftq.transport.raft.durability import ACKS_PER_LEADER_FALLBACK, DurableLog
from raftq.transport.raft.entries import is_membership
from raftq.transport.raft.journal import DurableJournal
from raftq.transport.raft.membership import Membership
from raftq.transport.raft.pinned import (
    DISCONNECT_ELECTION_SPREAD_S,
    LEADER,
    NO_OP,
    RAW_V1,
    REGULAR,
    ApplyError,
    monotonic_time,
)
from raftq.transport.raft.quiescence import Quiescence
from raftq.transport.raft.snapshot import (
    BackgroundSnapshot,
    SnapshotInstall,
    SnapshotReceiver,
    SnapshotSender,
)
from raftq.transport.raft.snapshots import Snapshots

if TYPE_CHECKING:
    from raftq.transport.raft.node import RaftNode

logger = logging.getLogger(__name__)


class _NoNotifier:
    """Stands in for pysyncobj's PipeNotifier on a driver-run node."""

    def notify(self) -> None:
        pass


class HardenedSyncObj(DurableLog, Snapshots, Quiescence, Membership, SyncObj):
    """pysyncobj's SyncObj with the hardening overrides; driven only by :class:`RaftNode`."""

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
        self._transfer = None  # leader: a leadership transfer holding appends (membership.py)
        self._leader_heard_at: float | None = None  # follower: the leader's last append_entries
        self.led_since = -math.inf  # raft time this replica last became leader
        # Follower: the election deadline a load grace was added to, and the deadline it set
        # (membership.py _election_due; lag.py).
        self._grace_base = -math.inf
        self._graced_deadline: float | None = None
        self._rechecked = False  # this deadline already waited for a fresh poll
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
        self._snapshot_tx = SnapshotSender(conf.fullDumpFile, conf.logCompactionBatchSize)
        off_driver = owner._capture is not None  # received, written and installed off it
        self._snapshot_rx = SnapshotReceiver(
            conf.fullDumpFile,
            fsync=journal.fsync_enabled,
            install_syncs=off_driver,
            background=off_driver,
            on_written=owner._wake,
        )
        self._snapshot_acked: tuple[Any, int] | None = None
        self._snapshot_job: BackgroundSnapshot | None = None  # being written off the tick thread
        self._install_job: SnapshotInstall | None = None  # a received one restored off it
        self._install_from: Any = None
        super().__init__(self_addr, list(peers), conf, transportClass=transport_class)
        # SyncObj built a MemoryJournal (conf.journalFile is None); swap in the durable one
        # and redo what SyncObj.__init__ derived from it (syncobj.py:166-176).
        if len(journal) == 0:
            journal.add(NO_OP, 1, 0)
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

    @property
    def _group(self) -> str:
        return self._raftq.name

    def _last_index(self) -> int:
        return int(self._SyncObj__raftLog[-1][1])

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        """Replaces syncobj.py:869: stock unpickles VERSION, MEMBERSHIP and REGULAR entries.
        Here nothing is unpickled: membership entries go through entries.decode_membership,
        any other non-REGULAR entry (NO_OP, VERSION, unknown) changes nothing."""
        kind = command[:1]
        if kind == REGULAR:
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
        elif kind != NO_OP:
            logger.error(
                "[group=%s] entry %d of type %r ignored",
                self._group,
                self.raftLastApplied + 1,
                bytes(kind),
            )
        return None

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
            node == self._SyncObj__raftLeader or self._SyncObj__raftState == LEADER
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
        if self._quiesced and self._SyncObj__raftState == LEADER:
            self._unquiesce(f"link to {node.id} opened")  # its replica may have restarted

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

    def _onTick(self, timeToWait: float = 0.0) -> None:
        """SyncObj._onTick (syncobj.py:611-706) with durable-only self votes for commit."""
        transport = self._SyncObj__transport
        if not transport.ready:
            with contextlib.suppress(TransportNotReadyError):
                transport.tryGetReady()
        conf = self._SyncObj__conf
        if not transport.ready:
            time.sleep(timeToWait)
            if not self._SyncObj__needLoadDumpFile and self._install_job is None:
                self._SyncObj__applyLogEntries()  # apply nothing before the snapshot
            return

        if self._SyncObj__needLoadDumpFile:
            if conf.fullDumpFile is not None and os.path.isfile(conf.fullDumpFile):
                self._SyncObj__loadDumpFile(clearJournal=False)
            self._SyncObj__needLoadDumpFile = False

        self._poll_snapshot_rx()
        if self._install_job is not None and self._install_job.done():
            self._finish_install()

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
            and self._election_due(now)  # may wait longer if this broker runs late
        ):
            if self._install_job is None:
                self._start_election()
            else:  # installing a snapshot: behind the leader by definition, it never campaigns
                self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()

        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            self._snapshot_tx.cancel_all()
        else:
            self._advance_leader_commit()
            self._advance_transfer()
            deadline = now - conf.leaderFallbackTimeout
            voters = self._voters()
            alive = 1 + sum(1 for n in voters if self._SyncObj__lastResponseTime[n] > deadline)
            if alive <= (len(voters) + 1) / 2:
                logger.warning("[group=%s] no quorum heard from: stepping down", self._group)
                self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
                self._SyncObj__raftLeader = None

        # Nothing is applied while a received snapshot is being restored (snapshots.py).
        need_send = self._SyncObj__applyLogEntries() if self._install_job is None else False
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
