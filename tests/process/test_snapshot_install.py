"""A follower installs a snapshot received from its leader off the broker's driver thread
(transport/raft/snapshots.py, "Installing off the tick thread"; issue 12).

Three brokers in one process (tests/process/test_replica.py's brokers), a "big" partition that
compacts after 40 entries and small partitions on the same brokers. A follower of the big
partition is stopped while the others move past what it holds and compact, then restarted: it
can only catch up from the leader's snapshot. The install has two long parts, each stalled by
the test (a disk that takes as long as the test wants): copying the state out of the received
file (before the commit point, the rename over the group's snapshot) and moving it into place
(after it).

While the copy is stalled for well over an election timeout, it is on a snapshot worker, not
a driver; every group on those brokers keeps its leader and term and accepts sends; the
installing replica applies and appends nothing. A copy of its files taken then (what a crash
leaves: the received snapshot, a partial copy) restarts to its old state exactly; one taken
while the restore waits after the commit restarts to the snapshot's state exactly. Released,
the replica ends with the leader's exact state, and its old SQLite file was not written
through its WAL a second time (moved into place).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from raftq.partitions.sqlite_store import SqliteStore
from raftq.replica import PartitionReplica
from raftq.transport.raft import snapshot
from tests.helpers import wait_until
from tests.process.test_replica import Broker, rec
from tests.process.test_snapshot_off_driver import BIG, SMALL, Brokers, leader_of, terms_and_leaders

SMALL_GROUPS = 4
STALL_WINDOW_S = 2.5 * BIG.election_timeout_max_s  # no election may fit in it


class Stall:
    """Armed for a directory: the first matching step from a thread other than the test's
    waits until ``release`` (``stalled`` tells it is waiting, ``on`` from which thread)."""

    def __init__(self) -> None:
        self.watched = ""
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.on = ""

    def wait_if(self, name: str) -> None:
        if not self.watched or not name.startswith(self.watched):
            return
        if threading.current_thread() is threading.main_thread():
            return
        if not self.stalled.is_set():
            self.on = threading.current_thread().name
            self.stalled.set()
        self.release.wait(60)


@pytest.fixture
def copy_stall(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stall]:
    """Stalls the copy of a received snapshot's state out of its file (before the commit)."""
    stall = Stall()
    real = snapshot._write_out

    def write_out(out: IO[bytes], data: bytes) -> None:
        if str(getattr(out, "name", "")).endswith(".rx.restore"):
            stall.wait_if(str(out.name))
        real(out, data)

    monkeypatch.setattr(snapshot, "_write_out", write_out)
    try:
        yield stall
    finally:
        stall.release.set()


@pytest.fixture
def restore_stall(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stall]:
    """Stalls the restore of a received snapshot (after the commit, before the file moves)."""
    stall = Stall()
    real = SqliteStore.restore_from

    def restore_from(self: SqliteStore, path: str, *, take: bool = False) -> None:
        stall.wait_if(self.path)
        real(self, path, take=take)

    monkeypatch.setattr(SqliteStore, "restore_from", restore_from)
    try:
        yield stall
    finally:
        stall.release.set()


def snapshot_state(snapshot_path: Path, scratch: Path) -> dict[str, Any]:
    """The partition state held in the snapshot file at ``snapshot_path``."""
    scratch.mkdir()
    copy = scratch / "state.db"

    def restore(user: str) -> None:
        shutil.copyfile(user, copy)

    snapshot.read_snapshot(str(snapshot_path), restore, fsync=False)
    store = SqliteStore(str(copy))
    try:
        return store.dump()
    finally:
        store.close()


def test_a_stalled_install_stops_no_group_and_a_crash_in_it_keeps_the_old_or_new_state(
    tmp_path: Path, copy_stall: Stall, restore_stall: Stall
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

        copy_stall.watched = restore_stall.watched = str(victim_dir)
        victim = cluster.start("big", broker, BIG)
        big = [*others, victim]
        groups["big"] = big
        assert copy_stall.stalled.wait(30), "the install never started"
        assert copy_stall.on.startswith("raft-snapshot"), f"copied on {copy_stall.on}"
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
        assert not copy_stall.release.is_set() and victim.node.syncobj.installing
        assert terms_and_leaders(groups) == before, "an election happened during the install"
        assert victim.node.applied_index == applied <= old_applied, "applied during the install"
        assert victim.node.journal[-1][1] == last, "appended during the install"

        # Past the commit point: the received snapshot is the group's, the state not yet.
        copy_stall.release.set()
        assert restore_stall.stalled.wait(30), "the restore never started"
        assert restore_stall.on.startswith("raft-snapshot"), f"restored on {restore_stall.on}"
        committed = tmp_path / "committed"
        shutil.copytree(victim_dir, committed, ignore=shutil.ignore_patterns("*-shm"))
        assert victim.node.syncobj.installing
        (snap_file,) = committed.glob("*.snapshot")
        snap_last = snapshot.read_snapshot_header(str(snap_file))[0][1]
        snap_state = snapshot_state(snap_file, tmp_path / "scratch")
        assert snap_state["meta"].applied_index > old_applied
        restore_stall.release.set()
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
        wait_until(lambda: not list(victim_dir.glob("*.old*")), 20, "replaced files freed")

        assert not list((tmp_path / "crash").glob("*.snapshot")), "committed before the copy"
        # What a crash mid-install leaves restarts to the old state before the commit point
        # and to the snapshot's after it, never a mix: a replica on the copy that can never
        # lead (its only peer does not exist) restores what it has and replays its journal.
        for image, applied_at_least, state in (
            (tmp_path / "crash", old_applied, old_state),
            (committed, snap_last, snap_state),
        ):
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
                    lambda: restarted.node.applied_index >= applied_at_least,  # noqa: B023
                    20,
                    f"the crash image {image.name} restored and replayed",
                )
                assert restarted.dump() == state, image.name
                leftovers = sorted(p.name for p in image.glob("*.r[ex]*"))
                assert leftovers == [], f"crash leftovers kept in {image.name}"
            finally:
                restarted.close()
    finally:
        copy_stall.release.set()
        restore_stall.release.set()
        cluster.close()
        crash.stop()
