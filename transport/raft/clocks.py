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
partition leader stamps it as a command's ``now_ms`` (broker/replica.py), so one broker's wrong
clock does not move partition time (DESIGN.md § Time).

Thread-safe without a lock: ``heard`` runs on the group's tick thread and replaces one dict
entry (an atomic store); ``quorum_ms`` reads entries from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class QuorumClock:
    def __init__(self, wall_s: Callable[[], float], monotonic_s: Callable[[], float]) -> None:
        self._wall_s = wall_s
        self._monotonic_s = monotonic_s
        self._readings: dict[str, tuple[int, float]] = {}  # peer -> (wall_ms, arrived at)

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

    def reading_ms(self, peer: str) -> int | None:
        """``peer``'s clock now, as estimated from its latest message; None before one."""
        reading = self._readings.get(peer)
        if reading is None:
            return None
        wall_ms, arrived_s = reading
        return wall_ms + int((self._monotonic_s() - arrived_s) * 1000)

    def quorum_ms(self, peers: Iterable[str]) -> int | None:
        """The highest time a majority of the voters (this replica and ``peers``) have
        reached; None while fewer than a majority of them have been heard from."""
        readings = [self.wall_ms()]
        voters = 1
        for peer in peers:
            voters += 1
            reading = self.reading_ms(peer)
            if reading is not None:
                readings.append(reading)
        majority = voters // 2 + 1
        if len(readings) < majority:
            return None
        readings.sort(reverse=True)
        return readings[majority - 1]
