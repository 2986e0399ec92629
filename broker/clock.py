"""The clock a broker is built from: wall time, monotonic time and a sleep.

Production brokers use `SYSTEM_CLOCK` (``time.time``, ``time.monotonic``, ``time.sleep``). The
simulation tier (tests/sim/brokers.py) builds brokers from a manual clock whose wall reading it
can skew and jump per broker, and whose sleep waits for simulated time, so the broker's
periodic duties (Backend, the reporter, Membership, metadata and partition proposals'
retry loops) follow the simulation's time rather than the machine's. Components keep their
narrow collaborators: each takes the one function it reads (``wall_s``, ``monotonic_s`` or
``sleep_s``), not this object.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


def _event_wait(event: threading.Event, timeout_s: float) -> bool:
    return event.wait(max(0.0, timeout_s))


@dataclass(frozen=True)
class Clock:
    """``wall_s``: seconds since the epoch (may jump, may be skewed); ``monotonic_s``: seconds
    that never go backwards; ``sleep_s(seconds)``: wait that long by ``monotonic_s``;
    ``wait_s(event, seconds)``: wait until ``event`` is set or that long passed by
    ``monotonic_s``, and say whether it is set."""

    wall_s: Callable[[], float] = time.time
    monotonic_s: Callable[[], float] = time.monotonic
    sleep_s: Callable[[float], None] = time.sleep
    wait_s: Callable[[threading.Event, float], bool] = _event_wait

    def wall_ms(self) -> int:
        return int(self.wall_s() * 1000)


SYSTEM_CLOCK = Clock()
