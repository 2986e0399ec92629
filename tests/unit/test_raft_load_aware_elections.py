"""Load-aware election timers (transport/raft/lag.py, membership.py ``_election_due``; issue 16).

A follower tells "the leader is hung" from "we are starved" by the lag lately seen: how late its
own driver's rounds started, and how late its leader broker's frames arrived. A follower that
saw either waits past its election deadline (a multiple of the lag, capped); one whose rounds
ran on time, beside a leader whose frames came on time until they stopped, campaigns at the
deadline.

Simulation tier, the harness of test_raft_quiescence.py: three hub brokers, RaftNode groups,
one RaftDriver per broker stepped by hand on the manual clock, raftq's default timings. A
machine-wide stall is the clock moving on while no driver runs; a hung (SIGSTOPped) broker is
one whose driver stops while its links stay open. Randomized tests print their seed; replay
with ``RAFTQ_SEED=<seed> pytest tests/unit/test_raft_load_aware_elections.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftq.transport.raft import RaftTimings
from raftq.transport.raft.hub import Hub
from raftq.transport.raft.lag import (
    GRACE_CAP_TIMEOUTS,
    GRACE_PER_LAG,
    LAG_HALF_LIFE_S,
    LAG_IGNORED_S,
    SchedulingLag,
    election_grace_s,
)
from tests.unit.test_raft_quiescence import (
    ADDRS,
    AWAKE,
    DRIVER_ROUND_S,
    PING_S,
    SILENT_AFTER_S,
    TIMINGS,
    Cluster,
    _seed,
    led,
    settle_quiet,
)


def _run(tmp: Path, test: Callable[[Cluster], Any], *, timings: RaftTimings = TIMINGS) -> Any:
    seed = _seed()
    hub = Hub(seed, ping_interval_s=PING_S, silent_after_s=SILENT_AFTER_S, dead_after_s=10.0)
    cluster = Cluster.__new__(Cluster)
    with hub.time():  # SyncObj.__init__ already reads the clock and the rng
        cluster.__init__(tmp, seed, hub=hub, timings=timings)  # type: ignore[misc]
        try:
            return test(cluster)
        finally:
            cluster.close()


def _stall_all(c: Cluster, seconds: float, order: list[str]) -> None:
    """No broker is scheduled for `seconds`; then each runs one iteration, in `order`."""
    c.hub.clock.advance(seconds)
    for addr in order:
        c.drivers[addr].run_once(0.0)
    c.check()


# -- the lag and the grace (pure) ----------------------------------------------------------------


def test_the_lag_is_a_decaying_max_of_how_late_rounds_start() -> None:
    lag = SchedulingLag()
    assert lag.value(100.0) == 0.0
    lag.record(0.4, 100.0)
    lag.record(0.1, 100.5)  # smaller than what is remembered: changes nothing
    assert lag.value(100.0 + LAG_HALF_LIFE_S) == pytest.approx(0.2)
    lag.record(0.3, 100.0 + LAG_HALF_LIFE_S)  # larger than the decayed max: taken
    assert lag.value(100.0 + 2 * LAG_HALF_LIFE_S) == pytest.approx(0.15)
    assert lag.value(100.0 + 30 * LAG_HALF_LIFE_S) < 1e-9  # forgotten
    fresh = SchedulingLag()
    fresh.record(-0.01, 200.0)  # a round that started early: no lag
    assert fresh.value(200.0) == 0.0


def test_the_grace_ignores_jitter_grows_with_the_lag_and_is_capped() -> None:
    timeout_max_s = 1.3
    assert election_grace_s(0.0, timeout_max_s) == 0.0
    assert election_grace_s(LAG_IGNORED_S, timeout_max_s) == 0.0  # at the jitter floor
    just_past = election_grace_s(LAG_IGNORED_S + 0.01, timeout_max_s)
    assert just_past == pytest.approx(GRACE_PER_LAG * 0.01)
    assert election_grace_s(0.35, timeout_max_s) == pytest.approx(GRACE_PER_LAG * 0.30)
    cap = GRACE_CAP_TIMEOUTS * timeout_max_s
    assert election_grace_s(10.0, timeout_max_s) == pytest.approx(cap)  # far past: the cap
    assert election_grace_s(LAG_IGNORED_S + cap / GRACE_PER_LAG, timeout_max_s) == pytest.approx(
        cap
    )  # at the cap


# -- followers in the simulated cluster ----------------------------------------------------------


@pytest.mark.parametrize("timings", [TIMINGS, AWAKE], ids=["quiesced", "awake"])
def test_followers_starved_with_their_leader_do_not_campaign(
    tmp_path: Path, timings: RaftTimings
) -> None:
    """The whole machine starves: no broker runs for 1.0-2.0 s (past every election deadline
    for the longer stalls), then they run one after the other, so the first finds its deadline
    passed and nothing from a leader that did not run either. Its own rounds were as late: it
    waits, the leader heartbeats as soon as it runs, and no group changes term or leader. (Before
    the grace, the first broker to run campaigned in every group it follows.)"""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        leads = {n: led(c, n) for n in c.names}
        terms = c.terms()
        for k, stall_s in enumerate((1.6, 1.0, 2.0, 1.3, 1.8, 1.6)):
            order = ADDRS[k % 3 :] + ADDRS[: k % 3]
            _stall_all(c, stall_s, order)
            c.step(2 * timings.election_timeout_max_s)
            assert c.terms() == terms, f"stall of {stall_s} s, brokers resumed in {order}"
        assert {n: led(c, n, ADDRS) for n in c.names} == leads

    _run(tmp_path, scenario, timings=timings)


@pytest.mark.parametrize("timings", [TIMINGS, AWAKE], ids=["quiesced", "awake"])
def test_followers_on_time_wait_for_a_leader_whose_broker_keeps_stalling(
    tmp_path: Path, timings: RaftTimings
) -> None:
    """Only one broker is starved: it stalls for 0.5 s, 0.9 s, then 1.6 s (past every election
    deadline), running 0.3 s in between, while the others run on time. Its frames came late
    before (its links' lag), so the followers of the groups it leads wait for it, and no group
    changes term or leader. (Without the links' lag they campaigned in the 1.6 s stall.)"""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        starved = led(c, "g0")
        leads = {n: led(c, n) for n in c.names}
        terms = c.terms()
        for stall_s in (0.5, 0.9, 1.6):
            c.frozen.add(starved)
            c.step(stall_s)
            c.frozen.discard(starved)
            c.step(0.3)
            assert c.terms() == terms, f"{starved} stalled for {stall_s} s"
        c.step(2 * timings.election_timeout_max_s)
        assert c.terms() == terms
        assert {n: led(c, n, ADDRS) for n in c.names} == leads

    _run(tmp_path, scenario, timings=timings)


def test_a_follower_stalled_between_its_poll_and_its_tick_reads_before_it_campaigns(
    tmp_path: Path,
) -> None:
    """A follower's broker stops for 1.6 s after its driver read the sockets and before it
    ticks the group (another group's fsync stalls, the process is descheduled mid-round): its
    election deadline passed meanwhile, its rounds had been on time, and what the leader sent
    since is unread. It decides only after the next read, which brings the leader's
    heartbeat: no group changes term. (Before, it campaigned in that same round.)"""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        leader = led(c, "g0")
        follower = next(a for a in ADDRS if a != leader)
        terms = c.terms()
        group = c.drivers[follower]._groups["g0"]
        tick = group.tick
        stalled: list[float] = []

        def tick_after_a_stall(timeout: float) -> None:
            if not stalled:
                stalled.append(c.hub.clock.now())
                c.hub.clock.advance(1.6)
            tick(timeout)

        group.tick = tick_after_a_stall
        c.until(lambda: bool(stalled), max_s=5.0)
        c.step(2 * AWAKE.election_timeout_max_s)
        assert c.terms() == terms

    _run(tmp_path, scenario, timings=AWAKE)


def test_a_follower_on_time_beside_a_hung_leader_campaigns_at_the_base_timeout(
    tmp_path: Path,
) -> None:
    """A machine-wide stall long ago is forgotten (the lag halves every LAG_HALF_LIFE_S): when
    the leader then hangs (SIGSTOP: its links open and silent) and the followers run on time
    (at most a step late), the first of them stands within an election timeout of when it last
    heard the leader's broker, as without the grace."""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        _stall_all(c, 1.6, ADDRS)
        c.step(20.0)
        assert all(c.drivers[a].lag_s() < LAG_IGNORED_S for a in ADDRS)
        leader = led(c, "g0")
        others = [a for a in ADDRS if a != leader]
        term = c.nodes[leader, "g0"].term
        c.frozen.add(leader)
        took = c.until(lambda: any(c.nodes[a, "g0"].term > term for a in others), max_s=10.0)
        print(f"a follower stood {took:.2f} s after the leader hung")
        # its last ping came at most PING_S before; the timer is checked once per round
        assert took <= TIMINGS.election_timeout_max_s + DRIVER_ROUND_S + 0.02

    _run(tmp_path, scenario)


def test_a_starved_follower_beside_a_hung_leader_campaigns_within_the_cap(
    tmp_path: Path,
) -> None:
    """The leader hangs, and so does the other follower; the last follower's own rounds each
    start a second late, so its grace is capped (GRACE_CAP_TIMEOUTS election timeouts). It
    stands no earlier than an election timeout plus the cap after it last heard the leader,
    and no later than that plus one of its late rounds: a hung leader is still replaced."""

    def scenario(c: Cluster) -> None:
        settle_quiet(c)
        leader = led(c, "g0")
        late, other = (a for a in ADDRS if a != leader)
        term = c.nodes[late, "g0"].term
        c.frozen |= {leader, other, late}
        start = c.hub.clock.now()
        while c.nodes[late, "g0"].term == term:
            assert c.hub.clock.now() - start < 10.0, "never campaigned"
            c.hub.clock.advance(1.0)
            c.drivers[late].run_once(0.0)
        took = c.hub.clock.now() - start
        cap = GRACE_CAP_TIMEOUTS * AWAKE.election_timeout_max_s
        print(f"the late follower stood {took:.2f} s after the leader hung (cap {cap:.2f} s)")
        # last heartbeat at most one heartbeat (and a step) before the hang
        earliest = AWAKE.election_timeout_min_s - AWAKE.heartbeat_s - 0.01 + cap
        assert earliest <= took <= AWAKE.election_timeout_max_s + cap + 1.0

    _run(tmp_path, scenario, timings=AWAKE)
