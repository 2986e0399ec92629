"""The simulation tier: three brokers in one process over the in-memory hub, manual clock.

Each schedule is seeded: crashes (half of them power cuts in the middle of a driver round, which
lose the journal's unsynced tail; sometimes every broker at once), restarts, partitions,
isolations, heals, drops and delays, under a live idempotent-producer workload. After every
step: at most one leader per term; every 25 steps: replicas' stores identical at equal applied
index; at the end (healed, settled): no acknowledged append lost, offsets dense, no batch
written twice. See tests/sim/cluster.py.

The normal suite runs fixed seeds (deterministic CI); the slow run explores 200 from a random
base. A failing schedule names its seed; replay it with
``RAFTQ_SEED=<seed> pytest tests/sim/test_simulation.py -k replay``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from raftq.proto import partition_pb2
from tests.sim.cluster import STEP_S, TIMINGS, SimCluster, memory_cap, no_fsync, run_schedule

QUICK_SCHEDULES = 30
QUICK_BASE_SEED = 1000
SLOW_SCHEDULES = 200


def run_many(base: int, count: int, tmp_path: Path) -> None:
    print(f"seeds {base}..{base + count - 1} (replay one: RAFTQ_SEED=<seed> ... -k replay)")
    with memory_cap():
        for seed in range(base, base + count):
            run_schedule(seed, tmp_path / str(seed))  # an AssertionError names the seed


def test_simulated_schedules(tmp_path: Path) -> None:
    run_many(QUICK_BASE_SEED, QUICK_SCHEDULES, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 200 schedules outgrow the 300 s default on a loaded machine
def test_simulated_schedules_200(tmp_path: Path) -> None:
    base = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
    run_many(base, SLOW_SCHEDULES, tmp_path)


QUIESCED_SCHEDULES = 10


def test_simulated_schedules_with_quiescence(tmp_path: Path) -> None:
    """The same chaos with quiescing groups (transport/raft/quiescence.py): the workload's think
    times and the settle phase leave groups idle long enough to quiesce and be woken."""
    print(f"seeds {QUICK_BASE_SEED}..{QUICK_BASE_SEED + QUIESCED_SCHEDULES - 1}, quiesce=True")
    with memory_cap():
        for seed in range(QUICK_BASE_SEED, QUICK_BASE_SEED + QUIESCED_SCHEDULES):
            run_schedule(seed, tmp_path / str(seed), quiesce=True)


def test_replay(tmp_path: Path) -> None:
    """The same seed replays the same schedule (RAFTQ_SEED picks it)."""
    seed = int(os.environ.get("RAFTQ_SEED", "20261121"))
    print(f"seed={seed}")
    first = run_schedule(seed, tmp_path / "a")
    assert run_schedule(seed, tmp_path / "b") == first


def test_regression_snapshot_then_crash_before_journal_compaction(tmp_path: Path) -> None:
    """A restart between a snapshot and the journal compaction after it kept the journal tail
    (it was cleared to the snapshot's two entries; a later power cut lost acked p0/4)."""
    run_schedule(4116286151, tmp_path)


def test_regression_leader_snapshot_send_loop(tmp_path: Path) -> None:
    """A follower needing a snapshot the tick after the leader wrote one: pysyncobj's send loop
    never advanced on the manual clock (memory ran out)."""
    with memory_cap():
        run_schedule(1085, tmp_path)


def test_a_commit_rides_on_the_next_append_or_follows_alone(tmp_path: Path) -> None:
    """Partition groups defer a commit-only push (RaftTimings.commit_push_s): followers learn
    an acknowledged append's commit from the next append_entries, or from a push sent
    commit_push_s later when none comes; never later than that."""
    cluster = SimCluster(7, tmp_path, producers=0)
    with cluster.hub.time(), no_fsync():
        cluster.start()
        cluster.settle()
        (leader,) = [r for r in cluster.live() if r.is_leader()]
        followers = [r for r in cluster.live() if r is not leader]
        outcomes: list[object] = []

        def append(value: bytes) -> None:
            append = partition_pb2.Append(values=[value])
            leader.append_async(append, lambda result, error: outcomes.append(error or result))

        append(b"first")
        while not outcomes:
            cluster.step()
        acked_at = cluster.hub.clock.now()
        committed = leader.node.applied_index
        for _ in range(2):  # 20 ms: a push at once would have reached them by now
            cluster.step()
        assert all(f.node.applied_index < committed for f in followers)
        append(b"second")  # its append_entries carry the first one's commit
        while len(outcomes) < 2:
            cluster.step()
        assert all(f.node.applied_index >= committed for f in followers)
        assert cluster.hub.clock.now() - acked_at < TIMINGS.commit_push_s
        second_at, second = cluster.hub.clock.now(), leader.node.applied_index
        while not all(f.node.applied_index == second for f in followers):
            cluster.step()
        assert cluster.hub.clock.now() - second_at <= TIMINGS.commit_push_s + 3 * STEP_S
        assert all(isinstance(o, partition_pb2.CommandResult) for o in outcomes)
