"""A leader's stamps are paced by its monotonic clock (transport/raft/clocks.py, DESIGN.md § Time):
wrong readings, however many at once, move them at most the headroom ahead of the pace, once;
the pace slews toward the quorum clock at SLEW_RATE of the time elapsed."""

from __future__ import annotations

from raftq.transport.raft.clocks import SLEW_RATE, Pacer, QuorumClock

HOUR_MS = 3_600_000
HEADROOM_MS = 1000
FRESH_S = 0.6
PEERS = ["b", "c"]


class Clocks:
    """This replica's wall clock (true time) and its monotonic clock, moved together."""

    def __init__(self) -> None:
        self.wall_s, self.mono_s = 1_000_000.0, 50.0
        self.quorum = QuorumClock(lambda: self.wall_s, lambda: self.mono_s)

    def advance(self, seconds: float) -> None:
        self.wall_s += seconds
        self.mono_s += seconds

    @property
    def true_ms(self) -> int:
        return int(self.wall_s * 1000)

    def heard(self, peer: str, offset_ms: int = 0) -> None:
        self.quorum.heard(peer, self.true_ms + offset_ms)

    def stamp(self, term: int = 1) -> int | None:
        return self.quorum.stamp_ms(term, PEERS, headroom_ms=HEADROOM_MS, fresh_s=FRESH_S)


def test_a_clock_put_right_while_another_jumps_moves_stamps_the_headroom_once() -> None:
    """Seed 777's case: b an hour ahead, then put right while c jumps an hour ahead; the leader
    still holds b's last reading, so two of three readings are an hour ahead."""
    clocks = Clocks()
    clocks.heard("b", HOUR_MS)
    clocks.heard("c")
    assert clocks.stamp() == clocks.true_ms  # one wrong clock: the median
    clocks.advance(0.1)
    clocks.heard("c", HOUR_MS)  # b put right, its next message not here yet
    assert (clocks.quorum.quorum_ms(PEERS) or 0) > clocks.true_ms + HOUR_MS - 1000  # the hole
    slew_ms = SLEW_RATE * 100  # the pace moved toward the quorum clock in those 0.1 s
    assert clocks.stamp() == clocks.true_ms + HEADROOM_MS + slew_ms
    for _ in range(100):  # 10 s more of a wrong majority: the pace slews 5% of it, no more
        clocks.advance(0.1)
        clocks.heard("b", HOUR_MS)
        clocks.heard("c", HOUR_MS)
        slew_ms += SLEW_RATE * 100
        stamp = clocks.stamp()
        assert stamp is not None and stamp <= clocks.true_ms + HEADROOM_MS + slew_ms + 1
    clocks.heard("b")  # put right: the quorum clock is true again, and so are the stamps
    assert clocks.stamp() == clocks.true_ms
    for _ in range(101):  # the pace slews back toward the quorum clock as fast
        clocks.advance(0.1)
        clocks.heard("b")
        assert clocks.stamp() == clocks.true_ms
    clocks.heard("c", HOUR_MS)
    clocks.heard("b", HOUR_MS)  # a majority wrong again: the headroom once more, not twice
    stamp = clocks.stamp()
    assert stamp is not None and stamp <= clocks.true_ms + HEADROOM_MS + 1


def test_stamps_follow_the_quorum_clock_while_it_is_behind_the_pace() -> None:
    clocks = Clocks()
    clocks.heard("b")
    clocks.heard("c")
    assert clocks.stamp() == clocks.true_ms
    clocks.heard("b", -120_000)
    clocks.heard("c", -120_000)  # a majority two minutes behind: stamps behind, never ahead
    assert clocks.stamp() == clocks.true_ms - 120_000
    clocks.advance(1.0)
    clocks.heard("b")
    assert clocks.stamp() == clocks.true_ms  # put right within a second: back at once


def test_a_leader_anchored_behind_catches_up_at_the_slew_rate() -> None:
    """An anchor two minutes behind (the fresh readings were the lower two) catches up on the
    quorum clock at SLEW_RATE, never all at once."""
    pacer = Pacer(1_000_000 - 120_000)
    assert pacer.bound_ms(1_000_000, 0.0, HEADROOM_MS) == 1_000_000 - 120_000 + HEADROOM_MS
    true_ms = 1_000_000
    for step in range(1, 101):
        true_ms += 100
        bound = pacer.bound_ms(true_ms, step * 0.1, HEADROOM_MS)
        assert bound <= true_ms - 120_000 + HEADROOM_MS + SLEW_RATE * step * 100 + 1
    assert bound >= true_ms - 120_000 + HEADROOM_MS + SLEW_RATE * 10_000 - 2
    # A quiesced leader that wakes after an hour counts at most a second of slew.
    assert pacer.bound_ms(true_ms + HOUR_MS, 10.0 + 3600, HEADROOM_MS) <= (
        bound + HOUR_MS + SLEW_RATE * 1000 + 1
    )


def test_a_new_term_anchors_at_the_fresh_readings_only() -> None:
    """A new leader's stale reading of a follower (heard at its last election, when that clock
    was an hour ahead) does not count in its anchor while its fresh ones make a majority."""
    clocks = Clocks()
    clocks.heard("c", HOUR_MS)
    clocks.advance(30.0)  # c since put right; its reading here is 30 s old
    clocks.heard("b", HOUR_MS)  # b, whose vote just arrived, runs an hour ahead
    assert (clocks.quorum.quorum_ms(PEERS) or 0) > clocks.true_ms + HOUR_MS - 1000  # stale, b
    assert clocks.stamp(term=2) == clocks.true_ms + HEADROOM_MS  # anchored at {own, b}: own
    clocks.advance(0.1)
    clocks.heard("c")
    assert clocks.stamp(term=2) == clocks.true_ms


def test_no_stamp_without_a_majority_and_fresh_readings_expire() -> None:
    clocks = Clocks()
    assert clocks.stamp() is None  # only its own reading of three
    clocks.heard("b", HOUR_MS)
    clocks.heard("c", HOUR_MS)
    assert clocks.quorum.quorum_ms(PEERS) == clocks.true_ms + HOUR_MS
    assert clocks.quorum.quorum_ms(PEERS, fresh_s=FRESH_S) == clocks.true_ms + HOUR_MS
    clocks.advance(1.0)
    assert clocks.quorum.quorum_ms(PEERS, fresh_s=FRESH_S) is None  # none fresh but its own
