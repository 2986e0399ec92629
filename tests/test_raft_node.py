"""RaftNode behaviour: the durable journal, restarts, snapshots, the API and its typed errors.

Clusters are real: three RaftNodes in this process on 127.0.0.1-3 with kernel-chosen ports,
real journals in tmp_path. Every wait polls a condition against a deadline.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from proto import errors
from transport.raft import FailReason, RaftNode, RaftTimings
from transport.raft.journal import MAGIC, DurableJournal, read_journal
from transport.raft.testing import free_addr, wait_until

FAST = RaftTimings.fast(compaction_min_entries=8)


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
