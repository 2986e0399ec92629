"""Quiesced Raft groups (transport/raft/quiescence.py; driver.py wakes them).

Simulation tier: three brokers over the in-memory hub, a few RaftNode groups per broker (real
journals, no fsync), one RaftDriver per broker stepped by hand on the manual clock, raftq's
default timings (heartbeat 0.25 s, elections 0.8-1.3 s) and the hub's link pings (every 0.1 s,
silent after 0.4 s). After every step: at most one leader per group and term, and every index
applied with the same data on every replica that applied it.

What is shown: an idle group sends nothing and is hardly ticked; a proposal wakes it and
commits at once; a hung leader (its driver stopped, links open: SIGSTOP), an isolated or a
crashed one is replaced as fast as without quiescence; a hung or restarted follower does not
depose the leader; a leader whose group stops being run wakes its followers. Randomized tests
print their seed; replay with ``RAFTQ_SEED=<seed> pytest tests/unit/test_raft_quiescence.py``.
"""

from __future__ import annotations

import os
import random
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftq.transport.raft import FailReason, RaftNode, RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.hub import Hub
from raftq.transport.raft.membership import TRANSFER_LAG_ENTRIES_MAX
from raftq.transport.raft.quiescence import QUIESCE_AFTER_HEARTBEATS

STEP_S = 0.01
DRIVER_ROUND_S = 0.05
TIMINGS = RaftTimings(election_timeout_min_s=0.8, election_timeout_max_s=1.3, heartbeat_s=0.25)
AWAKE = RaftTimings(
    election_timeout_min_s=0.8, election_timeout_max_s=1.3, heartbeat_s=0.25, quiesce=False
)
PING_S = 0.1
SILENT_AFTER_S = 0.4
ADDRS = [f"10.0.4.{i}:7000" for i in (1, 2, 3)]
# A group quiesces QUIESCE_AFTER_HEARTBEATS heartbeats after its last change (plus a round).
QUIESCE_S = (QUIESCE_AFTER_HEARTBEATS + 1) * TIMINGS.heartbeat_s + 2 * DRIVER_ROUND_S


def _seed() -> int:
    seed = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    return seed


class Cluster:
    """Groups ``g0..`` with a replica on each of three hub brokers; one driver per broker."""

    def __init__(
        self,
        tmp: Path,
        seed: int,
        *,
        hub: Hub | None = None,
        groups: int = 3,
        timings: RaftTimings = TIMINGS,
    ) -> None:
        self.tmp = tmp
        self.timings = timings
        self.hub = hub or Hub(seed, ping_interval_s=PING_S, silent_after_s=SILENT_AFTER_S)
        self.names = [f"g{i}" for i in range(groups)]
        self.frozen: set[str] = set()  # hung brokers: links open, driver not run
        self.down: set[str] = set()  # crashed brokers
        self.drivers: dict[str, RaftDriver] = {}
        self.nodes: dict[tuple[str, str], RaftNode] = {}
        self.applied: dict[tuple[str, str], dict[int, bytes]] = {}
        self.leader_of_term: dict[tuple[str, int], str] = {}
        self.sent: dict[str, Counter[str]] = {a: Counter() for a in ADDRS}
        for addr in ADDRS:
            self._count_sends(addr)
            self.start(addr)

    def _count_sends(self, addr: str) -> None:
        ep = self.hub.endpoint(addr)
        enqueue, counter = ep.enqueue, self.sent[addr]

        def counting(peer: str, group: str, message: Any, bulk_bytes: int = 0) -> bool:
            counter[message.get("type", "?")] += 1
            return bool(enqueue(peer, group, message, bulk_bytes))

        ep.enqueue = counting  # type: ignore[method-assign]

    def start(self, addr: str) -> None:
        ep = self.hub.endpoint(addr)
        driver = RaftDriver(ep, tick_interval_s=DRIVER_ROUND_S, clock=self.hub.clock)
        for name in self.names:
            applied = self.applied.setdefault((addr, name), {})
            node = RaftNode(
                addr,
                ADDRS,
                apply=self._applier(applied),
                data_dir=self.tmp / addr.replace(":", "_"),
                name=name,
                fsync=False,
                auto_tick=False,
                transport_class=ep.transport_class(name),
                timings=self.timings,
                group_commit=True,
            )
            driver.register(name, node)
            self.nodes[addr, name] = node
        self.drivers[addr] = driver

    @staticmethod
    def _applier(out: dict[int, bytes]) -> Callable[[bytes, int], None]:
        def apply(data: bytes, index: int) -> None:
            out[index] = data

        return apply

    def crash(self, addr: str) -> None:
        self.hub.crash(addr)
        for name in self.names:
            self.nodes.pop((addr, name)).destroy()
        del self.drivers[addr]
        self.down.add(addr)

    def restart(self, addr: str) -> None:
        self.hub.restart(addr)
        self.down.discard(addr)
        self.start(addr)

    def live(self) -> list[str]:
        return [a for a in ADDRS if a not in self.frozen and a not in self.down]

    # -- stepping and invariants -----------------------------------------------------------------

    def step(self, seconds: float = STEP_S) -> None:
        for _ in range(max(1, round(seconds / STEP_S))):
            self.hub.clock.advance(STEP_S)
            for addr in self.live():
                self.drivers[addr].run_once(0.0)
            self.check()

    def check(self) -> None:
        for (addr, name), node in self.nodes.items():
            if node.is_leader():
                seen = self.leader_of_term.setdefault((name, node.term), addr)
                assert seen == addr, f"[group={name}] two leaders in term {node.term}"
        for name in self.names:
            merged: dict[int, bytes] = {}
            for addr in ADDRS:
                for index, data in self.applied[addr, name].items():
                    assert merged.setdefault(index, data) == data, f"[group={name}] {index}"

    def until(self, cond: Callable[[], bool], max_s: float) -> float:
        """Step until `cond()`; fail after `max_s` of simulated time. Returns the time taken."""
        start = self.hub.clock.now()
        while not cond():
            if self.hub.clock.now() - start > max_s:
                pytest.fail(f"condition not reached within {max_s} s (seed {self.hub.seed})")
            self.step()
        return self.hub.clock.now() - start

    # -- views -----------------------------------------------------------------------------------

    def leader(self, name: str, among: list[str] | None = None) -> str | None:
        """The broker leading `name` as every replica in `among` (default: live) sees it."""
        among = among or self.live()
        seen = {self.nodes[a, name].leader() for a in among}
        if len(seen) == 1:
            (leader,) = seen
            if leader in among and self.nodes[leader, name].is_leader():
                return leader
        return None

    def settled(self, among: list[str] | None = None) -> bool:
        among = among or self.live()
        if any((a, n) not in self.nodes for a in among for n in self.names):
            return False
        for name in self.names:
            leader = self.leader(name, among)
            if leader is None:
                return False
            commit = self.nodes[leader, name].commit_index
            if any(self.nodes[a, name].applied_index != commit for a in among):
                return False
        return True

    def all_quiesced(self, among: list[str] | None = None) -> bool:
        among = among or self.live()
        return all(self.nodes[a, n].quiesced for a in among for n in self.names)

    def terms(self) -> dict[tuple[str, str], int]:
        return {key: node.term for key, node in self.nodes.items()}

    def close(self) -> None:
        for node in self.nodes.values():
            node.destroy()


def run(tmp: Path, seed: int, test: Callable[[Cluster], Any], **kw: Any) -> Any:
    cluster = Cluster.__new__(Cluster)
    hub = Hub(seed, ping_interval_s=PING_S, silent_after_s=SILENT_AFTER_S)
    with hub.time():  # SyncObj.__init__ already reads the clock and the rng
        cluster.__init__(tmp, seed, hub=hub, **kw)  # type: ignore[misc]
        try:
            return test(cluster)
        finally:
            cluster.close()


def settle_quiet(c: Cluster) -> None:
    c.until(c.settled, max_s=20.0)
    if c.timings.quiesce:
        c.until(c.all_quiesced, max_s=QUIESCE_S + 1.0)
    else:
        c.step(QUIESCE_S)


# -- tests ---------------------------------------------------------------------------------------


def test_an_idle_group_quiesces_sends_nothing_and_is_rarely_ticked(tmp_path: Path) -> None:
    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        terms = c.terms()
        for counter in c.sent.values():
            counter.clear()
        ticks = {a: d.stats["ticks"] for a, d in c.drivers.items()}
        window_s = 20.0
        c.step(window_s)
        assert c.terms() == terms and c.all_quiesced()
        assert all(not counter for counter in c.sent.values()), c.sent
        for addr, driver in c.drivers.items():
            per_group = (driver.stats["ticks"] - ticks[addr]) / len(c.names)
            print(f"{addr}: {per_group:.1f} ticks per group in {window_s} s")
            # the safety-net tick only: every quiet_full_tick_interval_s (5 s)
            assert per_group <= window_s / driver.quiet_full_tick_interval_s + 1
            assert driver.quiesced_groups() == set(c.names)
            assert driver.statistics()["quiesced"] == len(c.names)  # the metrics gauge

    run(tmp_path, _seed(), scenario)


def test_a_proposal_wakes_the_group_commits_at_once_and_it_quiesces_again(tmp_path: Path) -> None:
    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        rng = random.Random(c.hub.seed)
        woken: set[str] = set()
        for i in range(10):
            name = rng.choice(c.names)
            leader = c.leader(name)
            assert leader is not None
            node = c.nodes[leader, name]
            before = node.commit_index
            node.propose(f"e{i}".encode())
            took = c.until(
                lambda n=name, b=before: all(  # type: ignore[misc]
                    c.nodes[a, n].applied_index > b for a in ADDRS
                ),
                max_s=0.2,
            )
            assert took <= 2 * DRIVER_ROUND_S + 0.05, took  # no heartbeat wait
            c.until(c.all_quiesced, max_s=QUIESCE_S + 0.5)
            c.step(rng.random() * 3)
            woken.add(name)
        for (_addr, name), node in c.nodes.items():  # quiesced once per settle, once per wake
            assert node.statistics()["quiesce_count"] >= 1 + (name in woken), name
        for driver in c.drivers.values():  # the gauge follows every wake and re-quiesce
            assert driver.statistics()["quiesced"] == len(c.names)

    run(tmp_path, _seed(), scenario)


def _replacement_time(c: Cluster, fault: Callable[[Cluster, str], None]) -> tuple[float, str]:
    """Settle and quiesce, apply `fault` to the broker leading g0; seconds until the others
    agree on a new g0 leader."""
    settle_quiet(c)
    c.step(random.Random(c.hub.seed).random())  # anywhere between two pings
    old = c.leader("g0")
    assert old is not None
    fault(c, old)
    others = [a for a in ADDRS if a != old]
    took = c.until(lambda: c.leader("g0", others) is not None, max_s=10.0)
    return took, old


def _freeze(c: Cluster, addr: str) -> None:
    c.frozen.add(addr)


def test_a_hung_leader_is_replaced_as_fast_as_without_quiescence(tmp_path: Path) -> None:
    """SIGSTOP: the leader's links stay open but nothing comes out of them. Followers campaign
    an election timeout after they last heard its broker, as they would after its last
    heartbeat without quiescence. Same seeds, both modes."""
    base = _seed()
    quiet, awake = [], []
    for k in range(12):
        seed = base + k
        took, _ = run(tmp_path / f"q{k}", seed, lambda c: _replacement_time(c, _freeze))
        quiet.append(took)
        took, _ = run(
            tmp_path / f"a{k}",
            seed,
            lambda c: _replacement_time(c, _freeze),
            timings=AWAKE,
        )
        awake.append(took)
    print("quiesced:", [f"{t:.2f}" for t in quiet])
    print("awake:   ", [f"{t:.2f}" for t in awake])
    # one election timeout after the last ping or heartbeat, plus the vote; a split vote
    # costs one more timeout in either mode
    limit_s = TIMINGS.election_timeout_max_s + PING_S + 0.2
    assert statistics.median(quiet) <= limit_s
    assert max(quiet) <= limit_s + TIMINGS.election_timeout_max_s
    # the pings stand in for heartbeats: detection may lag by up to one ping interval (the
    # rest of the margin is the spread of 12 random election timeouts per mode)
    assert statistics.median(quiet) <= statistics.median(awake) + PING_S + 0.2


def test_an_isolated_or_crashed_leader_is_replaced_and_the_old_one_steps_down(
    tmp_path: Path,
) -> None:
    seed = _seed()

    def isolate(c: Cluster, addr: str) -> None:
        c.hub.isolate(addr)

    def crash(c: Cluster, addr: str) -> None:
        c.crash(addr)

    for k, fault in enumerate((isolate, crash)):

        def scenario(c: Cluster, fault: Callable[[Cluster, str], None] = fault) -> None:
            took, old = _replacement_time(c, fault)
            print(f"{fault.__name__}: new leader after {took:.2f} s")
            # the link closed: the followers campaign within DISCONNECT_ELECTION_SPREAD_S
            assert took <= 0.2 + 0.3 + TIMINGS.election_timeout_max_s  # + a possible split
            if fault is isolate:
                c.until(lambda: not c.nodes[old, "g0"].is_leader(), TIMINGS.leader_fallback_s)
                c.hub.heal()
            else:
                c.restart(old)
            c.until(lambda: c.settled(ADDRS), max_s=10.0)
            c.until(lambda: c.all_quiesced(ADDRS), max_s=QUIESCE_S + 1.0)

        run(tmp_path / str(k), seed + k, scenario)


def led(c: Cluster, name: str, among: list[str] | None = None) -> str:
    leader = c.leader(name, among)
    assert leader is not None, name
    return leader


def test_a_hung_or_restarted_follower_does_not_depose_the_leader(tmp_path: Path) -> None:
    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        leader = c.leader("g0")
        follower = next(a for a in ADDRS if a != leader)
        leads = {n: led(c, n) for n in c.names}
        led_by_follower = [n for n, a in leads.items() if a == follower]
        for fault in ("freeze", "restart"):
            terms = {n: c.nodes[leads[n], n].term for n in c.names if n not in led_by_follower}
            if fault == "freeze":
                c.frozen.add(follower)
                c.step(3.0)
                c.frozen.discard(follower)
            else:
                c.crash(follower)
                c.step(0.5)
                c.restart(follower)
            c.until(lambda: c.settled(ADDRS), max_s=10.0)
            # groups the follower did not lead keep their leader and term
            for n, term in terms.items():
                assert c.leader(n, ADDRS) == leads[n], (fault, n)
                assert c.nodes[leads[n], n].term == term, (fault, n)
            c.until(lambda: c.all_quiesced(ADDRS), max_s=QUIESCE_S + 1.0)
            leads = {n: led(c, n, ADDRS) for n in c.names}
            led_by_follower = [n for n, a in leads.items() if a == follower]

    run(tmp_path, _seed(), scenario)


def test_a_leader_whose_group_stops_running_wakes_its_followers(tmp_path: Path) -> None:
    """The replica is unregistered while its broker stays up (its links keep being heard):
    its last heartbeat wakes the followers, which elect a new leader."""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        old = c.leader("g0")
        assert old is not None
        others = [a for a in ADDRS if a != old]
        c.drivers[old].unregister("g0")  # takes effect at the driver's next iteration
        c.step()
        c.nodes.pop((old, "g0")).destroy()
        took = c.until(lambda: c.leader("g0", others) is not None, max_s=5.0)
        print(f"new leader after {took:.2f} s")
        assert took <= TIMINGS.election_timeout_max_s + 0.5  # + a possible split

    run(tmp_path, _seed(), scenario)


def test_random_faults_keep_one_leader_per_term_and_recover(tmp_path: Path) -> None:
    """Seeded schedule of hangs, crashes, isolations, cut links, drops and proposals; then
    everything heals: one leader per group, equal logs, quiesced again."""
    seed = _seed()
    rng = random.Random(seed)

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        proposed = 0
        for _ in range(60):
            action = rng.random()
            addr = rng.choice(ADDRS)
            if action < 0.15 and addr not in c.down:
                c.frozen.symmetric_difference_update({addr})  # hang or resume
            elif action < 0.25:
                if addr in c.down:
                    c.restart(addr)
                elif len(c.down) == 0 and addr not in c.frozen:
                    c.crash(addr)
            elif action < 0.35:
                c.hub.partition(addr, rng.choice([a for a in ADDRS if a != addr]))
            elif action < 0.45:
                c.hub.heal()
            elif action < 0.5:
                c.hub.drop(rng.choice([0.0, 0.0, 0.2, 1.0]))
            else:
                name = rng.choice(c.names)
                for a in c.live():
                    if c.nodes[a, name].is_leader():
                        c.nodes[a, name].propose(f"p{proposed}".encode())
                        proposed += 1
            c.step(rng.choice([0.05, 0.3, 1.0, 2.0]))
        c.frozen.clear()
        c.hub.heal()
        c.hub.drop(0.0)
        for addr in sorted(c.down):
            c.restart(addr)
        c.until(lambda: c.settled(ADDRS), max_s=20.0)
        c.until(lambda: c.all_quiesced(ADDRS), max_s=QUIESCE_S + 2.0)
        for name in c.names:
            logs = [c.applied[a, name] for a in ADDRS]
            assert logs[0] == logs[1] == logs[2], name
        print(f"{proposed} proposals, {len(c.leader_of_term)} (group, term) leaders")

    run(tmp_path, seed, scenario)


# -- CPU contention (issue 16): slow is not dead -------------------------------------------------


def test_a_leader_broker_stalled_past_the_silence_limit_keeps_its_groups(tmp_path: Path) -> None:
    """The leader's broker is not scheduled for 0.6 s (CPU hogs beside it): longer than the
    links' silence limit, so the followers of its quiesced groups wake, but shorter than an
    election timeout. The woken followers tell it (an ack without the quiescence offer), it
    heartbeats as soon as it runs again, and no group changes term or leader."""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        leader = c.leader("g0")
        assert leader is not None
        leads = {n: led(c, n) for n in c.names}
        terms = c.terms()
        c.frozen.add(leader)
        c.step(SILENT_AFTER_S + 0.2)  # silent: the followers of its groups are awake now
        assert not all(c.nodes[a, "g0"].quiesced for a in ADDRS if a != leader)
        c.frozen.discard(leader)
        c.step(3 * TIMINGS.election_timeout_max_s)
        assert c.terms() == terms
        assert {n: led(c, n, ADDRS) for n in c.names} == leads
        c.until(lambda: c.all_quiesced(ADDRS), max_s=QUIESCE_S + 1.0)

    run(tmp_path, _seed(), scenario)


def test_a_leadership_transfer_under_a_stream_of_proposals_takes_one_term(
    tmp_path: Path,
) -> None:
    """The leader holds new appends until the target has every entry, then sends TimeoutNow:
    the target campaigns with a log as long as anyone's and wins at once, so the term moves by
    exactly one although proposals arrive every step (stock pysyncobj refused the transfer:
    the target never has the last entry while proposals are in flight); every proposal gets
    an answer."""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        c.hub.delay(30.0)  # one way: a proposal every 10 ms keeps entries in flight
        old = led(c, "g0")
        target = next(a for a in ADDRS if a != old)
        term = c.nodes[old, "g0"].term
        made: list[bytes] = []
        outcomes: list[int] = []
        answered: list[int] = []

        def propose() -> None:
            now = c.leader("g0")
            if now is not None:
                made.append(f"s{len(made)}".encode())
                c.nodes[now, "g0"].propose(made[-1], lambda _r, err: outcomes.append(err))

        for _ in range(20):  # a steady stream before the request
            propose()
            c.step()
        c.nodes[old, "g0"].transfer_leadership(target, lambda _r, err: answered.append(err))
        for _ in range(round(2 * TIMINGS.election_timeout_max_s / STEP_S)):
            propose()
            c.step()
            if c.leader("g0", ADDRS) == target:
                break
        assert answered == [0], answered  # TimeoutNow sent
        assert c.leader("g0", ADDRS) == target
        assert {c.nodes[a, "g0"].term for a in ADDRS} == {term + 1}
        c.step(1.0)
        assert len(outcomes) == len(made), "every proposal is answered"
        assert outcomes.count(FailReason.SUCCESS) >= len(made) // 2, Counter(outcomes)

    run(tmp_path, _seed(), scenario)


def test_a_transfer_to_a_follower_far_behind_is_refused_and_holds_nothing(tmp_path: Path) -> None:
    """A target more than TRANSFER_LAG_ENTRIES_MAX entries behind is refused at once (holding
    appends while it catches up would stall the group); proposals keep committing."""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        old = led(c, "g0")
        target = next(a for a in ADDRS if a != old)
        leader = c.nodes[old, "g0"]
        c.frozen.add(target)
        for i in range(TRANSFER_LAG_ENTRIES_MAX + 8):
            leader.propose(f"x{i}".encode())
            c.step()
        answered: list[int] = []
        leader.transfer_leadership(target, lambda _r, err: answered.append(err))
        before = leader.commit_index
        leader.propose(b"after")
        c.step(2 * DRIVER_ROUND_S)
        assert answered == [FailReason.REQUEST_DENIED]
        assert leader.commit_index > before and leader.is_leader()
        assert leader.led_for_s() > 0
        c.frozen.discard(target)
        c.until(lambda: c.settled(ADDRS), max_s=10.0)

    run(tmp_path, _seed(), scenario)
