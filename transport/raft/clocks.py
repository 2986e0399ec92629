"""QuorumClock: the time a majority of a Raft group's voters' clocks have reached.

Every message a replica sends carries its wall clock (``wall_ms``, stamped by the node's
transport wrapper). The receiver keeps each peer's latest reading with its own monotonic time of
arrival and reads the peer's clock now as that reading plus the monotonic time since. A reading
arrives after it was taken, so the estimate runs behind the peer's clock by the message's
transit: it errs low. A leader has a majority's readings from the moment it wins (the vote
answers carry them) and fresh ones with every append answer; a quiesced group's readings age,
extrapolated by the monotonic clock. A peer whose link closed has no reading until it speaks
again.

``quorum_ms`` is the highest time that a majority of the voters' clocks (this replica's own
included) have reached: the ``n // 2``-th reading from the top. A minority of clocks, however far
ahead or behind, cannot move it; with two voters both count, with one only its own. The
partition leader stamps it, paced, as a command's ``now_ms`` (broker/replica.py), so one
broker's wrong clock does not move partition time (DESIGN.md § Time).

A leader's stamps are paced (``stamp_ms``, ``Pacer``). The quorum clock alone can jump: a
reading is as fresh as the peer's last message, so a clock put right and another jumping within
that time are two wrong readings to the leader, a majority of three (partition time would
move an hour and an expired lease be granted again inside its deadline). So within one
term the leader keeps its own estimate of partition time, anchored at the quorum clock when it
first stamps and advanced by its **monotonic** clock, and stamps the quorum clock only up to
that estimate plus ``headroom_ms``. A clock jump (any number of wrong readings) moves stamps
ahead of the estimate by at most ``headroom_ms``, once: the estimate itself does not follow
it, it only slews toward the quorum clock at ``SLEW_RATE`` of the elapsed time (like NTP's
slew), so a leader anchored behind catches up and a long wrong majority drags it by 5% of its
duration, not all at once. Stamps never exceed the quorum clock, so nothing changes while the
clocks agree. A new leader trusts the quorum clock at its first stamp (the anchor): it has a
majority's readings from its votes, and readings older than ``fresh_s`` (a follower's of the
other followers, from its last election) do not count there while fresh ones make a majority.

Thread-safe: ``heard`` runs on the group's tick thread and replaces one dict entry (an atomic
store); ``quorum_ms`` reads entries from any thread; ``stamp_ms`` paces under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

SLEW_RATE = 0.05  # the pace estimate moves toward the quorum clock by 5% of the time elapsed
SLEW_STEP_MAX_S = 1.0  # ... of at most this much time per stamp (a quiesced leader wakes slowly)


class QuorumClock:
    def __init__(self, wall_s: Callable[[], float], monotonic_s: Callable[[], float]) -> None:
        self._wall_s = wall_s
        self._monotonic_s = monotonic_s
        self._readings: dict[str, tuple[int, float]] = {}  # peer -> (wall_ms, arrived at)
        self._tenure: tuple[int, Pacer] | None = None  # (term, its pacer) on a leader
        self._tenure_lock = threading.Lock()

    def wall_ms(self) -> int:
        """This replica's own wall clock, as every message it sends carries."""
        return int(self._wall_s() * 1000)

    def heard(self, peer: str, wall_ms: object) -> None:
        """A message from ``peer`` carried ``wall_ms`` (anything but an int is ignored)."""
        if type(wall_ms) is int:
            self._readings[peer] = (wall_ms, self._monotonic_s())

    def forget(self, peer: str) -> None:
        """The link to ``peer`` closed: its last reading no longer counts (a broker that died
        with a wrong clock must not vote with it while it is down)."""
        self._readings.pop(peer, None)

    def quorum_ms(self, peers: Iterable[str], *, fresh_s: float | None = None) -> int | None:
        """The highest time a majority of the voters (this replica and ``peers``) have
        reached; None while fewer than a majority of them have been heard from (with
        ``fresh_s``: heard within that many seconds)."""
        readings = [self.wall_ms()]
        voters = 1
        now_s = self._monotonic_s()
        for peer in peers:
            voters += 1
            reading = self._readings.get(peer)
            if reading is None or (fresh_s is not None and now_s - reading[1] > fresh_s):
                continue
            readings.append(reading[0] + int((now_s - reading[1]) * 1000))
        majority = voters // 2 + 1
        if len(readings) < majority:
            return None
        readings.sort(reverse=True)
        return readings[majority - 1]

    def stamp_ms(
        self, term: int, peers: Iterable[str], *, headroom_ms: int, fresh_s: float
    ) -> int | None:
        """What the leader of ``term`` may stamp now: the quorum clock, at most ``headroom_ms``
        ahead of the term's pace (module docstring); None while ``quorum_ms`` is None. The
        term's first call anchors the pace, at the quorum clock of the readings heard within
        ``fresh_s`` when they make a majority."""
        voters = list(peers)
        quorum_ms = self.quorum_ms(voters)
        if quorum_ms is None:
            return None
        with self._tenure_lock:
            if self._tenure is None or self._tenure[0] != term:
                anchor_ms = self.quorum_ms(voters, fresh_s=fresh_s)
                self._tenure = (term, Pacer(quorum_ms if anchor_ms is None else anchor_ms))
            return self._tenure[1].bound_ms(quorum_ms, self._monotonic_s(), headroom_ms)


class Pacer:
    """A leader's estimate of partition time: it runs at the monotonic clock's rate from its
    anchor and slews toward the quorum clock by at most ``SLEW_RATE`` of the time elapsed
    (counting at most ``SLEW_STEP_MAX_S`` per call). Not thread-safe (QuorumClock locks)."""

    def __init__(self, anchor_ms: int) -> None:
        self._estimate_ms = float(anchor_ms)
        self._at_s: float | None = None  # monotonic time of the estimate; None: at the first call

    def bound_ms(self, quorum_ms: int, now_s: float, headroom_ms: int) -> int:
        """Advance the estimate to ``now_s`` and return the most a stamp may be: ``quorum_ms``,
        at most ``headroom_ms`` ahead of the estimate."""
        elapsed_ms = 0.0 if self._at_s is None else max(0.0, now_s - self._at_s) * 1000
        estimate_ms = self._estimate_ms + elapsed_ms
        slew_ms = SLEW_RATE * min(elapsed_ms, SLEW_STEP_MAX_S * 1000)
        if quorum_ms > estimate_ms:
            estimate_ms = min(float(quorum_ms), estimate_ms + slew_ms)
        else:
            estimate_ms = max(float(quorum_ms), estimate_ms - slew_ms)
        self._estimate_ms, self._at_s = estimate_ms, now_s
        return min(quorum_ms, int(estimate_ms) + headroom_ms)
