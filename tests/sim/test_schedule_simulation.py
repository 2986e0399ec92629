"""Recurring records in the simulation tier (tests/sim/): three real partition replicas (hardened
RaftNode, SQLite) on the in-memory hub with seeded crashes, power cuts, partitions, drops and
delays. Every leader fires as the broker's backend does (plan from its replica's committed
state at its quorum clock, propose, do not wait), so old and new leaders' plans interleave.
After healing: every slot up to the end fired exactly once, in order, never before its slot,
and every replica holds the same log.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from raftq.partitions.schedules import SLOT_HEADER, plan_fire
from raftq.proto import common_pb2, errors, partition_pb2
from tests.sim.cluster import SimCluster, no_fsync

INTERVAL_MS = 1000
FIRE_EVERY_S = 0.05  # 10x the backend's pace: plans overlap proposals still in flight


def _ignore(_result: object, _error: errors.RaftqError | None) -> None:
    """A leader's firing is fire-and-forget, as the backend's next tick plans again."""


def run(seed: int, root: Path, chaos_steps: int) -> tuple[list[int], list[int], int, int]:
    """(slots fired, record timestamps, the schedule's creation instant, leader terms)."""
    cluster = SimCluster(seed, root, producers=0)
    with cluster.hub.time(), no_fsync():
        try:
            cluster.start()
            created_at = create(cluster)
            next_fire = {b.addr: 0.0 for b in cluster.brokers}
            for _ in range(chaos_steps):
                cluster.chaos_step()
                fire(cluster, next_fire)
            cluster.settle()
            for _ in range(300):  # 3 s of healed time: the leader catches up what is due
                cluster.step()
                fire(cluster, next_fire)
            cluster.check_stores()
            log = cluster.live()[0].fetch(0, 100_000, 0)
            slots = [int(r.record.headers[SLOT_HEADER]) for r in log]
            terms = len(cluster.leader_of_term)
            return slots, [r.timestamp_ms for r in log], created_at, terms
        finally:
            cluster.close()


def create(cluster: SimCluster) -> int:
    command = partition_pb2.PartitionCommand(
        create_schedule=partition_pb2.CreateSchedule(
            schedule=common_pb2.Schedule(
                name="tick", interval_ms=INTERVAL_MS, template=common_pb2.Record(value=b"t")
            )
        )
    )
    while True:
        cluster.step()
        leaders = [r for r in cluster.live() if r.is_leader()]
        if leaders:
            leaders[0].propose_async(command, _ignore)
            for _ in range(100):
                cluster.step()
                found = [s for r in cluster.live() for s in r.schedules()]
                if found:
                    return found[0].created_ms


def fire(cluster: SimCluster, next_fire: dict[str, float]) -> None:
    now = cluster.hub.clock.now()
    for broker in cluster.brokers:
        replica = broker.replica
        if replica is None or not replica.is_leader() or now < next_fire[broker.addr]:
            continue
        next_fire[broker.addr] = now + FIRE_EVERY_S
        planned, problems = plan_fire(replica.schedules(), replica.now_ms())
        assert not problems
        if planned is not None:
            replica.propose_async(partition_pb2.PartitionCommand(fire_schedules=planned), _ignore)


def test_every_slot_fires_once_through_faults(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", 0)) or random.randrange(1 << 32)
    print(f"seed={seed} (RAFTQ_SEED replays)")
    slots, stamped, created_at, terms = run(seed, tmp_path, chaos_steps=1500)
    print(f"{len(slots)} slots fired under {terms} leader terms")
    assert len(slots) == len(set(slots)), f"seed={seed}: a slot fired twice: {slots}"
    assert slots == [created_at + INTERVAL_MS * (i + 1) for i in range(len(slots))], (
        f"seed={seed}: slots missing or out of order: {slots}"
    )
    assert len(slots) >= 12, f"seed={seed}: only {len(slots)} firings in 18 s"
    early = [(s, t) for s, t in zip(slots, stamped, strict=True) if t < s]
    assert not early, f"seed={seed}: fired before the slot: {early}"
