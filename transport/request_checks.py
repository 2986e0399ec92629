"""Request shape checks: the one validation of a client request, at the gRPC edge.

Each ``check_<rpc>`` checks the *shape* of its request (names present and well formed by the
metadata machine's rules, counts and durations in range) and raises InvalidArgument with a
message that says what to fix; everything else (does the topic exist, is this broker the
leader, is the generation current) is the handlers' business. A check that hands on a checked
command (``check_send`` -> :data:`CheckedSend`) lets the layers behind assert what it
guarantees instead of checking it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from raftq.metadata import machine
from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.proto import api_pb2, errors, partition_pb2

SEND_RECORDS_MAX = 100_000
POLL_WAIT_MS_MAX = 300_000  # a long poll of at most five minutes
PARTITIONS_MAX = 10_000
REPLICATION_FACTOR_MAX = 7

if TYPE_CHECKING:

    class CheckedSend(api_pb2.SendRequest):
        """A SendRequest ``check_send`` accepted: a well-formed topic name; records or values,
        not both, 1..SEND_RECORDS_MAX of them; a producer_id only with a partition and a
        sequence. A type only: at run time the request itself."""

else:
    CheckedSend = api_pb2.SendRequest


def bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message)


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
    """An id (member, producer, app): 1-255 printable characters, the machine's rule."""
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


def check_send(r: api_pb2.SendRequest) -> CheckedSend:
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


def check_join_group(r: api_pb2.JoinGroupRequest) -> None:
    check_group_name(r.group)
    check_range(len(r.topics), "number of topics", 1, PARTITIONS_MAX)
    for i, topic in enumerate(r.topics):
        check_topic_name(topic, f"topics[{i}]")
    if r.HasField("member_id"):
        check_name(r.member_id, "member_id")
    check_range(r.session_timeout_ms, "session_timeout_ms", 0)


def check_heartbeat(r: api_pb2.HeartbeatRequest) -> None:
    check_member(r.group, r.member_id, r.generation)


def check_leave_group(r: api_pb2.LeaveGroupRequest) -> None:
    check_group_name(r.group)
    check_name(r.member_id, "member_id")


def check_lease_ms(r: api_pb2.PollRequest | api_pb2.PollStart) -> None:
    if r.HasField("lease_ms"):
        check_range(r.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
    check_range(r.max_bytes, "max_bytes", 0)


def check_poll(r: api_pb2.PollRequest) -> None:
    check_member(r.group, r.member_id, r.generation)
    check_range(r.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(r.max_wait_ms, "max_wait_ms", 0, POLL_WAIT_MS_MAX)
    check_lease_ms(r)


def check_ack(r: api_pb2.AckRequest) -> None:
    check_member(r.group, r.member_id, r.generation)
    if not r.batches:
        check_refs(r.refs)
        return
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


def check_nack(r: api_pb2.NackRequest) -> None:
    check_member(r.group, r.member_id, r.generation)
    check_refs(r.refs)
    if r.HasField("delay_ms"):
        check_range(r.delay_ms, "delay_ms", 0, MAX_DELAY_MS)


def check_extend_lease(r: api_pb2.ExtendLeaseRequest) -> None:
    check_member(r.group, r.member_id, r.generation)
    check_refs(r.refs)
    check_range(r.lease_ms, "lease_ms", 1, MAX_LEASE_MS)


def check_fetch(r: api_pb2.FetchRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    check_range(r.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(r.max_bytes, "max_bytes", 0)


def check_list_offsets(r: api_pb2.ListOffsetsRequest) -> None:
    check_topic_name(r.topic)


def check_producer_state(r: api_pb2.ProducerStateRequest) -> None:
    check_topic_name(r.topic)
    check_name(r.producer_id, "producer_id")
    if len(r.partitions) > PARTITIONS_MAX:
        raise bad(f"at most {PARTITIONS_MAX} partitions")
    for partition in r.partitions:
        check_range(partition, "partition", 0)


def check_commit_txn(r: api_pb2.CommitTxnRequest) -> None:
    check_name(r.app_id, "app_id")
    check_range(r.version, "version", 0)


def check_get_txn(r: api_pb2.GetTxnRequest) -> None:
    check_name(r.app_id, "app_id")


def check_config_update(c: api_pb2.TopicConfigUpdate) -> None:
    """Signs only; the facade checks the merged config with
    raftq.partitions.machine.check_config."""
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


def check_create_topic(r: api_pb2.CreateTopicRequest) -> None:
    check_topic_name(r.name, "name")
    if r.HasField("partitions"):
        check_range(r.partitions, "partitions", 1, PARTITIONS_MAX)
    if r.HasField("replication_factor"):
        check_range(r.replication_factor, "replication_factor", 1, REPLICATION_FACTOR_MAX)
    check_config_update(r.config)


def check_topic_request(
    r: api_pb2.DeleteTopicRequest | api_pb2.DescribeTopicRequest,
) -> None:
    check_topic_name(r.name, "name")


def check_alter_topic_config(r: api_pb2.AlterTopicConfigRequest) -> None:
    check_topic_name(r.name, "name")
    if not r.config.ListFields():
        raise bad("config sets no field: name at least one setting to change")
    check_config_update(r.config)


def check_add_partitions(r: api_pb2.AddPartitionsRequest) -> None:
    check_topic_name(r.name, "name")
    check_range(r.partitions, "partitions", 2, PARTITIONS_MAX)


def check_describe_group(r: api_pb2.DescribeGroupRequest | api_pb2.DeleteGroupRequest) -> None:
    check_group_name(r.group)


def check_update_record(r: api_pb2.UpdateRecordRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    if not r.HasField("priority") and not r.HasField("deliver_at_ms"):
        raise bad("set priority, deliver_at_ms or both")
    if r.HasField("deliver_at_ms"):
        check_range(r.deliver_at_ms, "deliver_at_ms", 0)


def check_cancel_record(r: api_pb2.CancelRecordRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)


def check_seek_group(r: api_pb2.SeekGroupRequest) -> None:
    check_group_name(r.group)
    check_topic_name(r.topic)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    if r.to not in partition_pb2.SeekTo.values():
        raise bad(f"to is {r.to}; name a SeekTo target (offset, timestamp, earliest, latest)")
    check_range(r.offset, "offset", 0)
    check_range(r.timestamp_ms, "timestamp_ms", 0)


def check_purge_topic(r: api_pb2.PurgeTopicRequest) -> None:
    check_topic_name(r.topic)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)


def check_create_schedule(r: api_pb2.CreateScheduleRequest) -> None:
    check_topic_name(r.topic)
    check_name(r.schedule.name, "schedule.name")
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)


def check_list_schedules(r: api_pb2.ListSchedulesRequest) -> None:
    check_topic_name(r.topic)
    if r.name:
        check_name(r.name, "name")


def check_schedule_request(r: api_pb2.PauseScheduleRequest | api_pb2.DeleteScheduleRequest) -> None:
    check_topic_name(r.topic)
    check_name(r.name, "name")


def check_remove_broker(r: api_pb2.RemoveBrokerRequest) -> None:
    check_range(r.broker_id, "broker_id", 1)


def no_check(request: Any) -> None:
    return None


def check_backup_partition(r: api_pb2.BackupPartitionRequest) -> None:
    check_topic_name(r.topic)


def check_move_partition(r: api_pb2.MovePartitionRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    if not r.replicas or len(r.replicas) > REPLICATION_FACTOR_MAX:
        raise bad(f"replicas: name 1 to {REPLICATION_FACTOR_MAX} broker ids")
    for broker_id in r.replicas:
        check_range(broker_id, "replicas", 1)
