"""What each :class:`Admin` call sends and how its answer is read, shared by the thread
(:class:`raftq.client.admin.Admin`) and asyncio (:class:`raftq.client.aio.AsyncAdmin`) clients:
a :class:`Call` names the stub, the method, the request and the function that turns the
response into the call's result. Pure: no channel, no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

from raftq.proto import api_pb2, common_pb2, errors, partition_pb2

R = TypeVar("R")
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class Call(Generic[R]):
    service: str  # the stub: "admin", "log", "consumer", "producer"
    method: str
    request: Any
    result: Callable[[Any], R]
    timeout_min_s: float = 0.0  # a call that may take longer than the request timeout


def _same(response: Any) -> Any:
    return response


def _nothing(_: Any) -> None:
    return None


def _typed(build: Callable[P, T]) -> Callable[P, T]:
    """``build`` with protobuf's own refusals of a value (out of its field's range, of the wrong
    type: ``partition=2**40`` raises ValueError) turned into InvalidArgument, as the broker
    would answer."""

    @functools.wraps(build)
    def typed(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return build(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            raise errors.InvalidArgument(f"{build.__name__}: {exc}") from None

    return typed


@_typed
def config_update(config: Mapping[str, Any]) -> api_pb2.TopicConfigUpdate:
    """Keyword settings (``ordering="priority"``, ``lease_ms=5000``...) → TopicConfigUpdate."""
    update = api_pb2.TopicConfigUpdate()
    for name, value in config.items():
        if value is None:
            continue
        if name not in api_pb2.TopicConfigUpdate.DESCRIPTOR.fields_by_name:
            known = ", ".join(api_pb2.TopicConfigUpdate.DESCRIPTOR.fields_by_name)
            raise errors.InvalidArgument(f"no topic setting {name!r}; known: {known}")
        if name == "ordering" and isinstance(value, str):
            if value.upper() not in ("FIFO", "PRIORITY", "FAIR"):
                raise errors.InvalidArgument(f"ordering {value!r}: use fifo, priority or fair")
            value = common_pb2.Ordering.Value(value.upper())
        if name == "ttl_action" and isinstance(value, str):
            if value.lower() not in ("drop", "dead_letter"):
                raise errors.InvalidArgument(f"ttl_action {value!r}: use drop or dead_letter")
            value = common_pb2.TtlAction.Value(f"TTL_{value.upper()}")
        setattr(update, name, value)
    return update


@_typed
def create_topic(
    name: str, partitions: int | None, replication_factor: int | None, config: Mapping[str, Any]
) -> Call[api_pb2.TopicDescription]:
    request = api_pb2.CreateTopicRequest(name=name, config=config_update(config))
    if partitions is not None:
        request.partitions = partitions
    if replication_factor is not None:
        request.replication_factor = replication_factor
    return Call("admin", "CreateTopic", request, _same)


@_typed
def delete_topic(name: str) -> Call[None]:
    return Call("admin", "DeleteTopic", api_pb2.DeleteTopicRequest(name=name), _nothing)


def list_topics() -> Call[list[api_pb2.TopicSummary]]:
    return Call("admin", "ListTopics", api_pb2.ListTopicsRequest(), lambda r: list(r.topics))


@_typed
def describe_topic(name: str) -> Call[api_pb2.TopicDescription]:
    return Call("admin", "DescribeTopic", api_pb2.DescribeTopicRequest(name=name), _same)


@_typed
def alter_topic_config(name: str, config: Mapping[str, Any]) -> Call[api_pb2.TopicDescription]:
    request = api_pb2.AlterTopicConfigRequest(name=name, config=config_update(config))
    return Call("admin", "AlterTopicConfig", request, _same)


@_typed
def add_partitions(name: str, partitions: int) -> Call[api_pb2.TopicDescription]:
    request = api_pb2.AddPartitionsRequest(name=name, partitions=partitions)
    return Call("admin", "AddPartitions", request, _same)


def rebalance_leaders() -> Call[api_pb2.RebalanceLeadersResponse]:
    return Call("admin", "RebalanceLeaders", api_pb2.RebalanceLeadersRequest(), _same)


def list_groups() -> Call[list[api_pb2.GroupSummary]]:
    return Call("admin", "ListGroups", api_pb2.ListGroupsRequest(), lambda r: list(r.groups))


@_typed
def describe_group(group: str) -> Call[api_pb2.GroupDescription]:
    return Call("admin", "DescribeGroup", api_pb2.DescribeGroupRequest(group=group), _same)


@_typed
def delete_group(group: str) -> Call[api_pb2.DeleteGroupResponse]:
    return Call("admin", "DeleteGroup", api_pb2.DeleteGroupRequest(group=group), _same)


def describe_cluster() -> Call[api_pb2.ClusterDescription]:
    return Call("admin", "DescribeCluster", api_pb2.DescribeClusterRequest(), _same)


@_typed
def update_record(
    topic: str, partition: int, offset: int, priority: int | None, deliver_at_ms: int | None
) -> Call[None]:
    request = api_pb2.UpdateRecordRequest(topic=topic, partition=partition, offset=offset)
    if priority is not None:
        request.priority = priority
    if deliver_at_ms is not None:
        request.deliver_at_ms = deliver_at_ms
    return Call("admin", "UpdateRecord", request, _nothing)


@_typed
def cancel_record(topic: str, partition: int, offset: int) -> Call[None]:
    request = api_pb2.CancelRecordRequest(topic=topic, partition=partition, offset=offset)
    return Call("admin", "CancelRecord", request, _nothing)


@_typed
def remove_broker(broker_id: int, timeout_s: float) -> Call[int]:
    request = api_pb2.RemoveBrokerRequest(broker_id=broker_id)
    return Call("admin", "RemoveBroker", request, lambda r: int(r.moved_partitions), timeout_s)


@_typed
def list_offsets(topic: str) -> Call[list[api_pb2.PartitionOffsets]]:
    request = api_pb2.ListOffsetsRequest(topic=topic)
    return Call("log", "ListOffsets", request, lambda r: list(r.partitions))


@_typed
def fetch(
    topic: str, partition: int, offset: int, max_records: int, max_bytes: int
) -> Call[api_pb2.FetchResponse]:
    request = api_pb2.FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        max_records=max_records,
        max_bytes=max_bytes,
    )
    return Call("log", "Fetch", request, _same)


@_typed
def producer_state(
    topic: str, producer_id: str, partitions: Sequence[int]
) -> Call[dict[int, api_pb2.PartitionProducerState]]:
    request = api_pb2.ProducerStateRequest(
        topic=topic, producer_id=producer_id, partitions=list(partitions)
    )
    return Call("log", "ProducerState", request, lambda r: {p.partition: p for p in r.partitions})


@_typed
def commit_txn(app_id: str, version: int, scope: str) -> Call[int]:
    request = api_pb2.CommitTxnRequest(app_id=app_id, version=version, scope=scope)
    return Call("admin", "CommitTxn", request, lambda state: int(state.version))


@_typed
def get_txn(app_id: str, scope: str) -> Call[int | None]:
    return Call(
        "admin",
        "GetTxn",
        api_pb2.GetTxnRequest(app_id=app_id, scope=scope),
        lambda state: int(state.version) if state.known else None,
    )


@_typed
def seek_group(
    group: str,
    topic: str,
    partition: int | None,
    offset: int | None,
    timestamp_ms: int | None,
    earliest: bool,
    latest: bool,
    force: bool,
) -> Call[list[api_pb2.PartitionSeek]]:
    """Exactly one target: ``offset``, ``timestamp_ms``, ``earliest`` or ``latest``."""
    targets = [offset is not None, timestamp_ms is not None, earliest, latest]
    if sum(targets) != 1:
        raise errors.InvalidArgument(
            "seek to exactly one of offset, timestamp_ms, earliest, latest"
        )
    request = api_pb2.SeekGroupRequest(group=group, topic=topic, force=force)
    if partition is not None:
        request.partition = partition
    if offset is not None:
        request.to, request.offset = partition_pb2.SEEK_OFFSET, offset
    elif timestamp_ms is not None:
        request.to, request.timestamp_ms = partition_pb2.SEEK_TIMESTAMP, timestamp_ms
    else:
        request.to = partition_pb2.SEEK_EARLIEST if earliest else partition_pb2.SEEK_LATEST
    return Call("admin", "SeekGroup", request, lambda r: list(r.partitions))


@_typed
def purge_topic(topic: str, partition: int | None) -> Call[list[api_pb2.PartitionPurge]]:
    request = api_pb2.PurgeTopicRequest(topic=topic)
    if partition is not None:
        request.partition = partition
    return Call("admin", "PurgeTopic", request, lambda r: list(r.partitions))


@_typed
def create_schedule(
    topic: str,
    name: str,
    value: bytes,
    *,
    cron: str | None,
    time_zone: str,
    interval_ms: int | None,
    key: bytes | None,
    headers: Mapping[str, bytes] | None,
    priority: int | None,
    ttl_ms: int | None,
    partition: int | None,
    catch_up: str,
) -> Call[common_pb2.Schedule]:
    """The template's key, headers, priority and ttl_ms: None leaves the field unset."""
    if catch_up.lower() not in ("once", "skip"):
        raise errors.InvalidArgument(f"catch_up {catch_up!r}: use once or skip")
    template = common_pb2.Record(value=value, headers=headers or {})
    if key is not None:
        template.key = key
    if priority is not None:
        template.priority = priority
    if ttl_ms is not None:
        template.ttl_ms = ttl_ms
    schedule = common_pb2.Schedule(
        name=name,
        cron=cron or "",
        time_zone=time_zone,
        interval_ms=interval_ms or 0,
        template=template,
        catch_up=cast(common_pb2.CatchUp, common_pb2.CatchUp.Value(f"CATCH_UP_{catch_up.upper()}")),
    )
    request = api_pb2.CreateScheduleRequest(topic=topic, schedule=schedule)
    if partition is not None:
        request.partition = partition
    return Call("admin", "CreateSchedule", request, lambda r: r.schedule)


@_typed
def list_schedules(topic: str, name: str) -> Call[list[common_pb2.Schedule]]:
    request = api_pb2.ListSchedulesRequest(topic=topic, name=name)
    return Call("admin", "ListSchedules", request, lambda r: list(r.schedules))


@_typed
def pause_schedule(topic: str, name: str, paused: bool) -> Call[common_pb2.Schedule]:
    request = api_pb2.PauseScheduleRequest(topic=topic, name=name, paused=paused)
    return Call("admin", "PauseSchedule", request, lambda r: r.schedule)


@_typed
def delete_schedule(topic: str, name: str) -> Call[None]:
    request = api_pb2.DeleteScheduleRequest(topic=topic, name=name)
    return Call("admin", "DeleteSchedule", request, _nothing)
