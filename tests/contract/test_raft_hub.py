"""The in-memory hub: Raft groups on simulated brokers under seeded partitions, drops and delays.

Everything runs on a manual clock; nothing sleeps. Randomized tests print their seed; replay one
with ``RAFTQ_SEED=<seed> pytest tests/contract/test_raft_hub.py``.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftq.transport.raft.driver import ListGroup, RaftDriver, raft_now
from raftq.transport.raft.hub import Hub, ManualClock, pysyncobj_time

REPO = Path(__file__).resolve().parents[2]
FAST: dict[str, Any] = {"appendEntriesPeriod": 0.05, "raftMinTimeout": 0.3, "raftMaxTimeout": 0.6}
STEP_S = 0.01


def _seed() -> int:
    seed = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    return seed


class SimCluster:
    """Brokers on one hub, each hosting a replica of every group; ticked by hand.

    `step()` advances the clock, moves messages, ticks every live replica and checks the Raft
    invariants that must hold after every step.
    """

    def __init__(self, seed: int, *, brokers: int = 3, groups: int = 4) -> None:
        self.hub = Hub(seed)
        self.addrs = [f"10.0.0.{i + 1}:7000" for i in range(brokers)]
        self.names = [f"g{i}" for i in range(groups)]
        self.frozen: set[str] = set()
        self.replicas: dict[tuple[str, str], ListGroup] = {}
        self.leader_of_term: dict[tuple[str, int], str] = {}
        self.trace: list[str] = []  # first sighting of each (group, term) leader
        with self.hub.time():  # SyncObj.__init__ already reads the clock and the rng
            for addr in self.addrs:
                ep = self.hub.endpoint(addr)
                for name in self.names:
                    self.replicas[addr, name] = ListGroup(
                        name,
                        addr,
                        self.addrs,
                        ep.transport_class(name),
                        clock=self.hub.clock,
                        **FAST,
                    )
                    ep.activate(name)  # ticked by hand: registered as a driver would

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.hub.clock.advance(STEP_S)
            self.hub.step()
            for (addr, _name), g in self.replicas.items():
                if addr not in self.frozen:
                    g.doTick(0)
            self.check()

    def check(self) -> None:
        for name in self.names:
            logs = [self.replicas[a, name].applied for a in self.addrs]
            for a in logs:
                for b in logs:
                    shorter, longer = sorted((a, b), key=len)
                    assert longer[: len(shorter)] == shorter, f"[group={name}] logs diverged"
            for addr in self.addrs:
                g = self.replicas[addr, name]
                if g.is_leader():
                    term = g.raftCurrentTerm
                    if (name, term) not in self.leader_of_term:
                        self.leader_of_term[name, term] = addr
                        self.trace.append(f"{self.hub.clock.now():.2f} {name} t{term} {addr}")
                    seen = self.leader_of_term[name, term]
                    assert seen == addr, f"[group={name}] two leaders in term {term}"

    def until(self, cond: Callable[[], bool], *, max_s: float = 30.0) -> float:
        """Step until `cond()`; fail after `max_s` of simulated time. Returns simulated seconds."""
        start = self.hub.clock.now()
        while not cond():
            if self.hub.clock.now() - start > max_s:
                pytest.fail(f"condition not reached within {max_s}s of simulated time")
            self.step()
        return self.hub.clock.now() - start

    def leader(self, name: str, among: list[str] | None = None) -> str | None:
        """The broker that leads `name` and is recognised by every live replica in `among`."""
        among = among or [a for a in self.addrs if a not in self.frozen]
        leaders = {self.replicas[a, name].leader() for a in among}
        if len(leaders) == 1:
            (leader,) = leaders
            if leader in among and self.replicas[leader, name].is_leader():
                return leader
        return None

    def all_led(self, among: list[str] | None = None) -> bool:
        return all(self.leader(n, among) is not None for n in self.names)

    def propose(self, addr: str, name: str, data: bytes) -> None:
        self.replicas[addr, name].apply(data, callback=lambda _res, _err: None)

    def converged(self, name: str, among: list[str] | None = None) -> bool:
        among = among or self.addrs
        logs = {tuple(self.replicas[a, name].applied) for a in among}
        return len(logs) == 1


def test_manual_clock_drives_pysyncobj() -> None:
    clock = ManualClock(50.0)
    with pysyncobj_time(clock, random.Random(1)):
        assert raft_now() == 50.0  # raft_now() reads pysyncobj's own clock
        clock.advance(2.5)
        assert raft_now() == 52.5
    assert abs(raft_now() - time.monotonic()) < 5.0


def test_groups_elect_and_replicate_on_the_hub() -> None:
    c = SimCluster(seed=1)
    with c.hub.time():
        elapsed = c.until(c.all_led)
        assert elapsed < 5.0
        for i, name in enumerate(c.names):
            for j in range(5):  # through every replica: followers forward to the leader
                c.propose(c.addrs[(i + j) % 3], name, f"{name}-{j}".encode())
        c.until(lambda: all(len(c.replicas[a, n].applied) == 5 for a in c.addrs for n in c.names))
        for name in c.names:
            assert c.converged(name)


def test_partition_then_heal_reelects_and_converges() -> None:
    seed = _seed()
    c = SimCluster(seed)
    with c.hub.time():
        c.until(c.all_led)
        old = c.leader("g0")
        assert old is not None
        rest = [a for a in c.addrs if a != old]
        c.hub.isolate(old)
        c.until(lambda: c.leader("g0", rest) is not None)
        new = c.leader("g0", rest)
        assert new in rest
        c.propose(new, "g0", b"during-partition")
        c.propose(old, "g0", b"to-isolated-old-leader")  # must not commit while isolated
        c.until(lambda: all(b"during-partition" in c.replicas[a, "g0"].applied for a in rest))
        assert b"to-isolated-old-leader" not in c.replicas[old, "g0"].applied
        c.hub.heal()
        c.until(lambda: c.all_led() and all(c.converged(n) for n in c.names))
        assert b"during-partition" in c.replicas[old, "g0"].applied


def test_crash_freezes_a_broker_and_the_rest_carry_on() -> None:
    c = SimCluster(_seed())
    with c.hub.time():
        c.until(c.all_led)
        victim = c.leader("g1")
        assert victim is not None
        c.hub.crash(victim)
        c.frozen.add(victim)
        rest = [a for a in c.addrs if a != victim]
        c.until(lambda: c.all_led(rest))
        for n in c.names:
            c.propose(rest[0], n, b"after-crash")
        c.until(
            lambda: all(c.converged(n, rest) and c.replicas[rest[0], n].applied for n in c.names)
        )
        c.hub.restart(victim)
        c.frozen.discard(victim)
        c.until(lambda: c.all_led() and all(c.converged(n) for n in c.names))


def _chaos(seed: int, *, steps: int = 1500) -> list[str]:
    """A seeded schedule: drops, delays, partitions, heals and proposals; then heal and settle.
    Returns the leadership trace. Invariants are checked after every step."""
    c = SimCluster(seed, groups=3)
    sched = random.Random(seed)
    with c.hub.time():
        c.hub.delay(ms=2, jitter_ms=8)
        c.hub.drop(0.05)
        proposed = 0
        for i in range(steps):
            roll = sched.random()
            if roll < 0.004:
                a, b = sched.sample(c.addrs, 2)
                c.hub.partition(a, b)
            elif roll < 0.008:
                c.hub.heal()
            elif roll < 0.06:
                c.propose(sched.choice(c.addrs), sched.choice(c.names), f"c{i}".encode())
                proposed += 1
            c.step()
        c.hub.heal()
        c.hub.drop(0.0)
        c.until(lambda: c.all_led() and all(c.converged(n) for n in c.names), max_s=60)
        logs = [c.replicas[c.addrs[0], n].applied for n in c.names]
        digest = hashlib.sha256(repr(logs).encode()).hexdigest()[:16]
        c.trace.append(f"applied={sum(map(len, logs))} proposed={proposed} digest={digest}")
    return c.trace


def test_seeded_chaos_keeps_raft_invariants_and_replays() -> None:
    seed = _seed()
    first = _chaos(seed)
    assert _chaos(seed) == first, "same seed, same process: the schedule must replay exactly"
    assert first[-1].startswith("applied=")


@pytest.mark.parametrize("seed", [7, 11, 12345])
def test_chaos_fixed_seeds(seed: int) -> None:
    print(f"seed={seed}")
    _chaos(seed, steps=800)


def test_replay_is_identical_across_hash_seeds() -> None:
    """String hashing (set order of pysyncobj nodes) must not leak into the schedule."""
    seed = _seed()
    code = (
        "import hashlib, sys; sys.path.insert(0, '.');"
        "from tests.contract.test_raft_hub import _chaos;"
        f"print(hashlib.sha256('\\n'.join(_chaos({seed}, steps=600)).encode()).hexdigest())"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    local = hashlib.sha256("\n".join(_chaos(seed, steps=600)).encode()).hexdigest()
    assert digests == {local}


def test_driver_runs_hub_endpoints_on_the_manual_clock() -> None:
    """The same RaftDriver loop the brokers use, stepped by hand over the hub."""
    hub = Hub(seed=3)
    addrs = [f"10.0.1.{i}:7000" for i in range(1, 4)]
    with hub.time():
        drivers, groups = [], {}
        for addr in addrs:
            ep = hub.endpoint(addr)
            d = RaftDriver(ep, tick_interval_s=0.02, clock=hub.clock)
            for name in ("m0", "m1"):
                g = ListGroup(name, addr, addrs, ep.transport_class(name), clock=hub.clock, **FAST)
                groups[addr, name] = g
                d.register(name, g)
            drivers.append(d)

        def step() -> None:
            hub.clock.advance(STEP_S)
            for d in drivers:
                d.run_once(0.0)

        for _ in range(1000):
            step()
            if all(g.leader() for g in groups.values()):
                break
        groups[addrs[0], "m1"].apply(b"via-driver")
        for _ in range(1000):
            step()
            if all(g.applied == [b"via-driver"] for (_a, n), g in groups.items() if n == "m1"):
                break
        assert all(g.applied == [b"via-driver"] for (_a, n), g in groups.items() if n == "m1")
        assert drivers[0].stats["ticks_skipped"] > 0  # idle groups are not ticked every round


@pytest.mark.slow
def test_chaos_200_seeds() -> None:
    base = _seed()
    for i in range(200):
        print(f"seed={base + i}")
        _chaos(base + i, steps=600)


def test_flush_early_sends_only_append_entries_ahead_of_the_fsync() -> None:
    """A leader's append_entries may leave before its own journal fsync (the driver's
    flush_early); acks and votes wait for the full flush after the groups' syncs."""
    hub = Hub(1)
    a, b = hub.endpoint("10.0.0.1:7000"), hub.endpoint("10.0.0.2:7000")
    for message in (
        {"type": "next_node_idx", "next_node_idx": 3, "term": 1},
        {"type": "append_entries", "term": 1, "entries": []},
        {"type": "response_vote", "term": 2},
        {"type": "append_entries", "term": 2, "entries": []},
    ):
        assert a.enqueue(b.address, "g", message)
    with hub.time():
        assert hub.flush(a, early_only=True) == 2
        assert [m[2]["type"] for m in a._outbox] == ["next_node_idx", "response_vote"]
        assert hub.flush(a) == 2
    assert a._outbox == []
