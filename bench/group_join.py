"""JoinGroup apply cost against the number of groups in the metadata table.

The metadata machine applies JoinGroup commands (a second member joining a one-member group
subscribed to an 8-partition topic: a sticky rebalance of that group) to tables holding 1k, 10k
and 100k groups. Only ``MetadataMachine.apply`` is timed; the tables are filled directly (not
through apply) so that the fill costs the same before and after a change to the group store.

Goal: flat. The cost per join at the largest table is within 1.5x of the smallest (the group
store is a persistent map: a join copies that group and O(log n) map nodes; a copied dict cost
91 us at 1k groups and 9.5 ms at 40k).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import immutables

from bench.common import Result, format_number, median
from raftq.metadata.machine import MetadataMachine
from raftq.metadata.table import GroupInfo, MemberInfo, PartitionInfo, Table, TopicInfo, frozen_map
from raftq.proto import common_pb2, metadata_pb2

NAME = "group_join"

TOPIC = "orders"
TOPIC_PARTITIONS = 8
FLAT_GOAL_RATIO = 1.5
NOW_MS = 1_700_000_000_000


def add_arguments(group: Any) -> None:
    group.add_argument(
        "--group-counts",
        default="1000,10000,100000",
        help="comma-separated group counts of the tables (default 1000,10000,100000)",
    )
    group.add_argument(
        "--joins", type=int, default=2000, help="timed joins per table (default 2000)"
    )


def filled_table(groups: int) -> Table:
    """A table with one topic and ``groups`` one-member groups subscribed to it."""
    topic = TopicInfo(
        TOPIC,
        1,
        common_pb2.TopicConfig().SerializeToString(deterministic=True),
        tuple(PartitionInfo((1,), 1) for _ in range(TOPIC_PARTITIONS)),
    )
    assignment = tuple((TOPIC, p) for p in range(TOPIC_PARTITIONS))
    store = {}
    for g in range(groups):
        member = MemberInfo("m1", (TOPIC,), 10_000, assignment=assignment)
        store[f"g{g}"] = GroupInfo(f"g{g}", 1, frozen_map({"m1": member}), (TOPIC,))
    return Table(
        topics=frozen_map({TOPIC: topic}),
        groups=immutables.Map(store),
        next_topic_id=2,
        applied_index=1,
    )


def join_command(group: str) -> bytes:
    join = metadata_pb2.JoinGroup(
        group=group, member_id="m2", topics=[TOPIC], session_timeout_ms=10_000
    )
    return metadata_pb2.MetaCommand(now_ms=NOW_MS, join_group=join).SerializeToString()


def measure(groups: int, joins: int) -> float:
    """Median microseconds per JoinGroup apply over ``joins`` joins into distinct groups."""
    machine = MetadataMachine(filled_table(groups))
    commands = [join_command(f"g{(i * 7919) % groups}") for i in range(min(joins, groups))]
    samples = []
    index = machine.applied_index
    for data in commands:
        index += 1
        start = time.perf_counter()
        result = machine.apply(data, index)
        samples.append(time.perf_counter() - start)
        assert not result.error and result.generation == 2, result
    return median(samples) * 1e6


def run(options: argparse.Namespace) -> list[Result]:
    counts = [int(c) for c in options.group_counts.split(",")]
    if options.quick:
        counts = [c // 100 or 1 for c in counts]
    joins = 200 if options.quick else options.joins
    per_count = {c: median([measure(c, joins) for _ in range(options.repeat)]) for c in counts}
    results = [Result(f"join at {c:,} groups", us, "us/join") for c, us in per_count.items()]
    ratio = per_count[counts[-1]] / per_count[counts[0]]
    results.append(
        Result(
            f"join at {counts[-1]:,} / at {counts[0]:,} groups",
            ratio,
            "x",
            f"<= {format_number(FLAT_GOAL_RATIO)}",
            ratio <= FLAT_GOAL_RATIO,
            f"median of {joins} joins (second member into a one-member group, "
            f"{TOPIC_PARTITIONS}-partition topic), MetadataMachine.apply only",
        )
    )
    return results
