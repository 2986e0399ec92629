"""Replica placement, broker removal and leader balancing: pure, deterministic plans.

A *placement* of a topic is a list indexed by partition of ordered replica lists; the first
replica is the partition's preferred leader. A cluster placement maps topic name to placement.
Broker ids are ints. Nothing here does I/O or reads a clock or randomness; the metadata
frontend calls these functions and proposes their output through Raft.

``place_replicas`` — three passes.
1. Replica sets, greedily, partition by partition: each slot takes the broker not yet in the
   partition that minimises (replicas of this partition already on its rack, the broker's replica
   count, its preferred-leader count, its rack's replica count, broker id). Counts include
   existing topics. Rack diversity therefore wins over balance: when there are at least RF racks
   every partition spans RF racks, even if a small rack then holds more than its share. With no
   racks, or equal-sized racks, replica counts stay within one of each other. A broker with rack
   ``""`` is a rack of its own.
2. Preferred leaders: each set's least-leading member, then leaderships move along
   cost-reducing paths (``_even_out``) until none is left. That is an optimal semi-matching:
   cluster-wide leader counts are as even as the chosen sets allow (within one on a fresh
   cluster).
3. Followers: position ``i`` goes to the member holding position ``i`` least often, ties to the
   one holding later positions most often, so the replicas that take over when a leader fails
   spread too (best effort: not always within one).

``reassign_without`` — each partition with a replica on the removed broker replaces exactly that
replica, in the same list position (the minimum possible movement). The replacement is chosen by
the same greedy key, then the replacements move along cost-reducing paths among brokers that keep
the same rack spread, so survivors end as even as one move per partition allows. That is not
always within one: a survivor that already holds most of the affected partitions cannot take them.

``leader_plan`` — a min-cost flow. Partitions keep their current live leaders; each surplus
leadership (a partition with no live leader, or one above ``cap = ceil(P / N) + 1`` with P the
partitions that have a live replica and N the live brokers) is routed along the cheapest chain of
transfers to a broker under the cap, cost = transfers added to the plan (successive shortest
paths, Bellman-Ford in queue form because undoing a planned transfer costs -1). The plan thus
has the fewest transfers that meet the cap whenever any leader choice meets it. Ties prefer
making preferred leaders, then the least-leading broker. The plan lists only changed partitions.
Partitions with no live leader appear with ``from_broker=None``: the executor lets Raft elect and
transfers only if someone else won.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftq.proto.errors import InvalidArgument

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
    replica_sets: list[list[Broker]] = []
    leaders: list[BrokerId] = []
    for _ in range(partitions):
        chosen: list[Broker] = []
        for _ in range(replication_factor):
            chosen.append(load.best_new_replica(chosen, position=0))
        leader = min(chosen, key=lambda b: (load.held_at(0, b), b.broker_id))
        load.add_replicas(chosen)
        load.add_position(leader, 0)
        replica_sets.append(chosen)
        leaders.append(leader.broker_id)
    options = [[broker.broker_id for broker in chosen] for chosen in replica_sets]
    _even_out(options, leaders, load.positions[0])
    placement: list[list[BrokerId]] = []
    for leader_id, chosen in zip(leaders, replica_sets, strict=True):
        replicas = load.order(load.broker(leader_id), chosen)
        for position, broker in enumerate(replicas[1:], start=1):
            load.add_position(broker, position)
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
    affected: list[tuple[str, int, Sequence[BrokerId]]] = []
    options: list[list[BrokerId]] = []
    choice: list[BrokerId] = []
    for topic in sorted(placement):
        for index, replicas in enumerate(placement[topic]):
            if broker_id not in replicas:
                continue
            if not load.has_candidate(replicas):
                raise InvalidArgument(
                    f"cannot remove broker {broker_id}: {topic}/{index} has replicas "
                    f"{list(replicas)} and no other broker can take its place; add a broker "
                    f"or lower the topic's replication factor first"
                )
            others = [load.broker(b) for b in replicas if b != broker_id and load.known(b)]
            replacement = load.best_new_replica(others, list(replicas).index(broker_id), replicas)
            load.add_replicas([replacement])
            affected.append((topic, index, replicas))
            options.append(load.as_rack_diverse(replacement, others, exclude=replicas))
            choice.append(replacement.broker_id)
    _even_out(options, choice, load.replicas)
    return [
        Reassignment(
            topic, index, tuple(replicas), tuple(new if b == broker_id else b for b in replicas)
        )
        for (topic, index, replicas), new in zip(affected, choice, strict=True)
    ]


def leader_plan(
    placement: ClusterPlacement,
    live_brokers: Collection[BrokerId],
    current_leaders: Mapping[TopicPartition, BrokerId | None],
) -> list[LeaderTransfer]:
    """Leadership transfers after which no live broker leads more than ceil(P/N) + 1 partitions.

    P counts partitions with at least one live replica, N the live brokers. A current leader
    that is not live or not a replica counts as no leader. Transfers go only to live replicas,
    preferably to preferred leaders, in (topic, partition) order. When the cap can be met the
    plan has the fewest transfers that meet it; when the replica sets make it impossible, the
    leftover leaderships stay where they are or go to their least-leading live replica.
    Never raises.
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
    after = _LeaderBalancer(live_replicas, before, cap).plan()
    return [
        LeaderTransfer(tp[0], tp[1], before[tp], leader)
        for tp, leader in after.items()
        if leader != before[tp]
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
                        load.add_replicas([by_id[broker_id]])
                        load.add_position(by_id[broker_id], position)
        return load

    def known(self, broker_id: BrokerId) -> bool:
        return broker_id in self.brokers

    def broker(self, broker_id: BrokerId) -> Broker:
        return self.brokers[broker_id]

    def has_candidate(self, exclude: Collection[BrokerId]) -> bool:
        return any(broker_id not in exclude for broker_id in self.brokers)

    def add_replicas(self, replicas: Sequence[Broker]) -> None:
        for broker in replicas:
            self.replicas[broker.broker_id] += 1
            self.racks[_rack_key(broker)] += 1

    def add_position(self, broker: Broker, position: int) -> None:
        at = self.positions.setdefault(position, {})
        at[broker.broker_id] = at.get(broker.broker_id, 0) + 1

    def as_rack_diverse(
        self, pick: Broker, partners: Sequence[Broker], exclude: Collection[BrokerId]
    ) -> list[BrokerId]:
        """Brokers that could replace ``pick`` next to ``partners`` without losing rack spread."""
        partner_racks = [_rack_key(b) for b in partners]
        conflicts = partner_racks.count(_rack_key(pick))
        return [
            broker_id
            for broker_id, broker in sorted(self.brokers.items())
            if broker_id not in exclude and partner_racks.count(_rack_key(broker)) == conflicts
        ]

    def held_at(self, position: int, broker: Broker) -> int:
        return self.positions.get(position, {}).get(broker.broker_id, 0)

    def best_new_replica(
        self,
        partners: Sequence[Broker],
        position: int,
        exclude: Collection[BrokerId] = (),
    ) -> Broker:
        """The broker to add next to ``partners``, to sit at list ``position``."""
        taken = {b.broker_id for b in partners} | set(exclude)
        partner_racks = [_rack_key(b) for b in partners]

        def key(broker: Broker) -> tuple[int, ...]:
            return (
                partner_racks.count(_rack_key(broker)),
                self.replicas[broker.broker_id],
                self.held_at(position, broker),
                self.racks[_rack_key(broker)],
                broker.broker_id,
            )

        candidates = [b for b in self.brokers.values() if b.broker_id not in taken]
        assert candidates, "caller checks that a candidate exists"
        return min(candidates, key=key)

    def order(self, leader: Broker, chosen: Sequence[Broker]) -> list[Broker]:
        """Leader first; each later position to the member holding it least often, ties to the
        member holding the positions after it most often (so they go to someone else)."""
        remaining = [broker for broker in chosen if broker != leader]
        ordered = [leader]
        for position in range(1, len(chosen)):
            later = range(position + 1, len(chosen))

            def key(
                broker: Broker, position: int = position, later: range = later
            ) -> tuple[int, ...]:
                held_later = sum(self.held_at(q, broker) for q in later)
                return (self.held_at(position, broker), -held_later, broker.broker_id)

            pick = min(remaining, key=key)
            remaining.remove(pick)
            ordered.append(pick)
        return ordered


def _even_out(
    options: Sequence[Sequence[BrokerId]], choice: list[BrokerId], load: dict[BrokerId, int]
) -> None:
    """Move items between brokers until no cost-reducing path is left; updates both in place.

    Item ``i`` sits on ``choice[i]`` and may sit on any broker in ``options[i]``; ``load`` counts
    everything on a broker, including what cannot move. A cost-reducing path hands one item from
    a broker to another along a chain ending at a broker with at least two less load. With none
    left the assignment is an optimal semi-matching: the loads are as even as the options allow
    (the argument of ``raftq.assignors.sticky``).
    """
    holding: dict[BrokerId, set[int]] = {}
    for item, broker_id in enumerate(choice):
        holding.setdefault(broker_id, set()).add(item)
    candidates = {broker_id for brokers in options for broker_id in brokers}

    def handoffs(giver: BrokerId) -> list[tuple[int, BrokerId]]:
        return [
            (item, taker)
            for item in sorted(holding.get(giver, ()))
            for taker in options[item]
            if taker != giver
        ]

    while True:
        fewest = min((load.get(b, 0) for b in candidates), default=0)
        path: list[tuple[int, BrokerId]] = []
        for source in sorted(holding, key=lambda b: (-load.get(b, 0), b)):
            ceiling = load.get(source, 0) - 2
            if ceiling < fewest:
                return
            path = _handoff_path(source, handoffs, _at_most(load, ceiling))
            if path:
                break
        if not path:
            return
        giver = source
        for item, taker in path:
            holding[giver].remove(item)
            holding.setdefault(taker, set()).add(item)
            choice[item] = taker
            giver = taker
        load[source] -= 1
        load[giver] = load.get(giver, 0) + 1


def _at_most(leads: Mapping[BrokerId, int], ceiling: int) -> Callable[[BrokerId], bool]:
    return lambda broker_id: leads.get(broker_id, 0) <= ceiling


Edge = tuple[Any, BrokerId]  # (what is handed over, the broker that takes it)


def _handoff_path(
    source: BrokerId,
    handoffs: Callable[[BrokerId], Iterable[Edge]],
    accepts: Callable[[BrokerId], bool],
) -> list[Edge]:
    """Shortest chain of hand-offs from ``source`` to a broker that ``accepts`` (BFS, trying
    edges in the order ``handoffs`` gives them); empty when none is reachable."""
    via: dict[BrokerId, tuple[Any, BrokerId]] = {}
    seen = {source}
    queue = deque([source])
    while queue:
        giver = queue.popleft()
        for item, taker in handoffs(giver):
            if taker in seen:
                continue
            seen.add(taker)
            via[taker] = (item, giver)
            if accepts(taker):
                path: list[Edge] = []
                while taker != source:
                    item, giver = via[taker]
                    path.append((item, taker))
                    taker = giver
                return path[::-1]
            queue.append(taker)
    return []


Node = BrokerId | None  # None: where partitions without a live leader start
Hop = tuple[TopicPartition, BrokerId]  # (partition, its new leader)


def _node_order(node: Node) -> int:
    return -1 if node is None else node


@dataclass
class _LeaderBalancer:
    """Min-cost flow over brokers: each surplus leadership (a partition with no live leader, or
    one above the cap) is routed along the cheapest chain of transfers to a broker under the cap.

    A hand-off of a partition costs the transfers it adds to the plan: +1 away from its current
    live leader, -1 back to it, 0 otherwise (partitions with no live leader cost one transfer
    wherever they go). The start state has no negative-cost cycle, and successive shortest paths
    (Bellman-Ford in queue form: costs can be negative) keep it so; the final plan therefore has
    the fewest transfers among all leader choices that meet the cap, when any does.
    """

    live_replicas: Mapping[TopicPartition, Sequence[BrokerId]]  # preferred first; only live
    before: Mapping[TopicPartition, BrokerId | None]
    cap: int
    leader: dict[TopicPartition, Node] = field(init=False)
    led: dict[Node, set[TopicPartition]] = field(init=False)

    def __post_init__(self) -> None:
        self.leader = dict(self.before)
        self.led = {}
        for tp, node in self.leader.items():
            self.led.setdefault(node, set()).add(tp)

    def plan(self) -> dict[TopicPartition, BrokerId]:
        while path := self._cheapest_path():
            for tp, taker in path:
                self._move(tp, taker)
        for tp in sorted(self.led.get(None, ())):  # the cap cannot be met: least-leading replica
            replicas = self.live_replicas[tp]
            self._move(tp, min(replicas, key=lambda b: (self._count(b), replicas.index(b))))
        final: dict[TopicPartition, BrokerId] = {}
        for tp, node in self.leader.items():
            assert node is not None, "every partition with a live replica gets a leader"
            final[tp] = node
        return final

    def _count(self, node: Node) -> int:
        return len(self.led.get(node, ()))

    def _surplus(self, node: Node) -> int:
        return self._count(node) if node is None else max(0, self._count(node) - self.cap)

    def _move(self, tp: TopicPartition, taker: BrokerId) -> None:
        self.led[self.leader[tp]].remove(tp)
        self.leader[tp] = taker
        self.led.setdefault(taker, set()).add(tp)

    def _transfers(self, tp: TopicPartition, node: Node) -> int:
        return 0 if node is not None and node == self.before[tp] else 1

    def _edges(self) -> dict[Node, list[tuple[BrokerId, int, TopicPartition]]]:
        """For each (giver, taker) pair, the hand-off that adds fewest transfers; among equals,
        one that makes the taker a preferred leader, then one the giver leads without preference.
        """
        best: dict[tuple[Node, BrokerId], tuple[int, bool, bool, TopicPartition]] = {}
        for tp, giver in self.leader.items():
            preferred = self.live_replicas[tp][0]
            for taker in self.live_replicas[tp]:
                if taker == giver:
                    continue
                added = self._transfers(tp, taker) - self._transfers(tp, giver)
                rank = (added, taker != preferred, giver == preferred, tp)
                best[(giver, taker)] = min(rank, best.get((giver, taker), rank))
        edges: dict[Node, list[tuple[BrokerId, int, TopicPartition]]] = {}
        for (giver, taker), (added, _, _, tp) in sorted(
            best.items(), key=lambda item: (_node_order(item[0][0]), item[0][1])
        ):
            edges.setdefault(giver, []).append((taker, added, tp))
        return edges

    def _cheapest_path(self) -> list[Hop]:
        """Cheapest (fewest added transfers, then fewest hops) chain from any node with surplus
        to a broker under the cap; empty when there is no surplus or no such chain."""
        sources = [n for n in sorted(self.led, key=_node_order) if self._surplus(n) > 0]
        if not sources:
            return []
        edges = self._edges()
        distance: dict[Node, tuple[int, int]] = dict.fromkeys(sources, (0, 0))
        via: dict[Node, tuple[TopicPartition, Node]] = {}
        queue = deque(sources)
        queued = set(sources)
        relaxations, bound = 0, (len(self.live_replicas) + 2) * (1 + sum(map(len, edges.values())))
        while queue:
            giver = queue.popleft()
            queued.discard(giver)
            added, hops = distance[giver]
            for taker, step, tp in edges.get(giver, ()):
                candidate = (added + step, hops + 1)
                if taker in distance and candidate >= distance[taker]:
                    continue
                distance[taker] = candidate
                via[taker] = (tp, giver)
                relaxations += 1
                assert relaxations <= bound, "a negative-cost cycle: a balancer bug"
                if taker not in queued:
                    queue.append(taker)
                    queued.add(taker)
        spare = [n for n in distance if n is not None and self._count(n) < self.cap]
        if not spare:
            return []
        target = min(
            spare,
            key=lambda n: (
                distance[n],
                self.live_replicas[via[n][0]][0] != n,  # the last hop makes a preferred leader
                self._count(n),
                _node_order(n),
            ),
        )
        path: list[Hop] = []
        node: Node = target
        while node in via:
            tp, giver = via[node]
            assert node is not None
            path.append((tp, node))
            node = giver
        return path[::-1]
