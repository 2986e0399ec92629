"""A broker's own scheduling lag, and the election grace it buys a follower (issue 16).

Slow is not dead. When the whole machine is starved (CPU hogs beside the brokers), every
broker's driver runs late, the leader's as much as the followers': a follower whose own rounds
ran late has probably not heard its leader because neither was scheduled, not because the
leader hung. A SIGSTOPped (hung) leader on an otherwise healthy machine leaves its followers'
rounds on time, and the base election timeout holds.

- :class:`SchedulingLag`: the driver records how late each of its rounds starts (on its
  monotonic clock); the lag is a decaying maximum of those samples (half-life
  ``LAG_HALF_LIFE_S``), so one stall is remembered for a few seconds and then forgotten.
  The endpoints (mux, hub) keep one per link too, of how much later than a live peer's pings
  allow its frames arrived (``link_lag_s``): a leader broker starved now and then shows there
  even when its followers run on time; a hang adds nothing until something arrives again.
- :func:`election_grace_s`: how much later than its election deadline a follower that still
  has an open link to its leader campaigns: ``GRACE_PER_LAG`` times the larger of the two lags
  beyond ``LAG_IGNORED_S`` (ordinary jitter), at most ``GRACE_CAP_TIMEOUTS`` election timeouts.

- A follower whose tick comes more than ``RECHECK_AFTER_POLL_S`` after its driver last read
  the sockets (the round itself stalled: an fsync, the process descheduled mid-round) does
  not campaign in that tick: it looks again after the next read, once per deadline, since
  what its leader sent meanwhile is still unread.

Only a follower waits longer (membership.py ``_election_due``): that costs availability, never
safety. Nothing a leader relies on (leader fallback, the quorum clock) is stretched. Pure: no
clock of its own, the caller passes the time.
"""

from __future__ import annotations

import math
from typing import Protocol

LAG_HALF_LIFE_S = 3.0  # a stall's weight halves every this many seconds
LAG_IGNORED_S = 0.05  # lateness up to this much is ordinary jitter: no grace
GRACE_PER_LAG = 3.0  # seconds of grace per second of lag beyond LAG_IGNORED_S
GRACE_CAP_TIMEOUTS = 2.0  # grace at most this many (maximum) election timeouts
# A follower ticked this long after its driver last read the sockets decides no election in
# that tick: it looks again after the next read (once per deadline).
RECHECK_AFTER_POLL_S = 0.1


class LoadProbe(Protocol):
    """What a node reads of the thread that ticks it (``RaftDriver``)."""

    def lag_s(self) -> float:
        """How late its rounds have been starting lately (a :class:`SchedulingLag`)."""
        ...

    def since_poll_s(self) -> float:
        """Seconds since it last read the sockets."""
        ...


class SchedulingLag:
    """A decaying maximum of lateness samples, in seconds. One thread (the driver's)."""

    def __init__(self, half_life_s: float = LAG_HALF_LIFE_S) -> None:
        if half_life_s <= 0:
            raise ValueError("half_life_s > 0")
        self._half_life_s = half_life_s
        self._value = 0.0
        self._at = -math.inf

    def record(self, late_s: float, now: float) -> None:
        """A round that was due ``late_s`` seconds before ``now`` started at ``now``."""
        if late_s > self.value(now):
            self._value, self._at = late_s, now

    def value(self, now: float) -> float:
        """The lag at ``now``: the largest sample, halved per half-life since it was taken."""
        if self._value <= 0.0:
            return 0.0
        age = max(0.0, now - self._at)
        return self._value * 0.5 ** (age / self._half_life_s)


def election_grace_s(lag_s: float, election_timeout_max_s: float) -> float:
    """Seconds a follower whose own rounds run ``lag_s`` late adds to its election deadline."""
    grace = GRACE_PER_LAG * max(0.0, lag_s - LAG_IGNORED_S)
    return min(grace, GRACE_CAP_TIMEOUTS * election_timeout_max_s)
