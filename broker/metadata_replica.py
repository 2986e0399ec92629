"""This broker's replica of the metadata Raft group (group ``meta``).

The MetadataMachine (metadata/machine.py) applies MetaCommand bytes on the Raft driver thread;
its Table is immutable and swapped in whole, so any thread reads ``table`` without a lock.
Snapshots are the machine's deterministic ``snapshot_bytes()`` written to the path the Raft
node gives; on restart the node restores the snapshot and replays the journal after it.

Only the leader proposes, and it stamps ``now_ms``: the group's quorum clock, the time a majority
of the voters' clocks have reached (transport/raft/clocks.py), so one broker's wrong clock does
not move metadata time (frontends plan with the broker's clock; the stamp is what counts).
Waiters can block until the table reaches an applied index (``wait_for``), which is how a
broker that just forwarded a change reads its own write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from raftq.metadata.machine import MetadataMachine
from raftq.metadata.table import Table
from raftq.proto import errors, metadata_pb2
from raftq.transport.raft import ApplyError, RaftNode, RaftTimings
from raftq.transport.raft.driver import RaftDriver

logger = logging.getLogger("raftq.broker.metadata")

GROUP = "meta"


class MetadataReplica:
    """Raises (constructor): ``errors.Unavailable`` when the raft transport cannot bind."""

    def __init__(
        self,
        *,
        data_dir: str | Path,
        self_addr: str,
        voters: Sequence[str],
        driver: RaftDriver,
        timings: RaftTimings,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
        standby: bool = False,
        learners: Sequence[str] = (),
        max_clock_skew_ms: int = 2000,
    ) -> None:
        """``voters``: every member of the group (learners too); ``learners``: the members that
        do not vote (broker/membership.py); ``max_clock_skew_ms``: raft.max_clock_skew_ms."""
        self.machine = MetadataMachine()
        self._clock = clock
        self.max_clock_skew_ms = max_clock_skew_ms
        self._changed = threading.Condition()
        self._listeners: list[Callable[[Table], None]] = []
        self.self_addr = self_addr
        self.node = RaftNode(
            self_addr,
            list(voters),
            apply=self._apply,
            snapshot=self._snapshot,
            restore=self._restore,
            data_dir=Path(data_dir),
            name=GROUP,
            fsync=fsync,
            auto_tick=False,
            transport_class=driver.endpoint.transport_class(GROUP),  # type: ignore[attr-defined]
            timings=timings,
            group_commit=True,
            standby=standby,  # joining (broker/membership.py): no campaigns until added
            learners=learners,
            wall_clock=clock,
        )
        self._driver = driver
        driver.register(GROUP, self.node)

    # -- reads (any thread) --------------------------------------------------------------------

    @property
    def table(self) -> Table:
        return self.machine.table

    def is_leader(self) -> bool:
        return self.node.is_leader()

    def leader(self) -> str | None:
        """The metadata leader's raft address, or None while no leader is known."""
        return self.node.leader()

    def statistics(self) -> dict[str, int | str | bool]:
        """Raft state of the metadata group and the size of the table, for metrics."""
        status = self.node.status()
        table = self.machine.table
        return {
            "group": GROUP,
            "is_leader": self.node.is_leader(),
            "raft_state": status["state"],
            "raft_leader": status["leader"] or "",
            "raft_term": status["term"],
            "raft_commit_index": status["commit_index"],
            "raft_applied_index": status["applied_index"],
            "fsync_count": status["fsync_count"],
            "table_applied_index": table.applied_index,
            "brokers": len(table.brokers),
            "topics": len(table.topics),
            "groups": len(table.groups),
        }

    def now_ms(self) -> int:
        """Metadata time as this replica would stamp it now (meaningful on the leader): the
        group's quorum clock, paced on the leader like partition time (PartitionReplica.now_ms);
        while fewer than a majority of voters have been heard from, the
        time already applied (on an empty table, this broker's clock)."""
        quorum_ms = self.node.stamp_clock_ms(headroom_ms=self.max_clock_skew_ms // 2)
        if quorum_ms is not None:
            return quorum_ms
        applied_ms = self.machine.table.clock_ms
        return applied_ms if applied_ms else int(self._clock() * 1000)

    def expiry_now_ms(self) -> int:
        """The time by which the leader judges an expiry of stamped times (empty groups):
        ``now_ms`` less ``max_clock_skew_ms``, the error the quorum clock may still have, so
        nothing expires before its time by a true clock."""
        return self.now_ms() - self.max_clock_skew_ms

    def on_change(self, listener: Callable[[Table], None]) -> None:
        """Call ``listener(table)`` after every applied change, on the Raft driver thread: it
        must not block."""
        self._listeners.append(listener)

    def wait_until(self, predicate: Callable[[Table], bool], timeout_s: float) -> bool:
        """Block until ``predicate(table)`` holds; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.machine.table), timeout_s)

    def wait_for(self, index: int, timeout_s: float) -> bool:
        """Block until the table has applied ``index``; False on timeout."""
        return self.wait_until(lambda table: table.applied_index >= index, timeout_s)

    # -- writes --------------------------------------------------------------------------------

    def propose(
        self, command: metadata_pb2.MetaCommand, timeout_s: float
    ) -> metadata_pb2.MetaResult:
        """Replicate one planned command on this (leader) replica and return the applied result.

        Normal errors: ``NotLeader`` (the hint is the leader's raft address), ``Timeout``
        (outcome unknown: plan again and retry), ``Unavailable``, and the command's own
        rejection as its typed error (``TopicExists``, ``UnknownTopic``, ...).
        """
        stamped = metadata_pb2.MetaCommand()
        stamped.CopyFrom(command)
        stamped.now_ms = self.now_ms()
        result = self.node.propose_sync(stamped.SerializeToString(), timeout_s)
        if isinstance(result, ApplyError):
            raise errors.Internal(f"[group={GROUP}] apply failed: {result.message}")
        assert isinstance(result, metadata_pb2.MetaResult), type(result)
        if result.error:
            raise errors.error_for(result.error, result.message)
        return result

    def close(self) -> None:
        self._driver.unregister(GROUP)
        self.node.destroy()

    # -- on the driver thread --------------------------------------------------------------------

    def _apply(self, data: bytes, index: int) -> metadata_pb2.MetaResult:
        result = self.machine.apply(data, index)
        table = self.machine.table
        with self._changed:
            self._changed.notify_all()
        if not result.skipped:
            for listener in self._listeners:
                try:
                    listener(table)
                except Exception:  # a listener bug must not stop the metadata group
                    logger.exception("[group=%s] table listener failed", GROUP)
        return result

    def _snapshot(self, path: str) -> None:
        Path(path).write_bytes(self.machine.snapshot_bytes())

    def _restore(self, path: str) -> None:
        self.machine.restore_bytes(Path(path).read_bytes())
        with self._changed:
            self._changed.notify_all()
