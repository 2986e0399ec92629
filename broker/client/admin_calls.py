"""What each :class:`Admin` call sends and how its answer is read, shared by the thread
(:class:`raftq.client.admin.Admin`) and asyncio (:class:`raftq.client.aio.AsyncAdmin`) clients:
a :class:`Call` names the stub, the method, the request and the function that turns the
response into the call's result, a :mod:`raftq.client.types` dataclass (read here, once, for
both clients). Pure: no channel, no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

from raftq.client import types
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


# --- answers: protobuf -> raftq.client.types ------------------------------------------------


def _name(enum: Any, value: int) -> Any:
    """An enum value's API name; a number this client does not know (a newer broker) as
    its digits."""
    try:
        return enum.Name(value)
    except ValueError:
        return str(value)


def read_topic_config(config: common_pb2.TopicConfig) -> types.TopicConfig:
    return types.TopicConfig(
        ordering=_name(common_pb2.Ordering, config.ordering),
        lease_ms=config.lease_ms,
        max_deliveries=config.max_deliveries,
        dead_letter_topic=config.dead_letter_topic,
        retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes,
        max_record_bytes=config.max_record_bytes,
        dedup_window_ms=config.dedup_window_ms,
        nack_backoff_base_ms=config.nack_backoff_base_ms,
        nack_backoff_max_ms=config.nack_backoff_max_ms,
        ttl_ms=config.ttl_ms,
        ttl_action=_name(common_pb2.TtlAction, config.ttl_action),
        fair_key=config.fair_key,
    )


def read_topic_info(d: api_pb2.TopicDescription) -> types.TopicInfo:
    partitions = tuple(
        types.PartitionInfo(
            partition=p.partition,
            replicas=tuple(p.replicas),
            leader=p.leader,
            leader_addr=p.leader_addr,
            log_start=p.log_start,
            end=p.end,
            isr=tuple(p.in_sync),
        )
        for p in d.partitions
    )
    return types.TopicInfo(d.name, d.replication_factor, read_topic_config(d.config), partitions)


def _topic_listing(t: api_pb2.TopicSummary) -> types.TopicListing:
    return types.TopicListing(t.name, t.partitions, t.replication_factor)


def _group_listing(g: api_pb2.GroupSummary) -> types.GroupListing:
    return types.GroupListing(
        g.group, g.generation, g.members, tuple(g.topics), g.empty_since_ms, g.deleting
    )


def read_group_info(d: api_pb2.GroupDescription) -> types.GroupInfo:
    members = tuple(
        types.MemberInfo(
            member_id=m.member_id,
            topics=tuple(m.topics),
            assignment=tuple(
                types.TopicPartitions(a.topic, tuple(a.partitions)) for a in m.assignment
            ),
            session_timeout_ms=m.session_timeout_ms,
            last_heartbeat_ms=m.last_heartbeat_ms,
        )
        for m in d.members
    )
    lags = tuple(
        types.PartitionLag(
            p.topic, p.partition, p.committed, p.end, p.lag, p.pending, p.leased, p.member_id
        )
        for p in d.partitions
    )
    return types.GroupInfo(d.group, d.generation, members, lags, d.empty_since_ms, d.deleting)


def read_cluster_info(d: api_pb2.ClusterDescription) -> types.ClusterInfo:
    brokers = tuple(
        types.BrokerInfo(b.id, b.client_addr, b.raft_addr, b.rack, b.alive, b.metadata_voter)
        for b in d.brokers
    )
    return types.ClusterInfo(
        brokers=brokers,
        metadata_leader=d.metadata_leader,
        health=_name(api_pb2.ClusterHealth, d.health),
        problems=tuple(d.problems),
        topics=d.topics,
        partitions=d.partitions,
        partitions_without_leader=d.partitions_without_leader,
        under_replicated_partitions=d.under_replicated_partitions,
    )


def read_stored_record(s: common_pb2.StoredRecord) -> types.StoredRecord:
    r = s.record
    return types.StoredRecord(  # positional: a fetch reads thousands (Spark's source)
        s.offset,
        s.timestamp_ms,
        r.key if r.HasField("key") else None,
        r.value,
        dict(r.headers),
        r.priority,
        r.deliver_at_ms,
        r.idempotency_key,
        r.ttl_ms,
    )


def read_fetch_result(r: api_pb2.FetchResponse) -> types.FetchResult:
    return types.FetchResult(tuple(read_stored_record(s) for s in r.records), r.log_start, r.end)


def _producer_state(p: api_pb2.PartitionProducerState) -> types.ProducerState:
    return types.ProducerState(
        p.partition, p.known, p.last_sequence, tuple(p.last_offsets), p.records
    )


def read_schedule(s: common_pb2.Schedule) -> types.Schedule:
    t = s.template
    template = types.RecordTemplate(
        key=t.key if t.HasField("key") else None,
        value=t.value,
        headers=dict(t.headers),
        priority=t.priority,
        deliver_at_ms=t.deliver_at_ms,
        idempotency_key=t.idempotency_key,
        ttl_ms=t.ttl_ms,
    )
    return types.Schedule(
        name=s.name,
        cron=s.cron,
        time_zone=s.time_zone,
        interval_ms=s.interval_ms,
        template=template,
        partition=s.partition,
        catch_up=_name(common_pb2.CatchUp, s.catch_up),
        paused=s.paused,
        after_ms=s.after_ms,
        created_ms=s.created_ms,
        fired=s.fired,
        missed=s.missed,
        last_slot_ms=s.last_slot_ms,
        revision=s.revision,
        next_slot_ms=s.next_slot_ms,
    )


def read_partition_move(r: api_pb2.MovePartitionResponse) -> types.PartitionMove:
    return types.PartitionMove(tuple(r.replicas), r.leader)


def read_metadata_backup(r: api_pb2.BackupMetadataResponse) -> types.MetadataBackup:
    return types.MetadataBackup(r.table, r.applied_index, r.cluster_id)


def read_backup_chunk(c: api_pb2.BackupChunk) -> types.BackupChunk:
    return types.BackupChunk(
        c.applied_index, c.size_bytes, c.chunks, c.next_offset, c.index, c.sha256, c.data
    )


# --- calls ----------------------------------------------------------------------------------


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
) -> Call[types.TopicInfo]:
    request = api_pb2.CreateTopicRequest(name=name, config=config_update(config))
    if partitions is not None:
        request.partitions = partitions
    if replication_factor is not None:
        request.replication_factor = replication_factor
    return Call("admin", "CreateTopic", request, read_topic_info)


@_typed
def delete_topic(name: str) -> Call[None]:
    return Call("admin", "DeleteTopic", api_pb2.DeleteTopicRequest(name=name), _nothing)


def list_topics() -> Call[list[types.TopicListing]]:
    request = api_pb2.ListTopicsRequest()
    return Call("admin", "ListTopics", request, lambda r: [_topic_listing(t) for t in r.topics])


@_typed
def describe_topic(name: str) -> Call[types.TopicInfo]:
    return Call("admin", "DescribeTopic", api_pb2.DescribeTopicRequest(name=name), read_topic_info)


@_typed
def alter_topic_config(name: str, config: Mapping[str, Any]) -> Call[types.TopicInfo]:
    request = api_pb2.AlterTopicConfigRequest(name=name, config=config_update(config))
    return Call("admin", "AlterTopicConfig", request, read_topic_info)


@_typed
def add_partitions(name: str, partitions: int) -> Call[types.TopicInfo]:
    request = api_pb2.AddPartitionsRequest(name=name, partitions=partitions)
    return Call("admin", "AddPartitions", request, read_topic_info)


def rebalance_leaders() -> Call[types.LeaderRebalance]:
    request = api_pb2.RebalanceLeadersRequest()
    return Call(
        "admin", "RebalanceLeaders", request, lambda r: types.LeaderRebalance(r.moved, r.remaining)
    )


def list_groups() -> Call[list[types.GroupListing]]:
    request = api_pb2.ListGroupsRequest()
    return Call("admin", "ListGroups", request, lambda r: [_group_listing(g) for g in r.groups])


@_typed
def describe_group(group: str) -> Call[types.GroupInfo]:
    request = api_pb2.DescribeGroupRequest(group=group)
    return Call("admin", "DescribeGroup", request, read_group_info)


@_typed
def delete_group(group: str) -> Call[types.GroupDeletion]:
    request = api_pb2.DeleteGroupRequest(group=group)
    return Call(
        "admin", "DeleteGroup", request, lambda r: types.GroupDeletion(r.partitions, r.pending)
    )


def describe_cluster() -> Call[types.ClusterInfo]:
    return Call("admin", "DescribeCluster", api_pb2.DescribeClusterRequest(), read_cluster_info)


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
def list_offsets(topic: str) -> Call[list[types.PartitionOffsets]]:
    request = api_pb2.ListOffsetsRequest(topic=topic)

    def offsets(r: api_pb2.ListOffsetsResponse) -> list[types.PartitionOffsets]:
        return [types.PartitionOffsets(p.partition, p.log_start, p.end) for p in r.partitions]

    return Call("log", "ListOffsets", request, offsets)


@_typed
def fetch(
    topic: str, partition: int, offset: int, max_records: int, max_bytes: int
) -> Call[types.FetchResult]:
    request = api_pb2.FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        max_records=max_records,
        max_bytes=max_bytes,
    )
    return Call("log", "Fetch", request, read_fetch_result)


@_typed
def producer_state(
    topic: str, producer_id: str, partitions: Sequence[int]
) -> Call[dict[int, types.ProducerState]]:
    request = api_pb2.ProducerStateRequest(
        topic=topic, producer_id=producer_id, partitions=list(partitions)
    )
    return Call(
        "log",
        "ProducerState",
        request,
        lambda r: {p.partition: _producer_state(p) for p in r.partitions},
    )


@_typed
def move_partition(
    topic: str, partition: int, replicas: Sequence[int], timeout_s: float
) -> Call[types.PartitionMove]:
    request = api_pb2.MovePartitionRequest(
        topic=topic, partition=partition, replicas=list(replicas)
    )
    return Call("admin", "MovePartition", request, read_partition_move, timeout_s)


@_typed
def backup_metadata() -> Call[types.MetadataBackup]:
    request = api_pb2.BackupMetadataRequest()
    return Call("admin", "BackupMetadata", request, read_metadata_backup)


def backup_partition_request(
    topic: str, partition: int, topic_id: int, chunk_bytes: int, have: Sequence[bytes]
) -> api_pb2.BackupPartitionRequest:
    """BackupPartition's request (a server stream, so no :class:`Call`): ``have`` holds the
    SHA-256 of each chunk of a previous copy, whose unchanged chunks are not sent again."""
    return api_pb2.BackupPartitionRequest(
        topic=topic, partition=partition, topic_id=topic_id, chunk_bytes=chunk_bytes, have=have
    )


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
) -> Call[list[types.PartitionSeek]]:
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
    return Call(
        "admin",
        "SeekGroup",
        request,
        lambda r: [types.PartitionSeek(p.partition, p.offset, p.dropped) for p in r.partitions],
    )


@_typed
def purge_topic(topic: str, partition: int | None) -> Call[list[types.PartitionPurge]]:
    request = api_pb2.PurgeTopicRequest(topic=topic)
    if partition is not None:
        request.partition = partition
    return Call(
        "admin",
        "PurgeTopic",
        request,
        lambda r: [types.PartitionPurge(p.partition, p.log_start, p.deleted) for p in r.partitions],
    )


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
) -> Call[types.Schedule]:
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
    return Call("admin", "CreateSchedule", request, lambda r: read_schedule(r.schedule))


@_typed
def list_schedules(topic: str, name: str) -> Call[list[types.Schedule]]:
    request = api_pb2.ListSchedulesRequest(topic=topic, name=name)
    return Call(
        "admin", "ListSchedules", request, lambda r: [read_schedule(s) for s in r.schedules]
    )


@_typed
def pause_schedule(topic: str, name: str, paused: bool) -> Call[types.Schedule]:
    request = api_pb2.PauseScheduleRequest(topic=topic, name=name, paused=paused)
    return Call("admin", "PauseSchedule", request, lambda r: read_schedule(r.schedule))


@_typed
def delete_schedule(topic: str, name: str) -> Call[None]:
    request = api_pb2.DeleteScheduleRequest(topic=topic, name=name)
    return Call("admin", "DeleteSchedule", request, _nothing)
