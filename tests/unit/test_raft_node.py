"""RaftNode behaviour: the durable journal, restarts, snapshots, the API and its typed errors.

Clusters are real: three RaftNodes in this process on 127.0.0.1-3 with kernel-chosen ports,
real journals in tmp_path. Every wait polls a condition against a deadline.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from raftq.proto import errors
from raftq.transport.raft import FailReason, RaftNode, RaftTimings
from raftq.transport.raft.journal import MAGIC, DurableJournal, read_journal
from raftq.transport.raft.snapshot import (
    SnapshotReceiver,
    SnapshotSender,
    journal_keep_from,
    write_snapshot,
    written_inline,
)
from raftq.transport.raft.testing import free_addr, wait_until

FAST = RaftTimings.fast(compaction_min_entries=8)


# ---------------------------------------------------------------- snapshots
def _e(idx: int, term: int) -> tuple[bytes, int, int]:
    return (b"x", idx, term)


@pytest.mark.parametrize(
    ("first", "last", "terms", "keep_from"),
    [
        (1, 20, {}, 7),  # journal 1..20 holds (9, 1): keep from 8 (the snapshot's prev)
        (8, 20, {}, 0),  # already compacted at the snapshot
        (9, 20, {}, 0),  # starts at the snapshot's last entry
        (1, 5, {}, None),  # ends before the snapshot: all of it is in the snapshot
        (10, 20, {}, None),  # starts after it: cannot continue it
        (1, 20, {9: 2}, None),  # a different entry at 9: overwritten, uncommitted
    ],
)
def test_journal_keep_from_plans_by_index_and_term(
    first: int, last: int, terms: dict[int, int], keep_from: int | None
) -> None:
    log = [_e(i, terms.get(i, 1)) for i in range(first, last + 1)]
    assert journal_keep_from(log, _e(9, 1)) == keep_from
    assert journal_keep_from([], _e(9, 1)) is None


def _snapshot(tmp_path: Path, size: int) -> Path:
    path = tmp_path / "g.snapshot"

    def fill(target: str) -> None:
        Path(target).write_bytes(os.urandom(size))

    write_snapshot(
        str(path) + ".tmp",
        (_e(9, 1), _e(8, 1), ["a:1"]),
        fill,
        fsync=False,
    )
    os.replace(str(path) + ".tmp", path)
    return path


def _send_all(sender: SnapshotSender, room: int) -> tuple[list[list[Any]], int]:
    """Rounds of ``sender.chunks`` with ``room`` bytes each, the follower acknowledging all it
    got after every round; the rounds and the snapshot's last index."""
    rounds: list[list[Any]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = sender.chunks("b", room)
        assert got is not None
        chunks, last_index = got
        rounds.append(chunks)
        if last_index is not None:
            return rounds, last_index
        if chunks:
            end = chunks[-1][3] + len(chunks[-1][0])
            assert sender.acked("b", (chunks[-1][4], end))
    raise AssertionError("the transfer never ended")


def test_snapshot_sender_paces_by_window_and_room_and_resumes(tmp_path: Path) -> None:
    path = _snapshot(tmp_path, 1000)
    with written_inline():  # read at once: each round is exact
        sender = SnapshotSender(str(path), chunk_bytes=100, window_bytes=300)
        first = sender.chunks("b", 150)  # the link's room: a chunk more while room is left
        assert first is not None and [c[3] for c in first[0]] == [0, 100]
        again = sender.chunks("b", 1000)  # the window: 300 bytes unacknowledged at most
        assert again is not None and [c[3] for c in again[0]] == [200]
        assert sender.chunks("b", 1000) == ([], None)
        assert sender.chunks("b", 0) == ([], None)
        xfer = first[0][0][4]
        assert not sender.acked("b", (xfer + 1, 300))  # another transfer's ack
        assert not sender.acked("b", "garbage") and not sender.acked("b", (xfer, "x"))
        assert sender.acked("b", (xfer, 5000))  # at most what was sent counts
        assert not sender.acked("b", (xfer, 300))
        rounds, last_index = _send_all(sender, 1000)
        assert max(len(r) for r in rounds) == 3
    assert last_index == 9 and not sender.active("b")
    flat = first[0] + again[0] + [c for r in rounds for c in r]
    assert b"".join(c[0] for c in flat) == path.read_bytes()
    assert [c[3] for c in flat] == list(range(0, path.stat().st_size, 100))
    assert [c[1] for c in flat] == [True] + [False] * (len(flat) - 1)
    assert [c[2] for c in flat] == [False] * (len(flat) - 1) + [True]
    assert {c[4] for c in flat} == {xfer}
    assert SnapshotSender(str(tmp_path / "none"), 100).chunks("b", 1000) is None


def test_snapshot_sender_reads_ahead_on_its_thread(tmp_path: Path) -> None:
    path = _snapshot(tmp_path, 100_000)
    sender = SnapshotSender(str(path), chunk_bytes=4096, window_bytes=3 * 4096)
    rounds, last_index = _send_all(sender, 8192)
    flat = [c for r in rounds for c in r]
    assert last_index == 9 and b"".join(c[0] for c in flat) == path.read_bytes()
    assert max(sum(len(c[0]) for c in r) for r in rounds) <= 8192 + 4096


@pytest.mark.parametrize("background", [False, True])
def test_snapshot_receiver_installs_only_a_gapless_transfer(
    tmp_path: Path, background: bool
) -> None:
    (tmp_path / "leader").mkdir()
    source = _snapshot(tmp_path / "leader", 500)
    data = source.read_bytes()
    chunks = [
        (data[o : o + 100], o == 0, o + 100 >= len(data), o) for o in range(0, len(data), 100)
    ]
    target = tmp_path / "f.snapshot"
    wakes = []
    rx = SnapshotReceiver(
        str(target), fsync=True, background=background, on_written=lambda: wakes.append(1)
    )
    with pytest.raises(ValueError, match="expected"):
        for chunk in chunks[:2] + chunks[3:]:
            rx.add(*chunk, xfer=1)
    assert not rx.receiving
    with pytest.raises(ValueError, match="expected None"):
        rx.add(*chunks[-1], xfer=1)  # the rest of the broken transfer
    assert not target.exists()
    for chunk in chunks[:-1]:
        rx.add(*chunk, xfer=2)
        assert not rx.finished()
    wait_until(lambda: rx.progress() == (2, len(data) - len(chunks[-1][0])), 10, "written")
    rx.add(*chunks[-1], xfer=2)
    wait_until(rx.finished, 10, "the last chunk written")
    assert not rx.receiving and rx.progress() is None
    assert (len(wakes) > 0) == background  # the writer thread wakes the driver
    assert rx.header()[0][1] == 9
    rx.install()
    assert target.read_bytes() == data and not Path(rx.tmp_path).exists()


def test_snapshot_receiver_reports_a_failed_write_and_restarts(tmp_path: Path) -> None:
    (tmp_path / "leader").mkdir()
    data = _snapshot(tmp_path / "leader", 300).read_bytes()
    rx = SnapshotReceiver(str(tmp_path / "f.snapshot"), fsync=False, background=True)
    Path(rx.tmp_path).mkdir()  # the .rx file cannot be opened
    rx.add(data[:100], True, False, 0, xfer=1)
    with pytest.raises(IsADirectoryError):
        wait_until(rx.finished, 10, "the failure seen")
    assert not rx.receiving
    Path(rx.tmp_path).rmdir()
    rx.add(data, True, True, 0, xfer=2)
    wait_until(rx.finished, 10, "the retried transfer written")
    assert Path(rx.tmp_path).read_bytes() == data


# ------------------------------------------------------------------ journal
def test_journal_reopens_with_entries_term_vote_and_clamped_commit(tmp_path: Path) -> None:
    path = tmp_path / "g.journal"
    journal = DurableJournal(path)
    for idx in range(1, 6):
        journal.add(b"cmd%d" % idx, idx, 1)
    journal.setCurrentTerm(3, "127.0.0.2:1")
    journal.setRaftCommitIndex(9)  # a stale hint beyond the log
    journal.onOneSecondTimer()
    assert journal.sync()
    assert journal.durable_index == 5
    journal._destroy()

    again = DurableJournal(path)
    assert [e[1] for e in again.entries()] == [1, 2, 3, 4, 5]
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (3, "127.0.0.2:1")
    assert again.getRaftCommitIndex() == 5
    again._destroy()


def test_journal_group_commit_is_one_fsync_per_sync(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "g.journal")
    before = journal.fsync_count
    for idx in range(1, 101):
        journal.add(b"x", idx, 1)
    assert journal.durable_index == 0
    journal.sync()
    assert journal.fsync_count - before == 1
    assert journal.durable_index == 100
    assert not journal.sync()  # nothing new: no fsync
    journal._destroy()


def test_journal_drops_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "g.journal"
    journal = DurableJournal(path)
    for idx in range(1, 4):
        journal.add(b"entry-%d" % idx, idx, 2)
    journal._destroy()
    full = path.read_bytes()
    path.write_bytes(full[:-3])  # power lost halfway through the last record
    again = DurableJournal(path)
    assert [e[1] for e in again.entries()] == [1, 2]
    again.add(b"entry-3b", 3, 3)
    again._destroy()
    assert [(e[0], e[1]) for e in read_journal(path)] == [
        (b"entry-1", 1),
        (b"entry-2", 2),
        (b"entry-3b", 3),
    ]


def test_journal_truncate_and_compact(tmp_path: Path) -> None:
    path = tmp_path / "g.journal"
    journal = DurableJournal(path)
    for idx in range(1, 11):
        journal.add(b"e%d" % idx, idx, 1)
    journal.deleteEntriesFrom(7)  # list position 7 = index 8
    assert journal[-1][1] == 7
    assert journal.durable_index == 0  # nothing fsync'd yet
    journal.add(b"new8", 8, 2)
    journal.deleteEntriesTo(3)  # compaction keeps index 4..8
    assert journal.durable_index == 8
    journal._destroy()
    entries = read_journal(path)
    assert [(e[1], e[2]) for e in entries] == [(4, 1), (5, 1), (6, 1), (7, 1), (8, 2)]
    assert path.read_bytes().startswith(MAGIC)


# ------------------------------------------------------------- test doubles
class FileStateMachine:
    """apply() double that persists its last applied index with its data, like the store."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "state.json"
        self.seen_path = directory / "seen.log"  # every index apply acted on, ever
        self.state: dict[str, Any] = {"last": 0, "items": []}
        if self.path.exists():
            self.state = json.loads(self.path.read_text())
        self.restores = 0
        self.duplicates = 0
        self.lock = threading.Lock()

    def apply(self, data: bytes, index: int) -> object:
        with self.lock:
            if index <= self.state["last"]:
                self.duplicates += 1
                return "duplicate"
            self.state["last"] = index
            self.state["items"].append([index, data.decode()])
            self._save(self.path)
            with open(self.seen_path, "a") as f:
                f.write(f"{index}\n")
            return index

    def snapshot(self, path: str) -> None:
        with self.lock:
            self._save(Path(path))

    def restore(self, path: str) -> None:
        snap = json.loads(Path(path).read_text())
        with self.lock:
            if snap["last"] > self.state["last"]:  # else our own state is newer: keep it
                self.state = snap
                self._save(self.path)
                self.restores += 1

    def _save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.state))
        os.replace(tmp, path)

    def payloads(self) -> list[str]:
        with self.lock:
            return [item[1] for item in self.state["items"]]

    def seen(self) -> list[int]:
        if not self.seen_path.exists():
            return []
        return [int(line) for line in self.seen_path.read_text().split()]


class Cluster:
    def __init__(self, root: Path, size: int = 3, timings: RaftTimings = FAST) -> None:
        self.root = root
        self.timings = timings
        self.addrs = [free_addr(f"127.0.0.{i + 1}") for i in range(size)]
        self.machines: dict[str, FileStateMachine] = {}
        self.nodes: dict[str, RaftNode] = {}
        for addr in self.addrs:
            self.start(addr)

    def start(self, addr: str, peers: list[str] | None = None) -> RaftNode:
        directory = self.root / addr.replace(":", "_")
        machine = self.machines[addr] = FileStateMachine(directory / "sm")
        node = RaftNode(
            addr,
            peers or self.addrs,
            apply=machine.apply,
            snapshot=machine.snapshot,
            restore=machine.restore,
            data_dir=directory / "raft",
            name="p0",
            timings=self.timings,
        )
        self.nodes[addr] = node
        return node

    def stop(self, addr: str) -> None:
        self.nodes.pop(addr).destroy()

    def leader(self, timeout: float = 5.0) -> RaftNode:
        found: list[RaftNode] = []

        def one() -> bool:
            found[:] = [n for n in self.nodes.values() if n.is_leader()]
            return len(found) == 1

        wait_until(one, timeout, "exactly one leader")
        return found[0]

    def propose(self, payloads: list[str]) -> None:
        for payload in payloads:
            for _attempt in range(20):
                try:
                    self.leader().propose_sync(payload.encode(), timeout=2.0)
                    break
                except (errors.NotLeader, errors.Timeout, errors.Unavailable):
                    continue  # idempotent double: a retried duplicate is visible below
            else:
                raise AssertionError(f"could not commit {payload}")

    def wait_converged(self, timeout: float = 5.0) -> None:
        def same() -> bool:
            leader = self.leader()
            return all(
                n.applied_index == leader.commit_index == n.commit_index
                for n in self.nodes.values()
            )

        wait_until(same, timeout, "every replica applied the leader's commit index")

    def close(self) -> None:
        for addr in list(self.nodes):
            self.stop(addr)


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    made: list[Cluster] = []

    def make(**kw: Any) -> Cluster:
        c = Cluster(tmp_path, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


# ---------------------------------------------------------------- restarts
def test_restart_applies_every_index_exactly_once(cluster: Any) -> None:
    c = cluster()
    first = [f"a{i}" for i in range(20)]
    c.propose(first)
    c.wait_converged()
    c.close()
    snapshots = [p for p in c.root.rglob("p0.snapshot")]
    assert snapshots, "compaction never wrote a snapshot (compaction_min_entries=8)"

    for addr in c.addrs:  # same data dirs, same ports
        c.start(addr)
    second = [f"b{i}" for i in range(20)]
    c.propose(second)
    c.wait_converged()
    # The journal tail after the last snapshot was replayed and skipped by index.
    assert sum(m.duplicates for m in c.machines.values()) > 0
    for addr, machine in c.machines.items():
        seen = machine.seen()
        assert len(seen) == len(set(seen)), f"{addr} applied an index twice: {seen}"
        assert machine.payloads() == first + second, addr
        indexes = [item[0] for item in machine.state["items"]]
        assert indexes == sorted(indexes)


def test_lagging_replica_catches_up_from_a_snapshot(cluster: Any) -> None:
    c = cluster()
    c.propose(["x0"])
    c.wait_converged()
    leader = c.leader()
    lagging = next(a for a in c.addrs if a != leader.self_addr)
    c.stop(lagging)
    c.propose([f"y{i}" for i in range(30)])
    wait_until(lambda: len(leader.syncobj._SyncObj__raftLog) < 30, 5, "leader compaction")

    c.start(lagging)
    c.wait_converged()
    assert c.machines[lagging].restores >= 1
    assert c.machines[lagging].payloads() == ["x0"] + [f"y{i}" for i in range(30)]


# --------------------------------------------------------------------- API
def test_api_errors_and_status(cluster: Any) -> None:
    c = cluster()
    leader = c.leader()
    assert leader.propose_sync(b"hello", timeout=2) == leader.commit_index
    follower = next(n for n in c.nodes.values() if n is not leader)
    wait_until(lambda: follower.leader() == leader.self_addr, 2, "follower knows the leader")

    with pytest.raises(errors.NotLeader) as info:
        follower.propose_sync(b"x", timeout=1)
    assert info.value.leader_hint == leader.self_addr
    got: list[tuple[object, int]] = []
    follower.propose(b"x", lambda r, e: got.append((r, e)))
    assert got == [(None, FailReason.NOT_LEADER)]

    with pytest.raises(errors.RecordTooLarge):
        leader.propose_sync(b"x" * (FAST.max_entry_bytes + 1), timeout=1)

    status = leader.status()
    assert status["state"] == "leader" and status["group"] == "p0"
    assert status["durable_index"] >= status["commit_index"]
    assert status["fsync_count"] > 0

    for addr in [a for a in c.addrs if a != leader.self_addr]:
        c.stop(addr)
    with pytest.raises(errors.Timeout):  # no quorum: the outcome is unknown
        leader.propose_sync(b"lost?", timeout=0.3)


def test_transfer_leadership_and_membership(cluster: Any) -> None:
    c = cluster()
    leader = c.leader()
    c.propose(["m0"])
    c.wait_converged()
    target = next(a for a in c.addrs if a != leader.self_addr)
    leader.transfer_leadership(target)
    wait_until(lambda: c.nodes[target].is_leader(), 5, f"{target} to lead")
    leader = c.nodes[target]

    extra = free_addr("127.0.0.4")
    c.start(extra, peers=[*c.addrs, extra])
    added: list[int] = []
    leader.add_node(extra, lambda r, e: added.append(e))
    wait_until(lambda: added, 5, "add_node outcome")
    assert added == [FailReason.SUCCESS]
    c.propose(["m1"])
    wait_until(lambda: c.machines[extra].payloads() == ["m0", "m1"], 5, "new voter caught up")

    removed: list[int] = []
    leader.remove_node(extra, lambda r, e: removed.append(e))
    wait_until(lambda: removed, 5, "remove_node outcome")
    assert removed == [FailReason.SUCCESS]
    c.stop(extra)
    c.propose(["m2"])
    c.wait_converged()
