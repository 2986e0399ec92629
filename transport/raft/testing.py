"""Test doubles and stock-pysyncobj references for the Raft hardening tests.

Tests must not import pysyncobj (only transport/raft/ may); they get from here:

* :class:`RecordingTransport`: a pysyncobj Transport that records what a node sends and lets
  a test hand it crafted messages (``deliver``), to drive one node step by step.
* :class:`StockNode`: unmodified pysyncobj 0.3.17 with one ``@replicated`` apply and its own
  ``FileJournal``: the behaviour PYSYNCOBJ.md measured, run side by side with :class:`RaftNode`.
* small accessors over a SyncObj's private state (log, nextIndex, matchIndex, commit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pysyncobj.config import SyncObjConf
from pysyncobj.syncobj import _RAFT_STATE, SyncObj, replicated
from pysyncobj.transport import TCPTransport, Transport

from raftq.transport.raft.node import RaftNode
from raftq.transport.raft.timings import RaftTimings


class RecordingTransport(Transport):
    """Records every send; delivers only what a test passes to :meth:`deliver`."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self.nodes = {node.id: node for node in otherNodes}
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.on_send: Callable[[str, dict[str, Any]], None] | None = None

    def send(self, node: Any, message: Any) -> bool:
        self.sent.append((node.id, message))
        if self.on_send is not None:
            self.on_send(node.id, message)
        return True

    def connect_all(self) -> None:
        for node in self.nodes.values():
            self._onNodeConnected(node)

    def deliver(self, from_addr: str, message: dict[str, Any]) -> None:
        self._onMessageReceived(self.nodes[from_addr], message)

    def take(self, kind: str | None = None, to: str | None = None) -> list[dict[str, Any]]:
        """Remove and return the recorded messages of one type (and recipient)."""
        keep: list[tuple[str, dict[str, Any]]] = []
        out: list[tuple[str, dict[str, Any]]] = []
        for addr, message in self.sent:
            wanted = (kind is None or message.get("type") == kind) and (to is None or addr == to)
            (out if wanted else keep).append((addr, message))
        self.sent = keep
        return [message for _, message in out]


class StockNode(SyncObj):
    """Stock pysyncobj 0.3.17: FileJournal, no hardening, ``apply`` as a @replicated method."""

    def __init__(
        self,
        self_addr: str,
        peers: Sequence[str],
        *,
        apply: Callable[[bytes, int], object],
        journal_file: str | None = None,
        transport_class: type = TCPTransport,
        timings: RaftTimings | None = None,
        auto_tick: bool = True,
        **conf: Any,
    ) -> None:
        self._user_apply = apply
        t = timings or RaftTimings.fast()
        settings: dict[str, Any] = {
            "autoTick": auto_tick,
            "autoTickPeriod": t.tick_s,
            "appendEntriesUseBatch": False,
            "raftMinTimeout": t.election_timeout_min_s,
            "raftMaxTimeout": t.election_timeout_max_s,
            "appendEntriesPeriod": t.heartbeat_s,
            "connectionTimeout": t.connection_timeout_s,
            "connectionRetryTime": t.connection_retry_s,
            "journalFile": journal_file,
            "bindAddress": self_addr,
            "dynamicMembershipChange": True,
        }
        settings.update(conf)
        super().__init__(
            self_addr,
            [p for p in peers if p != self_addr],
            SyncObjConf(**settings),
            transportClass=transport_class,
        )

    @replicated
    def apply(self, data: bytes) -> object:
        return self._user_apply(data, self.raftLastApplied + 1)


def syncobj_of(node: RaftNode | SyncObj) -> Any:
    return node.syncobj if isinstance(node, RaftNode) else node


def log_entries(node: RaftNode | SyncObj) -> list[tuple[bytes, int, int]]:
    log = syncobj_of(node)._SyncObj__raftLog
    return [tuple(log[i]) for i in range(len(log))]


def next_index(node: RaftNode | SyncObj, peer: str) -> int:
    obj = syncobj_of(node)
    return int({n.id: v for n, v in obj._SyncObj__raftNextIndex.items()}[peer])


def match_index(node: RaftNode | SyncObj, peer: str) -> int:
    obj = syncobj_of(node)
    return int({n.id: v for n, v in obj._SyncObj__raftMatchIndex.items()}[peer])


def commit_index(node: RaftNode | SyncObj) -> int:
    return int(syncobj_of(node).raftCommitIndex)


def is_candidate(node: RaftNode | SyncObj) -> bool:
    return bool(syncobj_of(node)._SyncObj__raftState == _RAFT_STATE.CANDIDATE)


def transport_of(node: RaftNode | SyncObj) -> Any:
    return syncobj_of(node)._SyncObj__transport


def tick(node: RaftNode | SyncObj, timeout: float = 0.0) -> None:
    if isinstance(node, RaftNode):
        node.tick(timeout)
    else:
        node.doTick(timeout)


def read_stock_journal(data: bytes, scratch_dir: str) -> list[tuple[bytes, int, int]]:
    """Entries in the bytes of a stock pysyncobj FileJournal (empty bytes: none)."""
    if not data:
        return []
    import os

    from pysyncobj.journal import FileJournal

    path = os.path.join(scratch_dir, "stock-image.journal")
    with open(path, "wb") as f:
        f.write(data)
    journal = FileJournal(path)
    try:
        return [tuple(journal[i]) for i in range(len(journal))]
    finally:
        journal._destroy()


def write_stock_journal(
    path: str, entries: Sequence[tuple[bytes, int, int]], commit_index: int
) -> None:
    """Write a stock pysyncobj FileJournal holding ``entries`` (a crafted on-disk state)."""
    from pysyncobj.journal import FileJournal

    journal = FileJournal(path)
    try:
        for entry in entries:
            journal.add(*entry)
        journal.setRaftCommitIndex(commit_index)
        journal.flush()
    finally:
        journal._destroy()


def serializer_busy(node: RaftNode | SyncObj) -> None:
    """Put pysyncobj's serializer in the state it is in for one tick after every snapshot
    (useFork=False: ``pid == -1`` until the next ``checkSerializing``)."""
    syncobj_of(node)._SyncObj__serializer._Serializer__pid = -1


def free_addr(ip: str) -> str:
    """An 'ip:port' whose port the kernel just handed out (127.0.0.x are all loopback)."""
    import socket

    with socket.socket() as s:
        s.bind((ip, 0))
        return f"{ip}:{s.getsockname()[1]}"


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` every 5 ms until true; AssertionError naming ``what`` at the deadline."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)
