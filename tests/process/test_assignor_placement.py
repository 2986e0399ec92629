"""Replica placement, broker removal and leader balancing, by properties and by examples.

A failing property prints its falsifying example and a ``@reproduce_failure`` blob
(``print_blob=True``); ``pytest --hypothesis-seed=N`` replays a whole run.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from raftq.assignors.placement import (
    Broker,
    ClusterPlacement,
    LeaderTransfer,
    leader_plan,
    place_replicas,
    reassign_without,
)
from raftq.proto.errors import InvalidArgument

PROPERTY = settings(max_examples=100, deadline=None, print_blob=True)


def spread(counts: Sequence[int]) -> int:
    return max(counts) - min(counts)


def can_even_out(
    options: Sequence[Sequence[int]], choice: Sequence[int], load: Mapping[int, int]
) -> bool:
    """Independent check: could a chain of hand-offs of movable items (item i may sit on any
    of options[i]) take one unit from a broker to another with at least two less load?"""
    for source in set(choice):
        seen, frontier = {source}, [source]
        while frontier:
            giver = frontier.pop()
            for item, holder in enumerate(choice):
                if holder == giver:
                    fresh = [b for b in options[item] if b not in seen]
                    seen.update(fresh)
                    frontier.extend(fresh)
        if any(load.get(b, 0) <= load.get(source, 0) - 2 for b in seen):
            return True
    return False


def replica_counts(brokers: Sequence[Broker], placement: ClusterPlacement) -> list[int]:
    counts = Counter(b for topic in placement.values() for replicas in topic for b in replicas)
    return [counts[broker.broker_id] for broker in brokers]


def position_counts(brokers: Sequence[Broker], replicas: list[list[int]], at: int) -> list[int]:
    counts = Counter(r[at] for r in replicas)
    return [counts[broker.broker_id] for broker in brokers]


def racks_of(brokers: Sequence[Broker], replicas: Sequence[int]) -> list[object]:
    by_id = {b.broker_id: b for b in brokers}
    return [by_id[r].rack or ("own", r) for r in replicas]


def rack_count(brokers: Sequence[Broker]) -> int:
    return len(set(racks_of(brokers, [b.broker_id for b in brokers])))


@st.composite
def clusters(draw: st.DrawFn, racks: bool = True) -> list[Broker]:
    """1-9 brokers with distinct, unordered ids; racks from a few names or none ("")."""
    ids = draw(st.lists(st.integers(0, 99), min_size=1, max_size=9, unique=True))
    rack_names = ["", "r1", "r2", "r3"] if racks else [""]
    return [Broker(i, draw(st.sampled_from(rack_names))) for i in ids]


@st.composite
def topics(draw: st.DrawFn, brokers: Sequence[Broker]) -> tuple[int, int]:
    """(partitions, replication_factor) that are valid for ``brokers``."""
    return draw(st.integers(1, 30)), draw(st.integers(1, len(brokers)))


# ---- place_replicas ---------------------------------------------------------------------


@PROPERTY
@given(st.data())
def test_replicas_are_distinct_known_brokers_and_racks_spread(data: st.DataObject) -> None:
    brokers = data.draw(clusters())
    partitions, rf = data.draw(topics(brokers))
    placement = place_replicas(brokers, partitions, rf)
    assert len(placement) == partitions
    ids = {b.broker_id for b in brokers}
    for replicas in placement:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= ids
        assert len(set(racks_of(brokers, replicas))) == min(rf, rack_count(brokers))


@PROPERTY
@given(st.data())
def test_without_racks_replica_and_leader_counts_within_one(data: st.DataObject) -> None:
    brokers = data.draw(clusters(racks=False))
    partitions, rf = data.draw(topics(brokers))
    placement = place_replicas(brokers, partitions, rf)
    assert spread(replica_counts(brokers, {"t": placement})) <= 1
    assert spread(position_counts(brokers, placement, 0)) <= 1


@PROPERTY
@given(st.data())
def test_equal_racks_keep_balance_and_rack_diversity(data: st.DataObject) -> None:
    rack_total = data.draw(st.integers(1, 4))
    per_rack = data.draw(st.integers(1, 3))
    ids = data.draw(st.permutations(range(rack_total * per_rack)))
    brokers = [Broker(i, f"rack{i % rack_total}") for i in ids]
    partitions, rf = data.draw(topics(brokers))
    placement = place_replicas(brokers, partitions, rf)
    assert spread(replica_counts(brokers, {"t": placement})) <= 1
    assert spread(position_counts(brokers, placement, 0)) <= 1
    for replicas in placement:
        assert len(set(racks_of(brokers, replicas))) == min(rf, rack_total)


@PROPERTY
@given(st.data())
def test_successive_topics_keep_cluster_balance(data: st.DataObject) -> None:
    brokers = data.draw(clusters(racks=False))
    cluster: dict[str, list[list[int]]] = {}
    for name in ("a", "b", "c"):
        partitions, rf = data.draw(topics(brokers))
        cluster[name] = place_replicas(brokers, partitions, rf, cluster)
        assert spread(replica_counts(brokers, cluster)) <= 1
        # Leaders: as even across the cluster as the chosen replica sets allow.
        leads = Counter(r[0] for topic in cluster.values() for r in topic)
        assert not can_even_out(cluster[name], [r[0] for r in cluster[name]], leads)


@PROPERTY
@given(st.data())
def test_new_topic_fills_the_least_loaded_brokers(data: st.DataObject) -> None:
    brokers = data.draw(clusters(racks=False))
    assume(len(brokers) >= 2)
    skewed = {"old": [[brokers[0].broker_id]] * data.draw(st.integers(1, 20))}
    partitions, rf = data.draw(topics(brokers))
    before = replica_counts(brokers, skewed)
    after = replica_counts(
        brokers, {**skewed, "new": place_replicas(brokers, partitions, rf, skewed)}
    )
    assert spread(after) <= max(1, spread(before))
    assert max(after) == lowest_possible_maximum(before, partitions, rf)


def lowest_possible_maximum(before: Sequence[int], partitions: int, rf: int) -> int:
    """Water-filling: the smallest top load that fits partitions * rf new replicas when a
    broker can take at most one replica of each partition."""
    top = max(before)
    while sum(min(partitions, max(0, top - load)) for load in before) < partitions * rf:
        top += 1
    return top


@PROPERTY
@given(st.data())
def test_placement_is_deterministic_whatever_the_broker_order(data: st.DataObject) -> None:
    brokers = data.draw(clusters())
    partitions, rf = data.draw(topics(brokers))
    shuffled = data.draw(st.permutations(brokers))
    expected = place_replicas(brokers, partitions, rf)
    assert place_replicas(brokers, partitions, rf) == expected
    assert place_replicas(shuffled, partitions, rf) == expected
    assert place_replicas(set(brokers), partitions, rf) == expected


def test_three_brokers_three_racks_example() -> None:
    brokers = [Broker(3, "c"), Broker(1, "a"), Broker(2, "b")]
    assert place_replicas(brokers, 3, 3) == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # Latin square
    assert place_replicas(brokers, 3, 1) == [[1], [2], [3]]


def test_six_brokers_two_racks_rf_three() -> None:
    brokers = [Broker(i, "ab"[i % 2]) for i in range(6)]
    placement = place_replicas(brokers, 6, 3)
    assert replica_counts(brokers, {"t": placement}) == [3] * 6
    assert sorted(r[0] for r in placement) == list(range(6))
    assert all(len(set(racks_of(brokers, r))) == 2 for r in placement)


def test_rack_diversity_wins_over_balance() -> None:
    # Rack "solo" has one broker; with RF 2 every partition needs it.
    brokers = [Broker(1, "solo"), Broker(2, "big"), Broker(3, "big"), Broker(4, "big")]
    placement = place_replicas(brokers, 6, 2)
    assert all(1 in replicas for replicas in placement)
    assert replica_counts(brokers, {"t": placement}) == [6, 2, 2, 2]


@pytest.mark.parametrize(
    ("partitions", "rf", "message"),
    [
        (3, 4, "replication_factor 4 exceeds the 3 available brokers: lower"),
        (3, 0, "replication_factor is 0: it must be at least 1"),
        (0, 1, "partitions is 0: a topic needs at least 1 partition"),
        (-2, 1, "partitions is -2"),
    ],
)
def test_placement_rejects_what_cannot_be_placed(partitions: int, rf: int, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message) as caught:
        place_replicas([Broker(1), Broker(2), Broker(3)], partitions, rf)
    assert not caught.value.retriable


def test_placement_rejects_repeated_broker_ids_and_empty_clusters() -> None:
    with pytest.raises(InvalidArgument, match="broker ids repeat"):
        place_replicas([Broker(1, "a"), Broker(1, "b")], 1, 1)
    with pytest.raises(InvalidArgument, match="exceeds the 0 available brokers"):
        place_replicas([], 1, 1)


# ---- reassign_without -------------------------------------------------------------------


@st.composite
def placed_clusters(
    draw: st.DrawFn, racks: bool
) -> tuple[list[Broker], dict[str, list[list[int]]]]:
    brokers = draw(clusters(racks=racks))
    assume(len(brokers) >= 2)
    cluster: dict[str, list[list[int]]] = {}
    for name in ("a", "b"):
        partitions = draw(st.integers(1, 20))
        rf = draw(st.integers(1, len(brokers) - 1))
        cluster[name] = place_replicas(brokers, partitions, rf, cluster)
    return brokers, cluster


@PROPERTY
@given(placed_clusters(racks=True), st.data())
def test_removal_moves_exactly_the_removed_replicas(
    placed: tuple[list[Broker], dict[str, list[list[int]]]], data: st.DataObject
) -> None:
    brokers, cluster = placed
    gone = data.draw(st.sampled_from(brokers)).broker_id
    plan = reassign_without(gone, cluster, brokers)
    holding = [
        (t, i) for t, topic in sorted(cluster.items()) for i, r in enumerate(topic) if gone in r
    ]
    assert [(m.topic, m.partition) for m in plan] == holding
    for move in plan:
        assert move.before == tuple(cluster[move.topic][move.partition])
        changed = [
            i for i, (x, y) in enumerate(zip(move.before, move.after, strict=True)) if x != y
        ]
        assert len(changed) == 1 and move.before[changed[0]] == gone
        assert gone not in move.after and len(set(move.after)) == len(move.after)
        partners = [b for b in move.before if b != gone]
        partner_racks = set(racks_of(brokers, partners))
        fresh_rack_free = any(
            racks_of(brokers, [b.broker_id])[0] not in partner_racks
            for b in brokers
            if b.broker_id not in move.before
        )
        if len(partner_racks) == len(partners) and fresh_rack_free:
            assert len(set(racks_of(brokers, move.after))) == len(move.after)


@PROPERTY
@given(placed_clusters(racks=False), st.data())
def test_removal_keeps_survivors_within_one(
    placed: tuple[list[Broker], dict[str, list[list[int]]]], data: st.DataObject
) -> None:
    """With one move per partition, survivors end as even as those moves allow."""
    brokers, cluster = placed
    gone = data.draw(st.sampled_from(brokers)).broker_id
    after = {topic: [list(r) for r in replicas] for topic, replicas in cluster.items()}
    plan = reassign_without(gone, cluster, brokers)
    for move in plan:
        after[move.topic][move.partition] = list(move.after)
    survivors = [b for b in brokers if b.broker_id != gone]
    load = dict(
        zip([b.broker_id for b in survivors], replica_counts(survivors, after), strict=True)
    )
    options = [[b.broker_id for b in survivors if b.broker_id not in m.before] for m in plan]
    new = [next(b for b in m.after if b not in m.before) for m in plan]
    assert not can_even_out(options, new, load)


def test_removal_cannot_always_stay_within_one_with_one_move_per_partition() -> None:
    # Broker 2 can take only a/0's replica (it already holds the other three partitions).
    brokers = [Broker(i) for i in range(4)]
    cluster = {"a": [[0, 1]], "b": [[0, 2], [2, 0], [0, 2], [1, 3], [3, 1], [1, 3], [3, 1]]}
    plan = reassign_without(0, cluster, brokers)
    assert [m.after for m in plan] == [(2, 1), (3, 2), (2, 3), (1, 2)]
    after = {t: [list(r) for r in rs] for t, rs in cluster.items()}
    for move in plan:
        after[move.topic][move.partition] = list(move.after)
    assert replica_counts(brokers[1:], after) == [6, 4, 6]  # the best one move each allows


def test_removal_example_and_idempotence() -> None:
    brokers = [Broker(1), Broker(2), Broker(3), Broker(4)]
    cluster = {"t": [[1, 2], [2, 3], [3, 4], [4, 1]]}
    plan = reassign_without(4, cluster, brokers)
    assert [(m.partition, m.after) for m in plan] == [(2, (3, 1)), (3, (2, 1))]
    assert reassign_without(9, cluster, brokers) == []


def test_removal_refuses_when_no_broker_can_take_the_replica() -> None:
    with pytest.raises(InvalidArgument, match=r"cannot remove broker 2: t/0 .* add a broker"):
        reassign_without(2, {"t": [[1, 2]]}, [Broker(1), Broker(2)])


# ---- leader_plan ------------------------------------------------------------------------


Leaders = dict[tuple[str, int], int | None]


def apply(plan: Sequence[LeaderTransfer], leaders: Mapping[tuple[str, int], int | None]) -> Leaders:
    result = dict(leaders)
    for transfer in plan:
        result[(transfer.topic, transfer.partition)] = transfer.to_broker
    return result


@st.composite
def leadership(draw: st.DrawFn) -> tuple[dict[str, list[list[int]]], set[int], Leaders]:
    """A small cluster: placement (sometimes arbitrary), live brokers, current leaders."""
    broker_ids = list(range(draw(st.integers(1, 5))))
    cluster: dict[str, list[list[int]]] = {}
    for name in draw(st.sets(st.sampled_from(["a", "b"]), min_size=1)):
        rf = draw(st.integers(1, len(broker_ids)))
        count = draw(st.integers(1, 4))
        cluster[name] = [list(draw(st.permutations(broker_ids))[:rf]) for _ in range(count)]
    live = draw(st.sets(st.sampled_from(broker_ids)))
    leaders: Leaders = {}
    for topic, placement in cluster.items():
        for index, replicas in enumerate(placement):
            leaders[(topic, index)] = draw(st.sampled_from([None, 7, *replicas]))
    return cluster, live, leaders


def live_replicas(cluster: ClusterPlacement, live: set[int]) -> dict[tuple[str, int], list[int]]:
    found = {
        (t, i): [b for b in r if b in live]
        for t, topic in cluster.items()
        for i, r in enumerate(topic)
    }
    return {tp: bs for tp, bs in found.items() if bs}


def effective(leaders: Leaders, options: Mapping[tuple[str, int], list[int]]) -> Leaders:
    return {tp: (leaders.get(tp) if leaders.get(tp) in bs else None) for tp, bs in options.items()}


@PROPERTY
@given(leadership())
def test_leader_plan_meets_the_cap_whenever_any_assignment_can(
    case: tuple[dict[str, list[list[int]]], set[int], Leaders],
) -> None:
    cluster, live, leaders = case
    plan = leader_plan(cluster, live, leaders)
    options = live_replicas(cluster, live)
    before = effective(leaders, options)
    assert len({(t.topic, t.partition) for t in plan}) == len(plan)
    for transfer in plan:
        tp = (transfer.topic, transfer.partition)
        assert transfer.to_broker in options[tp]
        assert transfer.from_broker == before[tp] != transfer.to_broker
    after = apply(plan, before)
    assert all(after[tp] is not None for tp in options)
    if not options:
        assert plan == []
        return
    cap = math.ceil(len(options) / len(live)) + 1
    tps = sorted(options)
    best_changes: int | None = None
    for choice in itertools.product(*(options[tp] for tp in tps)):
        if max(Counter(choice).values()) <= cap:
            changes = sum(1 for tp, b in zip(tps, choice, strict=True) if before[tp] != b)
            best_changes = changes if best_changes is None else min(best_changes, changes)
    if best_changes is not None:
        assert max(Counter(after.values()).values()) <= cap
        assert len(plan) == best_changes


@PROPERTY
@given(st.integers(1, 6), st.integers(1, 40), st.data())
def test_full_replication_moves_exactly_the_excess(
    broker_total: int, partitions: int, data: st.DataObject
) -> None:
    brokers = [Broker(i) for i in range(broker_total)]
    placement = place_replicas(brokers, partitions, broker_total)
    leaders: Leaders = {
        ("t", i): data.draw(st.sampled_from(range(broker_total))) for i in range(partitions)
    }
    plan = leader_plan({"t": placement}, range(broker_total), leaders)
    cap = math.ceil(partitions / broker_total) + 1
    excess = sum(max(0, n - cap) for n in Counter(leaders.values()).values())
    assert len(plan) == excess
    assert max(Counter(apply(plan, leaders).values()).values()) <= cap


@PROPERTY
@given(leadership(), st.randoms(use_true_random=False))
def test_leader_plan_is_deterministic_whatever_the_input_order(
    case: tuple[dict[str, list[list[int]]], set[int], Leaders], rng: random.Random
) -> None:
    cluster, live, leaders = case
    expected = leader_plan(cluster, live, leaders)
    topics_shuffled = rng.sample(sorted(cluster), len(cluster))
    leaders_shuffled = dict(rng.sample(sorted(leaders.items(), key=str), len(leaders)))
    reordered = {t: cluster[t] for t in topics_shuffled}
    assert leader_plan(reordered, rng.sample(sorted(live), len(live)), leaders_shuffled) == expected


def test_all_leaders_on_one_broker_shed_down_to_the_cap() -> None:
    brokers = [Broker(0), Broker(1), Broker(2)]
    placement = place_replicas(brokers, 12, 3)
    plan = leader_plan({"t": placement}, {0, 1, 2}, {("t", i): 0 for i in range(12)})
    assert len(plan) == 12 - 5  # cap = ceil(12 / 3) + 1 = 5
    assert all(t.from_broker == 0 for t in plan)
    assert all(placement[t.partition][0] == t.to_broker for t in plan)  # preferred leaders


def test_dead_leaders_are_replaced_by_live_preferred_replicas() -> None:
    placement = {"t": [[0, 1], [1, 2], [2, 0]]}
    leaders: Leaders = {("t", 0): 0, ("t", 1): 1, ("t", 2): 2}
    plan = leader_plan(placement, {0, 1}, leaders)
    assert plan == [LeaderTransfer("t", 2, None, 0)]
    assert leader_plan(placement, set(), leaders) == []


def test_balanced_cluster_needs_no_transfers() -> None:
    placement = place_replicas([Broker(i) for i in range(4)], 8, 3)
    leaders: Leaders = {("t", i): r[0] for i, r in enumerate(placement)}
    assert leader_plan({"t": placement}, range(4), leaders) == []
