"""A follower installs a snapshot received from its leader off the broker's driver thread
(transport/raft/snapshots.py, "Installing off the tick thread"; issue 12).

Three brokers in one process (tests/process/test_replica.py's brokers), a "big" partition that
compacts after 40 entries and small partitions on the same brokers. A follower of the big
partition is stopped while the others move past what it holds and compact, then restarted: it
can only catch up from the leader's snapshot. Its SQLite file is opened on a VFS whose writes
from any thread but the test's stall (a disk that takes as long as the test wants) once the
test arms it: the restore of the received snapshot is the first such write.

While the restore is stalled for well over an election timeout, it is on a snapshot worker, not
a driver; every group on those brokers keeps its leader and term and accepts sends; the
installing replica applies and appends nothing. A copy of its files taken then (what a crash
leaves: the received snapshot, an uncommitted restore in the WAL) restarts to its old state
exactly. Released, the replica ends with the leader's exact state.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from raftq.replica import PartitionReplica
from tests.helpers import wait_until
from tests.process.test_replica import Broker, rec
from tests.process.test_snapshot_off_driver import BIG, SMALL, Brokers, leader_of, terms_and_leaders

SMALL_GROUPS = 4
STALL_WINDOW_S = 2.5 * BIG.election_timeout_max_s  # no election may fit in it
MAIN_THREAD = threading.main_thread()


class StallingVFS(apsw.VFS):
    """Registered as the default while a replica opens its files: once ``armed``, writes to
    files under ``watched`` from any thread but the test's wait until ``release``."""

    NAME = "raftq-install-stall"

    def __init__(self) -> None:
        self.watched = ""
        self.armed = threading.Event()
        self.release = threading.Event()
        self.stalled = threading.Event()  # a write is waiting
        self.stalled_on = ""  # the name of the thread it came from
        super().__init__(self.NAME, base="unix", makedefault=False)

    def xOpen(self, name: Any, flags: Any) -> apsw.VFSFile:
        return _StallingFile(self, name, flags)


class _StallingFile(apsw.VFSFile):
    def __init__(self, vfs: StallingVFS, name: Any, flags: Any) -> None:
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        self._vfs = vfs
        self._watched = bool(vfs.watched) and str(filename or "").startswith(vfs.watched)
        super().__init__("unix", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        vfs = self._vfs
        if self._watched and vfs.armed.is_set() and threading.current_thread() is not MAIN_THREAD:
            if not vfs.stalled.is_set():
                vfs.stalled_on = threading.current_thread().name
                vfs.stalled.set()
            vfs.release.wait(60)
        super().xWrite(data, offset)


@pytest.fixture
def vfs() -> Iterator[StallingVFS]:
    v = StallingVFS()
    try:
        yield v
    finally:
        v.release.set()
        apsw.set_default_vfs("unix")
        v.unregister()


def test_a_stalled_install_stops_no_group_and_a_crash_in_it_keeps_the_old_state(
    tmp_path: Path, vfs: StallingVFS
) -> None:
    cluster = Brokers(tmp_path)
    crash = Broker("127.0.0.4")
    try:
        big = cluster.group("big", BIG)
        groups = {"big": big}
        for i in range(SMALL_GROUPS):
            groups[f"small{i}"] = cluster.group(f"small{i}", SMALL)
        leaders = {name: leader_of(group) for name, group in groups.items()}
        for name, leader in leaders.items():
            leader.send([rec(f"{name}-first")], timeout_s=10)
        leader = leaders["big"]
        sent = 0
        for _ in range(5):
            leader.send([rec(f"big-{sent}", "k")], "p", sent, timeout_s=10)
            sent += 1
        victim = next(r for r in big if r is not leader)
        wait_until(
            lambda: victim.node.applied_index == leader.node.applied_index,
            20,
            "the victim has everything so far",
        )
        old_state = victim.dump()
        old_applied = victim.node.applied_index
        victim.close()
        broker = next(b for b in cluster.brokers if b.address == victim.node.self_addr)
        victim_dir = cluster.data_dir("big", broker)

        # The others move on past compaction_min_entries and compact: only a snapshot helps.
        others = [r for r in big if r is not victim]
        while not all(r.node.journal[0][1] > old_applied + 1 for r in others):
            assert sent < 500, "the leader never compacted"
            leader.send([rec(f"big-{sent}", "k")], "p", sent, timeout_s=10)
            sent += 1

        vfs.watched = str(victim_dir)
        apsw.set_default_vfs(StallingVFS.NAME)
        try:
            victim = cluster.start("big", broker, BIG)
        finally:
            # Other connections (the restore opens its copy read-only, which the Python VFS
            # shim does not carry for a WAL file) use SQLite's own VFS.
            apsw.set_default_vfs("unix")
        vfs.armed.set()
        big = [*others, victim]
        groups["big"] = big
        assert vfs.stalled.wait(30), "the restore never started"
        assert vfs.stalled_on.startswith("raft-snapshot"), f"restored on {vfs.stalled_on}"
        image = tmp_path / "crash"
        shutil.copytree(victim_dir, image, ignore=shutil.ignore_patterns("*-shm"))
        assert victim.node.syncobj.installing
        applied, last = victim.node.applied_index, victim.node.journal[-1][1]
        before = terms_and_leaders(groups)

        # The install stays stalled for 2.5 election timeouts; every group keeps serving.
        window_end = time.monotonic() + STALL_WINDOW_S
        rounds = 0
        while time.monotonic() < window_end or rounds < 3:
            for name, lead in leaders.items():
                if name == "big":
                    lead.send([rec(f"big-{sent}", "k")], "p", sent, timeout_s=2)
                    sent += 1
                else:
                    lead.send([rec(f"{name}-{rounds}")], timeout_s=2)
            rounds += 1
        assert not vfs.release.is_set() and victim.node.syncobj.installing
        assert terms_and_leaders(groups) == before, "an election happened during the install"
        assert victim.node.applied_index == applied <= old_applied, "applied during the install"
        assert victim.node.journal[-1][1] == last, "appended during the install"

        vfs.release.set()
        leader.send([rec("after")], timeout_s=10)
        wait_until(
            lambda: victim.node.applied_index == leader.node.applied_index,
            30,
            "the restarted replica caught up",
        )
        assert victim.node.journal[0][1] > old_applied + 1, "caught up without the snapshot"
        assert victim.dump() == leader.dump()
        assert terms_and_leaders(groups) == before
        assert sorted(p.name for p in victim_dir.glob("*.r[ex]*")) == [], "files left behind"

        # What a crash mid-install leaves restarts to the old state, not to a mix: a replica
        # on the copy that can never lead (its only peer does not exist) replays what it has.
        restarted = PartitionReplica(
            "big",
            0,
            cluster.topic_ids["big"],
            data_dir=image,
            self_addr=crash.address,
            peers=[crash.address, "127.0.0.9:9"],
            driver=crash.driver,
            timings=BIG,
            synchronous="NORMAL",
        )
        try:
            wait_until(
                lambda: restarted.node.applied_index >= old_applied,
                20,
                "the crash image replayed its journal",
            )
            assert restarted.dump() == old_state
            assert not any(p.name.endswith(".snapshot") for p in image.iterdir())
            assert sorted(p.name for p in image.glob("*.r[ex]*")) == [], "crash leftovers kept"
        finally:
            restarted.close()
    finally:
        vfs.release.set()
        cluster.close()
        crash.stop()
