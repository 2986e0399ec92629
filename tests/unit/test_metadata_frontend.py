"""The metadata frontend: validation errors raised before anything is proposed, and plans
(ids, defaults, placement, drain moves) that the state machine then accepts."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection
from typing import Any

import pytest

from raftq import config as broker_config
from raftq.metadata.frontend import (
    DEAD_LETTER_HEADERS_BYTES,
    GroupLimits,
    MetadataFrontend,
    TopicDefaults,
    TopicSpec,
    default_dead_letter_topic,
)
from raftq.metadata.machine import PARTITIONS_MAX, MetadataMachine
from raftq.metadata.table import Table
from raftq.partitions.machine import check_config
from raftq.proto import common_pb2, errors, metadata_pb2
from raftq.proto.common_pb2 import ErrorCode

NOW = 123_456


class Cluster:
    """A machine fed by a frontend: plan against the table, apply, expect OK."""

    def __init__(self, brokers: int = 3, racks: Collection[str] = ()) -> None:
        self.frontend = MetadataFrontend()
        self.machine = MetadataMachine()
        self.index = 0
        racks = list(racks) or [""] * brokers
        for b in range(1, brokers + 1):
            self.apply(
                self.frontend.register_broker(
                    self.table, b, f"h{b}:7070", f"h{b}:9070", racks[b - 1], now_ms=NOW
                )
            )
        self.live = set(range(1, brokers + 1))

    @property
    def table(self) -> Table:
        return self.machine.table

    def apply(self, data: bytes) -> metadata_pb2.MetaResult:
        self.index += 1
        result = self.machine.apply(data, self.index)
        assert result.error == ErrorCode.OK, result.message
        return result

    def create(self, name: str, partitions: int = 3, rf: int = 2, **config: Any) -> bytes:
        spec = TopicSpec(name, partitions, rf, config)
        return self.frontend.create_topic(self.table, spec, live_ids=self.live, now_ms=NOW)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def decode(data: bytes) -> metadata_pb2.MetaCommand:
    cmd = metadata_pb2.MetaCommand.FromString(data)
    assert cmd.now_ms == NOW
    return cmd


# -- defaults mirror the broker's configuration ----------------------------------------------


def test_topic_defaults_mirror_broker_config() -> None:
    ours = {f.name: f.default for f in dataclasses.fields(TopicDefaults)}
    theirs = broker_config.TopicDefaults()
    assert ours == {name: getattr(theirs, name) for name in ours}
    assert set(ours) == {f.name for f in dataclasses.fields(broker_config.TopicDefaults)}
    custom = broker_config.TopicDefaults(partitions=7, ordering="priority")
    converted = TopicDefaults.from_settings(custom)
    assert converted.partitions == 7 and converted.config().ordering == common_pb2.PRIORITY
    assert check_config(TopicDefaults().config()) is None


def test_group_limits_mirror_broker_config() -> None:
    theirs = broker_config.GroupSettings()
    ours = GroupLimits()
    assert GroupLimits.from_settings(theirs) == ours
    assert all(
        getattr(ours, f.name) == getattr(theirs, f.name) for f in dataclasses.fields(GroupLimits)
    )


# -- topics ---------------------------------------------------------------------------------


def test_create_topic_fills_defaults_assigns_the_next_id_and_places_replicas() -> None:
    cluster = Cluster(brokers=4)
    cluster.live = {1, 2, 4}  # broker 3 registered but down
    cmd = decode(
        cluster.frontend.create_topic(
            cluster.table, TopicSpec("orders"), live_ids=cluster.live, now_ms=NOW
        )
    ).create_topic
    assert cmd.name == "orders" and cmd.topic_id == cluster.table.next_topic_id
    assert cmd.replication_factor == 3 and len(cmd.replicas) == 9
    assert set(cmd.replicas) == {1, 2, 4}
    expected = TopicDefaults().config()
    expected.dead_letter_topic = "orders.dlq"
    assert cmd.config == expected
    cluster.apply(cluster.create("orders"))
    topic = cluster.table.topic("orders")
    assert topic is not None and topic.config.dead_letter_topic == "orders.dlq"


def test_placement_balances_against_existing_topics(cluster: Cluster) -> None:
    cluster.apply(cluster.create("a", partitions=3, rf=1))
    cluster.apply(cluster.create("b", partitions=3, rf=1))
    load = {b: len(cluster.table.partitions_of(b)) for b in (1, 2, 3)}
    assert load == {1: 2, 2: 2, 3: 2}


def test_placement_spreads_racks() -> None:
    cluster = Cluster(brokers=4, racks=["r1", "r1", "r2", "r2"])
    cluster.apply(cluster.create("t", partitions=4, rf=2))
    topic = cluster.table.topic("t")
    assert topic is not None
    for p in topic.partitions:
        assert {cluster.table.brokers[b].rack for b in p.replicas} == {"r1", "r2"}


def test_create_topic_overrides(cluster: Cluster) -> None:
    cmd = decode(
        cluster.create("t", ordering="priority", lease_ms=1234, dead_letter_topic="")
    ).create_topic
    assert cmd.config.ordering == common_pb2.PRIORITY
    assert cmd.config.lease_ms == 1234 and cmd.config.dead_letter_topic == ""
    assert decode(
        cluster.create("u", ordering=1, dead_letter_topic="dead")
    ).create_topic.config == (
        cmd.config.__class__(
            **{**_fields(TopicDefaults().config()), "ordering": 1, "dead_letter_topic": "dead"}
        )
    )


def _fields(config: common_pb2.TopicConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in config.DESCRIPTOR.fields}


@pytest.mark.parametrize(
    ("name", "partitions", "rf", "config", "error"),
    [
        ("", 1, 1, {}, errors.InvalidArgument),
        (".", 1, 1, {}, errors.InvalidArgument),
        ("..", 1, 1, {}, errors.InvalidArgument),
        ("a b", 1, 1, {}, errors.InvalidArgument),
        ("a/b", 1, 1, {}, errors.InvalidArgument),
        ("x" * 250, 1, 1, {}, errors.InvalidArgument),
        ("ñ", 1, 1, {}, errors.InvalidArgument),
        ("t", 0, 1, {}, errors.InvalidArgument),
        ("t", 10_001, 1, {}, errors.InvalidArgument),
        ("t", 1, 0, {}, errors.InvalidArgument),
        ("t", 1, 4, {}, errors.InvalidArgument),  # 3 live brokers
        ("t", 1, 1, {"color": 1}, errors.InvalidArgument),
        ("t", 1, 1, {"lease_ms": 0}, errors.InvalidArgument),
        ("t", 1, 1, {"lease_ms": True}, errors.InvalidArgument),
        ("t", 1, 1, {"lease_ms": "5"}, errors.InvalidArgument),
        ("t", 1, 1, {"lease_ms": 2**70}, errors.InvalidArgument),
        ("t", 1, 1, {"ordering": "lifo"}, errors.InvalidArgument),
        ("t", 1, 1, {"ordering": 3}, errors.InvalidArgument),
        ("t", 1, 1, {"max_deliveries": -1}, errors.InvalidArgument),
        ("t", 1, 1, {"max_record_bytes": 3_000_000}, errors.InvalidArgument),
        ("t", 1, 1, {"dead_letter_topic": "t"}, errors.InvalidArgument),
        ("t", 1, 1, {"dead_letter_topic": "bad name"}, errors.InvalidArgument),
        ("t", 1, 1, {"dead_letter_topic": 5}, errors.InvalidArgument),
        ("t", 1, 1, {"nack_backoff_base_ms": 10, "nack_backoff_max_ms": 5}, errors.InvalidArgument),
        ("t", 1, 1, {"ttl_ms": -1}, errors.InvalidArgument),
        ("t", 1, 1, {"ttl_action": "expire"}, errors.InvalidArgument),
        ("t", 1, 1, {"ttl_action": 2}, errors.InvalidArgument),
        ("t", 1, 1, {"ttl_action": True}, errors.InvalidArgument),
        ("x" * 246, 1, 1, {}, errors.InvalidArgument),  # x*246 + ".dlq" is over 249
        ("exists", 1, 1, {}, errors.TopicExists),
    ],
)
def test_create_topic_rejects_before_proposing(
    cluster: Cluster,
    name: str,
    partitions: int,
    rf: int,
    config: dict[str, Any],
    error: type[errors.RaftqError],
) -> None:
    cluster.apply(cluster.create("exists"))
    with pytest.raises(error) as caught:
        cluster.create(name, partitions, rf, **config)
    assert type(caught.value) is error and caught.value.message


@pytest.mark.parametrize(
    ("given", "action"),
    [("drop", common_pb2.TTL_DROP), ("DEAD_LETTER", common_pb2.TTL_DEAD_LETTER), (1, 1)],
)
def test_create_topic_takes_a_ttl(cluster: Cluster, given: str | int, action: int) -> None:
    cluster.apply(cluster.create("t", 1, 1, ttl_ms=5000, ttl_action=given))
    topic = cluster.table.topic("t")
    assert topic is not None
    assert (topic.config.ttl_ms, topic.config.ttl_action) == (5000, action)


def test_a_long_name_works_with_an_explicit_dead_letter_topic(cluster: Cluster) -> None:
    cluster.apply(cluster.create("x" * 249, 1, 1, dead_letter_topic="x.dead"))
    with pytest.raises(errors.InvalidArgument):
        default_dead_letter_topic("x" * 246)
    assert default_dead_letter_topic("x" * 245) == "x" * 245 + ".dlq"


def test_rf_counts_live_registered_brokers_only() -> None:
    cluster = Cluster(brokers=3)
    cluster.live = {1, 2, 99}  # 99 is not registered
    with pytest.raises(errors.InvalidArgument, match="2 live brokers"):
        cluster.create("t", 1, 3)
    cluster.apply(cluster.create("t", 1, 2))


def test_a_topic_too_big_for_one_raft_entry(cluster: Cluster) -> None:
    small = MetadataFrontend(command_bytes_max=1_000, partitions_max=500)
    spec = TopicSpec("t", 400, 3)
    with pytest.raises(errors.InvalidArgument, match="Raft entry limit"):
        small.create_topic(cluster.table, spec, live_ids=cluster.live, now_ms=NOW)
    with pytest.raises(errors.InvalidArgument, match=r"1\.\.500"):
        small.create_topic(cluster.table, TopicSpec("t", 501, 1), live_ids=cluster.live, now_ms=1)
    big = cluster.frontend.create_topic(
        cluster.table, TopicSpec("big", 10_000, 3), live_ids=cluster.live, now_ms=NOW
    )
    assert len(big) <= 32_768
    cluster.apply(big)


def test_dead_letter_topic_plan(cluster: Cluster) -> None:
    cluster.apply(cluster.create("orders", partitions=4, rf=3, ordering="priority", lease_ms=7))
    plan = cluster.frontend.dead_letter_topic(cluster.table, "orders", live_ids={1, 2}, now_ms=NOW)
    assert plan is not None
    cmd = decode(plan).create_topic
    assert cmd.name == "orders.dlq" and cmd.replication_factor == 2 and len(cmd.replicas) == 8
    assert cmd.config.dead_letter_topic == "" and cmd.config.max_deliveries == 0
    assert cmd.config.ordering == common_pb2.FIFO and cmd.config.lease_ms == 7
    # room for the dead letter's origin headers beyond the largest record a topic may hold
    assert (
        cmd.config.max_record_bytes == cluster.frontend.record_bytes_max + DEAD_LETTER_HEADERS_BYTES
    )
    cluster.apply(plan)
    assert (
        cluster.frontend.dead_letter_topic(cluster.table, "orders", live_ids={1}, now_ms=1) is None
    )
    assert (
        cluster.frontend.dead_letter_topic(cluster.table, "orders.dlq", live_ids={1}, now_ms=1)
        is None
    )
    with pytest.raises(errors.UnknownTopic):
        cluster.frontend.dead_letter_topic(cluster.table, "nope", live_ids={1}, now_ms=1)
    cluster.apply(cluster.create("other"))
    with pytest.raises(errors.Unavailable):
        cluster.frontend.dead_letter_topic(cluster.table, "other", live_ids=set(), now_ms=1)


def test_delete_and_alter_name_the_incarnation_they_planned_against(cluster: Cluster) -> None:
    cluster.apply(cluster.create("t"))
    delete = cluster.frontend.delete_topic(cluster.table, "t", now_ms=NOW)
    alter = cluster.frontend.alter_topic_config(cluster.table, "t", {"lease_ms": 99}, now_ms=NOW)
    assert decode(delete).delete_topic.topic_id == 1
    altered = decode(alter).alter_topic_config
    assert altered.topic_id == 1 and altered.config.lease_ms == 99
    assert altered.config.dead_letter_topic == "t.dlq"  # merged onto the current config
    cluster.apply(delete)
    cluster.apply(cluster.create("t"))  # a new incarnation, id 2
    assert cluster.machine.apply(alter, 99).error == ErrorCode.UNKNOWN_TOPIC
    with pytest.raises(errors.UnknownTopic):
        cluster.frontend.delete_topic(cluster.table, "nope", now_ms=NOW)
    with pytest.raises(errors.UnknownTopic):
        cluster.frontend.alter_topic_config(cluster.table, "nope", {}, now_ms=NOW)
    with pytest.raises(errors.InvalidArgument):
        cluster.frontend.alter_topic_config(cluster.table, "t", {"lease": 1}, now_ms=NOW)


def test_reassign_partition(cluster: Cluster) -> None:
    cluster.apply(cluster.create("t", partitions=2, rf=2))
    f, table = cluster.frontend, cluster.table
    cluster.apply(f.reassign_partition(table, "t", 1, [3, 1, 2], live_ids={1, 2, 3}, now_ms=NOW))
    assert cluster.table.replicas("t", 1) == (3, 1, 2)
    table = cluster.table
    for topic, partition, replicas, error in [
        ("u", 0, [1], errors.UnknownTopic),
        ("t", 2, [1], errors.UnknownPartition),
        ("t", 0, [], errors.InvalidArgument),
        ("t", 0, [1, 1], errors.InvalidArgument),
        ("t", 0, [1, 7], errors.InvalidArgument),
        ("t", 0, [1, 3], errors.InvalidArgument),  # 3 is down
    ]:
        with pytest.raises(error):
            f.reassign_partition(table, topic, partition, replicas, live_ids={1, 2}, now_ms=NOW)


# -- brokers --------------------------------------------------------------------------------


def test_add_partitions_grows_only_and_places_new_partitions_evenly(cluster: Cluster) -> None:
    cluster.apply(cluster.create("t", partitions=3, rf=2))
    grow = cluster.frontend.add_partitions
    for at_or_below in (0, 2, 3):
        with pytest.raises(errors.InvalidArgument, match="only grow"):
            grow(cluster.table, "t", at_or_below, live_ids=cluster.live, now_ms=NOW)
    with pytest.raises(errors.InvalidArgument, match="at most"):
        grow(cluster.table, "t", PARTITIONS_MAX + 1, live_ids=cluster.live, now_ms=NOW)
    with pytest.raises(errors.UnknownTopic):
        grow(cluster.table, "u", 4, live_ids=cluster.live, now_ms=NOW)
    with pytest.raises(errors.InvalidArgument, match="live"):
        grow(cluster.table, "t", 4, live_ids={1}, now_ms=NOW)
    cmd = decode(grow(cluster.table, "t", 6, live_ids=cluster.live, now_ms=NOW))
    topic = cluster.table.topic("t")
    assert topic is not None
    assert cmd.add_partitions.topic_id == topic.topic_id
    assert cmd.add_partitions.replication_factor == 2 and len(cmd.add_partitions.replicas) == 6
    cluster.apply(cmd.SerializeToString())
    grown = cluster.table.topic("t")
    assert grown is not None and grown.partition_count == 6
    assert grown.placement()[:3] == topic.placement()
    # 6 partitions x RF 2 on 3 brokers: 4 replicas and 2 preferred leaderships each
    replicas = Counter(b for p in grown.placement() for b in p)
    leaders = Counter(p[0] for p in grown.placement())
    assert set(replicas.values()) == {4} and set(leaders.values()) == {2}
    # a broker's partition limit: grown to it exactly, not past it
    capped = MetadataFrontend(partitions_max=8).add_partitions
    with pytest.raises(errors.InvalidArgument, match="at most 8"):
        capped(cluster.table, "t", 9, live_ids=cluster.live, now_ms=NOW)
    cluster.apply(capped(cluster.table, "t", 8, live_ids=cluster.live, now_ms=NOW))
    assert cluster.table.topics["t"].partition_count == 8


def test_register_broker_errors(cluster: Cluster) -> None:
    f = cluster.frontend
    with pytest.raises(errors.InvalidArgument):
        f.register_broker(cluster.table, 0, "a:1", "a:2", now_ms=NOW)
    with pytest.raises(errors.InvalidArgument):
        f.register_broker(cluster.table, 5, "no-port", "a:2", now_ms=NOW)
    with pytest.raises(errors.InvalidArgument, match="belongs to broker 1"):
        f.register_broker(cluster.table, 5, "h1:7070", "a:2", now_ms=NOW)
    cluster.apply(f.register_broker(cluster.table, 1, "h1:7070", "h1:9070", "r1", now_ms=NOW))
    broker = cluster.table.broker(1)
    assert broker is not None and broker.rack == "r1"


def test_deregister_broker_moves_its_replicas_to_live_brokers() -> None:
    cluster = Cluster(brokers=4)
    cluster.apply(cluster.create("a", partitions=4, rf=2))
    cluster.apply(cluster.create("b", partitions=2, rf=3))
    held = cluster.table.partitions_of(4)
    assert held
    plan = cluster.frontend.deregister_broker(cluster.table, 4, live_ids={1, 2, 3}, now_ms=NOW)
    moves = decode(plan).deregister_broker.moves
    assert sorted((m.topic, m.partition) for m in moves) == held
    for move in moves:
        before = cluster.table.replicas(move.topic, move.partition)
        assert before is not None
        changed = [(x, y) for x, y in zip(before, move.replicas, strict=True) if x != y]
        assert len(changed) == 1  # one replica moves, in place
        ((old, new),) = changed
        assert old == 4 and new in {1, 2, 3} and new not in before
    cluster.apply(plan)
    assert cluster.table.broker(4) is None and cluster.table.partitions_of(4) == []


def test_deregister_broker_errors(cluster: Cluster) -> None:
    f = cluster.frontend
    with pytest.raises(errors.InvalidArgument, match="not registered"):
        f.deregister_broker(cluster.table, 9, live_ids={1, 2, 3}, now_ms=NOW)
    cluster.apply(cluster.create("t", partitions=1, rf=3))
    with pytest.raises(errors.InvalidArgument, match="cannot remove broker 3"):
        f.deregister_broker(cluster.table, 3, live_ids={1, 2, 3}, now_ms=NOW)
    empty = Cluster(brokers=2)
    empty.apply(empty.frontend.deregister_broker(empty.table, 2, live_ids=(), now_ms=NOW))
    assert sorted(empty.table.brokers) == [1]


# -- consumer groups ------------------------------------------------------------------------


def test_join_group_fills_the_default_session_timeout_and_accepts_unknown_topics(
    cluster: Cluster,
) -> None:
    cluster.apply(cluster.create("t", partitions=2))
    plan = cluster.frontend.join_group(
        cluster.table, "g", "member-1", ["t", "later", "t"], client_id="c", now_ms=NOW
    )
    join = decode(plan).join_group
    assert join.session_timeout_ms == GroupLimits().session_timeout_ms
    result = cluster.apply(plan)
    assert result.generation == 1 and list(result.unknown_topics) == ["later"]
    assert [(r.topic, r.partition) for r in result.assignment] == [("t", 0), ("t", 1)]


@pytest.mark.parametrize(
    ("group", "member", "topics", "timeout"),
    [
        ("", "m", ["t"], 0),
        ("g", "", ["t"], 0),
        ("g", "m", [], 0),
        ("g", "m", ["bad topic"], 0),
        ("g", "m", ["t"], 5_999),
        ("g", "m", ["t"], 1_800_001),
        ("g", "m", ["t"], -1),
    ],
)
def test_join_group_rejects_before_proposing(
    cluster: Cluster, group: str, member: str, topics: list[str], timeout: int
) -> None:
    with pytest.raises(errors.InvalidArgument):
        cluster.frontend.join_group(cluster.table, group, member, topics, timeout, now_ms=NOW)


def test_session_bounds_come_from_the_limits(cluster: Cluster) -> None:
    f = MetadataFrontend(
        group_limits=GroupLimits(session_timeout_ms=100, session_timeout_min_ms=50)
    )
    assert decode(f.join_group(cluster.table, "g", "m", ["t"], now_ms=NOW)).join_group == (
        metadata_pb2.JoinGroup(group="g", member_id="m", topics=["t"], session_timeout_ms=100)
    )
    f.join_group(cluster.table, "g", "m", ["t"], 50, now_ms=NOW)
    with pytest.raises(errors.InvalidArgument, match=r"50\.\.1800000"):
        f.join_group(cluster.table, "g", "m", ["t"], 49, now_ms=NOW)


def test_leave_and_delete_group(cluster: Cluster) -> None:
    f = cluster.frontend
    cluster.apply(f.join_group(cluster.table, "g", "m1", ["t"], now_ms=NOW))
    cluster.apply(f.join_group(cluster.table, "g", "m2", ["t"], now_ms=NOW))
    with pytest.raises(errors.UnknownGroup):
        f.leave_group(cluster.table, "h", ["m1"], now_ms=NOW)
    with pytest.raises(errors.UnknownMember):
        f.leave_group(cluster.table, "g", ["m9"], now_ms=NOW)
    with pytest.raises(errors.InvalidArgument):
        f.leave_group(cluster.table, "g", [], now_ms=NOW)
    with pytest.raises(errors.GroupNotEmpty):
        f.delete_group(cluster.table, "g", now_ms=NOW)
    plan = f.leave_group(
        cluster.table, "g", ["m2", "m1", "m2", "gone"], reason="session expired", now_ms=NOW
    )
    leave = decode(plan).leave_group
    assert list(leave.member_ids) == ["gone", "m1", "m2"] and leave.reason == "session expired"
    assert cluster.apply(plan).generation == 3
    with pytest.raises(errors.InvalidArgument):  # not being deleted yet
        f.delete_group(cluster.table, "g", now_ms=NOW, finish=True)
    cluster.apply(f.delete_group(cluster.table, "g", now_ms=NOW))
    with pytest.raises(errors.Unavailable):  # joined since it was judged expired
        f.delete_group(cluster.table, "g", now_ms=NOW, empty_since_ms=NOW - 1)
    cluster.apply(f.delete_group(cluster.table, "g", now_ms=NOW, finish=True))
    with pytest.raises(errors.UnknownGroup):
        f.delete_group(cluster.table, "g", now_ms=NOW)


def test_commit_txn(cluster: Cluster) -> None:
    f = cluster.frontend
    assert cluster.apply(f.commit_txn(cluster.table, "app", 4, now_ms=NOW)).txn_version == 4
    assert not cluster.apply(f.commit_txn(cluster.table, "app", 4, now_ms=NOW)).changed
    with pytest.raises(errors.InvalidArgument):
        f.commit_txn(cluster.table, "app", -1, now_ms=NOW)
    with pytest.raises(errors.InvalidArgument):
        f.commit_txn(cluster.table, "", 1, now_ms=NOW)


def test_planning_is_deterministic(cluster: Cluster) -> None:
    cluster.apply(cluster.create("a"))
    for _ in range(2):
        assert cluster.create("b", 12, 3) == cluster.create("b", 12, 3)
