"""Snapshots of a Raft group: taken locally, sent to a follower, received and loaded.

The file format, the chunked sender and receiver and the background writer are in
snapshot.py; this layer is what the node does with them.

- **Loading keeps the journal.** Loading a snapshot (at start-up or from the leader) keeps the
  journal entries after it whenever the journal holds the snapshot's last (index, term)
  instead of clearing the journal (pysyncobj's ``__loadDumpFile`` cleared it unless it began
  exactly at the snapshot, losing acknowledged entries after a crash between snapshot and
  compaction).
- **Durable before the journal changes.** Snapshots travel in offset-checked chunks and are
  made durable before the journal changes; a follower that needs a snapshot while none can be
  read (pysyncobj's serializer is busy for one tick after each snapshot) gets a heartbeat, not
  an unbounded loop.
- **Paced transfer.** The leader's chunks are read ahead on the process's reader thread
  (snapshot.SnapshotSender, a few chunks per transfer); its tick only hands the chunks already
  read to the transport, while the follower has fewer than ``SNAPSHOT_WINDOW_BYTES``
  unacknowledged and the link has room this round (``bulk_room``: the mux's per-round budget
  less what the link has not written yet), so heartbeats of the broker's other groups never
  queue behind more than a round's budget of snapshot bytes. The follower's writes run on the
  process's writer thread (snapshot.SnapshotReceiver); it acknowledges every chunk and every
  completed write (``snapshot``: the transfer's id and the bytes written, with a success ack
  at its commit index), which opens the window and sends the next chunks at once, and the
  leader's heartbeat while the window is full (an empty append_entries) is answered the same
  way: neither side's election or check-quorum logic sees silence during a transfer. A new
  transfer (another leader, a restart after a gap or a failed write) starts at offset 0 and
  replaces the partial file; only a file whose final chunk was written is installed.
- **Off the tick thread.** With ``capture`` a due snapshot only *pins* the state on the tick
  thread (a partition: a WAL read transaction on a second SQLite connection) with its (last,
  prev) entries; a worker (snapshot.BackgroundSnapshot, two per process) writes and fsyncs
  the file while the group keeps applying, and a later tick renames it over the snapshot file
  and compacts the journal to it. A snapshot installed meanwhile (from the leader) cancels
  the job, so an older state never replaces a newer one.
- **Installing off the tick thread.** With ``capture`` a snapshot received from the leader is
  restored on a worker too (snapshot.SnapshotInstall: fsync the received file, copy the
  state out, ``restore`` it: a partition's SQLite backup into its live file in one
  transaction). The tick thread only writes the chunks (fdatasync'd behind it); while the
  worker runs, the group *installs*: it applies nothing, appends nothing from the leader (it
  answers with an ack at its commit index, so the leader neither steps down nor restarts the
  transfer), takes no snapshot of its own and does not campaign. When the worker is done, a
  tick renames the received file over the group's snapshot (the commit point: a crash before
  it restarts from the old snapshot and journal, whatever the SQLite file holds, since a
  restart restores the snapshot; after it, from the new one), reconciles the journal with it
  and acknowledges the snapshot's last index.
"""

from __future__ import annotations

import logging
from typing import Any

from pysyncobj.syncobj import SyncObj

from raftq.transport.raft.pinned import monotonic_time
from raftq.transport.raft.snapshot import (
    BackgroundSnapshot,
    SnapshotInstall,
    SnapshotReceiver,
    SnapshotSender,
    journal_keep_from,
)

logger = logging.getLogger(__name__)

# Snapshot bytes a round may hand a link when its transport has no budget of its own (bulk_room).
SNAPSHOT_ROUND_BYTES = 2 << 20


class Snapshots(SyncObj):
    """The snapshot layer of :class:`~raftq.transport.raft.hardened.HardenedSyncObj` (not
    instantiated alone)."""

    # State (set up in HardenedSyncObj.__init__).
    _snapshot_tx: SnapshotSender
    _snapshot_rx: SnapshotReceiver
    _snapshot_job: BackgroundSnapshot | None  # being written off the tick thread
    _install_job: SnapshotInstall | None  # a received snapshot being restored off it
    _install_from: Any  # the node that sent it
    _snapshot_acked: tuple[Any, int] | None  # follower: the transfer progress acknowledged last
    _SyncObj__raftLeader: Any
    _SyncObj__raftCommitIndex: int
    _SyncObj__forceLogCompaction: bool

    # ---------------------------------------------------- received from the leader
    def _on_snapshot_chunk(self, node: Any, message: dict[str, Any]) -> int | None:
        """Follower side of a snapshot chunk; returns the snapshot's last index once installed.

        Replaces pysyncobj's receive (serializer.setTransmissionData + ``__loadDumpFile(
        clearJournal=True)``), which wrote chunks blindly, renamed the file without fsync and
        cleared the whole journal. The chunk is written on the writer thread (see "Paced
        transfer"); the transfer's progress is acknowledged now and as the writes complete.
        """
        data, is_first, is_last = message["serialized"]
        rx = self._snapshot_rx
        try:
            rx.add(
                bytes(data),
                bool(is_first),
                bool(is_last),
                message.get("offset"),
                message.get("xfer"),
            )
        except ValueError as exc:
            logger.warning("[group=%s] snapshot from %s restarts: %s", self._group, node, exc)
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return None
        return self._snapshot_progress(node, always_ack=True)

    def _snapshot_progress(self, node: Any, *, always_ack: bool) -> int | None:
        """Where the transfer from ``node`` stands: once its final chunk is written, go on to
        install it (returns the snapshot's last index once installed); else acknowledge the
        bytes written when they moved since the last ack, or ``always_ack`` (a message from
        the leader: it hears from this follower while the transfer runs)."""
        rx = self._snapshot_rx
        try:
            finished = rx.finished()
        except OSError:
            logger.exception("[group=%s] cannot write the snapshot from %s", self._group, node)
            rx.discard()
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return None
        if finished:
            return self._snapshot_received(node)
        progress = rx.progress()
        if progress is not None and (always_ack or progress != self._snapshot_acked):
            self._snapshot_acked = progress
            commit = self._SyncObj__raftCommitIndex  # entries this follower holds as the leader
            self._SyncObj__sendNextNodeIdx(
                node, nextNodeIdx=commit + 1, success=True, quiesce=False, snapshot=progress
            )
        return None

    def _poll_snapshot_rx(self) -> None:
        """Tick: acknowledge the writer's progress, or install what it finished."""
        leader = self._SyncObj__raftLeader
        if not self._snapshot_rx.receiving or leader is None:
            return
        verified = self._snapshot_progress(leader, always_ack=False)
        if verified is not None:
            self._commit_verified(verified)

    def _snapshot_received(self, node: Any) -> int | None:
        """The final chunk from ``node`` is written: check it and install it."""
        rx = self._snapshot_rx
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
        if self._raftq._capture is not None:
            return self._begin_install(node)
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

    def _begin_install(self, node: Any) -> int | None:
        """Restore the received snapshot on a worker (see "Installing off the tick thread");
        inline (the simulation) it is done at once and acknowledged as on the tick thread."""
        self._cancel_snapshot_job()  # an older local snapshot must not be renamed over it
        owner, received = self._raftq, self._snapshot_rx
        self._install_from = node
        self._install_job = SnapshotInstall(
            lambda cancelled: owner._restore_received(received, cancelled), owner._wake
        )
        if self._install_job.done():
            return self._finish_install()
        logger.info(
            "[group=%s] installing the snapshot from %s off the tick thread", self._group, node
        )
        return None

    @property
    def installing(self) -> bool:
        """A received snapshot is being restored: apply, append, compact and campaign wait."""
        return self._install_job is not None

    def _finish_install(self) -> int | None:
        """Tick thread, once the install job is done (it renamed the received snapshot over
        the group's, the commit point, and restored it): reconcile the journal with it and
        acknowledge it to the leader. Returns the snapshot's last index, or None when the
        install failed (the leader is asked to start over)."""
        job, sender = self._install_job, self._install_from
        assert job is not None
        self._install_job = self._install_from = None
        leader = self._SyncObj__raftLeader or sender
        try:
            last, prev, cluster, learners = job.result()
            self._adopt_snapshot(last, prev, cluster, learners)
        except Exception:
            logger.exception("[group=%s] cannot install the snapshot from %s", self._group, sender)
            self._snapshot_rx.discard()
            self._SyncObj__sendNextNodeIdx(leader, success=False, reset=True)
            return None
        self._sync_before_reply()
        self._SyncObj__sendNextNodeIdx(leader, nextNodeIdx=last[1] + 1, success=True)
        return int(last[1])

    def _cancel_install(self) -> None:
        if self._install_job is not None:
            self._install_job.cancel()
            self._install_job = self._install_from = None

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
        self._adopt_snapshot(last, prev, cluster, self._raftq._snapshot_learners)

    def _adopt_snapshot(self, last: Any, prev: Any, cluster: Any, learners: list[str]) -> None:
        """The group's bookkeeping after its state was restored from a snapshot whose last two
        entries are (prev, last): journal, applied and commit index, members, learners."""
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
            self._set_learners(learners)
        self._SyncObj__onSetCodeVersion(0)

    # ---------------------------------------------------------- sent to a follower
    def _send_snapshot(self, node: Any, *, heartbeat: bool = True) -> None:
        """Send ``node`` the snapshot chunks that are read, within its window and the link's
        budget (see "Paced transfer"). ``heartbeat``: a heartbeat round, which sends the
        follower at least an empty append_entries (its election timer) when no chunk can go."""
        room = getattr(self._SyncObj__transport, "bulk_room", None)
        budget = room(node) if room else SNAPSHOT_ROUND_BYTES
        got = self._snapshot_tx.chunks(node, budget, self._SyncObj__raftCurrentTerm)
        if got is None:
            if not heartbeat:
                return
            if self._SyncObj__raftLog[0][1] == 1:  # never compacted: index 1 is the same no-op
                self._SyncObj__raftNextIndex[node] = 2  # everywhere; entries can be sent
                self._send_entries(node)
                return
            # No readable snapshot right now: keep the follower's election timer quiet.
            logger.warning("[group=%s] %s needs a snapshot; none to send yet", self._group, node)
            self._SyncObj__transport.send(node, self._append_message(serialized=None))
            return
        chunks, snapshot_last = got
        if not chunks and heartbeat:
            self._SyncObj__transport.send(node, self._append_message(serialized=None))
        for data, is_first, is_last, offset, xfer in chunks:
            message = self._append_message(
                serialized=(data, is_first, is_last), offset=offset, xfer=xfer
            )
            send_bulk = getattr(self._SyncObj__transport, "send_bulk", None)
            if send_bulk is not None:
                send_bulk(node, message, len(data))
            else:
                self._SyncObj__transport.send(node, message)
            if node not in self._SyncObj__connectedNodes:
                self._snapshot_tx.cancel(node)
                return
        if snapshot_last is not None:
            self._SyncObj__raftNextIndex[node] = max(
                self._SyncObj__raftNextIndex[node], snapshot_last + 1
            )

    def _on_snapshot_ack(self, node: Any, progress: Any) -> None:
        """Leader: ``node`` reports what it wrote of the transfer; send what fits now."""
        if self._snapshot_tx.acked(node, progress) and self._isLeader():
            self._send_snapshot(node, heartbeat=False)

    # --------------------------------------------------------------- taken locally
    def _SyncObj__tryLogCompaction(self) -> None:
        """SyncObj.__tryLogCompaction (syncobj.py:1421), the snapshot written off this thread
        when the owner gives ``capture`` (see "Snapshots off the tick thread", RaftNode)."""
        if self._raftq._capture is None:
            SyncObj._SyncObj__tryLogCompaction(self)
            return
        if self._install_job is not None:
            return  # its own state is being replaced
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
        self._cancel_install()
        self._snapshot_tx.cancel_all()
        self._snapshot_rx.abort()
        super()._doDestroy()
