"""A partition's snapshot is written off the broker's driver thread (transport/raft/snapshots.py,
"Off the tick thread"; issue 12 item 4).

Three brokers in one process (tests/process/test_replica.py's brokers: a MuxEndpoint and a
RaftDriver each), a "big" partition that compacts after 40 entries and several small partitions
on the same brokers. SQLite runs on a VFS whose writes to a snapshot's backup file
(``*.state.tmp``) stall until the test releases them: a disk that takes as long as the test
wants, without sleeping in the test. While every replica's snapshot of the big partition is
stalled, for well over an election timeout, every group on those brokers keeps its leader and
term and accepts sends (the big partition too). Released, the snapshot is installed and compacts
the journal, and a replica started empty is restored from it to the leader's exact state.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from raftq.partitions.sqlite_store import SnapshotCancelled, SqliteStore
from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftTimings
from tests.helpers import wait_until
from tests.process.test_replica import Broker, rec

# Elections slow enough that a loaded 2-core machine does not hold one by itself.
SLOW_ELECTIONS: dict[str, Any] = {
    "election_timeout_min_s": 0.8,
    "election_timeout_max_s": 1.6,
    "connection_timeout_s": 1.6,
    "leader_fallback_s": 3.0,
    "quiesce": False,
}
SMALL = RaftTimings.fast(**SLOW_ELECTIONS)
BIG = RaftTimings.fast(**SLOW_ELECTIONS, compaction_min_entries=40, compaction_min_time_s=3600.0)
SMALL_GROUPS = 6
STALL_WINDOW_S = 2.5 * BIG.election_timeout_max_s  # no election may fit in it


class StallingVFS(apsw.VFS):
    """The default VFS for the test: writes to files named ``*.state.tmp`` (the SQLite backup
    a snapshot writes) wait while ``stall`` is set, until ``release``."""

    def __init__(self) -> None:
        self.stall = threading.Event()
        self.release = threading.Event()
        self.stalled = threading.Event()  # a backup write is waiting
        super().__init__("raftq-stall", base="unix", makedefault=True)

    def xOpen(self, name: Any, flags: Any) -> apsw.VFSFile:
        return _StallingFile(self, name, flags)


class _StallingFile(apsw.VFSFile):
    def __init__(self, vfs: StallingVFS, name: Any, flags: Any) -> None:
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        self._vfs = vfs
        self._watched = bool(filename) and str(filename).endswith(".state.tmp")
        super().__init__("unix", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self._watched and self._vfs.stall.is_set():
            self._vfs.stalled.set()
            self._vfs.release.wait(60)
        super().xWrite(data, offset)


@pytest.fixture
def vfs() -> Iterator[StallingVFS]:
    v = StallingVFS()
    try:
        yield v
    finally:
        v.release.set()
        v.unregister()


class Brokers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.brokers = [Broker(f"127.0.0.{i}") for i in (1, 2, 3)]
        self.addrs = [b.address for b in self.brokers]
        self.replicas: list[PartitionReplica] = []
        self.topic_ids: dict[str, int] = {}

    def start(self, topic: str, broker: Broker, timings: RaftTimings) -> PartitionReplica:
        replica = PartitionReplica(
            topic,
            0,
            self.topic_ids.setdefault(topic, len(self.topic_ids) + 1),
            data_dir=self.data_dir(topic, broker),
            self_addr=broker.address,
            peers=self.addrs,
            driver=broker.driver,
            timings=timings,
            synchronous="NORMAL",
        )
        self.replicas.append(replica)
        return replica

    def data_dir(self, topic: str, broker: Broker) -> Path:
        return self.root / topic / broker.address.replace(":", "_")

    def group(self, topic: str, timings: RaftTimings) -> list[PartitionReplica]:
        return [self.start(topic, b, timings) for b in self.brokers]

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()
        for broker in self.brokers:
            broker.stop()


def leader_of(group: list[PartitionReplica]) -> PartitionReplica:
    def one() -> PartitionReplica | None:
        leaders = [r for r in group if not r._closed and r.is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    found = wait_until(one, 20, "exactly one leader")
    assert found is not None
    return found


def terms_and_leaders(groups: dict[str, list[PartitionReplica]]) -> dict[str, Any]:
    return {
        name: sorted((r.node.self_addr, r.node.term, r.node.leader()) for r in group)
        for name, group in groups.items()
    }


def test_a_stalled_snapshot_stops_no_group_and_restores_a_replica_exactly(
    tmp_path: Path, vfs: StallingVFS
) -> None:
    cluster = Brokers(tmp_path)
    try:
        big = cluster.group("big", BIG)
        groups = {"big": big}
        for i in range(SMALL_GROUPS):
            groups[f"small{i}"] = cluster.group(f"small{i}", SMALL)
        leaders = {name: leader_of(group) for name, group in groups.items()}
        for name, leader in leaders.items():  # every group committed in its term, settled
            leader.send([rec(f"{name}-first")], timeout_s=10)
        wait_until(
            lambda: all(r.node.leader() is not None for g in groups.values() for r in g),
            20,
            "every replica knows its leader",
        )
        before = terms_and_leaders(groups)

        vfs.stall.set()
        sent = 0
        while not vfs.stalled.is_set():  # past compaction_min_entries: the snapshots start
            assert sent < 500, "no snapshot started"
            leaders["big"].send([rec(f"big-{sent}", "k")], "p", sent, timeout_s=5)
            sent += 1
        journals_at_stall = [len(r.node.journal) for r in big]

        # The snapshot stays stalled for 2.5 election timeouts; every group keeps serving.
        window_end = time.monotonic() + STALL_WINDOW_S
        rounds = 0
        while time.monotonic() < window_end or rounds < 3:
            for name, leader in leaders.items():
                if name == "big":
                    leader.send([rec(f"big-{sent}", "k")], "p", sent, timeout_s=2)
                    sent += 1
                else:
                    leader.send([rec(f"{name}-{rounds}")], timeout_s=2)
            rounds += 1
        assert vfs.stalled.is_set() and not vfs.release.is_set()
        assert terms_and_leaders(groups) == before, "an election happened during the snapshot"
        assert all(r.node.journal[0][1] == 1 for r in big), "compacted before the snapshot"
        assert all(len(r.node.journal) >= n for r, n in zip(big, journals_at_stall, strict=True))

        vfs.stall.clear()
        vfs.release.set()
        # New connections (a restore opens its file read-only, which the Python VFS shim
        # does not carry for a WAL file) use SQLite's own VFS again.
        apsw.set_default_vfs("unix")
        wait_until(
            lambda: all(r.node.journal[0][1] > 1 for r in big),
            30,
            "every big replica installed its snapshot and compacted its journal",
        )
        assert terms_and_leaders(groups) == before

        # A replica started empty can only catch up from the leader's snapshot.
        leader = leaders["big"]
        victim = next(r for r in big if r is not leader)
        victim.close()
        broker = next(b for b in cluster.brokers if b.address == victim.node.self_addr)
        shutil.rmtree(cluster.data_dir("big", broker))
        fresh = cluster.start("big", broker, BIG)
        leader.send([rec("after")], timeout_s=10)
        wait_until(
            lambda: fresh.node.applied_index == leader.node.applied_index,
            30,
            "the empty replica caught up",
        )
        assert fresh.node.journal[0][1] > 1, "caught up from entries, not from the snapshot"
        assert fresh.dump() == leader.dump()
    finally:
        vfs.release.set()
        cluster.close()


def test_a_pinned_backup_holds_the_state_of_its_moment(tmp_path: Path) -> None:
    """pin_backup: writes after the pin do not reach the copy; a cancelled copy leaves nothing."""
    store = SqliteStore(str(tmp_path / "p.db"), synchronous="NORMAL")
    try:
        meta = store.load_meta()
        with store.transaction():
            store.save_meta(dataclasses.replace(meta, applied_index=10))
        write = store.pin_backup()
        cancelled_write = store.pin_backup()
        with store.transaction():
            store.save_meta(dataclasses.replace(meta, applied_index=11))
        assert store.load_meta().applied_index == 11
        write(str(tmp_path / "copy.db"), threading.Event())
        copy = SqliteStore(str(tmp_path / "copy.db"))
        try:
            assert copy.load_meta().applied_index == 10
        finally:
            copy.close()
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(SnapshotCancelled):
            cancelled_write(str(tmp_path / "never.db"), cancel)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("never")) == []
    finally:
        store.close()
