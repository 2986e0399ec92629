"""Followers acknowledge unchanged heartbeats sparsely (raft/durability.py `_ack_repeats`).

Simulation tier: three RaftNodes of one group over the in-memory hub, each run by a RaftDriver
stepped by hand on the manual clock. A follower answers every heartbeat that changes anything
(new entries, a commit the leader has not made, a new leader or term) at once, and otherwise
at least ACKS_PER_LEADER_FALLBACK times per leaderFallbackTimeout, so an idle leader neither
steps down nor loses track of its followers, and lost acks are repeated.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.transport.raft import RaftNode, RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.durability import ACKS_PER_LEADER_FALLBACK
from raftq.transport.raft.hub import Hub

STEP_S = 0.01
DRIVER_ROUND_S = 0.02
TIMINGS = RaftTimings.fast()  # heartbeat 0.04 s, leader fallback 2.0 s
REFRESH_S = TIMINGS.leader_fallback_s / ACKS_PER_LEADER_FALLBACK
ADDRS = [f"10.0.2.{i}:7000" for i in (1, 2, 3)]
GROUP = "g"


def _seed() -> int:
    seed = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    return seed


class Group:
    """One group on three hub brokers; counts the messages each broker sends, by type."""

    def __init__(self, tmp: Path, hub: Hub) -> None:
        self.hub = hub
        self.sent: dict[str, Counter[str]] = {a: Counter() for a in ADDRS}
        self.applied: dict[str, list[bytes]] = {a: [] for a in ADDRS}
        self.drivers: dict[str, RaftDriver] = {}
        self.nodes: dict[str, RaftNode] = {}
        for addr in ADDRS:
            ep = self.hub.endpoint(addr)
            self._count_sends(ep, self.sent[addr])
            driver = RaftDriver(ep, tick_interval_s=DRIVER_ROUND_S, clock=self.hub.clock)
            node = RaftNode(
                addr,
                ADDRS,
                apply=self._applier(self.applied[addr]),
                data_dir=tmp / addr.replace(":", "_"),
                name=GROUP,
                fsync=False,
                auto_tick=False,
                transport_class=ep.transport_class(GROUP),
                timings=TIMINGS,
                group_commit=True,
            )
            driver.register(GROUP, node)
            self.drivers[addr], self.nodes[addr] = driver, node

    @staticmethod
    def _applier(out: list[bytes]) -> Callable[[bytes, int], None]:
        return lambda data, _index: out.append(data)

    @staticmethod
    def _count_sends(ep: Any, counter: Counter[str]) -> None:
        enqueue = ep.enqueue

        def counting(peer: str, group: str, message: Any) -> bool:
            counter[message.get("type", "?")] += 1
            return bool(enqueue(peer, group, message))

        ep.enqueue = counting

    def step(self, seconds: float = STEP_S) -> None:
        for _ in range(max(1, round(seconds / STEP_S))):
            self.hub.clock.advance(STEP_S)
            for driver in self.drivers.values():
                driver.run_once(0.0)

    def leader(self) -> str | None:
        leaders = [a for a, n in self.nodes.items() if n.is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    def settle(self, limit_s: float = 20.0) -> str:
        for _ in range(round(limit_s / STEP_S)):
            self.step()
            leader = self.leader()
            if leader and all(n.leader() == leader for n in self.nodes.values()):
                commit = self.nodes[leader].commit_index
                if all(n.applied_index == commit for n in self.nodes.values()):
                    return leader
        raise AssertionError(f"no settled leader after {limit_s} s of simulated time")

    def close(self) -> None:
        for node in self.nodes.values():
            node.destroy()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    hub = Hub(seed=_seed())
    with hub.time():  # the nodes read the manual clock from their construction on
        g = Group(tmp_path, hub)
        try:
            yield g
        finally:
            g.close()


def test_idle_followers_ack_a_few_times_per_fallback_and_the_leader_stays(group: Group) -> None:
    leader = group.settle()
    term = group.nodes[leader].term
    for counter in group.sent.values():
        counter.clear()
    window_s = 3 * TIMINGS.leader_fallback_s
    group.step(window_s)
    assert group.leader() == leader and group.nodes[leader].term == term
    heartbeats = group.sent[leader]["append_entries"]
    # Two followers; a heartbeat goes out at the first driver round after it is due.
    assert heartbeats >= 2 * window_s / (TIMINGS.heartbeat_s + DRIVER_ROUND_S) * 0.9
    for addr in ADDRS:
        if addr == leader:
            continue
        acks = group.sent[addr]["next_node_idx"]
        print(f"{addr}: {acks} acks for {heartbeats // 2} heartbeats in {window_s} s")
        assert window_s / REFRESH_S - 2 <= acks <= window_s / REFRESH_S + 2


def test_new_entries_are_acknowledged_and_committed_at_once(group: Group) -> None:
    leader = group.settle()
    rng = random.Random(group.hub.seed)
    group.step(2 * REFRESH_S)  # followers are in their sparse-ack phase
    node = group.nodes[leader]
    for i in range(20):
        node.propose(f"e{i}".encode())
        before = node.commit_index
        group.step(0.1)  # a few rounds and hops: far below REFRESH_S
        assert node.commit_index > before, f"entry {i} not committed within 0.1 s"
        group.step(rng.random() * REFRESH_S)
    group.step(0.1)
    assert all(group.applied[a] == [f"e{i}".encode() for i in range(20)] for a in ADDRS)


def test_lost_acks_are_repeated_and_the_leader_catches_up(group: Group) -> None:
    leader = group.settle()
    group.hub.drop(0.3)  # seeded: the hub's rng
    proposed = 0
    for _ in range(200):
        current = group.leader()
        if current is not None:
            group.nodes[current].propose(f"d{proposed}".encode())
            proposed += 1
        group.step(0.03)
    group.hub.drop(0.0)
    leader = group.settle()
    node = group.nodes[leader]
    last = node.commit_index
    # Within one refresh interval every follower's acknowledged index reaches the leader.
    group.step(REFRESH_S + 0.2)
    match = node.status()["match_index"]
    assert all(match[a] >= last for a in ADDRS if a != leader), (match, last)
    logs = {a: group.applied[a] for a in ADDRS}
    assert logs[ADDRS[0]] == logs[ADDRS[1]] == logs[ADDRS[2]]


def test_a_leader_that_hears_nothing_still_steps_down(group: Group) -> None:
    leader = group.settle()
    group.step(2 * REFRESH_S)
    group.hub.drop(1.0)  # links stay up (no disconnect to react to): only the fallback acts
    group.step(TIMINGS.leader_fallback_s - REFRESH_S - 0.2)
    assert group.nodes[leader].is_leader()  # its last acks are recent enough
    group.step(REFRESH_S + 0.5)
    assert not group.nodes[leader].is_leader()
