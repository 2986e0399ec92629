"""The checked commands (transport/request_checks.py): every RPC that carries client input is
checked once at the edge into a type of its own, and each handler takes exactly that type.

mypy refuses a raw request where a checked command is due and a check paired with the wrong
protocol method; these tests add what it cannot see, from the annotations (at run time each
checked type is a ``NewType`` of its own): each broker handler's own parameter is the checked
type (a handler taking the wider raw type would still satisfy its protocol), each checked type
is made by one check, and the RPCs that pass ``no_check`` carry no field.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest

from raftq.handlers.admin import AdminHandler
from raftq.handlers.admin_groups import GroupAdmin
from raftq.handlers.consume import ConsumeHandler
from raftq.handlers.groups import GroupHandler
from raftq.handlers.log import LogHandler
from raftq.handlers.produce import ProduceHandler
from raftq.metadata.machine import SESSION_TIMEOUT_MS_MAX, SUBSCRIPTIONS_MAX
from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.proto import api_pb2, common_pb2, errors
from raftq.proto.limits import BACKUP_CHUNK_BYTES_MAX, BACKUP_CHUNK_BYTES_MIN
from raftq.transport import grpc_server
from raftq.transport import request_checks as rc

SERVICERS: dict[str, tuple[type, type, list[type]]] = {
    "Producer": (grpc_server.ProducerServicer, grpc_server.ProducerApi, [ProduceHandler]),
    "Consumer": (
        grpc_server.ConsumerServicer,
        grpc_server.ConsumerApi,
        [ConsumeHandler, GroupHandler],
    ),
    "Log": (grpc_server.LogServicer, grpc_server.LogApi, [LogHandler]),
    "Admin": (grpc_server.AdminServicer, grpc_server.AdminApi, [AdminHandler, GroupAdmin]),
}
# The servicer methods written out (streams, and the calls that pass more than the request):
# the protocol method and the check each one runs.
SPECIAL: dict[str, tuple[str, Callable[..., Any]]] = {
    "SendStream": ("send", rc.check_send),
    "JoinGroup": ("join_group", rc.check_join_group),
    "Poll": ("poll", rc.check_poll),
    "PollStream": ("poll", rc.check_poll_start),
    "BackupPartition": ("backup_partition", rc.check_backup_partition),
}


def _request_type(function: Callable[..., Any]) -> Any:
    hints = typing.get_type_hints(function)
    name = next(p for p in inspect.signature(function).parameters if p != "self")
    return hints[name]


def _handler_method(handlers: list[type], method: str) -> Callable[..., Any] | None:
    for cls in handlers:
        if method in vars(cls):
            function: Callable[..., Any] = vars(cls)[method]
            return function
    return None


def _rpcs() -> list[tuple[str, str]]:
    return [
        (service, rpc)
        for service in SERVICERS
        for rpc in api_pb2.DESCRIPTOR.services_by_name[service].methods_by_name
    ]


@pytest.mark.parametrize(("service", "rpc"), _rpcs())
def test_every_rpc_is_checked_into_the_type_its_handler_takes(service: str, rpc: str) -> None:
    servicer, protocol, handlers = SERVICERS[service]
    serve = vars(servicer)[rpc]
    if rpc in SPECIAL:
        method, check = SPECIAL[rpc]
        if rpc == "PollStream":  # its polls are made from the checked start
            assert typing.get_type_hints(rc.stream_poll)["start"] is rc.CheckedPollStart
            check = rc.stream_poll
    else:
        method, check = serve.handler.__name__, serve.check
    checked = typing.get_type_hints(check)["return"]
    message = api_pb2.DESCRIPTOR.services_by_name[service].methods_by_name[rpc].input_type
    if check is grpc_server.no_check:
        assert not message.fields, f"{rpc} carries input: give it a check and a checked type"
        return
    assert checked.__name__.startswith("Checked"), (rpc, checked)
    assert checked.__supertype__.DESCRIPTOR.name in (message.name, "PollRequest"), rpc
    assert _request_type(getattr(protocol, method)) is checked, (rpc, method)
    implementation = _handler_method(handlers, method)
    assert implementation is not None, f"no handler implements {service}.{method}"
    assert _request_type(implementation) is checked, (rpc, implementation.__qualname__)


def test_each_checked_type_is_made_by_one_check() -> None:
    made: dict[Any, list[str]] = {}
    for name, function in vars(rc).items():
        if name.startswith(("check_", "stream_")) and callable(function):
            returned = typing.get_type_hints(function).get("return")
            if getattr(returned, "__name__", "").startswith("Checked"):
                made.setdefault(returned, []).append(name)
    declared = [v for k, v in vars(rc).items() if k.startswith("Checked")]
    assert set(made) == set(declared)
    assert {k.__name__: v for k, v in made.items() if len(v) > 1} == {
        "CheckedPoll": ["check_poll", "stream_poll"]
    }


# -- the limits, at, just past and far past (the checks alone; the process tests send them) ----

Case = tuple[str, Callable[[Any], Any], Any, str | None]  # what is refused names its field

TOPIC_AT, TOPIC_PAST, TOPIC_FAR = "t" * 249, "t" * 250, "t" * 100_000
ID_AT, ID_PAST, ID_FAR = "i" * 255, "i" * 256, "i" * 100_000
A = api_pb2


def _member(**kw: Any) -> dict[str, Any]:
    return {"group": "g", "member_id": "m", "generation": 1, **kw}


def _refs(n: int) -> list[api_pb2.RecordRef]:
    return [A.RecordRef(topic="t", partition=0, offset=i, delivery_count=1) for i in range(n)]


CASES: list[Case] = [
    # Producer
    ("send topic at", rc.check_send, A.SendRequest(topic=TOPIC_AT, values=[b""]), None),
    ("send topic past", rc.check_send, A.SendRequest(topic=TOPIC_PAST, values=[b""]), "topic"),
    ("send topic far", rc.check_send, A.SendRequest(topic=TOPIC_FAR, values=[b""]), "topic"),
    ("send dot topic", rc.check_send, A.SendRequest(topic="..", values=[b""]), "topic"),
    ("send records at", rc.check_send, A.SendRequest(topic="t", values=[b""] * 100_000), None),
    (
        "send records past",
        rc.check_send,
        A.SendRequest(topic="t", values=[b""] * 100_001),
        "number of records",
    ),
    ("send no records", rc.check_send, A.SendRequest(topic="t"), "number of records"),
    (
        "send producer id past",
        rc.check_send,
        A.SendRequest(topic="t", values=[b""], producer_id=ID_PAST, partition=0, sequence=0),
        "producer_id",
    ),
    (
        "send sequence below",
        rc.check_send,
        A.SendRequest(topic="t", values=[b""], producer_id="p", partition=0, sequence=-1),
        "sequence",
    ),
    # Consumer
    ("join group at", rc.check_join_group, A.JoinGroupRequest(group=TOPIC_AT, topics=["t"]), None),
    (
        "join group past",
        rc.check_join_group,
        A.JoinGroupRequest(group=TOPIC_PAST, topics=["t"]),
        "group",
    ),
    (
        "join topics at",
        rc.check_join_group,
        A.JoinGroupRequest(group="g", topics=[f"t{i}" for i in range(SUBSCRIPTIONS_MAX)]),
        None,
    ),
    (
        "join topics past",
        rc.check_join_group,
        A.JoinGroupRequest(group="g", topics=[f"t{i}" for i in range(SUBSCRIPTIONS_MAX + 1)]),
        "number of topics",
    ),
    (
        "join topics repeated",
        rc.check_join_group,
        A.JoinGroupRequest(group="g", topics=["t"] * (SUBSCRIPTIONS_MAX + 1)),
        None,
    ),
    (
        "join session at",
        rc.check_join_group,
        A.JoinGroupRequest(group="g", topics=["t"], session_timeout_ms=SESSION_TIMEOUT_MS_MAX),
        None,
    ),
    (
        "join session past",
        rc.check_join_group,
        A.JoinGroupRequest(group="g", topics=["t"], session_timeout_ms=SESSION_TIMEOUT_MS_MAX + 1),
        "session_timeout_ms",
    ),
    (
        "join start_from past",
        rc.check_join_group,
        A.JoinGroupRequest(group="g", topics=["t"], start_from=2),  # type: ignore[arg-type]
        "start_from",
    ),
    (
        "heartbeat member at",
        rc.check_heartbeat,
        A.HeartbeatRequest(**_member(member_id=ID_AT)),
        None,
    ),
    (
        "heartbeat member past",
        rc.check_heartbeat,
        A.HeartbeatRequest(**_member(member_id=ID_PAST)),
        "member_id",
    ),
    (
        "heartbeat generation below",
        rc.check_heartbeat,
        A.HeartbeatRequest(**_member(generation=-1)),
        "generation",
    ),
    (
        "leave member far",
        rc.check_leave_group,
        A.LeaveGroupRequest(group="g", member_id=ID_FAR),
        "member_id",
    ),
    (
        "poll records at",
        rc.check_poll,
        A.PollRequest(**_member(max_records=MAX_LEASE_RECORDS)),
        None,
    ),
    (
        "poll records past",
        rc.check_poll,
        A.PollRequest(**_member(max_records=MAX_LEASE_RECORDS + 1)),
        "max_records",
    ),
    ("poll records none", rc.check_poll, A.PollRequest(**_member(max_records=0)), "max_records"),
    (
        "poll wait past",
        rc.check_poll,
        A.PollRequest(**_member(max_records=1, max_wait_ms=rc.POLL_WAIT_MS_MAX + 1)),
        "max_wait_ms",
    ),
    (
        "poll lease at",
        rc.check_poll,
        A.PollRequest(**_member(max_records=1, lease_ms=MAX_LEASE_MS)),
        None,
    ),
    (
        "poll lease past",
        rc.check_poll,
        A.PollRequest(**_member(max_records=1, lease_ms=MAX_LEASE_MS + 1)),
        "lease_ms",
    ),
    (
        "poll stream lease far",
        rc.check_poll_start,
        A.PollStart(**_member(lease_ms=2**62)),
        "lease_ms",
    ),
    ("ack refs at", rc.check_ack, A.AckRequest(**_member(refs=_refs(MAX_REFS))), None),
    (
        "ack refs past",
        rc.check_ack,
        A.AckRequest(**_member(refs=_refs(MAX_REFS + 1))),
        "number of refs",
    ),
    ("ack no refs", rc.check_ack, A.AckRequest(**_member()), "number of refs"),
    (
        "nack delay at",
        rc.check_nack,
        A.NackRequest(**_member(refs=_refs(1), delay_ms=MAX_DELAY_MS)),
        None,
    ),
    (
        "nack delay past",
        rc.check_nack,
        A.NackRequest(**_member(refs=_refs(1), delay_ms=MAX_DELAY_MS + 1)),
        "delay_ms",
    ),
    (
        "extend lease past",
        rc.check_extend_lease,
        A.ExtendLeaseRequest(**_member(refs=_refs(1), lease_ms=MAX_LEASE_MS + 1)),
        "lease_ms",
    ),
    (
        "extend lease none",
        rc.check_extend_lease,
        A.ExtendLeaseRequest(**_member(refs=_refs(1), lease_ms=0)),
        "lease_ms",
    ),
    # Log
    (
        "fetch records at",
        rc.check_fetch,
        A.FetchRequest(topic="t", max_records=MAX_LEASE_RECORDS),
        None,
    ),
    (
        "fetch records past",
        rc.check_fetch,
        A.FetchRequest(topic="t", max_records=MAX_LEASE_RECORDS + 1),
        "max_records",
    ),
    (
        "fetch offset below",
        rc.check_fetch,
        A.FetchRequest(topic="t", max_records=1, offset=-1),
        "offset",
    ),
    ("offsets topic past", rc.check_list_offsets, A.ListOffsetsRequest(topic=TOPIC_PAST), "topic"),
    (
        "producer state partitions at",
        rc.check_producer_state,
        A.ProducerStateRequest(topic="t", producer_id="p", partitions=range(rc.PARTITIONS_MAX)),
        None,
    ),
    (
        "producer state partitions past",
        rc.check_producer_state,
        A.ProducerStateRequest(topic="t", producer_id="p", partitions=range(rc.PARTITIONS_MAX + 1)),
        "number of partitions",
    ),
    # Admin
    (
        "create partitions at",
        rc.check_create_topic,
        A.CreateTopicRequest(name="t", partitions=rc.PARTITIONS_MAX),
        None,
    ),
    (
        "create partitions past",
        rc.check_create_topic,
        A.CreateTopicRequest(name="t", partitions=rc.PARTITIONS_MAX + 1),
        "partitions",
    ),
    (
        "create replication past",
        rc.check_create_topic,
        A.CreateTopicRequest(name="t", replication_factor=rc.REPLICATION_FACTOR_MAX + 1),
        "replication_factor",
    ),
    (
        "create lease past",
        rc.check_create_topic,
        A.CreateTopicRequest(name="t", config=A.TopicConfigUpdate(lease_ms=MAX_LEASE_MS + 1)),
        "config.lease_ms",
    ),
    ("delete topic past", rc.check_delete_topic, A.DeleteTopicRequest(name=TOPIC_PAST), "name"),
    ("describe topic at", rc.check_describe_topic, A.DescribeTopicRequest(name=TOPIC_AT), None),
    (
        "alter nothing",
        rc.check_alter_topic_config,
        A.AlterTopicConfigRequest(name="t"),
        "config sets no field",
    ),
    (
        "add partitions past",
        rc.check_add_partitions,
        A.AddPartitionsRequest(name="t", partitions=rc.PARTITIONS_MAX + 1),
        "partitions",
    ),
    (
        "purge partition below",
        rc.check_purge_topic,
        A.PurgeTopicRequest(topic="t", partition=-1),
        "partition",
    ),
    ("update neither", rc.check_update_record, A.UpdateRecordRequest(topic="t"), "priority"),
    (
        "cancel offset below",
        rc.check_cancel_record,
        A.CancelRecordRequest(topic="t", offset=-1),
        "offset",
    ),
    (
        "describe group past",
        rc.check_describe_group,
        A.DescribeGroupRequest(group=TOPIC_PAST),
        "group",
    ),
    ("delete group past", rc.check_delete_group, A.DeleteGroupRequest(group="a b"), "group"),
    (
        "seek to far",
        rc.check_seek_group,
        A.SeekGroupRequest(group="g", topic="t", to=99),  # type: ignore[arg-type]
        "SeekTo",
    ),
    (
        "schedule name past",
        rc.check_create_schedule,
        A.CreateScheduleRequest(
            topic="t", schedule=common_pb2.Schedule(name=ID_PAST, interval_ms=1000)
        ),
        "schedule.name",
    ),
    (
        "schedule bad cron",
        rc.check_create_schedule,
        A.CreateScheduleRequest(
            topic="t", schedule=common_pb2.Schedule(name="s", cron="61 * * * *")
        ),
        "cron",
    ),
    ("pause name none", rc.check_pause_schedule, A.PauseScheduleRequest(topic="t"), "name"),
    (
        "delete schedule name far",
        rc.check_delete_schedule,
        A.DeleteScheduleRequest(topic="t", name=ID_FAR),
        "name",
    ),
    (
        "list schedules topic far",
        rc.check_list_schedules,
        A.ListSchedulesRequest(topic=TOPIC_FAR),
        "topic",
    ),
    ("remove broker none", rc.check_remove_broker, A.RemoveBrokerRequest(broker_id=0), "broker_id"),
    (
        "move replicas past",
        rc.check_move_partition,
        A.MovePartitionRequest(topic="t", replicas=range(1, rc.REPLICATION_FACTOR_MAX + 2)),
        "replicas",
    ),
    (
        "backup chunk at",
        rc.check_backup_partition,
        A.BackupPartitionRequest(topic="t", chunk_bytes=BACKUP_CHUNK_BYTES_MAX),
        None,
    ),
    (
        "backup chunk past",
        rc.check_backup_partition,
        A.BackupPartitionRequest(topic="t", chunk_bytes=BACKUP_CHUNK_BYTES_MAX + 4096),
        "chunk_bytes",
    ),
    (
        "backup chunk below",
        rc.check_backup_partition,
        A.BackupPartitionRequest(topic="t", chunk_bytes=BACKUP_CHUNK_BYTES_MIN - 1),
        "chunk_bytes",
    ),
    (
        "backup digest short",
        rc.check_backup_partition,
        A.BackupPartitionRequest(topic="t", have=[b"x" * 31]),
        "have",
    ),
    ("commit txn at", rc.check_commit_txn, A.CommitTxnRequest(app_id=ID_AT, scope=TOPIC_AT), None),
    (
        "commit txn scope past",
        rc.check_commit_txn,
        A.CommitTxnRequest(app_id="a", scope=TOPIC_PAST),
        "scope",
    ),
    (
        "commit txn version below",
        rc.check_commit_txn,
        A.CommitTxnRequest(app_id="a", version=-1),
        "version",
    ),
    ("get txn app far", rc.check_get_txn, A.GetTxnRequest(app_id=ID_FAR), "app_id"),
]


@pytest.mark.parametrize(("name", "check", "request_", "refused"), CASES, ids=[c[0] for c in CASES])
def test_each_limit_at_just_past_and_far_past(
    name: str, check: Callable[[Any], Any], request_: Any, refused: str | None
) -> None:
    before = request_.SerializeToString()
    if refused is None:
        assert check(request_) is request_  # the checked command is the request itself
    else:
        with pytest.raises(errors.InvalidArgument) as info:
            check(request_)
        assert refused in info.value.message, info.value.message
    assert request_.SerializeToString() == before  # a check never changes its request
