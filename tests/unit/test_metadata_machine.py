"""The metadata state machine: each command's happy path and errors, group generations and
sticky assignments, and properties over random command sequences (Hypothesis, seeded).

Commands are built here as protobuf messages, not through the frontend, so apply's own checks
are what is tested. Seed: printed at the start of each randomized test; replay with
RAFTQ_SEED=<seed> pytest tests/unit/test_metadata_machine.py.
"""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from raftq.metadata.frontend import MetadataFrontend
from raftq.metadata.machine import PARTITIONS_MAX, MetadataMachine
from raftq.metadata.table import GroupInfo, Table
from raftq.partitions.machine import DEFAULT_CONFIG
from raftq.proto import common_pb2, errors, metadata_pb2
from raftq.proto.common_pb2 import ErrorCode

SEED = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def command(now_ms: int = 1000, **op: Any) -> bytes:
    return metadata_pb2.MetaCommand(now_ms=now_ms, **op).SerializeToString(deterministic=True)


def config(**changes: Any) -> common_pb2.TopicConfig:
    out = common_pb2.TopicConfig()
    out.CopyFrom(DEFAULT_CONFIG)
    for key, value in changes.items():
        setattr(out, key, value)
    return out


class Cluster:
    """A machine and its next Raft index, with one-line helpers per command."""

    def __init__(self) -> None:
        self.machine = MetadataMachine()
        self.index = 0
        self.log: list[tuple[bytes, int]] = []

    @property
    def table(self) -> Table:
        return self.machine.table

    def apply(self, data: bytes) -> metadata_pb2.MetaResult:
        self.index += 1
        self.log.append((data, self.index))
        return self.machine.apply(data, self.index)

    def ok(self, data: bytes) -> metadata_pb2.MetaResult:
        result = self.apply(data)
        assert result.error == ErrorCode.OK, result.message
        return result

    def rejected(self, data: bytes, code: int) -> metadata_pb2.MetaResult:
        before = self.machine.dump()
        result = self.apply(data)
        assert result.error == code, (ErrorCode.Name(result.error), result.message)
        assert result.message
        after = self.machine.dump()
        assert after.pop("applied_index") == self.index
        before.pop("applied_index")
        assert after == before, "a rejected command changed the table"
        return result

    def broker(self, broker_id: int, rack: str = "") -> metadata_pb2.MetaResult:
        return self.ok(
            command(
                register_broker=metadata_pb2.RegisterBroker(
                    broker_id=broker_id,
                    client_addr=f"10.0.0.{broker_id}:7070",
                    raft_addr=f"10.0.0.{broker_id}:9070",
                    rack=rack,
                )
            )
        )

    def topic(self, name: str, replicas: list[list[int]], **changes: Any) -> bytes:
        rf = len(replicas[0])
        return command(
            create_topic=metadata_pb2.CreateTopic(
                name=name,
                topic_id=self.table.next_topic_id,
                config=config(**changes),
                replication_factor=rf,
                replicas=[b for p in replicas for b in p],
            )
        )

    def join(self, group: str, member: str, topics: list[str], timeout: int = 10_000) -> bytes:
        return command(
            join_group=metadata_pb2.JoinGroup(
                group=group, member_id=member, topics=topics, session_timeout_ms=timeout
            )
        )

    def leave(self, group: str, *members: str) -> bytes:
        return command(leave_group=metadata_pb2.LeaveGroup(group=group, member_ids=members))


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    for b in (1, 2, 3):
        c.broker(b)
    return c


def owned(result: metadata_pb2.MetaResult) -> list[tuple[str, int]]:
    return [(ref.topic, ref.partition) for ref in result.assignment]


# -- decoding, skipping, failures ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xff\xff", b"\x08", command()[:-1] + b"\x80", b"\x52\x05abc"],
    ids=["empty", "garbage", "truncated-varint", "bad-tail", "truncated-message"],
)
def test_bytes_that_do_not_decode_or_name_no_operation_are_malformed(
    cluster: Cluster, data: bytes
) -> None:
    cluster.rejected(data, ErrorCode.MALFORMED_COMMAND)


def test_entries_at_or_below_the_applied_index_are_skipped(cluster: Cluster) -> None:
    before = cluster.machine.dump()
    result = cluster.machine.apply(cluster.topic("t", [[1]]), cluster.index)
    assert result.skipped and result.error == ErrorCode.OK
    assert cluster.machine.apply(b"garbage", 1).skipped
    assert cluster.machine.dump() == before


def test_a_rejection_moves_the_applied_index_and_nothing_else(cluster: Cluster) -> None:
    cluster.rejected(cluster.leave("nobody", "m"), ErrorCode.UNKNOWN_GROUP)
    assert cluster.machine.applied_index == cluster.index


def test_the_clock_never_goes_backwards(cluster: Cluster) -> None:
    cluster.ok(command(now_ms=5000, commit_txn=metadata_pb2.CommitTxn(app_id="a", version=1)))
    cluster.ok(command(now_ms=10, commit_txn=metadata_pb2.CommitTxn(app_id="a", version=2)))
    assert cluster.table.clock_ms == 5000
    join = metadata_pb2.JoinGroup(group="g", member_id="m", topics=["t"], session_timeout_ms=1)
    cluster.ok(command(now_ms=10, join_group=join))
    group = cluster.table.group("g")
    assert group is not None and group.members["m"].joined_ms == 5000


def test_a_bug_in_a_handler_is_internal_latches_failed_and_leaves_the_table(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("boom")

    snapshot = cluster.machine.snapshot_bytes()
    before = cluster.machine.dump()
    monkeypatch.setitem(cluster.machine._handlers, "commit_txn", broken)
    result = cluster.apply(command(commit_txn=metadata_pb2.CommitTxn(app_id="a", version=1)))
    assert result.error == ErrorCode.INTERNAL and "boom" in result.message
    assert cluster.machine.dump() == before  # not even the applied index moved
    assert cluster.machine.statistics()["failed"]
    assert cluster.apply(cluster.join("g", "m", ["t"])).error == ErrorCode.INTERNAL
    cluster.machine.restore_bytes(snapshot)
    assert cluster.machine.failed is None


def test_tables_are_never_mutated_in_place(cluster: Cluster) -> None:
    old = cluster.table
    old_dump = old.dump()
    cluster.ok(cluster.topic("t", [[1, 2]]))
    cluster.ok(cluster.join("g", "m", ["t"]))
    assert old.dump() == old_dump
    assert cluster.table is not old
    with pytest.raises(TypeError):
        cluster.table.topics["x"] = cluster.table.topics["t"]  # type: ignore[index]


# -- brokers --------------------------------------------------------------------------------------


def test_register_adds_updates_and_ignores_an_identical_registration(cluster: Cluster) -> None:
    assert cluster.table.broker(1) is not None
    same = cluster.broker(1)
    assert not same.changed and same.broker.broker_id == 1
    moved = cluster.ok(
        command(
            now_ms=9999,
            register_broker=metadata_pb2.RegisterBroker(
                broker_id=1, client_addr="new:1", raft_addr="new:2", rack="r9"
            ),
        )
    )
    assert moved.changed
    info = cluster.table.broker(1)
    assert info is not None
    assert (info.client_addr, info.rack, info.registered_ms) == ("new:1", "r9", 1000)


@pytest.mark.parametrize(
    ("broker_id", "client", "raft", "rack"),
    [
        (0, "a:1", "a:2", ""),
        (2**31, "a:1", "a:2", ""),
        (9, "nohost", "a:2", ""),
        (9, "a:0", "a:2", ""),
        (9, "a:1", "a:99999", ""),
        (9, ":1", "a:2", ""),
        (9, "a:1", "a:2", "r" * 256),
        (9, "10.0.0.1:7070", "a:2", ""),  # broker 1's client address
        (9, "a:1", "10.0.0.2:9070", ""),  # broker 2's raft address
    ],
)
def test_register_rejects_bad_ids_addresses_and_taken_addresses(
    cluster: Cluster, broker_id: int, client: str, raft: str, rack: str
) -> None:
    msg = metadata_pb2.RegisterBroker(client_addr=client, raft_addr=raft, rack=rack)
    if broker_id < 2**31:
        msg.broker_id = broker_id
        cluster.rejected(command(register_broker=msg), ErrorCode.INVALID_ARGUMENT)
    else:
        with pytest.raises(ValueError):
            msg.broker_id = broker_id  # int32: the wire cannot even carry it


def test_deregister_needs_every_replica_moved_in_the_same_command(cluster: Cluster) -> None:
    cluster.broker(4)
    cluster.ok(cluster.topic("t", [[1, 2], [2, 3]]))
    cluster.rejected(
        command(deregister_broker=metadata_pb2.DeregisterBroker(broker_id=3)),
        ErrorCode.UNAVAILABLE,
    )
    cluster.rejected(
        command(
            deregister_broker=metadata_pb2.DeregisterBroker(
                broker_id=3,
                moves=[metadata_pb2.ReassignPartition(topic="t", partition=1, replicas=[2, 3])],
            )
        ),
        ErrorCode.INVALID_ARGUMENT,
    )
    cluster.rejected(
        command(
            deregister_broker=metadata_pb2.DeregisterBroker(
                broker_id=3,
                moves=[metadata_pb2.ReassignPartition(topic="t", partition=1, replicas=[2, 7])],
            )
        ),
        ErrorCode.INVALID_ARGUMENT,
    )
    cluster.ok(
        command(
            deregister_broker=metadata_pb2.DeregisterBroker(
                broker_id=3,
                moves=[metadata_pb2.ReassignPartition(topic="t", partition=1, replicas=[2, 4])],
            )
        )
    )
    assert cluster.table.broker(3) is None
    assert cluster.table.replicas("t", 1) == (2, 4)
    assert cluster.table.partitions_of(3) == []
    assert cluster.table.partitions_of(2) == [("t", 0), ("t", 1)]


def test_deregister_an_unknown_broker_is_invalid(cluster: Cluster) -> None:
    cluster.rejected(
        command(deregister_broker=metadata_pb2.DeregisterBroker(broker_id=42)),
        ErrorCode.INVALID_ARGUMENT,
    )


# -- topics ---------------------------------------------------------------------------------------


def test_create_topic_stores_id_config_replicas_and_revisions(cluster: Cluster) -> None:
    result = cluster.ok(cluster.topic("orders", [[1, 2], [2, 3], [3, 1]], lease_ms=5000))
    topic = cluster.table.topic("orders")
    assert topic is not None
    assert result.topic == topic.to_proto()
    assert topic.topic_id == 1 and cluster.table.next_topic_id == 2
    assert topic.placement() == [[1, 2], [2, 3], [3, 1]]
    assert topic.replication_factor == 2 and topic.partition_count == 3
    assert topic.config.lease_ms == 5000
    assert topic.revision == cluster.index and topic.partitions[0].revision == cluster.index
    assert topic.created_ms == 1000
    assert cluster.table.topic_by_id(1) is topic


def test_topic_ids_are_never_reused(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("a", [[1]]))
    cluster.ok(command(delete_topic=metadata_pb2.DeleteTopic(name="a")))
    cluster.ok(cluster.topic("a", [[1]]))
    topic = cluster.table.topic("a")
    assert topic is not None and topic.topic_id == 2


def test_create_topic_with_a_taken_id_is_a_stale_plan(cluster: Cluster) -> None:
    stale = cluster.topic("a", [[1]])
    cluster.ok(cluster.topic("b", [[1]]))
    cluster.rejected(stale, ErrorCode.UNAVAILABLE)
    assert errors.error_class(ErrorCode.UNAVAILABLE).kind.retriable


@pytest.mark.parametrize(
    ("name", "replicas", "rf", "changes"),
    [
        ("", [1], 1, {}),
        (".", [1], 1, {}),
        ("..", [1], 1, {}),
        ("a/b", [1], 1, {}),
        ("x" * 250, [1], 1, {}),
        ("é", [1], 1, {}),
        ("t", [], 1, {}),
        ("t", [1, 2, 3], 2, {}),
        ("t", [1], 0, {}),
        ("t", [1, 1], 2, {}),
        ("t", [1, 9], 2, {}),
        ("t", [0], 1, {}),
        ("t", [1], 1, {"lease_ms": 0}),
        ("t", [1], 1, {"max_record_bytes": 0}),
        ("t", [1], 1, {"ordering": 7}),
        ("t", [1], 1, {"dead_letter_topic": "t"}),
        ("t", [1], 1, {"dead_letter_topic": "bad name"}),
        ("t", [1] * 10_001, 1, {}),
    ],
)
def test_create_topic_rejects_invalid_requests(
    cluster: Cluster, name: str, replicas: list[int], rf: int, changes: dict[str, Any]
) -> None:
    if len(replicas) > 10_000:
        cluster.broker(4)
    cmd = metadata_pb2.CreateTopic(
        name=name,
        topic_id=cluster.table.next_topic_id,
        config=config(**changes),
        replication_factor=rf,
        replicas=replicas,
    )
    cluster.rejected(command(create_topic=cmd), ErrorCode.INVALID_ARGUMENT)


def test_create_an_existing_topic(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]]))
    cluster.rejected(cluster.topic("t", [[2]]), ErrorCode.TOPIC_EXISTS)


def test_delete_topic_checks_the_incarnation(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]]))
    cluster.rejected(
        command(delete_topic=metadata_pb2.DeleteTopic(name="t", topic_id=99)),
        ErrorCode.UNKNOWN_TOPIC,
    )
    result = cluster.ok(command(delete_topic=metadata_pb2.DeleteTopic(name="t", topic_id=1)))
    assert result.topic.name == "t" and cluster.table.topic("t") is None
    cluster.rejected(
        command(delete_topic=metadata_pb2.DeleteTopic(name="t")), ErrorCode.UNKNOWN_TOPIC
    )


def test_alter_topic_config_replaces_it_and_bumps_the_revision(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]]))
    created = cluster.index
    same = cluster.ok(
        command(alter_topic_config=metadata_pb2.AlterTopicConfig(name="t", config=config()))
    )
    assert not same.changed
    result = cluster.ok(
        command(
            alter_topic_config=metadata_pb2.AlterTopicConfig(
                name="t", topic_id=1, config=config(ordering=common_pb2.PRIORITY)
            )
        )
    )
    topic = cluster.table.topic("t")
    assert result.changed and topic is not None
    assert topic.config.ordering == common_pb2.PRIORITY
    assert topic.revision == cluster.index != created
    assert topic.partitions[0].revision == created
    cluster.rejected(
        command(
            alter_topic_config=metadata_pb2.AlterTopicConfig(name="t", config=config(lease_ms=-1))
        ),
        ErrorCode.INVALID_ARGUMENT,
    )
    cluster.rejected(
        command(alter_topic_config=metadata_pb2.AlterTopicConfig(name="u", config=config())),
        ErrorCode.UNKNOWN_TOPIC,
    )


def test_reassign_partition(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1, 2], [2, 3]]))

    def reassign(partition: int, replicas: list[int], topic: str = "t") -> bytes:
        return command(
            reassign_partition=metadata_pb2.ReassignPartition(
                topic=topic, partition=partition, replicas=replicas
            )
        )

    result = cluster.ok(reassign(1, [3]))
    assert result.changed and cluster.table.replicas("t", 1) == (3,)
    topic = cluster.table.topic("t")
    assert topic is not None and topic.partitions[1].revision == cluster.index
    assert not cluster.ok(reassign(1, [3])).changed
    cluster.rejected(reassign(2, [1]), ErrorCode.UNKNOWN_PARTITION)
    cluster.rejected(reassign(-1, [1]), ErrorCode.UNKNOWN_PARTITION)
    cluster.rejected(reassign(0, [1], topic="u"), ErrorCode.UNKNOWN_TOPIC)
    for bad in ([], [1, 1], [1, 8]):
        cluster.rejected(reassign(0, bad), ErrorCode.INVALID_ARGUMENT)


def test_add_partitions_appends_placed_partitions_and_rebalances_subscribed_groups(
    cluster: Cluster,
) -> None:
    cluster.ok(cluster.topic("t", [[1, 2], [2, 3]]))
    created = cluster.index
    cluster.ok(cluster.join("g", "m1", ["t"]))
    generation = cluster.table.groups["g"].generation

    def grow(replicas: list[int], rf: int = 2, name: str = "t", topic_id: int = 0) -> bytes:
        msg = metadata_pb2.AddPartitions(
            name=name, topic_id=topic_id, replication_factor=rf, replicas=replicas
        )
        return command(add_partitions=msg)

    # nothing added, half a partition, unknown brokers or topics, a past incarnation, too many
    cluster.rejected(grow([]), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(grow([1, 2, 3]), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(grow([1, 1]), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(grow([1, 9]), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(grow([1, 2], rf=0), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(grow([1, 2], name="u"), ErrorCode.UNKNOWN_TOPIC)
    cluster.rejected(grow([1, 2], topic_id=7), ErrorCode.UNKNOWN_TOPIC)
    cluster.rejected(grow([1] * (PARTITIONS_MAX - 1), rf=1), ErrorCode.INVALID_ARGUMENT)

    result = cluster.ok(grow([3, 1, 1, 2], topic_id=1))
    topic = cluster.table.topic("t")
    assert topic is not None and result.topic == topic.to_proto()
    assert topic.placement() == [[1, 2], [2, 3], [3, 1], [1, 2]]
    assert [p.created_index for p in topic.partitions] == [0, 0, cluster.index, cluster.index]
    assert topic.created_index == created and topic.revision == cluster.index
    # the added partitions are new, not moved: their replicas start their group themselves
    assert not any(topic.moved(p) for p in range(4))
    assert result.rebalanced_groups == ["g"]
    group = cluster.table.groups["g"]
    assert group.generation == generation + 1
    assert sorted(p for _, p in group.members["m1"].assignment) == [0, 1, 2, 3]
    # a later move of an added partition is a move; the snapshot keeps when it was added
    added_at = cluster.index
    move = metadata_pb2.ReassignPartition(topic="t", partition=3, replicas=[3, 2])
    cluster.ok(command(reassign_partition=move))
    topic = cluster.table.topic("t")
    assert topic is not None and topic.moved(3) and topic.partitions[3].created_index == added_at
    restored = MetadataMachine()
    restored.restore_bytes(cluster.machine.snapshot_bytes())
    assert restored.dump() == cluster.machine.dump()
    # the limit: up to PARTITIONS_MAX in all, not one more
    cluster.ok(grow([1] * (PARTITIONS_MAX - 4), rf=1))
    cluster.rejected(grow([1], rf=1), ErrorCode.INVALID_ARGUMENT)


# -- consumer groups ------------------------------------------------------------------------------


def test_joins_bump_the_generation_and_balance_the_assignment(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1], [2], [3], [1]]))
    first = cluster.ok(cluster.join("g", "m1", ["t"]))
    assert first.generation == 1 and len(owned(first)) == 4
    assert first.rebalanced_groups == ["g"]
    second = cluster.ok(cluster.join("g", "m2", ["t"]))
    assert second.generation == 2 and len(owned(second)) == 2
    group = cluster.table.group("g")
    assert group is not None and group.generation == 2
    assert sorted(group.assignment["m1"] + group.assignment["m2"]) == [("t", p) for p in range(4)]
    assert result_group_matches(second, cluster)


def result_group_matches(result: metadata_pb2.MetaResult, cluster: Cluster) -> bool:
    group = cluster.table.group(result.group.name)
    return group is not None and group.to_proto() == result.group


def test_an_identical_rejoin_changes_nothing(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1], [2]]))
    cluster.ok(cluster.join("g", "m1", ["t"]))
    before = cluster.table.group("g")
    again = cluster.ok(cluster.join("g", "m1", ["t", "t"]))
    assert not again.changed and again.generation == 1 and owned(again) == [("t", 0), ("t", 1)]
    assert cluster.table.group("g") == before


def test_a_new_session_timeout_is_recorded_without_a_rebalance(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]]))
    cluster.ok(cluster.join("g", "m1", ["t"]))
    result = cluster.ok(cluster.join("g", "m1", ["t"], timeout=99_000))
    group = cluster.table.group("g")
    assert result.changed and result.generation == 1 and not result.rebalanced_groups
    assert group is not None and group.members["m1"].session_timeout_ms == 99_000


def test_leaving_and_expiry_keep_the_survivors_partitions(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]] * 6))
    for m in ("m1", "m2", "m3"):
        cluster.ok(cluster.join("g", m, ["t"]))
    before = cluster.table.group("g")
    assert before is not None and before.generation == 3
    result = cluster.ok(cluster.leave("g", "m3"))
    after = cluster.table.group("g")
    assert after is not None and result.generation == 4 and set(after.members) == {"m1", "m2"}
    for m in ("m1", "m2"):
        assert set(before.assignment[m]) <= set(after.assignment[m])
        assert len(after.assignment[m]) == 3
    expired = cluster.ok(cluster.leave("g", "m1", "m2", "gone-already"))
    assert expired.generation == 5
    group = cluster.table.group("g")
    assert group is not None and not group.members and group.generation == 5


def test_leave_errors(cluster: Cluster) -> None:
    cluster.ok(cluster.join("g", "m1", ["t"]))
    cluster.rejected(cluster.leave("h", "m1"), ErrorCode.UNKNOWN_GROUP)
    cluster.rejected(cluster.leave("g", "m9"), ErrorCode.UNKNOWN_MEMBER)
    cluster.rejected(cluster.leave("g"), ErrorCode.INVALID_ARGUMENT)


def test_a_subscription_change_bumps_and_reassigns(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("a", [[1], [2]]))
    cluster.ok(cluster.topic("b", [[1], [2]]))
    cluster.ok(cluster.join("g", "m1", ["a"]))
    result = cluster.ok(cluster.join("g", "m1", ["a", "b"]))
    assert result.generation == 2 and len(owned(result)) == 4


def test_unknown_topics_wait_for_creation_and_deletion_takes_them_away(cluster: Cluster) -> None:
    joined = cluster.ok(cluster.join("g", "m1", ["later"]))
    assert joined.generation == 1 and not owned(joined) and list(joined.unknown_topics) == ["later"]
    cluster.ok(cluster.join("other", "x", ["unrelated"]))
    created = cluster.ok(cluster.topic("later", [[1], [2]]))
    assert list(created.rebalanced_groups) == ["g"]
    group = cluster.table.group("g")
    assert group is not None and group.generation == 2
    assert group.assignment == {"m1": [("later", 0), ("later", 1)]}
    assert group.owner("later", 1) == "m1"
    deleted = cluster.ok(command(delete_topic=metadata_pb2.DeleteTopic(name="later")))
    assert list(deleted.rebalanced_groups) == ["g"]
    group = cluster.table.group("g")
    assert group is not None and group.generation == 3 and group.assignment == {"m1": []}
    assert group.members["m1"].topics == ("later",)
    other = cluster.table.group("other")
    assert other is not None and other.generation == 1


@pytest.mark.parametrize(
    "msg",
    [
        metadata_pb2.JoinGroup(group="", member_id="m", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g", member_id="", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g", member_id="m\n", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g" * 256, member_id="m", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g" * 250, member_id="m", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="..", member_id="m", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group=".", member_id="m", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="a/b", member_id="m", topics=["t"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g", member_id="m", topics=[], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g", member_id="m", topics=["a b"], session_timeout_ms=1),
        metadata_pb2.JoinGroup(group="g", member_id="m", topics=["t"], session_timeout_ms=0),
        metadata_pb2.JoinGroup(group="g", member_id="m", topics=["t"], session_timeout_ms=10**12),
        metadata_pb2.JoinGroup(
            group="g", member_id="m", topics=[f"t{i}" for i in range(1001)], session_timeout_ms=1
        ),
        metadata_pb2.JoinGroup(
            group="g", member_id="m", topics=["t"], session_timeout_ms=1, client_id="c" * 300
        ),
    ],
    ids=[
        "no-group",
        "no-member",
        "control-char",
        "long-group",
        "group-just-past-249",
        "group-dotdot",
        "group-dot",
        "group-slash",
        "no-topics",
        "bad-topic",
        "zero-timeout",
        "huge-timeout",
        "too-many-topics",
        "long-client-id",
    ],
)
def test_join_rejects_invalid_requests(cluster: Cluster, msg: metadata_pb2.JoinGroup) -> None:
    cluster.rejected(command(join_group=msg), ErrorCode.INVALID_ARGUMENT)


def test_group_names_follow_the_topic_name_rule_at_the_limit(cluster: Cluster) -> None:
    for name in ("g" * 249, "a.b_c-D9", "..."):
        cluster.ok(cluster.join(name, "m", ["t"]))
        assert cluster.table.group(name) is not None


def test_delete_group_marks_it_deleting_then_finishes_only_when_empty(cluster: Cluster) -> None:
    cluster.ok(cluster.join("g", "m1", ["t"]))

    def delete(finish: bool = False, empty_since_ms: int = 0) -> bytes:
        msg = metadata_pb2.DeleteGroup(group="g", finish=finish, empty_since_ms=empty_since_ms)
        return command(5000, delete_group=msg)

    cluster.rejected(delete(), ErrorCode.GROUP_NOT_EMPTY)
    cluster.rejected(delete(finish=True), ErrorCode.INVALID_ARGUMENT)  # not deleting
    cluster.ok(command(3000, leave_group=metadata_pb2.LeaveGroup(group="g", member_ids=["m1"])))
    marked = cluster.ok(delete())
    assert marked.changed and marked.group.deleting and list(marked.group.topics) == ["t"]
    group = cluster.table.group("g")
    assert group is not None and group.deleting
    again = cluster.ok(delete())
    assert not again.changed and again.group.deleting
    cluster.rejected(cluster.join("g", "m2", ["t"]), ErrorCode.UNAVAILABLE)  # being deleted
    assert cluster.ok(delete(finish=True)).changed
    assert cluster.table.group("g") is None
    cluster.rejected(delete(), ErrorCode.UNKNOWN_GROUP)
    cluster.rejected(delete(finish=True), ErrorCode.UNKNOWN_GROUP)
    fresh = cluster.ok(cluster.join("g", "m2", ["u"]))  # the name is free again, from scratch
    assert fresh.generation == 1 and list(fresh.group.topics) == ["u"]


def test_an_empty_group_keeps_its_topics_and_the_time_it_emptied(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]]))
    cluster.ok(
        command(
            1000,
            join_group=metadata_pb2.JoinGroup(
                group="g", member_id="m1", topics=["t", "u"], session_timeout_ms=10_000
            ),
        )
    )
    cluster.ok(
        command(
            2000,
            join_group=metadata_pb2.JoinGroup(
                group="g", member_id="m2", topics=["v"], session_timeout_ms=10_000
            ),
        )
    )
    group = cluster.table.group("g")
    assert group is not None and group.topics == ("t", "u", "v") and group.empty_since_ms == 0
    cluster.ok(command(3000, leave_group=metadata_pb2.LeaveGroup(group="g", member_ids=["m2"])))
    group = cluster.table.group("g")
    assert group is not None and group.topics == ("t", "u", "v") and group.empty_since_ms == 0
    cluster.ok(command(4000, leave_group=metadata_pb2.LeaveGroup(group="g", member_ids=["m1"])))
    group = cluster.table.group("g")
    assert group is not None and not group.members
    assert group.topics == ("t", "u", "v") and group.empty_since_ms == 4000
    cluster.ok(
        command(
            5000,
            join_group=metadata_pb2.JoinGroup(
                group="g", member_id="m3", topics=["t"], session_timeout_ms=10_000
            ),
        )
    )
    group = cluster.table.group("g")
    assert group is not None and group.empty_since_ms == 0 and group.topics == ("t", "u", "v")


def test_an_expiry_deletes_only_a_group_still_empty_since_the_time_judged(cluster: Cluster) -> None:
    def leave(now_ms: int) -> bytes:
        return command(now_ms, leave_group=metadata_pb2.LeaveGroup(group="g", member_ids=["m"]))

    def expire(empty_since_ms: int) -> bytes:
        msg = metadata_pb2.DeleteGroup(group="g", empty_since_ms=empty_since_ms)
        return command(99_000, delete_group=msg)

    cluster.ok(cluster.join("g", "m", ["t"]))
    cluster.ok(leave(5000))
    cluster.ok(cluster.join("g", "m", ["t"]))  # joined (and left) after it was judged
    cluster.ok(leave(9000))
    cluster.rejected(expire(5000), ErrorCode.UNAVAILABLE)
    cluster.ok(cluster.join("g", "m", ["t"]))
    cluster.rejected(expire(9000), ErrorCode.GROUP_NOT_EMPTY)
    cluster.ok(leave(12_000))
    assert cluster.ok(expire(12_000)).group.deleting


def test_a_join_copies_that_group_and_shares_every_other(cluster: Cluster) -> None:
    for g in range(50):
        cluster.ok(cluster.join(f"g{g}", "m", ["t"]))
    before = cluster.table
    cluster.ok(cluster.join("g7", "m2", ["t"]))
    after = cluster.table
    assert after.groups is not before.groups
    assert all(after.groups[f"g{g}"] is before.groups[f"g{g}"] for g in range(50) if g != 7)
    assert before.groups["g7"].members.keys() == {"m"}  # the old table is untouched


# -- Spark writer transactions --------------------------------------------------------------------


def test_commit_txn_only_raises_the_watermark(cluster: Cluster) -> None:
    def commit(app: str, version: int) -> bytes:
        return command(commit_txn=metadata_pb2.CommitTxn(app_id=app, version=version))

    assert cluster.table.txn_version("app") is None
    assert cluster.ok(commit("app", 0)).txn_version == 0
    assert cluster.ok(commit("app", 3)).txn_version == 3
    stale = cluster.ok(commit("app", 2))
    assert not stale.changed and stale.txn_version == 3
    assert cluster.table.txn_version("app") == 3
    cluster.rejected(commit("app", -1), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(commit("", 1), ErrorCode.INVALID_ARGUMENT)


def test_commit_txn_keeps_one_watermark_per_app_and_scope(cluster: Cluster) -> None:
    """Two writes in one batch (two topics) each have their own watermark; the scope-less
    watermark of older commands is the scope "" one; a snapshot carries them all."""

    def commit(app: str, version: int, scope: str) -> bytes:
        cmd = metadata_pb2.CommitTxn(app_id=app, version=version, scope=scope)
        return command(commit_txn=cmd)

    assert cluster.ok(commit("app", 5, "")).txn_version == 5
    assert cluster.ok(commit("app", 2, "orders")).txn_version == 2  # not held back by ""'s 5
    assert cluster.ok(commit("app", 3, "audit")).txn_version == 3
    assert cluster.ok(commit("app", 1, "orders")).txn_version == 2
    table = cluster.table
    assert [table.txn_version("app", s) for s in ("", "orders", "audit", "x")] == [5, 2, 3, None]
    assert Table.from_proto(table.to_proto()).txns == table.txns
    cluster.rejected(commit("app", 1, "bad/scope"), ErrorCode.INVALID_ARGUMENT)


def test_txn_watermarks_expire_only_if_not_raised_since_the_time_judged(cluster: Cluster) -> None:
    def commit(app: str, version: int, now_ms: int) -> bytes:
        return command(now_ms, commit_txn=metadata_pb2.CommitTxn(app_id=app, version=version))

    def expire(before_ms: int, *apps: str, scope: str = "") -> bytes:
        refs = [metadata_pb2.TxnRef(app_id=a, scope=scope) for a in apps]
        msg = metadata_pb2.ExpireTxns(txns=refs, committed_before_ms=before_ms)
        return command(90_000, expire_txns=msg)

    cluster.ok(commit("a", 3, 1000))
    cluster.ok(commit("b", 1, 2000))
    assert not cluster.ok(commit("a", 2, 5000)).changed  # stale: not a raise, not dated
    assert dict(cluster.table.txn_committed_ms) == {("a", ""): 1000, ("b", ""): 2000}
    assert not cluster.ok(expire(999, "a", "b", "never")).changed  # just before: kept
    assert cluster.ok(expire(1000, "a", "b")).changed  # at the limit: a goes, b was later
    assert cluster.table.txn_version("a") is None and cluster.table.txn_version("b") == 1
    assert dict(cluster.table.txn_committed_ms) == {("b", ""): 2000}
    cluster.ok(commit("b", 2, 7000))  # raised since it was judged: kept
    assert not cluster.ok(expire(6000, "b")).changed
    assert cluster.ok(commit("a", 0, 8000)).txn_version == 0  # an expired app starts afresh
    cluster.rejected(expire(1000), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(expire(-1, "a"), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(expire(1000, ""), ErrorCode.INVALID_ARGUMENT)
    cluster.rejected(expire(1000, "a", scope="bad/scope"), ErrorCode.INVALID_ARGUMENT)
    scoped = metadata_pb2.CommitTxn(app_id="a", version=4, scope="orders")
    cluster.ok(command(9000, commit_txn=scoped))  # stamped 90_000: the clock never goes back
    assert not cluster.ok(expire(90_000, "a", scope="audit")).changed  # another scope
    assert cluster.ok(expire(90_000, "a", scope="orders")).changed  # only that scope goes
    assert cluster.table.txn_version("a", "orders") is None and cluster.table.txn_version("a") == 0
    too_many = [f"s{i}" for i in range(10_001)]
    cluster.rejected(expire(1000, *too_many), ErrorCode.INVALID_ARGUMENT)
    cluster.ok(expire(1000, *too_many[:10_000]))


# -- snapshots and statistics ---------------------------------------------------------------------


def populated() -> Cluster:
    c = Cluster()
    for b in (1, 2, 3):
        c.broker(b, rack=f"r{b % 2}")
    c.ok(c.topic("a", [[1, 2], [2, 3], [3, 1]]))
    c.ok(c.topic("b", [[2]]))
    c.ok(c.join("g", "m1", ["a", "b", "zzz"]))
    c.ok(c.join("g", "m2", ["a"]))
    c.ok(c.join("empty", "m1", ["b"]))
    c.ok(c.leave("empty", "m1"))
    c.ok(c.join("gone", "m1", ["a"]))
    c.ok(c.leave("gone", "m1"))
    c.ok(command(delete_group=metadata_pb2.DeleteGroup(group="gone")))
    c.ok(command(commit_txn=metadata_pb2.CommitTxn(app_id="spark", version=7)))
    return c


def test_snapshot_restore_round_trips_to_equal_dumps_and_bytes() -> None:
    c = populated()
    data = c.machine.snapshot_bytes()
    other = MetadataMachine()
    other.restore_bytes(data)
    assert other.dump() == c.machine.dump()
    assert other.table == c.table
    assert other.snapshot_bytes() == data
    assert MetadataMachine().snapshot_bytes() == metadata_pb2.ClusterSnapshot(
        next_topic_id=1
    ).SerializeToString(deterministic=True)


def test_a_snapshot_from_before_empty_since_dates_empty_groups_by_its_clock() -> None:
    old = metadata_pb2.ClusterSnapshot(
        applied_index=9,
        clock_ms=77_000,
        groups=[
            metadata_pb2.GroupState(name="empty", generation=4),
            metadata_pb2.GroupState(
                name="live",
                generation=2,
                members=[metadata_pb2.MemberState(member_id="m", topics=["t"])],
            ),
        ],
    )
    machine = MetadataMachine()
    machine.restore_bytes(old.SerializeToString())
    empty, live = machine.table.group("empty"), machine.table.group("live")
    assert empty is not None and empty.empty_since_ms == 77_000 and empty.topics == ()
    assert live is not None and live.empty_since_ms == 0 and live.topics == ("t",)
    again = MetadataMachine()
    again.restore_bytes(machine.snapshot_bytes())
    assert again.dump() == machine.dump()


def test_state_topics_are_the_groups_topics_or_every_topic_when_unknown(cluster: Cluster) -> None:
    cluster.ok(cluster.topic("t", [[1]]))
    cluster.ok(cluster.topic("u", [[2]]))
    cluster.ok(cluster.join("g", "m", ["u", "gone"]))
    table = cluster.table
    group = table.group("g")
    assert group is not None and table.state_topics(group) == ["u"]  # existing ones only
    legacy = GroupInfo("old", 3)  # empty, from a snapshot without topics: leased who knows where
    assert table.state_topics(legacy) == ["t", "u"]


def test_a_snapshot_from_before_committed_ms_dates_watermarks_by_its_clock() -> None:
    old = metadata_pb2.ClusterSnapshot(
        applied_index=3, clock_ms=55_000, txns=[metadata_pb2.TxnWatermark(app_id="s", version=4)]
    )
    machine = MetadataMachine()
    machine.restore_bytes(old.SerializeToString())
    assert machine.table.txn_version("s") == 4
    assert dict(machine.table.txn_committed_ms) == {("s", ""): 55_000}


def test_restore_of_garbage_raises_and_keeps_the_table() -> None:
    c = populated()
    before = c.machine.dump()
    with pytest.raises(errors.MalformedCommand):
        c.machine.restore_bytes(b"\xff\x00garbage")
    assert c.machine.dump() == before


def test_statistics_count_state_and_outcomes() -> None:
    c = populated()
    c.rejected(c.leave("nope", "m"), ErrorCode.UNKNOWN_GROUP)
    stats = c.machine.statistics()
    assert stats["brokers"] == 3 and stats["topics"] == 2 and stats["partitions"] == 4
    assert stats["groups"] == 3 and stats["members"] == 2 and stats["txn_apps"] == 1
    assert stats["applied_by_op"]["join_group"] == 4
    assert stats["rejected_by_op_and_code"] == {"leave_group:UNKNOWN_GROUP": 1}
    assert stats["applied_index"] == c.index and not stats["failed"]


# -- randomized: command sequences, replicas, snapshots, replays ----------------------------------

TOPICS = ("a", "b", "c.dlq", "d")
GROUPS = ("g1", "g2")
MEMBERS = ("m1", "m2", "m3", "m4")


def random_command(rng: random.Random, table: Table) -> bytes:
    """One plausible, often invalid, command, planned against ``table`` where a frontend would
    be (topic ids, drain moves); 1 in 20 is random bytes."""
    now_ms = rng.randrange(0, 10_000)
    kind = rng.randrange(21)
    brokers = sorted(table.brokers)

    def some_replicas(n: int) -> list[int]:
        pool = [*brokers, rng.randrange(0, 7)] if rng.random() < 0.1 else brokers or [1]
        return rng.sample(pool, min(n, len(pool))) if pool else []

    if kind == 0:
        return rng.randbytes(rng.randrange(0, 40))
    if kind in (1, 2):
        b = rng.randrange(0, 6)
        host = rng.choice([b, b, rng.randrange(6)])
        msg: Message = metadata_pb2.RegisterBroker(
            broker_id=b,
            client_addr=f"h{host}:1",
            raft_addr=f"h{b}:2",
            rack=rng.choice(["", "r1", "r2"]),
        )
        return command(now_ms, register_broker=msg)
    if kind == 3:
        b = rng.choice([*brokers, 9]) if brokers else 1
        live = [x for x in brokers if x != b]
        frontend = MetadataFrontend()
        if rng.random() < 0.7:
            try:
                return frontend.deregister_broker(table, b, live_ids=live, now_ms=now_ms)
            except errors.RaftqError:
                pass
        return command(now_ms, deregister_broker=metadata_pb2.DeregisterBroker(broker_id=b))
    if kind in (4, 5, 6):
        rf = rng.randrange(1, 4)
        partitions = [some_replicas(rf) for _ in range(rng.randrange(1, 5))]
        topic_id = table.next_topic_id if rng.random() < 0.8 else rng.randrange(0, 8)
        msg = metadata_pb2.CreateTopic(
            name=rng.choice(TOPICS),
            topic_id=topic_id,
            config=config(
                lease_ms=rng.choice([0, 1000, 30_000]),
                dead_letter_topic=rng.choice(["", "a", "c.dlq"]),
            ),
            replication_factor=rf,
            replicas=[b for p in partitions for b in p],
        )
        return command(now_ms, create_topic=msg)
    if kind == 7:
        name = rng.choice(TOPICS)
        topic = table.topic(name)
        topic_id = rng.choice([0, topic.topic_id if topic else 0, rng.randrange(8)])
        return command(now_ms, delete_topic=metadata_pb2.DeleteTopic(name=name, topic_id=topic_id))
    if kind == 8:
        changed = config(
            lease_ms=rng.choice([0, 2000, 30_000]),
            ordering=rng.choice([common_pb2.FIFO, common_pb2.PRIORITY]),
        )
        msg = metadata_pb2.AlterTopicConfig(name=rng.choice(TOPICS), config=changed)
        return command(now_ms, alter_topic_config=msg)
    if kind in (9, 10):
        msg = metadata_pb2.ReassignPartition(
            topic=rng.choice(TOPICS),
            partition=rng.randrange(-1, 5),
            replicas=some_replicas(rng.randrange(1, 4)),
        )
        return command(now_ms, reassign_partition=msg)
    if kind in (11, 12, 13, 14):
        msg = metadata_pb2.JoinGroup(
            group=rng.choice(GROUPS),
            member_id=rng.choice(MEMBERS),
            topics=rng.sample(TOPICS, rng.randrange(1, 4)),
            session_timeout_ms=rng.choice([0, 6_000, 45_000, 45_000]),
            client_id=rng.choice(["", "c1"]),
        )
        return command(now_ms, join_group=msg)
    if kind in (15, 16):
        msg = metadata_pb2.LeaveGroup(
            group=rng.choice(GROUPS), member_ids=rng.sample(MEMBERS, rng.randrange(0, 3))
        )
        return command(now_ms, leave_group=msg)
    if kind == 17:
        name = rng.choice(GROUPS)
        group = table.group(name)
        since = rng.choice([0, 0, group.empty_since_ms if group else 0, rng.randrange(10_000)])
        msg_delete = metadata_pb2.DeleteGroup(
            group=name, empty_since_ms=since, finish=rng.random() < 0.4
        )
        return command(now_ms, delete_group=msg_delete)
    if kind == 18:
        refs = [
            metadata_pb2.TxnRef(app_id=a, scope=rng.choice(["", "", "a"]))
            for a in rng.sample(["s1", "s2", "s3"], rng.randrange(0, 3))
        ]
        expire = metadata_pb2.ExpireTxns(txns=refs, committed_before_ms=rng.randrange(-1, 9000))
        return command(now_ms, expire_txns=expire)
    msg_txn = metadata_pb2.CommitTxn(
        app_id=rng.choice(["s1", "s2"]), version=rng.randrange(-1, 6), scope=rng.choice(["", "a"])
    )
    return command(now_ms, commit_txn=msg_txn)


def check_invariants(table: Table) -> None:
    assert table.txns.keys() == table.txn_committed_ms.keys()
    ids = [t.topic_id for t in table.topics.values()]
    assert len(set(ids)) == len(ids) and all(0 < i < table.next_topic_id for i in ids)
    for name, topic in table.topics.items():
        assert topic.name == name and topic.partitions
        for p in topic.partitions:
            assert p.replicas and len(set(p.replicas)) == len(p.replicas)
            assert set(p.replicas) <= table.brokers.keys(), (name, p, sorted(table.brokers))
    for name, group in table.groups.items():
        assert group.name == name and group.topics == tuple(sorted(set(group.topics)))
        assert set(group.topics) >= group.subscribed_topics()
        assert (group.empty_since_ms == 0) == bool(group.members), name
        assert not (group.deleting and group.members), name
        owners: dict[tuple[str, int], str] = {}
        for member_id, member in group.members.items():
            assert member.topics == tuple(sorted(set(member.topics)))
            for tp in member.assignment:
                assert tp[0] in member.topics and tp not in owners, (name, tp)
                owners[tp] = member_id
        wanted = {
            (t, i)
            for t, n in table.partition_counts(group.subscribed_topics()).items()
            for i in range(n)
        }
        assert set(owners) == wanted, (name, sorted(owners), sorted(wanted))


def result_key(result: metadata_pb2.MetaResult) -> bytes:
    return result.SerializeToString(deterministic=True)


def run_sequence(rng: random.Random, steps: int, snapshot_at: int) -> None:
    leader, follower, late = MetadataMachine(), MetadataMachine(), MetadataMachine()
    log: list[tuple[bytes, int]] = []
    generations: dict[str, int] = {}
    for index in range(1, steps + 1):
        data = random_command(rng, leader.table)
        log.append((data, index))
        expected = leader.apply(data, index)
        assert result_key(follower.apply(data, index)) == result_key(expected)
        assert not leader.failed, expected.message
        if index == snapshot_at:
            late.restore_bytes(leader.snapshot_bytes())
        elif index > snapshot_at:
            assert result_key(late.apply(data, index)) == result_key(expected)
        check_invariants(leader.table)
        for name, group in leader.table.groups.items():
            assert group.generation >= generations.get(name, 0)
            generations[name] = group.generation
        generations = {n: g for n, g in generations.items() if n in leader.table.groups}
    assert follower.dump() == leader.dump()
    if snapshot_at <= steps:
        assert late.dump() == leader.dump()
        assert late.snapshot_bytes() == leader.snapshot_bytes()
    before = leader.dump()
    for data, index in log:
        assert leader.apply(data, index).skipped
    assert leader.dump() == before
    restored = MetadataMachine()
    restored.restore_bytes(leader.snapshot_bytes())
    assert restored.dump() == before


@PROPERTY
@hypothesis_seed(SEED)
@given(
    rng=st.randoms(use_true_random=False),
    steps=st.integers(1, 80),
    snapshot_at=st.integers(1, 90),
)
def test_random_sequences_agree_across_replicas_snapshots_and_replays(
    rng: random.Random, steps: int, snapshot_at: int
) -> None:
    print(f"metadata machine seed: {SEED} (replay: RAFTQ_SEED={SEED})")
    run_sequence(rng, steps, snapshot_at)


def test_a_long_seeded_sequence() -> None:
    print(f"metadata machine seed: {SEED} (replay: RAFTQ_SEED={SEED})")
    run_sequence(random.Random(SEED), 600, 300)


@PROPERTY
@hypothesis_seed(SEED)
@given(data=st.binary(max_size=200))
def test_bad_bytes_never_raise_and_change_nothing_but_the_index(data: bytes) -> None:
    c = populated()
    before = c.machine.dump()
    result = c.apply(data)
    assert not c.machine.failed, result.message
    if result.error != ErrorCode.OK:
        after = c.machine.dump()
        after["applied_index"] = before["applied_index"]
        assert after == before


@PROPERTY
@hypothesis_seed(SEED)
@given(st.data())
def test_mutated_commands_never_raise(data: st.DataObject) -> None:
    c = populated()
    rng = data.draw(st.randoms(use_true_random=False))
    raw = bytearray(random_command(rng, c.table))
    for _ in range(data.draw(st.integers(1, 4))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    c.apply(bytes(raw))
    assert not c.machine.failed
    check_invariants(c.table)


_REPLAY_SCRIPT = """
import hashlib, random, sys
sys.path.insert(0, {root!r})
from tests.unit.test_metadata_machine import random_command
from raftq.metadata.machine import MetadataMachine
rng, m, h = random.Random({seed}), MetadataMachine(), hashlib.sha256()
for index in range(1, 301):
    h.update(m.apply(random_command(rng, m.table), index).SerializeToString(deterministic=True))
h.update(m.snapshot_bytes())
print(h.hexdigest())
"""


def _replay_digest(seed: int, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    script = _REPLAY_SCRIPT.format(root=str(ROOT), seed=seed)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_processes_with_different_hash_seeds_compute_the_same_table() -> None:
    """Set and dict orders of str differ between processes: apply must not depend on them."""
    print(f"metadata machine seed: {SEED} (replay: RAFTQ_SEED={SEED})")
    digests = {_replay_digest(SEED, hash_seed) for hash_seed in ("1", "2", "3")}
    assert len(digests) == 1, digests


def test_a_member_is_bound_to_the_principal_that_joined_and_survives_a_snapshot() -> None:
    c = Cluster()

    def join(principal: str) -> bytes:
        return command(
            join_group=metadata_pb2.JoinGroup(
                group="g",
                member_id="m-1",
                topics=["t"],
                session_timeout_ms=10_000,
                principal=principal,
            )
        )

    c.ok(join("alice"))
    c.rejected(join("bob"), ErrorCode.PERMISSION_DENIED)
    c.rejected(join(""), ErrorCode.PERMISSION_DENIED)  # nor the anonymous principal
    c.ok(join("alice"))  # its own rejoin
    restored = MetadataMachine()
    restored.restore_bytes(c.machine.snapshot_bytes())
    group = restored.table.group("g")
    assert group is not None and group.members["m-1"].principal == "alice"
