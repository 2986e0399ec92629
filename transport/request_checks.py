"""Request shape checks: the one validation of a client request, at the edge.

Each ``check_<rpc>`` checks the *shape* of its request (names present and well formed by the
metadata machine's rules — one rule for topics and groups, one for ids — counts, bytes and
durations in range) and raises InvalidArgument with a message that says what to fix. It hands
on the request as a checked command: a type of its own (``CheckedSend``, ``CheckedPoll``...,
one per RPC that carries client input), the same object at run time (no copy on the hot
path). Handlers take the checked types, and mypy refuses an unchecked request where a checked
one is due (transport/grpc_server.py pairs each check with its protocol method), so the layers
behind ``assert`` what a check guarantees instead of checking it again; a handler never mutates
a checked command. What is not shape stays with the layers that know it: does the
topic exist, is this broker the leader, is the generation current, a limit that depends on
replicated state (a topic's max_record_bytes) or on the broker's settings (session timeout
bounds).

The edges that run these checks: the gRPC servicers (transport/grpc_server.py), the metadata
leader for a call another broker forwarded to it (broker/metadata_client.py LeaderCall.check:
the bytes come from another process, perhaps of an older version), and broker code that builds
a client request itself (broker/backend.py: a dead letter's Send).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NewType, cast

from raftq.metadata import machine
from raftq.metadata.machine import SESSION_TIMEOUT_MS_MAX, SUBSCRIPTIONS_MAX
from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.partitions.schedules import check_schedule
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.proto.limits import (
    BACKUP_CHUNK_BYTES_MAX,
    BACKUP_CHUNK_BYTES_MIN,
    BACKUP_PAGE_BYTES,
)

SEND_RECORDS_MAX = 100_000
POLL_WAIT_MS_MAX = 300_000  # a long poll of at most five minutes
PARTITIONS_MAX = 10_000
REPLICATION_FACTOR_MAX = 7
SHA256_BYTES = 32

# The checked commands, one per RPC that carries client input (see the module docstring). For
# mypy each is a subclass of its request (types-protobuf types the messages), so a request is
# not a checked command until a check says so; at run time a NewType over it (the object passed
# is the request itself), a name of its own tests/unit/test_request_checks.py reads from the
# annotations to hold each handler's own signature to it (a handler taking the wider raw type
# would still satisfy its protocol).
if TYPE_CHECKING:

    class CheckedSend(api_pb2.SendRequest): ...

    class CheckedJoinGroup(api_pb2.JoinGroupRequest): ...

    class CheckedHeartbeat(api_pb2.HeartbeatRequest): ...

    class CheckedLeaveGroup(api_pb2.LeaveGroupRequest): ...

    class CheckedPoll(api_pb2.PollRequest): ...

    class CheckedPollStart(api_pb2.PollStart): ...

    class CheckedAck(api_pb2.AckRequest): ...

    class CheckedNack(api_pb2.NackRequest): ...

    class CheckedExtendLease(api_pb2.ExtendLeaseRequest): ...

    class CheckedFetch(api_pb2.FetchRequest): ...

    class CheckedListOffsets(api_pb2.ListOffsetsRequest): ...

    class CheckedProducerState(api_pb2.ProducerStateRequest): ...

    class CheckedCreateTopic(api_pb2.CreateTopicRequest): ...

    class CheckedDeleteTopic(api_pb2.DeleteTopicRequest): ...

    class CheckedDescribeTopic(api_pb2.DescribeTopicRequest): ...

    class CheckedAlterTopicConfig(api_pb2.AlterTopicConfigRequest): ...

    class CheckedAddPartitions(api_pb2.AddPartitionsRequest): ...

    class CheckedPurgeTopic(api_pb2.PurgeTopicRequest): ...

    class CheckedUpdateRecord(api_pb2.UpdateRecordRequest): ...

    class CheckedCancelRecord(api_pb2.CancelRecordRequest): ...

    class CheckedDescribeGroup(api_pb2.DescribeGroupRequest): ...

    class CheckedDeleteGroup(api_pb2.DeleteGroupRequest): ...

    class CheckedSeekGroup(api_pb2.SeekGroupRequest): ...

    class CheckedCreateSchedule(api_pb2.CreateScheduleRequest): ...

    class CheckedListSchedules(api_pb2.ListSchedulesRequest): ...

    class CheckedPauseSchedule(api_pb2.PauseScheduleRequest): ...

    class CheckedDeleteSchedule(api_pb2.DeleteScheduleRequest): ...

    class CheckedRemoveBroker(api_pb2.RemoveBrokerRequest): ...

    class CheckedMovePartition(api_pb2.MovePartitionRequest): ...

    class CheckedBackupPartition(api_pb2.BackupPartitionRequest): ...

    class CheckedCommitTxn(api_pb2.CommitTxnRequest): ...

    class CheckedGetTxn(api_pb2.GetTxnRequest): ...

else:
    CheckedSend = NewType("CheckedSend", api_pb2.SendRequest)
    CheckedJoinGroup = NewType("CheckedJoinGroup", api_pb2.JoinGroupRequest)
    CheckedHeartbeat = NewType("CheckedHeartbeat", api_pb2.HeartbeatRequest)
    CheckedLeaveGroup = NewType("CheckedLeaveGroup", api_pb2.LeaveGroupRequest)
    CheckedPoll = NewType("CheckedPoll", api_pb2.PollRequest)
    CheckedPollStart = NewType("CheckedPollStart", api_pb2.PollStart)
    CheckedAck = NewType("CheckedAck", api_pb2.AckRequest)
    CheckedNack = NewType("CheckedNack", api_pb2.NackRequest)
    CheckedExtendLease = NewType("CheckedExtendLease", api_pb2.ExtendLeaseRequest)
    CheckedFetch = NewType("CheckedFetch", api_pb2.FetchRequest)
    CheckedListOffsets = NewType("CheckedListOffsets", api_pb2.ListOffsetsRequest)
    CheckedProducerState = NewType("CheckedProducerState", api_pb2.ProducerStateRequest)
    CheckedCreateTopic = NewType("CheckedCreateTopic", api_pb2.CreateTopicRequest)
    CheckedDeleteTopic = NewType("CheckedDeleteTopic", api_pb2.DeleteTopicRequest)
    CheckedDescribeTopic = NewType("CheckedDescribeTopic", api_pb2.DescribeTopicRequest)
    CheckedAlterTopicConfig = NewType("CheckedAlterTopicConfig", api_pb2.AlterTopicConfigRequest)
    CheckedAddPartitions = NewType("CheckedAddPartitions", api_pb2.AddPartitionsRequest)
    CheckedPurgeTopic = NewType("CheckedPurgeTopic", api_pb2.PurgeTopicRequest)
    CheckedUpdateRecord = NewType("CheckedUpdateRecord", api_pb2.UpdateRecordRequest)
    CheckedCancelRecord = NewType("CheckedCancelRecord", api_pb2.CancelRecordRequest)
    CheckedDescribeGroup = NewType("CheckedDescribeGroup", api_pb2.DescribeGroupRequest)
    CheckedDeleteGroup = NewType("CheckedDeleteGroup", api_pb2.DeleteGroupRequest)
    CheckedSeekGroup = NewType("CheckedSeekGroup", api_pb2.SeekGroupRequest)
    CheckedCreateSchedule = NewType("CheckedCreateSchedule", api_pb2.CreateScheduleRequest)
    CheckedListSchedules = NewType("CheckedListSchedules", api_pb2.ListSchedulesRequest)
    CheckedPauseSchedule = NewType("CheckedPauseSchedule", api_pb2.PauseScheduleRequest)
    CheckedDeleteSchedule = NewType("CheckedDeleteSchedule", api_pb2.DeleteScheduleRequest)
    CheckedRemoveBroker = NewType("CheckedRemoveBroker", api_pb2.RemoveBrokerRequest)
    CheckedMovePartition = NewType("CheckedMovePartition", api_pb2.MovePartitionRequest)
    CheckedBackupPartition = NewType("CheckedBackupPartition", api_pb2.BackupPartitionRequest)
    CheckedCommitTxn = NewType("CheckedCommitTxn", api_pb2.CommitTxnRequest)
    CheckedGetTxn = NewType("CheckedGetTxn", api_pb2.GetTxnRequest)


def bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message)


# -- the rules, one per kind of value ---------------------------------------------------------


def check_topic_name(name: str, field: str = "topic") -> None:
    """The metadata machine's name rules, here at the edge: one rule per kind of name (topics
    and groups; ids), checked once; the layers behind take a checked name as it is."""
    if not name:
        raise bad(f"{field} is empty: name a topic")
    machine.check_topic_name(name, field)


def check_group_name(name: str, field: str = "group") -> None:
    if not name:
        raise bad(f"{field} is empty: name a group")
    machine.check_group_name(name, field)


def check_name(value: str, field: str) -> None:
    """An id (member, producer, app, schedule): 1-255 printable characters, the machine's."""
    if not value:
        raise bad(f"{field} is empty: set it")
    machine.check_name(value, field)


def check_range(value: int, field: str, low: int, high: int | None = None) -> None:
    if value < low or (high is not None and value > high):
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise bad(f"{field} is {value}; it must be {allowed}")


def check_member(group: str, member_id: str, generation: int) -> None:
    check_group_name(group)
    check_name(member_id, "member_id")
    check_range(generation, "generation", 0)


def check_refs(refs: Sequence[api_pb2.RecordRef]) -> None:
    check_range(len(refs), "number of refs", 1, MAX_REFS)
    for i, ref in enumerate(refs):
        check_topic_name(ref.topic, f"refs[{i}].topic")
        check_range(ref.partition, f"refs[{i}].partition", 0)
        check_range(ref.offset, f"refs[{i}].offset", 0)
        check_range(ref.delivery_count, f"refs[{i}].delivery_count", 1)


def check_lease_ms(r: api_pb2.PollRequest | api_pb2.PollStart) -> None:
    if r.HasField("lease_ms"):
        check_range(r.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
    check_range(r.max_bytes, "max_bytes", 0)


# -- Producer ---------------------------------------------------------------------------------


def check_send(r: api_pb2.SendRequest) -> CheckedSend:
    """A well-formed topic name; records or values, not both, 1..SEND_RECORDS_MAX of them; a
    producer_id only with a partition and a sequence. (Each record's size is its topic's to
    judge: max_record_bytes is replicated state.)"""
    check_topic_name(r.topic)
    if r.records and r.values:
        raise bad("a send carries records or values (bare records), not both")
    check_range(len(r.records) or len(r.values), "number of records", 1, SEND_RECORDS_MAX)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    if r.HasField("producer_id"):
        check_name(r.producer_id, "producer_id")
        if not r.HasField("partition") or not r.HasField("sequence"):
            raise bad("producer_id needs partition and sequence: sequences are per partition")
        check_range(r.sequence, "sequence", 0)
    elif r.HasField("sequence"):
        raise bad("sequence without producer_id: set both or neither")
    return cast(CheckedSend, r)


# -- Consumer ---------------------------------------------------------------------------------


def check_join_group(r: api_pb2.JoinGroupRequest) -> CheckedJoinGroup:
    """1..SUBSCRIPTIONS_MAX distinct well-formed topics; a session timeout within the hard
    bound (0: the broker's default; the broker's configured bounds are its handler's);
    start_from EARLIEST or LATEST."""
    check_group_name(r.group)
    check_range(len(set(r.topics)), "number of topics", 1, SUBSCRIPTIONS_MAX)  # distinct
    for i, topic in enumerate(r.topics):
        check_topic_name(topic, f"topics[{i}]")
    if r.HasField("member_id"):
        check_name(r.member_id, "member_id")
    check_range(r.session_timeout_ms, "session_timeout_ms", 0, SESSION_TIMEOUT_MS_MAX)
    if r.start_from not in partition_pb2.StartFrom.values():
        raise bad(f"start_from is {r.start_from}; it must be EARLIEST (0) or LATEST (1)")
    return cast(CheckedJoinGroup, r)


def check_heartbeat(r: api_pb2.HeartbeatRequest) -> CheckedHeartbeat:
    check_member(r.group, r.member_id, r.generation)
    return cast(CheckedHeartbeat, r)


def check_leave_group(r: api_pb2.LeaveGroupRequest) -> CheckedLeaveGroup:
    check_group_name(r.group)
    check_name(r.member_id, "member_id")
    return cast(CheckedLeaveGroup, r)


def check_poll(r: api_pb2.PollRequest) -> CheckedPoll:
    check_member(r.group, r.member_id, r.generation)
    check_range(r.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(r.max_wait_ms, "max_wait_ms", 0, POLL_WAIT_MS_MAX)
    check_lease_ms(r)
    return cast(CheckedPoll, r)


def check_poll_start(r: api_pb2.PollStart) -> CheckedPollStart:
    check_member(r.group, r.member_id, r.generation)
    check_lease_ms(r)
    return cast(CheckedPollStart, r)


def stream_poll(start: CheckedPollStart, records: int, wait_ms: int) -> CheckedPoll:
    """The Poll a PollStream makes for ``records`` of credit: built from its checked start,
    so checked by construction."""
    assert 1 <= records <= MAX_LEASE_RECORDS and 0 <= wait_ms <= POLL_WAIT_MS_MAX
    poll = api_pb2.PollRequest(
        group=start.group,
        member_id=start.member_id,
        generation=start.generation,
        max_records=records,
        max_wait_ms=wait_ms,
        max_bytes=start.max_bytes,
    )
    if start.HasField("lease_ms"):
        poll.lease_ms = start.lease_ms
    return cast(CheckedPoll, poll)


def check_ack(r: api_pb2.AckRequest) -> CheckedAck:
    check_member(r.group, r.member_id, r.generation)
    if not r.batches:
        check_refs(r.refs)
        return cast(CheckedAck, r)
    if r.refs:
        raise bad("an ack names refs or batches, not both")
    check_range(sum(len(b.offsets) for b in r.batches), "number of refs", 1, MAX_REFS)
    for i, b in enumerate(r.batches):  # per batch, never per ref: packed lists checked in C
        check_topic_name(b.topic, f"batches[{i}].topic")
        check_range(b.partition, f"batches[{i}].partition", 0)
        check_range(len(b.offsets), f"batches[{i}] number of offsets", 1, MAX_REFS)
        if len(b.delivery_counts) != len(b.offsets):
            raise bad(f"batches[{i}]: delivery_counts must be as long as offsets")
        check_range(min(b.offsets), f"batches[{i}] offsets", 0)
        check_range(min(b.delivery_counts), f"batches[{i}] delivery_counts", 1)
    return cast(CheckedAck, r)


def check_nack(r: api_pb2.NackRequest) -> CheckedNack:
    check_member(r.group, r.member_id, r.generation)
    check_refs(r.refs)
    if r.HasField("delay_ms"):
        check_range(r.delay_ms, "delay_ms", 0, MAX_DELAY_MS)
    return cast(CheckedNack, r)


def check_extend_lease(r: api_pb2.ExtendLeaseRequest) -> CheckedExtendLease:
    check_member(r.group, r.member_id, r.generation)
    check_refs(r.refs)
    check_range(r.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
    return cast(CheckedExtendLease, r)


# -- Log --------------------------------------------------------------------------------------


def check_fetch(r: api_pb2.FetchRequest) -> CheckedFetch:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    check_range(r.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(r.max_bytes, "max_bytes", 0)
    return cast(CheckedFetch, r)


def check_list_offsets(r: api_pb2.ListOffsetsRequest) -> CheckedListOffsets:
    check_topic_name(r.topic)
    return cast(CheckedListOffsets, r)


def check_producer_state(r: api_pb2.ProducerStateRequest) -> CheckedProducerState:
    check_topic_name(r.topic)
    check_name(r.producer_id, "producer_id")
    check_range(len(r.partitions), "number of partitions", 0, PARTITIONS_MAX)
    for partition in r.partitions:
        check_range(partition, "partition", 0)
    return cast(CheckedProducerState, r)


# -- Admin: topics and records ----------------------------------------------------------------


def check_config_update(c: api_pb2.TopicConfigUpdate) -> None:
    """Signs and fixed bounds only; the metadata frontend checks the merged config (its
    defaults, the broker's record_bytes_max) with raftq.partitions.machine.check_config."""
    for field in (
        "lease_ms",
        "max_deliveries",
        "retention_ms",
        "retention_bytes",
        "dedup_window_ms",
        "nack_backoff_base_ms",
        "nack_backoff_max_ms",
        "ttl_ms",
    ):
        if c.HasField(field):
            check_range(getattr(c, field), f"config.{field}", 0)
    if c.HasField("lease_ms"):
        check_range(c.lease_ms, "config.lease_ms", 1, MAX_LEASE_MS)
    if c.HasField("max_record_bytes"):
        check_range(c.max_record_bytes, "config.max_record_bytes", 1)
    if c.HasField("dead_letter_topic") and c.dead_letter_topic:
        check_topic_name(c.dead_letter_topic, "config.dead_letter_topic")


def check_create_topic(r: api_pb2.CreateTopicRequest) -> CheckedCreateTopic:
    check_topic_name(r.name, "name")
    if r.HasField("partitions"):
        check_range(r.partitions, "partitions", 1, PARTITIONS_MAX)
    if r.HasField("replication_factor"):
        check_range(r.replication_factor, "replication_factor", 1, REPLICATION_FACTOR_MAX)
    check_config_update(r.config)
    return cast(CheckedCreateTopic, r)


def check_delete_topic(r: api_pb2.DeleteTopicRequest) -> CheckedDeleteTopic:
    check_topic_name(r.name, "name")
    return cast(CheckedDeleteTopic, r)


def check_describe_topic(r: api_pb2.DescribeTopicRequest) -> CheckedDescribeTopic:
    check_topic_name(r.name, "name")
    return cast(CheckedDescribeTopic, r)


def check_alter_topic_config(r: api_pb2.AlterTopicConfigRequest) -> CheckedAlterTopicConfig:
    check_topic_name(r.name, "name")
    if not r.config.ListFields():
        raise bad("config sets no field: name at least one setting to change")
    check_config_update(r.config)
    return cast(CheckedAlterTopicConfig, r)


def check_add_partitions(r: api_pb2.AddPartitionsRequest) -> CheckedAddPartitions:
    check_topic_name(r.name, "name")
    check_range(r.partitions, "partitions", 2, PARTITIONS_MAX)
    return cast(CheckedAddPartitions, r)


def check_purge_topic(r: api_pb2.PurgeTopicRequest) -> CheckedPurgeTopic:
    check_topic_name(r.topic)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    return cast(CheckedPurgeTopic, r)


def check_update_record(r: api_pb2.UpdateRecordRequest) -> CheckedUpdateRecord:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    if not r.HasField("priority") and not r.HasField("deliver_at_ms"):
        raise bad("set priority, deliver_at_ms or both")
    if r.HasField("deliver_at_ms"):
        check_range(r.deliver_at_ms, "deliver_at_ms", 0)
    return cast(CheckedUpdateRecord, r)


def check_cancel_record(r: api_pb2.CancelRecordRequest) -> CheckedCancelRecord:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    return cast(CheckedCancelRecord, r)


# -- Admin: groups ----------------------------------------------------------------------------


def check_describe_group(r: api_pb2.DescribeGroupRequest) -> CheckedDescribeGroup:
    check_group_name(r.group)
    return cast(CheckedDescribeGroup, r)


def check_delete_group(r: api_pb2.DeleteGroupRequest) -> CheckedDeleteGroup:
    check_group_name(r.group)
    return cast(CheckedDeleteGroup, r)


def check_seek_group(r: api_pb2.SeekGroupRequest) -> CheckedSeekGroup:
    check_group_name(r.group)
    check_topic_name(r.topic)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    if r.to not in partition_pb2.SeekTo.values():
        raise bad(f"to is {r.to}; name a SeekTo target (offset, timestamp, earliest, latest)")
    check_range(r.offset, "offset", 0)
    check_range(r.timestamp_ms, "timestamp_ms", 0)
    return cast(CheckedSeekGroup, r)


# -- Admin: recurring records -----------------------------------------------------------------


def check_create_schedule(r: api_pb2.CreateScheduleRequest) -> CheckedCreateSchedule:
    """The whole definition (raftq.partitions.schedules.check_schedule: name, cron or
    interval, time zone, catch-up, the template's fields); the fired record's size is the
    topic's to judge."""
    check_topic_name(r.topic)
    check_name(r.schedule.name, "schedule.name")
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    problem = check_schedule(r.schedule)
    if problem:
        raise bad(problem)
    return cast(CheckedCreateSchedule, r)


def check_list_schedules(r: api_pb2.ListSchedulesRequest) -> CheckedListSchedules:
    check_topic_name(r.topic)
    if r.name:
        check_name(r.name, "name")
    return cast(CheckedListSchedules, r)


def check_pause_schedule(r: api_pb2.PauseScheduleRequest) -> CheckedPauseSchedule:
    check_topic_name(r.topic)
    check_name(r.name, "name")
    return cast(CheckedPauseSchedule, r)


def check_delete_schedule(r: api_pb2.DeleteScheduleRequest) -> CheckedDeleteSchedule:
    check_topic_name(r.topic)
    check_name(r.name, "name")
    return cast(CheckedDeleteSchedule, r)


# -- Admin: the cluster, backups, Spark writer transactions -----------------------------------


def check_remove_broker(r: api_pb2.RemoveBrokerRequest) -> CheckedRemoveBroker:
    check_range(r.broker_id, "broker_id", 1)
    return cast(CheckedRemoveBroker, r)


def check_move_partition(r: api_pb2.MovePartitionRequest) -> CheckedMovePartition:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    if not r.replicas or len(r.replicas) > REPLICATION_FACTOR_MAX:
        raise bad(f"replicas: name 1 to {REPLICATION_FACTOR_MAX} broker ids")
    for broker_id in r.replicas:
        check_range(broker_id, "replicas", 1)
    return cast(CheckedMovePartition, r)


def check_backup_partition(r: api_pb2.BackupPartitionRequest) -> CheckedBackupPartition:
    """chunk_bytes 0 (the default) or a multiple of BACKUP_PAGE_BYTES within the bounds; each
    ``have`` entry a SHA-256 digest."""
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    if r.chunk_bytes and (
        not BACKUP_CHUNK_BYTES_MIN <= r.chunk_bytes <= BACKUP_CHUNK_BYTES_MAX
        or r.chunk_bytes % BACKUP_PAGE_BYTES
    ):
        raise bad(
            f"chunk_bytes is {r.chunk_bytes}: it must be a multiple of {BACKUP_PAGE_BYTES} "
            f"within {BACKUP_CHUNK_BYTES_MIN}..{BACKUP_CHUNK_BYTES_MAX} (0: the default)"
        )
    if any(len(digest) != SHA256_BYTES for digest in r.have):
        raise bad(f"have: every entry is a {SHA256_BYTES}-byte SHA-256 digest")
    return cast(CheckedBackupPartition, r)


def check_commit_txn(r: api_pb2.CommitTxnRequest) -> CheckedCommitTxn:
    check_name(r.app_id, "app_id")
    check_range(r.version, "version", 0)
    if r.scope:
        check_topic_name(r.scope, "scope")
    return cast(CheckedCommitTxn, r)


def check_get_txn(r: api_pb2.GetTxnRequest) -> CheckedGetTxn:
    check_name(r.app_id, "app_id")
    if r.scope:
        check_topic_name(r.scope, "scope")
    return cast(CheckedGetTxn, r)
