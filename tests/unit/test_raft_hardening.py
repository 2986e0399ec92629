"""Each pysyncobj hardening item, run against RaftNode and against stock pysyncobj 0.3.17.

Every test runs one scenario twice: on :class:`RaftNode` (must hold) and on
:class:`~raftq.transport.raft.testing.StockNode` (must show the defect), so a regression to stock
behaviour fails here. Nodes are driven tick by tick over a RecordingTransport with crafted
messages; durability is judged with :class:`DiskModel`, which keeps what would survive a
power loss (file bytes as of their last fsync, directory entries as of the directory's last
fsync) and is consulted at the instant an acknowledgement leaves.
"""

from __future__ import annotations

import json
import logging
import os
import random
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.proto import errors
from raftq.transport.raft import RaftNode, RaftTimings
from raftq.transport.raft.hub import ManualClock, pysyncobj_time
from raftq.transport.raft.journal import DurableJournal, parse_journal, read_meta
from raftq.transport.raft.snapshot import read_snapshot, write_snapshot, written_inline
from raftq.transport.raft.testing import (
    RecordingTransport,
    StockNode,
    commit_index,
    free_addr,
    is_candidate,
    log_entries,
    match_index,
    next_index,
    read_stock_journal,
    serializer_busy,
    syncobj_of,
    tick,
    transport_of,
    wait_until,
    write_stock_journal,
)

A, B, C = "127.0.0.1:7001", "127.0.0.2:7001", "127.0.0.3:7001"
NOOP = b"\x01"  # pysyncobj NO_OP command type: replicated, never reaches apply
FAST = RaftTimings.fast()


def entry(idx: int, term: int, tag: str = "") -> tuple[bytes, int, int]:
    return (NOOP + f"{tag}{idx}".encode(), idx, term)


def append(term: int, prev: tuple[int, int], entries: list[Any], commit: int) -> dict[str, Any]:
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "prevLogIdx": prev[0],
        "prevLogTerm": prev[1],
        "entries": entries,
    }


def ack(next_idx: int, success: bool = True) -> dict[str, Any]:
    return {
        "type": "next_node_idx",
        "next_node_idx": next_idx,
        "success": success,
        "reset": not success,
    }


def hardened(tmp: Path, self_addr: str = A, **kw: Any) -> RaftNode:
    return RaftNode(
        self_addr,
        [A, B, C],
        apply=kw.pop("apply", lambda data, index: index),
        data_dir=tmp,
        name="g",
        auto_tick=False,
        transport_class=RecordingTransport,
        timings=FAST,
        **kw,
    )


def stock(tmp: Path, self_addr: str = A, **kw: Any) -> StockNode:
    tmp.mkdir(parents=True, exist_ok=True)
    return StockNode(
        self_addr,
        [A, B, C],
        apply=kw.pop("apply", lambda data, index: index),
        journal_file=str(tmp / "g.journal"),
        transport_class=RecordingTransport,
        timings=FAST,
        auto_tick=False,
        **kw,
    )


MAKERS: dict[str, Callable[..., Any]] = {"raftq": hardened, "stock": stock}


def destroy(node: Any) -> None:
    if isinstance(node, RaftNode):
        node.destroy()
    else:
        node._doDestroy()


def make_leader(node: Any) -> None:
    """Let ``node`` time out, then hand it B's vote."""
    transport_of(node).connect_all()
    deadline = time.monotonic() + 3
    while not is_candidate(node):
        assert time.monotonic() < deadline, "never became a candidate"
        tick(node, 0.01)
    term = syncobj_of(node).raftCurrentTerm
    transport_of(node).deliver(B, {"type": "response_vote", "term": term})
    assert syncobj_of(node)._isLeader()


class DiskModel:
    """What survives power loss, tracked through os.fsync (ext4-like ordering, no luck)."""

    def __init__(self, real_fsync: Callable[[int], None]) -> None:
        self._real_fsync = real_fsync
        self.inodes: dict[int, bytes] = {}
        self.dirs: dict[str, dict[str, int]] = {}
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self._real_fsync(fd)
        self.fsyncs += 1
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            path = os.readlink(f"/proc/self/fd/{fd}")
            self.dirs[path] = {
                name: os.stat(os.path.join(path, name)).st_ino for name in os.listdir(path)
            }
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as f:  # fd may be write-only
                self.inodes[st.st_ino] = f.read()

    def crash_image(self, directory: Path) -> dict[str, bytes]:
        listing = self.dirs.get(str(directory), {})
        return {name: self.inodes.get(ino, b"") for name, ino in listing.items()}


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskModel]:
    model = DiskModel(os.fsync)
    monkeypatch.setattr(os, "fsync", model.fsync)
    monkeypatch.setattr(os, "fdatasync", model.fsync)  # a file's data (and its size) too
    yield model


def durable_last_index(kind: str, disk: DiskModel, tmp: Path) -> int:
    data = disk.crash_image(tmp).get("g.journal", b"")
    if kind == "raftq":
        entries = parse_journal(data)
    else:
        scratch = tmp / "scratch"
        scratch.mkdir(exist_ok=True)
        entries = read_stock_journal(data, str(scratch))
    return max((e[1] for e in entries), default=0)


# ------------------------------------------------------------------- 1. fsync
def follower_ack_scenario(kind: str, tmp: Path, disk: DiskModel) -> list[tuple[int, int]]:
    """(acknowledged index, index durable at that instant) for each success ack."""
    node = MAKERS[kind](tmp)
    acks: list[tuple[int, int]] = []

    def on_send(to: str, message: dict[str, Any]) -> None:
        if message["type"] == "next_node_idx" and message["success"]:
            acks.append((message["next_node_idx"] - 1, durable_last_index(kind, disk, tmp)))

    transport = transport_of(node)
    transport.connect_all()
    transport.on_send = on_send
    transport.deliver(B, append(1, (1, 0), [entry(2, 1), entry(3, 1)], commit=1))
    transport.deliver(B, append(1, (3, 1), [entry(4, 1)], commit=3))
    destroy(node)
    return acks


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_follower_acknowledges_only_fsynced_entries(
    kind: str, tmp_path: Path, disk: DiskModel
) -> None:
    acks = follower_ack_scenario(kind, tmp_path, disk)
    assert [acked for acked, _ in acks] == [3, 4]
    lost = [(acked, durable) for acked, durable in acks if durable < acked]
    if kind == "raftq":
        assert lost == []
    else:  # stock: a power loss right after the ack loses what the leader counted
        assert lost == acks


def vote_scenario(kind: str, tmp: Path, disk: DiskModel) -> dict[str, Any] | None:
    """What the disk says about term/vote at the instant the vote is sent."""
    node = MAKERS[kind](tmp)
    seen: list[dict[str, Any] | None] = []

    def on_send(to: str, message: dict[str, Any]) -> None:
        if message["type"] == "response_vote":
            meta = disk.crash_image(tmp).get("g.journal.meta", b"")
            if not meta:
                seen.append(None)
            elif kind == "raftq":
                found = read_meta(meta)
                seen.append(None if found is None else found[1])
            else:
                seen.append({"raw": meta})

    transport = transport_of(node)
    transport.connect_all()
    transport.on_send = on_send
    vote = {"type": "request_vote", "term": 5, "last_log_index": 1, "last_log_term": 0}
    transport.deliver(C, vote)
    destroy(node)
    assert len(seen) == 1
    return seen[0]


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_term_and_vote_are_durable_before_the_vote_leaves(
    kind: str, tmp_path: Path, disk: DiskModel
) -> None:
    meta = vote_scenario(kind, tmp_path, disk)
    if kind == "raftq":
        assert meta is not None
        assert (meta["term"], meta["voted_for"]) == (5, C)
    else:  # stock writes .meta without fsync: after power loss it may vote twice in term 5
        assert meta is None


def leader_commit_scenario(kind: str, tmp: Path, disk: DiskModel, **kw: Any) -> list[int]:
    """B acks everything, C is silent: commit needs the leader's own durable copy."""
    node = MAKERS[kind](tmp, **kw)
    make_leader(node)
    violations: list[int] = []
    if kind == "raftq":
        node.propose(b"x")
    else:
        node.apply(b"x")
    for _ in range(3):
        tick(node)
        last = log_entries(node)[-1][1]
        transport_of(node).deliver(B, ack(last + 1))
        tick(node)
        if commit_index(node) > durable_last_index(kind, disk, tmp):
            violations.append(commit_index(node))
    if kind == "raftq" and kw.get("group_commit"):
        assert commit_index(node) == 1, "committed with only B's copy durable"
        node.sync()  # the driver's group commit
        tick(node)
        assert commit_index(node) == 3
        assert durable_last_index(kind, disk, tmp) >= 3
    destroy(node)
    return violations


@pytest.mark.parametrize(
    ("kind", "kw"),
    [("raftq", {}), ("raftq", {"group_commit": True}), ("stock", {})],
    ids=["raftq", "raftq-group-commit", "stock"],
)
def test_leader_counts_itself_only_when_durable(
    kind: str, kw: dict[str, Any], tmp_path: Path, disk: DiskModel
) -> None:
    violations = leader_commit_scenario(kind, tmp_path, disk, **kw)
    if kind == "raftq":
        assert violations == []
    else:
        assert violations, "stock committed only after fsync?"


# --------------------------------------------------------------- 2. truncation
@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_stale_append_does_not_delete_acknowledged_entries(kind: str, tmp_path: Path) -> None:
    node = MAKERS[kind](tmp_path)
    transport = transport_of(node)
    transport.connect_all()
    transport.deliver(B, append(1, (1, 0), [entry(i, 1) for i in range(2, 8)], commit=1))
    assert transport.take("next_node_idx")[-1]["next_node_idx"] == 8  # acked 2..7
    # A retransmitted / reordered older batch: prev=2, just entry 3.
    transport.deliver(B, append(1, (2, 1), [entry(3, 1)], commit=1))
    last = log_entries(node)[-1][1]
    destroy(node)
    if kind == "raftq":
        assert last == 7
    else:
        assert last == 3  # stock deleted 4..7 after acknowledging them


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_conflict_at_or_below_commit_is_refused(kind: str, tmp_path: Path) -> None:
    node = MAKERS[kind](tmp_path)
    transport = transport_of(node)
    transport.connect_all()
    transport.deliver(B, append(1, (1, 0), [entry(i, 1) for i in range(2, 8)], commit=5))
    assert commit_index(node) == 5
    before = log_entries(node)
    # A (buggy or byzantine) term-2 leader claims index 4 holds something else.
    transport.deliver(C, append(2, (3, 1), [entry(4, 2, "other")], commit=5))
    after = log_entries(node)
    destroy(node)
    if kind == "raftq":
        assert after == before
    else:
        assert after[3] == entry(4, 2, "other")  # stock overwrote a committed entry
        assert len(after) < len(before)


def test_truncates_from_first_conflicting_term_only(tmp_path: Path) -> None:
    node = hardened(tmp_path)
    transport = transport_of(node)
    transport.connect_all()
    transport.deliver(B, append(1, (1, 0), [entry(i, 1) for i in range(2, 8)], commit=3))
    # New leader C (term 2) agrees on 2..5 (resent) and replaced 6.. with its own entries.
    resent = [entry(4, 1), entry(5, 1), entry(6, 2, "c"), entry(7, 2, "c"), entry(8, 2, "c")]
    transport.deliver(C, append(2, (3, 1), resent, commit=3))
    log = log_entries(node)
    assert [e[1:] for e in log] == [(1, 0)] + [(i, 1) for i in range(2, 6)] + [
        (6, 2),
        (7, 2),
        (8, 2),
    ]
    last = transport.take("next_node_idx", to=C)[-1]
    assert type(last.pop("wall_ms")) is int  # every message carries the sender's clock
    assert last == ack(9)
    # Later a heartbeat that only verifies up to 5 must not commit the unverified tail.
    transport.deliver(C, append(2, (5, 1), [], commit=8))
    assert commit_index(node) == 5
    node.destroy()


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_leader_never_moves_next_index_back_on_success(kind: str, tmp_path: Path) -> None:
    node = MAKERS[kind](tmp_path)
    make_leader(node)
    for i in range(10):
        node.propose(b"%d" % i) if kind == "raftq" else node.apply(b"%d" % i)
    tick(node)  # appends 3..12 after the no-op at 2 and pipelines them to B and C
    assert log_entries(node)[-1][1] == 12
    assert next_index(node, B) == 13
    # B answers an earlier, smaller batch (up to 4) while 5..12 are still in flight.
    transport_of(node).deliver(B, ack(5))
    nxt, match = next_index(node, B), match_index(node, B)
    destroy(node)
    if kind == "raftq":
        assert (nxt, match) == (13, 4)
    else:
        # stock rewinds and resends 5.. with prevLogIdx=4, and a stock follower then deletes
        # every entry after 4 it already acknowledged (previous test).
        assert (nxt, match) == (5, 4)


# -------------------------------------------------------------- 3. big entries
@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_100kib_entry_is_sent_whole_and_accepted(kind: str, tmp_path: Path) -> None:
    leader = MAKERS[kind](tmp_path / "leader")
    make_leader(leader)
    tick(leader)
    transport_of(leader).take()
    payload = os.urandom(100 * 1024)
    leader.propose(payload) if kind == "raftq" else leader.apply(payload)
    tick(leader)
    to_b = transport_of(leader).take("append_entries", to=B)
    leader_log = log_entries(leader)
    destroy(leader)

    follower = MAKERS[kind](tmp_path / "follower", self_addr=B)
    ftr = transport_of(follower)
    ftr.connect_all()
    prefix = leader_log[:-1]
    ftr.deliver(A, append(1, (1, 0), prefix[1:], commit=1))
    raised: list[BaseException] = []
    for message in to_b:
        try:
            ftr.deliver(A, message)
        except Exception as exc:  # stock: the exception escapes into the tick loop
            raised.append(exc)
    got = log_entries(follower)[-1]
    destroy(follower)
    if kind == "raftq":
        assert len(to_b) == 1 and "transmission" not in to_b[0]
        assert raised == [] and got == leader_log[-1]
    else:
        chunks = [m.get("transmission") for m in to_b]
        assert chunks.count("finish") >= 2, chunks  # 'finish' before the last chunk
        assert raised, "stock follower parsed a truncated chunk without error?"


def test_entry_over_max_entry_bytes_is_refused(tmp_path: Path) -> None:
    node = hardened(tmp_path)
    make_leader(node)
    with pytest.raises(errors.RecordTooLarge):
        node.propose(b"x" * (FAST.max_entry_bytes + 1))
    node.destroy()


def test_100kib_commands_commit_quickly_over_tcp(tmp_path: Path) -> None:
    addrs = [free_addr(f"127.0.0.{i}") for i in (1, 2, 3)]
    nodes = [
        RaftNode(
            a,
            addrs,
            apply=lambda d, i: len(d),
            data_dir=tmp_path / str(n),
            name="big",
            timings=FAST,
        )
        for n, a in enumerate(addrs)
    ]
    try:
        wait_until(lambda: any(n.is_leader() for n in nodes), 5, "a leader")
        leader = next(n for n in nodes if n.is_leader())
        latencies = []
        for _ in range(10):
            started = time.monotonic()
            assert leader.propose_sync(os.urandom(100 * 1024), timeout=5) == 100 * 1024
            latencies.append(time.monotonic() - started)
        latencies.sort()
        print(
            f"100 KiB propose_sync p50={latencies[5] * 1000:.1f} ms "
            f"max={latencies[-1] * 1000:.1f} ms"
        )
        assert latencies[5] < 0.25 and latencies[-1] < 1.0
    finally:
        for n in nodes:
            n.destroy()


# ---------------------------------------------------------------- 4. apply
@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_raising_apply_does_not_wedge_the_group(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL)
    applied: list[bytes] = []

    def apply(data: bytes, index: int) -> object:
        if data == b"boom":
            raise RuntimeError("poison command")
        applied.append(data)
        return index

    node: Any = (
        RaftNode(
            A,
            [A],
            data_dir=tmp_path,
            name="g",
            auto_tick=False,
            transport_class=RecordingTransport,
            timings=FAST,
            apply=apply,
        )
        if kind == "raftq"
        else StockNode(
            A,
            [A],
            journal_file=str(tmp_path / "g.journal"),
            transport_class=RecordingTransport,
            timings=FAST,
            auto_tick=False,
            apply=apply,
        )
    )
    results: list[tuple[object, int]] = []
    errors_seen = 0

    def run_ticks(n: int) -> None:
        nonlocal errors_seen
        for _ in range(n):
            try:
                tick(node, 0.005)
            except RuntimeError:
                errors_seen += 1

    deadline = time.monotonic() + 3
    while not syncobj_of(node)._isLeader():
        assert time.monotonic() < deadline
        run_ticks(1)
    for data in (b"boom", b"after"):
        cb = lambda r, e: results.append((r, e))  # noqa: E731
        node.propose(data, cb) if kind == "raftq" else node.apply(data, callback=cb)
    run_ticks(20)
    destroy(node)
    if kind == "raftq":
        assert applied == [b"after"]
        assert [e for _, e in results] == [0, 0]
        assert type(results[0][0]).__name__ == "ApplyError"
    else:
        assert applied == [] and results == []  # wedged: "after" never applies
        assert errors_seen >= 10  # the poison entry is retried on every tick


# ------------------------------------------------- 2b. pipelined load, seeded
def pipelined_load(kind: str, tmp: Path, seed: int, steps: int = 300) -> list[str]:
    """Leader A pipelines 10 KB entries to B and C over FIFO links; returns violations of
    "a follower holds every entry the leader counts as matched on it"."""
    rng = random.Random(seed)
    nodes: dict[str, Any]
    if kind == "raftq":
        timings = RaftTimings.fast(max_entry_bytes=60_000, append_batch_bytes=64 * 1024)
        nodes = {
            addr: RaftNode(
                addr,
                [A, B, C],
                apply=lambda d, i: i,
                data_dir=tmp / addr,
                name="g",
                auto_tick=False,
                transport_class=RecordingTransport,
                timings=timings,
                fsync=False,
            )
            for addr in (A, B, C)
        }
    else:
        nodes = {
            addr: StockNode(
                addr,
                [A, B, C],
                apply=lambda d, i: i,
                transport_class=RecordingTransport,
                timings=FAST,
                auto_tick=False,
            )
            for addr in (A, B, C)
        }
    leader = nodes[A]
    make_leader(leader)
    links: dict[tuple[str, str], list[dict[str, Any]]] = {}
    violations: list[str] = []

    def collect() -> None:
        for src, node in nodes.items():
            for dst, message in transport_of(node).sent:
                links.setdefault((src, dst), []).append(message)
            transport_of(node).sent.clear()

    for step in range(steps):
        roll = rng.random()
        if roll < 0.3:
            data = rng.randbytes(10_000)
            leader.propose(data) if kind == "raftq" else leader.apply(data)
        elif roll < 0.55:
            tick(leader)
        else:
            busy = [link for link, queue in links.items() if queue]
            if busy:
                src, dst = rng.choice(busy)
                transport_of(nodes[dst]).deliver(src, links[(src, dst)].pop(0))
        collect()
        leader_log = {e[1]: e[2] for e in log_entries(leader)}
        for follower in (B, C):
            matched = match_index(leader, follower)
            have = {e[1]: e[2] for e in log_entries(nodes[follower])}
            if matched in leader_log and have.get(matched) != leader_log[matched]:
                violations.append(f"step {step}: {follower} acked {matched}, has {max(have)}")
    for node in nodes.values():
        destroy(node)
    return violations


def test_pipelined_load_never_loses_acknowledged_entries(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    assert pipelined_load("raftq", tmp_path / "raftq", seed) == []
    stock_runs = [pipelined_load("stock", tmp_path / f"stock{k}", seed + k) for k in range(2)]
    assert any(stock_runs), "stock pysyncobj kept every acknowledged entry in 2 seeded runs"


# ------------------------------------------------- 6. snapshots, restarts, catch-up
class ListState:
    """A state machine for snapshot tests: the applied indexes, snapshotted as JSON."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.restores = 0

    def apply(self, data: bytes, index: int) -> int:
        self.applied.append(index)
        return index

    def snapshot(self, path: str) -> None:
        Path(path).write_text(json.dumps(self.applied))

    def restore(self, path: str) -> None:
        self.applied = json.loads(Path(path).read_text())
        self.restores += 1


def snapshot_file(tmp: Path, prev_idx: int, term: int, applied: list[int]) -> Path:
    """A raftq snapshot file whose last entries are (prev_idx, term), (prev_idx + 1, term)."""
    state = ListState()
    state.applied = applied
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "g.snapshot"
    last, prev = entry(prev_idx + 1, term), entry(prev_idx, term)
    write_snapshot(str(path) + ".tmp", (last, prev, [A, B, C]), state.snapshot, fsync=False)
    os.replace(str(path) + ".tmp", path)
    return path


def with_snapshots(kind: str, tmp: Path, state: ListState, **kw: Any) -> Any:
    if kind == "raftq":
        return hardened(
            tmp, apply=state.apply, snapshot=state.snapshot, restore=state.restore, **kw
        )

    def deserialize(path: str) -> tuple[Any, ...]:
        last, prev, cluster = read_snapshot(path, state.restore, fsync=False)
        return last, prev, [n for n in cluster if n != tmp_self]  # stock compares Node to str

    tmp_self = kw.get("self_addr", A)

    def serialize(path: str, data: tuple[Any, ...]) -> None:
        write_snapshot(path, data, state.snapshot, fsync=False)

    return stock(
        tmp,
        apply=state.apply,
        fullDumpFile=str(tmp / "g.snapshot"),
        serializer=serialize,
        deserializer=deserialize,
        useFork=False,
        **kw,
    )


def journal_file(kind: str, tmp: Path, entries: list[Any], commit: int) -> None:
    if kind == "raftq":
        journal = DurableJournal(tmp / "g.journal", fsync=False)
        for e in entries:
            journal.add(*e)
        journal.setRaftCommitIndex(commit)
        journal._destroy()
    else:
        write_stock_journal(str(tmp / "g.journal"), entries, commit)


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_restart_between_snapshot_and_compaction_keeps_the_journal_tail(
    kind: str, tmp_path: Path
) -> None:
    """Crash point: the snapshot at 9 was renamed into place, the journal (1..20, all
    acknowledged, commit 20) not yet compacted. The restart must keep 10..20."""
    snapshot_file(tmp_path, 8, 1, applied=list(range(2, 10)))
    journal_file(kind, tmp_path, [entry(1, 0)] + [entry(i, 1) for i in range(2, 21)], 20)
    state = ListState()
    node = with_snapshots(kind, tmp_path, state)
    tick(node)
    indexes = [e[1] for e in log_entries(node)]
    applied = syncobj_of(node).raftLastApplied
    destroy(node)
    assert state.restores == 1
    if kind == "raftq":
        assert indexes == list(range(8, 21))
        assert applied == 20  # the snapshot's 9, then 10..20 replayed from the journal
    else:  # stock clears the journal down to the snapshot's two entries
        assert indexes == [8, 9]


@pytest.mark.parametrize(
    ("journal", "expected"),
    [
        ([entry(i, 1) for i in range(8, 15)], list(range(8, 15))),  # compacted: kept
        ([entry(i, 1) for i in range(9, 15)], list(range(9, 15))),  # starts at last: kept
        ([entry(1, 0)] + [entry(i, 1) for i in range(2, 6)], [8, 9]),  # ends before it
        ([entry(1, 0)] + [entry(i, 1) for i in range(2, 9)] + [entry(9, 2)], [8, 9]),  # term
        ([entry(i, 1) for i in range(10, 15)], [8, 9]),  # starts after it: unusable
    ],
)
def test_restart_reconciles_snapshot_and_journal_by_index_and_term(
    journal: list[Any], expected: list[int], tmp_path: Path
) -> None:
    snapshot_file(tmp_path, 8, 1, applied=list(range(2, 10)))
    journal_file("raftq", tmp_path, journal, commit=journal[-1][1])
    state = ListState()
    node = with_snapshots("raftq", tmp_path, state)
    tick(node)
    assert [e[1] for e in log_entries(node)] == expected
    assert node.applied_index == expected[-1]
    assert node.commit_index >= 9  # the snapshot holds committed entries only
    destroy(node)
    again = with_snapshots("raftq", tmp_path, ListState())  # and the reconciled files reload
    tick(again)
    assert [e[1] for e in log_entries(again)] == expected
    destroy(again)


def snapshot_messages(path: Path, chunk: int) -> list[dict[str, Any]]:
    data = path.read_bytes()
    out = []
    for offset in range(0, len(data), chunk):
        piece = data[offset : offset + chunk]
        last = offset + chunk >= len(data)
        out.append(
            {
                "type": "append_entries",
                "term": 2,
                "commit_index": 9,
                "serialized": (piece, offset == 0, False),
                "offset": offset,
            }
        )
        if last:  # stock finishes on an empty chunk; raftq on the last non-empty one
            out[-1]["serialized"] = (piece, offset == 0, True)
    return out


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_snapshot_from_leader_keeps_acknowledged_entries_after_it(
    kind: str, tmp_path: Path
) -> None:
    """A follower holding (and having acknowledged) 2..20 gets the leader's snapshot at 9."""
    source = snapshot_file(tmp_path / "leader", 8, 1, applied=list(range(2, 10)))
    state = ListState()
    node = with_snapshots(kind, tmp_path / "f", state)
    transport = transport_of(node)
    transport.connect_all()
    transport.deliver(B, append(1, (1, 0), [entry(i, 1) for i in range(2, 21)], commit=1))
    transport.take()
    if kind == "stock":  # stock's receive: (data, first, last) with an empty final chunk
        transport.deliver(
            B,
            {
                **snapshot_messages(source, 1 << 20)[0],
                "serialized": (source.read_bytes(), True, False),
            },
        )
        transport.deliver(
            B, {**snapshot_messages(source, 1 << 20)[0], "serialized": (b"", False, True)}
        )
    else:
        for message in snapshot_messages(source, 64):
            transport.deliver(B, message)
    acks = transport.take("next_node_idx", to=B)
    indexes = [e[1] for e in log_entries(node)]
    destroy(node)
    if kind == "raftq":
        # Every chunk but the last is acknowledged as written (the leader's window), at the
        # follower's commit index; the last one by the snapshot's index once installed.
        size = source.stat().st_size
        progress = [(a["success"], a["next_node_idx"], a["snapshot"][1]) for a in acks[:-1]]
        assert progress == [(True, 2, end) for end in range(64, size, 64)]
        assert [(a["success"], a["next_node_idx"]) for a in acks[-1:]] == [(True, 10)]
        assert "snapshot" not in acks[-1]
        assert indexes == list(range(8, 21))
        assert (tmp_path / "f" / "g.snapshot").read_bytes() == source.read_bytes()
    else:
        assert indexes == [8, 9]  # 10..20 were acknowledged, and are gone


def test_snapshot_chunk_lost_restarts_the_transfer(tmp_path: Path) -> None:
    source = snapshot_file(tmp_path / "leader", 8, 1, applied=list(range(2, 10)))
    node = with_snapshots("raftq", tmp_path / "f", ListState())
    transport = transport_of(node)
    transport.connect_all()
    messages = snapshot_messages(source, 32)
    assert len(messages) >= 3
    for message in messages[:1] + messages[2:]:  # the second chunk is lost
        transport.deliver(B, message)
    acks = transport.take("next_node_idx", to=B)
    # The first chunk is acknowledged as written; every one after the gap asks for a restart.
    assert [a.get("snapshot", (None, None))[1] for a in acks[:1]] == [32]
    assert acks[1:] and all(not a["success"] and a["reset"] for a in acks[1:])
    assert not (tmp_path / "f" / "g.snapshot").exists()  # nothing half-received installed
    for message in messages:  # the leader starts over
        transport.deliver(B, message)
    acks = transport.take("next_node_idx", to=B)
    assert [a["next_node_idx"] for a in acks if "snapshot" not in a] == [10]
    assert [e[1] for e in log_entries(node)] == [8, 9]
    destroy(node)


def test_stale_snapshot_does_not_roll_back_a_follower(tmp_path: Path) -> None:
    source = snapshot_file(tmp_path / "leader", 3, 1, applied=[2, 3, 4])
    state = ListState()
    node = with_snapshots("raftq", tmp_path / "f", state)
    transport = transport_of(node)
    transport.connect_all()
    transport.deliver(B, append(1, (1, 0), [entry(i, 1) for i in range(2, 21)], commit=12))
    tick(node)
    assert node.applied_index == 12
    for message in snapshot_messages(source, 1 << 20):
        transport.deliver(B, message)
    assert state.restores == 0 and node.applied_index == 12
    assert [e[1] for e in log_entries(node)] == list(range(1, 21))
    destroy(node)


@pytest.mark.parametrize("kind", ["raftq", "stock"])
def test_leader_send_round_is_bounded_when_a_follower_needs_a_snapshot(
    kind: str, tmp_path: Path
) -> None:
    """The tick after a leader wrote a snapshot its serializer reports busy; a follower whose
    nextIndex fell below the compacted journal then needs that snapshot. On a clock that does
    not move within the round (the simulation's), stock's send loop never ends."""
    snapshot_file(tmp_path, 8, 1, applied=list(range(2, 10)))
    journal_file(kind, tmp_path, [entry(i, 1) for i in range(8, 21)], 20)
    node = with_snapshots(kind, tmp_path, ListState())
    tick(node)
    make_leader(node)
    transport = transport_of(node)
    transport.take()
    transport.deliver(B, ack(3, success=False))  # B lost entries (e.g. its disk)
    assert next_index(node, B) == 3

    def on_send(to: str, message: dict[str, Any]) -> None:
        if len(transport.sent) > 10_000:
            raise RuntimeError("unbounded send loop")

    transport.on_send = on_send
    serializer_busy(node)
    clock = ManualClock(time.monotonic())  # continues the real clock the node started on
    # Chunks read at once, as in the simulation (otherwise on the reader thread, sent later).
    with pysyncobj_time(clock, random.Random(1)), written_inline():
        clock.advance(FAST.heartbeat_s * 2)  # a heartbeat is due, a quorum is still fresh
        if kind == "stock":
            with pytest.raises(RuntimeError, match="unbounded"):
                tick(node)
            destroy(node)
            return
        tick(node)
    to_b = transport.take("append_entries", to=B)
    destroy(node)
    assert 1 <= len(to_b) <= 2 * 8
    chunks = [m for m in to_b if m.get("serialized") is not None]
    assert chunks and chunks[0]["serialized"][1] and chunks[-1]["serialized"][2]
    assert [m["offset"] for m in chunks] == sorted(m["offset"] for m in chunks)


def test_every_crash_point_of_snapshot_and_compaction_keeps_acknowledged_entries(
    tmp_path: Path, disk: DiskModel
) -> None:
    """A follower appends, applies, snapshots and compacts several times; the disk as a power
    cut would leave it is captured at every fsync. Each image must restart into a journal and
    snapshot that hold every entry acknowledged before the next fsync."""
    data_dir = tmp_path / "node"
    timings = RaftTimings.fast(compaction_min_entries=4)
    state = ListState()
    node = RaftNode(
        A,
        [A, B, C],
        apply=state.apply,
        snapshot=state.snapshot,
        restore=state.restore,
        data_dir=data_dir,
        name="g",
        auto_tick=False,
        transport_class=RecordingTransport,
        timings=timings,
    )
    acked = [0]
    images: list[tuple[dict[str, bytes], int]] = []
    model_fsync = os.fsync

    def fsync_and_capture(fd: Any) -> None:
        model_fsync(fd)
        images.append((disk.crash_image(data_dir), acked[0]))

    def on_send(to: str, message: dict[str, Any]) -> None:
        if message["type"] == "next_node_idx" and message["success"]:
            acked[0] = max(acked[0], message["next_node_idx"] - 1)

    os.fsync = fsync_and_capture
    try:
        transport = transport_of(node)
        transport.connect_all()
        transport.on_send = on_send
        prev = (1, 0)
        for start in range(2, 40, 3):
            batch = [entry(i, 1) for i in range(start, start + 3)]
            transport.deliver(B, append(1, prev, batch, commit=prev[0]))
            prev = (start + 2, 1)
            tick(node)
        destroy(node)
    finally:
        os.fsync = model_fsync
    assert len(list(data_dir.glob("g.snapshot"))) == 1 and syncobj_of(node).raftLastApplied > 30
    assert log_entries(node)[0][1] > 20, "the journal was compacted several times"

    for k, (image, _) in enumerate(images):
        must_hold = images[k + 1][1] if k + 1 < len(images) else acked[0]
        restart_dir = tmp_path / f"crash{k}"
        restart_dir.mkdir()
        for name, content in image.items():
            (restart_dir / name).write_bytes(content)
        again = RaftNode(
            A,
            [A, B, C],
            apply=lambda data, index: index,
            snapshot=ListState().snapshot,
            restore=ListState().restore,
            data_dir=restart_dir,
            name="g",
            auto_tick=False,
            transport_class=RecordingTransport,
            timings=timings,
            fsync=False,
        )
        tick(again)
        log = log_entries(again)
        applied = syncobj_of(again).raftLastApplied
        destroy(again)
        assert log[-1][1] >= must_hold, f"crash point {k}: acked {must_hold}, journal {log[-1]}"
        assert log[0][1] <= applied + 1, f"crash point {k}: gap after the snapshot"
