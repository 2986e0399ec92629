"""A snapshot's transfer from leader to follower runs off both brokers' driver threads
(transport/raft/snapshots.py, "Paced transfer"; issue 12).

Three brokers in one process (tests/process/test_replica.py's brokers), a "big" partition that
compacts after 40 entries, sends its snapshot in 8 KiB chunks, and small partitions on the same
brokers. A follower of the big partition is stopped while the others move past what it holds
and compact, then restarted: it can only catch up from the leader's snapshot. The leader's chunk
reads or the follower's chunk writes (``snapshot._read_chunk``, ``snapshot._write_chunk``: a
disk that takes as long as the test wants) stall once the test arms them.

While the transfer is stalled for 2.5 election timeouts, the stalled call is on the reader or
writer thread, not a driver: every group keeps its leader and term and accepts sends, the
leader keeps hearing from the receiving follower, and nothing is installed. Released, the
follower ends with the leader's exact state. A leader that stops mid-transfer leaves a partial
file that the next leader's transfer replaces from its first byte: the follower installs only
the new leader's whole snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftTimings, snapshot
from tests.helpers import wait_until
from tests.process.test_replica import rec
from tests.process.test_snapshot_off_driver import (
    SLOW_ELECTIONS,
    SMALL,
    Brokers,
    leader_of,
    terms_and_leaders,
)

BIG = RaftTimings.fast(
    **SLOW_ELECTIONS,
    compaction_min_entries=40,
    compaction_min_time_s=3600.0,
    snapshot_chunk_bytes=8192,
)
SMALL_GROUPS = 4
STALL_WINDOW_S = 2.5 * BIG.election_timeout_max_s  # no election may fit in it
VALUE = "v" * 1000  # records big enough for a snapshot of many chunks


class Stall:
    """Wraps a chunk read or write: once ``armed``, the call after ``after`` more calls waits
    until ``release``."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.after = 0
        self.calls = 0
        self.armed = threading.Event()
        self.release = threading.Event()
        self.stalled = threading.Event()
        self.stalled_on = ""  # the name of the thread that waits

    def __call__(self, *args: Any) -> Any:
        if self.armed.is_set() and not self.release.is_set():
            self.calls += 1
            if self.calls > self.after:
                self.stalled_on = threading.current_thread().name
                self.stalled.set()
                self.release.wait(60)
        return self.real(*args)


@pytest.fixture
def stalls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Stall]]:
    found = {"read": Stall(snapshot._read_chunk), "write": Stall(snapshot._write_chunk)}
    monkeypatch.setattr(snapshot, "_read_chunk", found["read"])
    monkeypatch.setattr(snapshot, "_write_chunk", found["write"])
    try:
        yield found
    finally:
        for stall in found.values():
            stall.release.set()


@dataclass
class Setup:
    cluster: Brokers
    groups: dict[str, list[PartitionReplica]]
    leaders: dict[str, PartitionReplica]
    victim: PartitionReplica  # restarted empty-handed: it needs the leader's snapshot
    old_applied: int
    sent: int

    def send_everywhere(self, rounds: int) -> None:
        for name, lead in self.leaders.items():
            if name == "big":
                lead.send([rec(f"big-{self.sent}", "k")], "p", self.sent, timeout_s=2)
                self.sent += 1
            else:
                lead.send([rec(f"{name}-{rounds}")], timeout_s=2)


def needs_snapshot(cluster: Brokers) -> Setup:
    """The groups up, the big one's follower stopped while the others compacted past it, and
    restarted (the caller armed what it stalls)."""
    big = cluster.group("big", BIG)
    groups = {"big": big}
    for i in range(SMALL_GROUPS):
        groups[f"small{i}"] = cluster.group(f"small{i}", SMALL)
    leaders = {name: leader_of(group) for name, group in groups.items()}
    for name, leader in leaders.items():
        leader.send([rec(f"{name}-first")], timeout_s=10)
    leader = leaders["big"]
    victim = next(r for r in big if r is not leader)
    wait_until(lambda: victim.node.applied_index == leader.node.applied_index, 20, "in step")
    old_applied = victim.node.applied_index
    victim.close()
    broker = next(b for b in cluster.brokers if b.address == victim.node.self_addr)
    others = [r for r in big if r is not victim]
    sent = 0
    while not all(r.node.journal[0][1] > old_applied + 1 for r in others):
        assert sent < 500, "the leader never compacted"
        leader.send([rec(f"{VALUE}-{sent}", "k")], "p", sent, timeout_s=10)
        sent += 1
    victim = cluster.start("big", broker, BIG)
    groups["big"] = [*others, victim]
    return Setup(cluster, groups, leaders, victim, old_applied, sent)


def heard_from(leader: PartitionReplica, follower: PartitionReplica) -> float:
    """Seconds since ``leader`` last heard from ``follower`` (its check-quorum's view)."""
    obj = leader.node.syncobj
    node = next(n for n in obj._SyncObj__otherNodes if n.id == follower.node.self_addr)
    return float(time.monotonic() - obj._SyncObj__lastResponseTime[node])


@pytest.mark.parametrize("side", ["read", "write"])
def test_a_stalled_transfer_stops_no_group_and_installs_nothing_partial(
    tmp_path: Any, stalls: dict[str, Stall], side: str
) -> None:
    cluster = Brokers(tmp_path)
    try:
        stall = stalls[side]
        stall.after = 2  # mid-transfer: the first chunks went through
        stall.armed.set()
        setup = needs_snapshot(cluster)
        victim, leader = setup.victim, setup.leaders["big"]
        assert stall.stalled.wait(30), "the transfer never started"
        assert stall.stalled_on.startswith(f"raft-snapshot-{side}"), stall.stalled_on
        applied, last = victim.node.applied_index, victim.node.journal[-1][1]
        before = terms_and_leaders(setup.groups)

        window_end = time.monotonic() + STALL_WINDOW_S
        rounds = 0
        longest_unheard = 0.0
        while time.monotonic() < window_end or rounds < 3:
            setup.send_everywhere(rounds)
            longest_unheard = max(longest_unheard, heard_from(leader, victim))
            rounds += 1
        assert not stall.release.is_set()
        assert terms_and_leaders(setup.groups) == before, "an election during the transfer"
        assert victim.node.applied_index == applied <= setup.old_applied
        assert victim.node.journal[-1][1] == last, "appended during the transfer"
        assert not victim.node.syncobj.installing, "installed a partial snapshot"
        # The receiving follower answers while it receives: the leader never misses it long.
        assert longest_unheard < BIG.leader_fallback_s / 2, longest_unheard

        stall.release.set()
        leader.send([rec("after")], timeout_s=10)
        wait_until(
            lambda: victim.node.applied_index == leader.node.applied_index,
            30,
            "the restarted replica caught up",
        )
        assert victim.node.journal[0][1] > setup.old_applied + 1, "caught up without it"
        assert victim.dump() == leader.dump()
        assert terms_and_leaders(setup.groups) == before
        victim_dir = cluster.data_dir("big", cluster.brokers[0]).parent
        assert sorted(p.name for p in victim_dir.rglob("*.r[ex]*")) == [], "files left behind"
    finally:
        cluster.close()


def test_a_leader_change_mid_transfer_restarts_it_from_the_new_leader(
    tmp_path: Any, stalls: dict[str, Stall]
) -> None:
    cluster = Brokers(tmp_path)
    try:
        stall = stalls["write"]
        stall.after = 2
        stall.armed.set()
        setup = needs_snapshot(cluster)
        victim, old_leader = setup.victim, setup.leaders["big"]
        assert stall.stalled.wait(30), "the transfer never started"
        applied = victim.node.applied_index
        rx = victim.node.syncobj._snapshot_rx
        old = rx.progress()
        assert old is not None
        old_leader.close()  # mid-transfer: a partial file on the follower, chunks queued
        survivor = next(r for r in setup.groups["big"] if r not in (old_leader, victim))
        wait_until(survivor.is_leader, 20, "the other replica leads")
        # Its transfer starts while the old one's writes still wait: nothing mixes them.
        wait_until(
            lambda: (rx.progress() or old)[0] != old[0], 20, "the new leader's transfer began"
        )
        assert victim.node.applied_index == applied and not victim.node.syncobj.installing
        stall.release.set()
        survivor.send([rec("after")], timeout_s=10)
        wait_until(
            lambda: victim.node.applied_index == survivor.node.applied_index,
            30,
            "the restarted replica caught up from the new leader",
        )
        assert victim.node.journal[0][1] > setup.old_applied + 1, "caught up without it"
        assert victim.dump() == survivor.dump()
    finally:
        cluster.close()
