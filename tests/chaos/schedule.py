"""The seeded fault schedule: a pure function of (seed, duration, brokers, consumers).

The same seed gives the same faults at the same offsets from the start of the load, with the
same targets, durations and partition modes (``RAFTQ_SEED=<seed>`` replays a run). The first
faults cover every kind once in a seeded order, so even a short run injects each of them; then
kinds are drawn by weight. One fault at a time, each healed before a healthy gap.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

# kind -> (weight, shortest, longest duration in s)
KINDS: dict[str, tuple[int, float, float]] = {
    "kill": (3, 0.5, 3.0),  # kill -9 one broker, restart it after the duration
    "pause": (2, 1.0, 4.0),  # SIGSTOP one broker, SIGCONT after the duration
    "isolate": (2, 2.0, 6.0),  # cut one broker's raft links to both others
    "link": (2, 2.0, 6.0),  # cut one pair's raft link (a non-transitive partition)
    "power": (1, 0.5, 2.0),  # kill -9 every broker (power loss, fsync on), restart all
    "consumer": (1, 0.5, 2.0),  # kill -9 one consumer process, start a new one
}
GAP_S = (2.0, 5.0)  # healthy time between faults
WARMUP_S = 4.0


@dataclass(frozen=True)
class Fault:
    at_s: float  # offset from the start of the load
    kind: str
    targets: tuple[int, ...]  # broker ids (kill, pause, isolate, link) or consumer index
    duration_s: float
    mode: str = ""  # isolate/link: "blackhole" or "reset"

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def make_schedule(
    seed: int, duration_s: float, brokers: int = 3, consumers: int = 3
) -> list[Fault]:
    rng = random.Random(seed)
    first = sorted(KINDS)
    rng.shuffle(first)
    faults: list[Fault] = []
    at = WARMUP_S
    while True:
        kind = (
            first.pop(0)
            if first
            else rng.choices(list(KINDS), weights=[w for w, _, _ in KINDS.values()])[0]
        )
        _, lo, hi = KINDS[kind]
        duration = round(rng.uniform(lo, hi), 2)
        if at + duration > duration_s:
            return faults
        mode = ""
        ids = list(range(1, brokers + 1))
        if kind in ("kill", "pause", "isolate"):
            targets: tuple[int, ...] = (rng.choice(ids),)
        elif kind == "link":
            targets = tuple(sorted(rng.sample(ids, 2)))
        elif kind == "consumer":
            targets = (rng.randrange(consumers),)
        else:
            targets = tuple(ids)
        if kind in ("isolate", "link"):
            mode = rng.choice(["blackhole", "reset"])
        faults.append(Fault(round(at, 2), kind, targets, duration, mode))
        at += duration + rng.uniform(*GAP_S)
