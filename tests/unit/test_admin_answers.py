"""How Admin answers are read from the API's protobufs (broker/client/admin_calls.py) and
shown as JSON (broker/client/types.py ``to_dict``): every field of the API message is carried,
under the API's name in JSON (the HTTP API's and ``raftq ... --json``'s shape), integers as
numbers, enums by name, bytes as base64, an absent key as null."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message as ProtoMessage

from raftq.client import admin_calls as calls
from raftq.client import types
from raftq.proto import api_pb2, common_pb2


def assert_api_shape(data: Any, message: ProtoMessage) -> None:
    """``data`` (to_dict of what ``message`` was read into) has exactly ``message``'s field
    names, nested messages likewise (repeated ones: each item)."""
    assert set(data) == {f.name for f in message.DESCRIPTOR.fields}, type(message)
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.is_repeated:
            assert len(data[field.name]) == len(value)
            for item, sub in zip(data[field.name], value, strict=True):
                assert_api_shape(item, sub)
        else:
            assert_api_shape(data[field.name], value)


def test_every_field_of_a_topic_description_is_carried_under_its_api_name() -> None:
    config = common_pb2.TopicConfig(
        ordering=common_pb2.FAIR,
        lease_ms=5,
        max_deliveries=3,
        dead_letter_topic="t.dlq",
        ttl_action=common_pb2.TTL_DEAD_LETTER,
        fair_key="tenant",
    )
    partition = api_pb2.PartitionDescription(
        partition=0, replicas=[1, 2], leader=1, leader_addr="h:1", log_start=2, end=9, in_sync=[1]
    )
    message = api_pb2.TopicDescription(
        name="t", replication_factor=2, config=config, partitions=[partition]
    )
    info = calls.read_topic_info(message)
    data = types.to_dict(info)
    assert_api_shape(data, message)
    assert data["partitions"] == [
        {
            "partition": 0,
            "replicas": [1, 2],
            "leader": 1,
            "leader_addr": "h:1",
            "log_start": 2,
            "end": 9,
            "in_sync": [1],
        }
    ]
    assert data["config"]["ordering"] == "FAIR" and data["config"]["ttl_action"] == (
        "TTL_DEAD_LETTER"
    )
    assert info.partitions[0].isr == (1,) and info.config.ordering == "FAIR"


def test_groups_are_carried_whole_and_named_group_in_json() -> None:
    lag = api_pb2.PartitionLag(
        topic="t", partition=1, committed=2, end=5, lag=3, pending=1, leased=1, member_id="m"
    )
    member = api_pb2.GroupMember(
        member_id="m",
        topics=["t"],
        assignment=[api_pb2.TopicPartitions(topic="t", partitions=[1])],
        session_timeout_ms=10,
        last_heartbeat_ms=11,
    )
    message = api_pb2.GroupDescription(
        group="g", generation=4, members=[member], partitions=[lag], empty_since_ms=0
    )
    info = calls.read_group_info(message)
    assert_api_shape(types.to_dict(info), message)
    assert info.group_id == "g" and info.members[0].assignment[0].partitions == (1,)
    assert types.to_dict(info)["group"] == "g"


def test_a_schedule_keeps_an_absent_key_apart_from_an_empty_one() -> None:
    template = common_pb2.Record(value=b"\xff", headers={"h": b"\x00"})
    message = common_pb2.Schedule(
        name="s", interval_ms=1000, template=template, catch_up=common_pb2.CATCH_UP_SKIP
    )
    absent = calls.read_schedule(message)
    assert absent.template.key is None and absent.catch_up == "CATCH_UP_SKIP"
    data = types.to_dict(absent)
    assert_api_shape(data, message)
    assert data["template"]["key"] is None and data["template"]["value"] == "/w=="
    assert data["template"]["headers"] == {"h": "AA=="} and data["interval_ms"] == 1000
    message.template.key = b""
    assert calls.read_schedule(message).template.key == b""


def test_a_cluster_description_and_an_unknown_enum_number() -> None:
    broker = api_pb2.BrokerDescription(id=1, client_addr="a", alive=True, metadata_voter=True)
    message = api_pb2.ClusterDescription(
        brokers=[broker], metadata_leader=1, health=api_pb2.DEGRADED, problems=["p"], topics=2
    )
    info = calls.read_cluster_info(message)
    assert_api_shape(types.to_dict(info), message)
    assert info.health == "DEGRADED" and info.brokers[0].alive
    message.health = 9  # type: ignore[assignment]  # a newer broker's: shown as its number
    assert calls.read_cluster_info(message).health == "9"
