"""Operator verbs that act on a topic's partitions: seek a group, purge a topic.

Each resolves its targets from the broker's metadata table and proposes one replicated partition
command per partition through the router (the partition leader stamps and decides it:
partitions/machine.py SeekGroup, Purge). Both are idempotent: after UNAVAILABLE (a partition did
not answer; the ones before it are done) the operator calls again.

Seek runs on the metadata leader (the group's members are only known for sure there); like
Kafka's ``kafka-consumer-groups --reset-offsets``, it is refused while the group has live members
unless forced. Purge runs on any broker.

Time: a call's deadline is read on the broker's monotonic clock (``monotonic``, broker/clock.py),
the one its router's retries wait by; what a seek by timestamp finds and what a purge deletes is
decided at apply, against the records' stamped timestamps and the log, never a broker's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from raftq.metadata.table import Table, TopicInfo
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.router import Router
from raftq.transport.request_checks import (
    CheckedPurgeTopic,
    CheckedSeekGroup,
)

logger = logging.getLogger("raftq.broker.admin_ops")


def _partitions(info: TopicInfo, partition: int | None) -> list[int]:
    if partition is None:
        return list(range(info.partition_count))
    if not 0 <= partition < info.partition_count:
        raise errors.UnknownPartition(
            f"topic {info.name!r} has partitions 0..{info.partition_count - 1}, not {partition}"
        )
    return [partition]


def _topic(table: Table, name: str) -> TopicInfo:
    info = table.topic(name)
    if info is None:
        raise errors.UnknownTopic(f"topic {name!r} does not exist")
    return info


def _propose(
    router: Router,
    topic: str,
    partition: int,
    command: partition_pb2.PartitionCommand,
    deadline: float,
    what: str,
    monotonic: Callable[[], float],
) -> partition_pb2.CommandResult:
    left = deadline - monotonic()
    if left <= 0:
        raise errors.Unavailable(
            f"{topic}/{partition} did not {what}: the call's time ran out; the partitions before "
            "it did: call again"
        )
    try:
        response = router.propose(topic, partition, command, left)
    except (errors.Unavailable, errors.Timeout, errors.NotLeader) as exc:
        raise errors.Unavailable(
            f"{topic}/{partition} did not {what} ({exc}); the partitions before it did: call again"
        ) from exc
    result: partition_pb2.CommandResult = response.result
    if result.error:
        raise errors.error_for(result.error, result.message)
    return result


def seek_group(
    table: Table,
    router: Router,
    request: CheckedSeekGroup,
    timeout_s: float,
    *,
    monotonic: Callable[[], float],
) -> api_pb2.SeekGroupResponse:
    """On the metadata leader: move the group's position on the requested partitions.

    Raises (normal): InvalidArgument, UnknownGroup, UnknownTopic, UnknownPartition,
    GroupNotEmpty (members live and not ``force``), Unavailable, Timeout.
    """
    deadline = monotonic() + timeout_s
    group = table.group(request.group)
    if group is None:
        raise errors.UnknownGroup(f"group {request.group!r} does not exist")
    info = _topic(table, request.topic)
    partitions = _partitions(info, request.partition if request.HasField("partition") else None)
    if request.topic not in table.state_topics(group):
        raise errors.InvalidArgument(
            f"group {group.name!r} holds no state on topic {request.topic!r} (its topics: "
            f"{', '.join(group.topics) or 'none'}): a member must subscribe to it first"
        )
    if group.deleting:
        raise errors.UnknownGroup(f"group {group.name!r} is being deleted")
    if group.members and not request.force:
        raise errors.GroupNotEmpty(
            f"group {group.name!r} has {len(group.members)} live member(s): stop them, or "
            "force the seek (their leases on the topic end)"
        )
    command = partition_pb2.PartitionCommand(
        seek_group=partition_pb2.SeekGroup(
            group=group.name,
            to=request.to,
            offset=request.offset,
            timestamp_ms=request.timestamp_ms,
        )
    )
    out = api_pb2.SeekGroupResponse()
    for partition in partitions:
        result = _propose(router, info.name, partition, command, deadline, "seek", monotonic)
        out.partitions.add(partition=partition, offset=result.offset, dropped=result.count)
    logger.info(
        "[group=%s] seek on %s: %s",
        group.name,
        info.name,
        ", ".join(f"{p.partition}->{p.offset}" for p in out.partitions),
    )
    return out


def purge_topic(
    table: Table,
    router: Router,
    request: CheckedPurgeTopic,
    timeout_s: float,
    *,
    monotonic: Callable[[], float],
) -> api_pb2.PurgeTopicResponse:
    """Delete every record now in the topic's (or one partition's) log.

    Raises (normal): InvalidArgument, UnknownTopic, UnknownPartition, Unavailable, Timeout.
    """
    deadline = monotonic() + timeout_s
    info = _topic(table, request.topic)
    partitions = _partitions(info, request.partition if request.HasField("partition") else None)
    command = partition_pb2.PartitionCommand(purge=partition_pb2.Purge())
    out = api_pb2.PurgeTopicResponse()
    for partition in partitions:
        result = _propose(router, info.name, partition, command, deadline, "purge", monotonic)
        out.partitions.add(partition=partition, log_start=result.offset, deleted=result.count)
    logger.info(
        "[topic=%s] purged: %d records",
        info.name,
        sum(p.deleted for p in out.partitions),
    )
    return out
