"""Replica placement, broker removal and leader balancing: pure, deterministic plans.

A *placement* of a topic is a list indexed by partition of ordered replica lists; the first
replica is the partition's preferred leader. A cluster placement maps topic name to placement.
Broker ids are ints. Nothing here does I/O or reads a clock or randomness; the metadata
frontend calls these functions and proposes their output through Raft.

``place_replicas`` — greedy, partition by partition, replica by replica. Each slot takes the
broker that is not yet in the partition and minimises, in order:
(replicas of this partition already on its rack, the broker's replica count, its rack's replica
count, broker id). Counts include existing topics. Rack diversity therefore wins over balance:
when there are at least RF racks every partition spans RF racks, even if a small rack then holds
more than its share. With no racks, or equal-sized racks, counts stay within one of each other.
A broker with rack ``""`` is a rack of its own. Once a partition's replica set is chosen, it is
ordered position by position: position ``i`` goes to the member that holds position ``i`` least
often across the cluster (ties: smallest id). Position 0 is the preferred leader, so preferred
leaders spread evenly, and so do the second choices that take over when a leader fails.

``reassign_without`` — each partition with a replica on the removed broker replaces exactly that
replica (the minimum possible movement), in the same list position, with the broker chosen by
the same key as above plus that position's load. Partitions are handled in (topic, partition)
order, and each replacement sees the loads the previous ones produced.

``leader_plan`` — starts from the current live leaders; a partition without one gets its
preferred leader if that broker is live and under the cap, else its least-leading live replica.
Then, while a broker leads more than ``cap = ceil(P / N) + 1`` partitions (P partitions with a
live replica, N live brokers), it hands one leadership along the shortest chain of transfers
that ends at a broker under the cap (an augmenting path; preferring preferred leaders as
targets). If no chain exists the cap cannot be met and the plan stops there. The plan lists only
the partitions whose leader changes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from proto.errors import InvalidArgument

BrokerId = int
Placement = Sequence[Sequence[BrokerId]]  # partition -> ordered replicas, preferred leader first
ClusterPlacement = Mapping[str, Placement]  # topic -> placement
TopicPartition = tuple[str, int]

__all__ = [
    "Broker",
    "BrokerId",
    "ClusterPlacement",
    "LeaderTransfer",
    "Placement",
    "Reassignment",
    "leader_plan",
    "place_replicas",
    "reassign_without",
]


@dataclass(frozen=True, order=True)
class Broker:
    broker_id: BrokerId
    rack: str = ""


@dataclass(frozen=True)
class Reassignment:
    """Replace one partition's replica list; ``after`` differs from ``before`` in one slot."""

    topic: str
    partition: int
    before: tuple[BrokerId, ...]
    after: tuple[BrokerId, ...]


@dataclass(frozen=True)
class LeaderTransfer:
    """Move a partition's leadership. ``from_broker`` is None when no live broker leads it now:
    the executor waits for the election and transfers only if someone else won."""

    topic: str
    partition: int
    from_broker: BrokerId | None
    to_broker: BrokerId


def place_replicas(
    brokers: Collection[Broker],
    partitions: int,
    replication_factor: int,
    existing: ClusterPlacement | None = None,
) -> list[list[BrokerId]]:
    """Ordered replica lists for a new topic's partitions, balanced against ``existing``.

    Replicas in ``existing`` on brokers not in ``brokers`` are ignored for load.
    Raises InvalidArgument (normal, for bad requests) when partitions < 1, replication_factor
    < 1, replication_factor > number of brokers, or broker ids repeat.
    """
    _check_brokers(brokers)
    if partitions < 1:
        raise InvalidArgument(f"partitions is {partitions}: a topic needs at least 1 partition")
    if replication_factor < 1:
        raise InvalidArgument(f"replication_factor is {replication_factor}: it must be at least 1")
    if replication_factor > len(brokers):
        raise InvalidArgument(
            f"replication_factor {replication_factor} exceeds the {len(brokers)} available "
            f"brokers: lower replication_factor to at most {len(brokers)} or add brokers"
        )
    load = _Load.of(brokers, existing or {})
    placement: list[list[BrokerId]] = []
    for _ in range(partitions):
        chosen: list[Broker] = []
        for _ in range(replication_factor):
            chosen.append(load.best_new_replica(chosen, position=None))
        replicas = load.order(chosen)
        load.add(replicas)
        placement.append([broker.broker_id for broker in replicas])
    return placement


def reassign_without(
    broker_id: BrokerId,
    placement: ClusterPlacement,
    brokers: Collection[Broker],
) -> list[Reassignment]:
    """Move every replica off ``broker_id`` onto the other ``brokers``, one move per partition.

    ``brokers`` is the cluster (with or without the broker being removed). Returns the changed
    partitions in (topic, partition) order; empty if the broker holds no replica.
    Raises InvalidArgument (normal) when a partition has no broker left to take the replica.
    """
    survivors = [broker for broker in brokers if broker.broker_id != broker_id]
    _check_brokers(survivors)
    load = _Load.of(survivors, placement)
    plan: list[Reassignment] = []
    for topic in sorted(placement):
        for index, replicas in enumerate(placement[topic]):
            if broker_id not in replicas:
                continue
            slot = list(replicas).index(broker_id)
            others = [load.broker(b) for b in replicas if b != broker_id and load.known(b)]
            if not load.has_candidate(replicas):
                raise InvalidArgument(
                    f"cannot remove broker {broker_id}: {topic}/{index} has replicas "
                    f"{list(replicas)} and no other broker can take its place; add a broker "
                    f"or lower the topic's replication factor first"
                )
            replacement = load.best_new_replica(others, position=slot, exclude=replicas)
            after = [replacement.broker_id if b == broker_id else b for b in replicas]
            load.add_one(replacement, slot)
            plan.append(Reassignment(topic, index, tuple(replicas), tuple(after)))
    return plan


def leader_plan(
    placement: ClusterPlacement,
    live_brokers: Collection[BrokerId],
    current_leaders: Mapping[TopicPartition, BrokerId | None],
) -> list[LeaderTransfer]:
    """Leadership transfers after which no live broker leads more than ceil(P/N) + 1 partitions.

    P counts partitions with at least one live replica, N the live brokers. A current leader
    that is not live or not a replica counts as no leader. Transfers go only to live replicas,
    preferably to preferred leaders, in (topic, partition) order. If the replica sets make the
    cap impossible, the plan gets as close as augmenting paths allow. Never raises.
    """
    live = frozenset(live_brokers)
    live_replicas = {
        (topic, index): [b for b in replicas if b in live]
        for topic in sorted(placement)
        for index, replicas in enumerate(placement[topic])
    }
    live_replicas = {tp: bs for tp, bs in live_replicas.items() if bs}
    if not live_replicas:
        return []
    cap = math.ceil(len(live_replicas) / len(live)) + 1
    before: dict[TopicPartition, BrokerId | None] = {}
    for tp, replicas in live_replicas.items():
        leader = current_leaders.get(tp)
        before[tp] = leader if leader in replicas else None
    balancer = _LeaderBalancer(live_replicas, dict(before), cap)
    balancer.elect_missing()
    balancer.relieve_over_cap()
    return [
        LeaderTransfer(tp[0], tp[1], before[tp], leader)
        for tp, leader in balancer.leader.items()
        if leader is not None and leader != before[tp]
    ]


def _check_brokers(brokers: Collection[Broker]) -> None:
    ids = [broker.broker_id for broker in brokers]
    if len(set(ids)) != len(ids):
        raise InvalidArgument(f"broker ids repeat in {sorted(ids)}: each broker needs its own id")


RackKey = tuple[str, BrokerId]  # (rack, -1) for a racked broker; ("", id) when it has no rack


def _rack_key(broker: Broker) -> RackKey:
    return (broker.rack, -1) if broker.rack else ("", broker.broker_id)


@dataclass
class _Load:
    """Replica counts per broker, per rack and per list position, over known brokers."""

    brokers: dict[BrokerId, Broker]
    replicas: dict[BrokerId, int]
    racks: dict[RackKey, int]
    positions: dict[int, dict[BrokerId, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, brokers: Collection[Broker], placement: ClusterPlacement) -> _Load:
        by_id = {broker.broker_id: broker for broker in brokers}
        load = cls(by_id, dict.fromkeys(by_id, 0), dict.fromkeys(map(_rack_key, brokers), 0))
        for topic in placement.values():
            for replicas in topic:
                for position, broker_id in enumerate(replicas):
                    if broker_id in by_id:
                        load.add_one(by_id[broker_id], position)
        return load

    def known(self, broker_id: BrokerId) -> bool:
        return broker_id in self.brokers

    def broker(self, broker_id: BrokerId) -> Broker:
        return self.brokers[broker_id]

    def has_candidate(self, exclude: Collection[BrokerId]) -> bool:
        return any(broker_id not in exclude for broker_id in self.brokers)

    def add_one(self, broker: Broker, position: int) -> None:
        self.replicas[broker.broker_id] += 1
        self.racks[_rack_key(broker)] += 1
        at = self.positions.setdefault(position, {})
        at[broker.broker_id] = at.get(broker.broker_id, 0) + 1

    def add(self, replicas: Sequence[Broker]) -> None:
        for position, broker in enumerate(replicas):
            self.add_one(broker, position)

    def held_at(self, position: int, broker: Broker) -> int:
        return self.positions.get(position, {}).get(broker.broker_id, 0)

    def best_new_replica(
        self,
        partners: Sequence[Broker],
        position: int | None,
        exclude: Collection[BrokerId] = (),
    ) -> Broker:
        """The broker to add next to ``partners`` (optionally at a known list position)."""
        taken = {b.broker_id for b in partners} | set(exclude)
        partner_racks = [_rack_key(b) for b in partners]

        def key(broker: Broker) -> tuple[int, ...]:
            return (
                partner_racks.count(_rack_key(broker)),
                self.replicas[broker.broker_id],
                0 if position is None else self.held_at(position, broker),
                self.racks[_rack_key(broker)],
                broker.broker_id,
            )

        candidates = [b for b in self.brokers.values() if b.broker_id not in taken]
        assert candidates, "caller checks that a candidate exists"
        return min(candidates, key=key)

    def order(self, chosen: Sequence[Broker]) -> list[Broker]:
        """Order a replica set so each position goes to the member holding it least often."""
        remaining = list(chosen)
        ordered: list[Broker] = []
        for position in range(len(chosen)):
            pick = min(remaining, key=lambda b: (self.held_at(position, b), b.broker_id))
            remaining.remove(pick)
            ordered.append(pick)
        return ordered


@dataclass
class _LeaderBalancer:
    live_replicas: dict[TopicPartition, list[BrokerId]]  # preferred first; only live brokers
    leader: dict[TopicPartition, BrokerId | None]
    cap: int
    led: dict[BrokerId, set[TopicPartition]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for tp, leader in self.leader.items():
            if leader is not None:
                self.led.setdefault(leader, set()).add(tp)

    def count(self, broker_id: BrokerId) -> int:
        return len(self.led.get(broker_id, ()))

    def move(self, tp: TopicPartition, to: BrokerId) -> None:
        old = self.leader[tp]
        if old is not None:
            self.led[old].remove(tp)
        self.leader[tp] = to
        self.led.setdefault(to, set()).add(tp)

    def elect_missing(self) -> None:
        for tp, leader in self.leader.items():
            if leader is not None:
                continue
            replicas = self.live_replicas[tp]
            under = [b for b in replicas if self.count(b) < self.cap]
            if under:
                self.move(tp, under[0])
            else:
                self.move(tp, min(replicas, key=lambda b: (self.count(b), replicas.index(b))))

    def relieve_over_cap(self) -> None:
        while True:
            over = sorted((b for b in self.led if self.count(b) > self.cap), key=self._busiest)
            for broker_id in over:
                path = self._path_to_spare(broker_id)
                if path:
                    for tp, to in path:
                        self.move(tp, to)
                    break
            else:
                return

    def _busiest(self, broker_id: BrokerId) -> tuple[int, BrokerId]:
        return (-self.count(broker_id), broker_id)

    def _path_to_spare(self, source: BrokerId) -> list[tuple[TopicPartition, BrokerId]]:
        """Shortest chain of (partition, new leader) from ``source`` to a broker under the cap."""
        via: dict[BrokerId, tuple[TopicPartition, BrokerId]] = {}
        queue = deque([source])
        seen = {source}
        while queue:
            giver = queue.popleft()
            for tp, taker in self._handoffs(giver):
                if taker in seen:
                    continue
                seen.add(taker)
                via[taker] = (tp, giver)
                if self.count(taker) < self.cap:
                    return self._unwind(via, source, taker)
                queue.append(taker)
        return []

    def _handoffs(self, giver: BrokerId) -> list[tuple[TopicPartition, BrokerId]]:
        """(partition led by giver, other live replica), preferred-leader targets first."""
        edges = [(tp, taker) for tp in self.led.get(giver, ()) for taker in self.live_replicas[tp]]
        return sorted(
            (e for e in edges if e[1] != giver),
            key=lambda e: (
                self.live_replicas[e[0]][0] != e[1],
                self.live_replicas[e[0]][0] == giver,
                e,
            ),
        )

    @staticmethod
    def _unwind(
        via: Mapping[BrokerId, tuple[TopicPartition, BrokerId]],
        source: BrokerId,
        target: BrokerId,
    ) -> list[tuple[TopicPartition, BrokerId]]:
        path: list[tuple[TopicPartition, BrokerId]] = []
        taker = target
        while taker != source:
            tp, giver = via[taker]
            path.append((tp, taker))
            taker = giver
        path.reverse()
        return path
