"""The sticky consumer-group assignor, by properties (Hypothesis) and by examples.

A failing property prints its falsifying example and a ``@reproduce_failure`` blob
(``print_blob=True``); ``pytest --hypothesis-seed=N`` replays a whole run.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Mapping, Set
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftq.assignors.sticky import Assignment, TopicPartition, assign, moved, owners
from raftq.proto.errors import InvalidArgument

PROPERTY = settings(max_examples=100, deadline=None, print_blob=True)

TOPICS = ["a", "b", "c", "d", "e"]


@dataclass(frozen=True)
class Group:
    members: dict[str, frozenset[str]]
    partitions: dict[str, int]
    previous: dict[str, list[TopicPartition]]

    def run(self) -> Assignment:
        return assign(self.members, self.partitions, self.previous)


def universe(members: Mapping[str, Set[str]], partitions: Mapping[str, int]) -> set[TopicPartition]:
    """Every partition some member subscribes to."""
    subscribed = set().union(*members.values()) if members else set()
    return {(t, i) for t, n in partitions.items() if t in subscribed for i in range(n)}


@st.composite
def previous_assignments(
    draw: st.DrawFn, partitions: Mapping[str, int], names: Collection[str]
) -> dict[str, list[TopicPartition]]:
    """Arbitrary previous state: departed members, duplicates, out-of-range partitions."""
    candidates = [*sorted(names), "gone1", "gone2"]
    all_tps = [(t, i) for t, n in sorted(partitions.items()) for i in range(n + 1)]
    previous: dict[str, list[TopicPartition]] = {}
    if not all_tps:
        return previous
    for tp in draw(st.lists(st.sampled_from(all_tps), max_size=40)):
        previous.setdefault(draw(st.sampled_from(candidates)), []).append(tp)
    return previous


@st.composite
def groups(
    draw: st.DrawFn,
    equal_subscriptions: bool = False,
    most_members: int = 7,
    most_partitions: int = 9,
) -> Group:
    """Up to five topics, some subscribed by nobody, some subscribed but unknown ("unknown")."""
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=5, unique=True))
    partitions = {t: draw(st.integers(0, most_partitions)) for t in topics}
    names = [f"m{i}" for i in range(draw(st.integers(1, most_members)))]
    choices = [*topics, "unknown"]
    if equal_subscriptions:
        shared = frozenset(draw(st.sets(st.sampled_from(topics), min_size=1)))
        members = dict.fromkeys(names, shared)
    else:
        members = {n: frozenset(draw(st.sets(st.sampled_from(choices)))) for n in names}
    previous = draw(previous_assignments(partitions, names))
    return Group(members, partitions, previous)


def reducing_path_exists(members: Mapping[str, Set[str]], result: Assignment) -> bool:
    """Independent BFS: can a chain of hand-offs move one partition from u to v with v <= u - 2?"""
    for source in members:
        seen = {source}
        frontier = [source]
        while frontier:
            giver = frontier.pop()
            for topic, _ in result[giver]:
                for taker, subscription in members.items():
                    if topic in subscription and taker not in seen:
                        seen.add(taker)
                        frontier.append(taker)
        if any(len(result[v]) <= len(result[source]) - 2 for v in seen):
            return True
    return False


def kept_at_most(group: Group) -> int:
    """Equal subscriptions: the most previous ownerships any balanced assignment can keep."""
    total = len(universe(group.members, group.partitions))
    valid = {m: 0 for m in group.members}
    for tp, member in owners(group.previous).items():
        if member in valid and tp in universe(group.members, group.partitions):
            valid[member] += 1
    quota, larger = divmod(total, len(valid))
    ranked = sorted(valid.values(), reverse=True)
    return sum(min(v, quota + 1 if i < larger else quota) for i, v in enumerate(ranked))


def moved_within_universe(group: Group, result: Assignment) -> int:
    return len(moved(group.previous, result) & universe(group.members, group.partitions))


# ---- properties -------------------------------------------------------------------------


@PROPERTY
@given(groups())
def test_every_subscribed_partition_owned_exactly_once_by_a_subscriber(group: Group) -> None:
    result = group.run()
    assert set(result) == set(group.members)
    owned = [tp for tps in result.values() for tp in tps]
    assert len(owned) == len(set(owned))
    assert set(owned) == universe(group.members, group.partitions)
    for member, tps in result.items():
        assert all(topic in group.members[member] for topic, _ in tps)
        assert tps == sorted(tps)


@PROPERTY
@given(groups())
def test_result_is_balanced_as_subscriptions_allow(group: Group) -> None:
    assert not reducing_path_exists(group.members, group.run())


@PROPERTY
@given(groups(equal_subscriptions=True))
def test_equal_subscriptions_counts_within_one(group: Group) -> None:
    counts = [len(tps) for tps in group.run().values()]
    assert max(counts) - min(counts) <= 1


@PROPERTY
@given(groups(equal_subscriptions=True))
def test_equal_subscriptions_move_exactly_the_lower_bound(group: Group) -> None:
    result = group.run()
    total = len(universe(group.members, group.partitions))
    assert moved_within_universe(group, result) == total - kept_at_most(group)


@PROPERTY
@given(groups())
def test_previous_result_is_a_fixed_point(group: Group) -> None:
    first = group.run()
    assert assign(group.members, group.partitions, first) == first


@PROPERTY
@given(groups(), st.randoms(use_true_random=False))
def test_deterministic_and_input_order_irrelevant(group: Group, rng: random.Random) -> None:
    def shuffled_dict(d: Mapping[str, object]) -> list[str]:
        keys = list(d)
        rng.shuffle(keys)
        return keys

    members = {m: set(group.members[m]) for m in shuffled_dict(group.members)}
    partitions = {t: group.partitions[t] for t in shuffled_dict(group.partitions)}
    previous = {m: rng.sample(tps, len(tps)) for m, tps in group.previous.items()}
    previous = {m: previous[m] for m in shuffled_dict(previous)}
    expected = group.run()
    assert group.run() == expected
    assert assign(members, partitions, previous) == expected


@PROPERTY
@given(groups(equal_subscriptions=True))
def test_joining_member_takes_only_its_share(group: Group) -> None:
    settled = group.run()
    subscription = next(iter(group.members.values()))
    members = {**group.members, "joiner": subscription}
    result = assign(members, group.partitions, settled)
    total = len(universe(members, group.partitions))
    assert moved(settled, result) == set(result["joiner"])
    assert len(result["joiner"]) == total // len(members)


@PROPERTY
@given(groups(equal_subscriptions=True), st.data())
def test_leaving_member_moves_only_its_partitions(group: Group, data: st.DataObject) -> None:
    settled = group.run()
    leaver = data.draw(st.sampled_from(sorted(group.members)))
    members = {m: s for m, s in group.members.items() if m != leaver}
    result = assign(members, group.partitions, settled)
    if members:
        assert moved(settled, result) == set(settled[leaver])
    counts = [len(tps) for tps in result.values()]
    assert not counts or max(counts) - min(counts) <= 1


@PROPERTY
@given(groups(), st.data())
def test_any_leave_strips_the_leaver_and_stays_balanced(group: Group, data: st.DataObject) -> None:
    settled = group.run()
    leaver = data.draw(st.sampled_from(sorted(group.members)))
    members = {m: s for m, s in group.members.items() if m != leaver}
    result = assign(members, group.partitions, settled)
    assert leaver not in result
    assert not reducing_path_exists(members, result)


@settings(max_examples=100, deadline=None, print_blob=True)
@given(st.one_of(groups(most_members=3, most_partitions=3), groups(True, 3, 3)))
def test_tiny_groups_match_brute_force_balance(group: Group) -> None:
    """Against exhaustive search: same minimal sum of squared counts (an optimal semi-matching),
    and with equal subscriptions the same minimal movement."""
    tps = sorted(universe(group.members, group.partitions))
    if len(tps) > 6 or len(group.members) > 3:
        return
    result = group.run()
    eligible = [[m for m in sorted(group.members) if tp[0] in group.members[m]] for tp in tps]
    before = owners(group.previous)
    best: tuple[int, int] | None = None
    for choice in itertools.product(*eligible):
        counts = [choice.count(m) for m in group.members]
        moves = sum(1 for tp, m in zip(tps, choice, strict=True) if before.get(tp) != m)
        candidate = (sum(c * c for c in counts), moves)
        best = candidate if best is None else min(best, candidate)
    ours = sum(len(v) ** 2 for v in result.values()), moved_within_universe(group, result)
    assert best is not None or not tps
    if best is not None:
        assert ours[0] == best[0]
        if len(set(group.members.values())) == 1:
            assert ours[1] == best[1]


@settings(max_examples=20, deadline=None, print_blob=True)
@given(st.integers(1, 30), st.integers(50, 400))
def test_large_group_is_fast_and_even(member_count: int, partition_count: int) -> None:
    members = {f"m{i:02}": {"big", "small"} for i in range(member_count)}
    sizes = {"big": partition_count, "small": 7}
    first = assign(members, sizes, {})
    members["late"] = {"big", "small"}
    second = assign(members, sizes, first)
    counts = [len(tps) for tps in second.values()]
    assert max(counts) - min(counts) <= 1
    assert len(moved(first, second)) == (partition_count + 7) // len(members)


# ---- examples ---------------------------------------------------------------------------


def test_twelve_partitions_three_to_four_members_moves_exactly_three() -> None:
    three = {f"m{i}": {"orders"} for i in range(3)}
    before = assign(three, {"orders": 12}, {})
    assert [len(v) for v in before.values()] == [4, 4, 4]
    after = assign({**three, "m3": {"orders"}}, {"orders": 12}, before)
    assert [len(v) for v in after.values()] == [3, 3, 3, 3]
    assert len(moved(before, after)) == 3
    assert moved(before, after) == set(after["m3"])


def test_member_leaving_hands_over_only_its_partitions() -> None:
    four = {f"m{i}": {"orders"} for i in range(4)}
    before = assign(four, {"orders": 12}, {})
    after = assign({m: s for m, s in four.items() if m != "m1"}, {"orders": 12}, before)
    assert moved(before, after) == set(before["m1"])
    assert sorted(len(v) for v in after.values()) == [4, 4, 4]


def test_first_assignment_is_round_robin() -> None:
    result = assign({"a": {"t"}, "b": {"t"}}, {"t": 4}, {})
    assert result == {"a": [("t", 0), ("t", 2)], "b": [("t", 1), ("t", 3)]}


def test_topics_nobody_subscribes_to_go_to_nobody() -> None:
    result = assign({"a": {"t"}, "b": {"t", "ghost"}}, {"t": 2, "other": 3}, {})
    assert sorted(tp for tps in result.values() for tp in tps) == [("t", 0), ("t", 1)]


def test_unsubscribed_previous_owner_loses_the_topic() -> None:
    previous = {"a": [("t", 0), ("u", 0)], "b": [("t", 1)]}
    result = assign({"a": {"u"}, "b": {"t", "u"}}, {"t": 2, "u": 1}, previous)
    assert result == {"a": [("u", 0)], "b": [("t", 0), ("t", 1)]}


def test_uneven_subscriptions_use_the_flexible_member() -> None:
    # b and c can only take their own topic; a takes whatever evens the counts out.
    members = {"a": {"x", "y"}, "b": {"x"}, "c": {"y"}}
    result = assign(members, {"x": 4, "y": 2}, {"b": [("x", 0), ("x", 1), ("x", 2), ("x", 3)]})
    assert sorted(len(v) for v in result.values()) == [2, 2, 2]
    assert set(result["c"]) <= {("y", 0), ("y", 1)}


def test_chain_of_hand_offs_reaches_a_member_two_hops_away() -> None:
    # a holds 3 of x; only b shares x, and only c shares b's topic y.
    members = {"a": {"x"}, "b": {"x", "y"}, "c": {"y"}}
    previous = {"a": [("x", 0), ("x", 1), ("x", 2)], "b": [("y", 0)]}
    result = assign(members, {"x": 3, "y": 1}, previous)
    assert result == {"a": [("x", 1), ("x", 2)], "b": [("x", 0)], "c": [("y", 0)]}
    assert moved(previous, result) == {("x", 0), ("y", 0)}  # the minimum: two hand-offs


def test_conflicting_previous_claims_go_to_the_smallest_member_id() -> None:
    previous = {"b": [("t", 0)], "a": [("t", 0)]}
    result = assign({"a": {"t"}, "b": {"t"}}, {"t": 2}, previous)
    assert ("t", 0) in result["a"]


def test_new_partitions_and_new_topics_spread_without_moving_old_ones() -> None:
    members = {"a": {"t", "u"}, "b": {"t", "u"}}
    before = assign(members, {"t": 2}, {})
    after = assign(members, {"t": 4, "u": 2}, before)
    assert moved(before, after) == {("t", 2), ("t", 3), ("u", 0), ("u", 1)}
    assert [len(v) for v in after.values()] == [3, 3]


def test_members_without_subscriptions_get_empty_lists() -> None:
    assert assign({"a": set(), "b": {"t"}}, {"t": 1}, {}) == {"a": [], "b": [("t", 0)]}
    assert assign({}, {"t": 3}, {}) == {}


def test_moved_counts_gained_and_lost_ownership() -> None:
    assert moved({"a": [("t", 0)]}, {"b": [("t", 0)], "a": [("t", 1)]}) == {("t", 0), ("t", 1)}
    assert moved({"a": [("t", 0)]}, {}) == {("t", 0)}
    assert moved({}, {}) == set()


def test_negative_partition_count_is_rejected_with_a_fix() -> None:
    with pytest.raises(InvalidArgument, match="'t' has partition count -1"):
        assign({"a": {"t"}}, {"t": -1}, {})
