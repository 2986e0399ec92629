"""The simulation tier: three brokers in one process over the in-memory hub, manual clock.

Each schedule is seeded: crashes (half of them with a power cut that loses the journal's
unsynced tail), restarts, partitions, isolations, heals, drops and delays, under a live
idempotent-producer workload. After every step: at most one leader per term; every 25 steps:
replicas' stores identical at equal applied index; at the end (healed, settled): no
acknowledged append lost, offsets dense, no batch written twice. See tests/sim/cluster.py.

A failing schedule names its seed; replay it with
``RAFTQ_SEED=<seed> pytest tests/test_simulation.py -k replay``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.sim.cluster import run_schedule

QUICK_SCHEDULES = 30
SLOW_SCHEDULES = 200


def base_seed() -> int:
    seed = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"base seed={seed} (replay one schedule: RAFTQ_SEED=<seed>)")
    return seed


def run_many(count: int, tmp_path: Path) -> None:
    base = base_seed()
    for i in range(count):
        seed = base + i
        print(f"schedule seed={seed}")
        run_schedule(seed, tmp_path / str(seed))


def test_simulated_schedules(tmp_path: Path) -> None:
    run_many(QUICK_SCHEDULES, tmp_path)


@pytest.mark.slow
def test_simulated_schedules_200(tmp_path: Path) -> None:
    run_many(SLOW_SCHEDULES, tmp_path)


def test_replay(tmp_path: Path) -> None:
    """The same seed replays the same schedule (RAFTQ_SEED picks it)."""
    seed = int(os.environ.get("RAFTQ_SEED", "20261121"))
    print(f"seed={seed}")
    first = run_schedule(seed, tmp_path / "a")
    assert run_schedule(seed, tmp_path / "b") == first
