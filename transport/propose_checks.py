"""The shape check of a partition command another broker forwards (Internal.Propose).

A broker that does not lead a partition forwards the partition work of a client call (an
Append, a Lease, a settle...) to the leader as a ``ProposeRequest``. Its bytes come from
another process: maybe an older or newer version, maybe one whose cluster secret leaked. So the
leader checks them as it checks a client's request, before anything reaches the Raft log
(``check_propose`` → ``CheckedPropose``), and refuses with a typed, non-retriable error that
changes nothing:

    bytes that do not decode                    MALFORMED_COMMAND (transport/internal.py)
    no operation this broker knows, or fields   MALFORMED_COMMAND: a newer broker's command;
      it does not know (command or operation)     proposed, a newer follower would apply what
                                                  this leader's machine ignores (divergence)
    an operation only a leader proposes         INVALID_ARGUMENT (configure, retain, dead-letter
      itself                                      progress, group-committed batches, firings)
    names, counts and ranges out of bounds      INVALID_ARGUMENT, by the client edge's rules
                                                  (transport/request_checks.py) and the machine's

What the check leaves to the leader: does the topic and partition exist, does it lead it, a
record against the topic's config (``PartitionReplica.append``), the stamped entry against
``raft.max_entry_bytes`` (RECORD_TOO_LARGE), the message against the gRPC message limit
(RESOURCE_EXHAUSTED before any code runs). ``now_ms`` and ``clock_skew_ms`` are the leader's
to stamp: whatever the forwarder put there is overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NewType, cast

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.partitions.schedules import check_schedule
from raftq.proto import errors, internal_pb2, partition_pb2
from raftq.transport.request_checks import (
    PARTITIONS_MAX,
    SEND_RECORDS_MAX,
    bad,
    check_group_name,
    check_name,
    check_range,
    check_topic_name,
)

if TYPE_CHECKING:

    class CheckedPropose(internal_pb2.ProposeRequest): ...

else:
    CheckedPropose = NewType("CheckedPropose", internal_pb2.ProposeRequest)


def _refs(refs: Iterable[partition_pb2.DeliveryRef], field: str = "refs") -> None:
    refs = list(refs)
    check_range(len(refs), f"number of {field}", 1, MAX_REFS)
    for i, ref in enumerate(refs):
        check_range(ref.offset, f"{field}[{i}].offset", 0)
        check_range(ref.delivery_count, f"{field}[{i}].delivery_count", 1)


def _member(cmd: Any) -> None:
    check_group_name(cmd.group)
    check_name(cmd.member, "member")


def _append(cmd: partition_pb2.Append) -> None:
    if cmd.records and cmd.values:
        raise bad("an append carries records or values (bare records), not both")
    check_range(len(cmd.records) or len(cmd.values), "number of records", 1, SEND_RECORDS_MAX)
    if cmd.producer_id:
        check_name(cmd.producer_id, "producer_id")
        check_range(cmd.sequence, "sequence", 0)
    elif cmd.sequence:
        raise bad("sequence without producer_id: set both or neither")


def _lease(cmd: partition_pb2.Lease) -> None:
    _member(cmd)
    check_range(cmd.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(cmd.lease_ms, "lease_ms", 0, MAX_LEASE_MS)  # 0: the topic's
    check_range(cmd.max_bytes, "max_bytes", 0)
    check_range(cmd.generation, "generation", 0)
    if cmd.start_from not in partition_pb2.StartFrom.values():
        raise bad(f"start_from is {cmd.start_from}; it must be EARLIEST (0) or LATEST (1)")


def _ack(cmd: partition_pb2.Settle) -> None:
    _member(cmd)
    if not cmd.offsets and not cmd.delivery_counts:
        _refs(cmd.refs)
        return
    if cmd.refs:
        raise bad("an ack names refs or offsets, not both")
    check_range(len(cmd.offsets), "number of offsets", 1, MAX_REFS)
    if len(cmd.delivery_counts) != len(cmd.offsets):
        raise bad("delivery_counts must be as long as offsets")
    check_range(min(cmd.offsets), "offsets", 0)
    check_range(min(cmd.delivery_counts), "delivery_counts", 1)


def _nack(cmd: partition_pb2.Nack) -> None:
    _member(cmd)
    _refs(cmd.refs)
    if cmd.HasField("delay_ms"):
        check_range(cmd.delay_ms, "delay_ms", 0, MAX_DELAY_MS)


def _extend_lease(cmd: partition_pb2.ExtendLease) -> None:
    _member(cmd)
    _refs(cmd.refs)
    check_range(cmd.lease_ms, "lease_ms", 1, MAX_LEASE_MS)


def _release(cmd: partition_pb2.Release) -> None:
    check_group_name(cmd.group)
    check_range(cmd.generation, "generation", 0)
    if cmd.member:
        check_name(cmd.member, "member")
    if cmd.undelivered:
        if not cmd.member:
            raise bad("undelivered names one member's deliveries: set member")
        _refs(cmd.undelivered, "undelivered")


def _update_record(cmd: partition_pb2.UpdateRecord) -> None:
    check_range(cmd.offset, "offset", 0)
    if cmd.HasField("deliver_at_ms"):
        check_range(cmd.deliver_at_ms, "deliver_at_ms", 0)


def _cancel_record(cmd: partition_pb2.CancelRecord) -> None:
    check_range(cmd.offset, "offset", 0)


def _forget_group(cmd: partition_pb2.ForgetGroup) -> None:
    check_group_name(cmd.group)


def _seek_group(cmd: partition_pb2.SeekGroup) -> None:
    check_group_name(cmd.group)
    if cmd.to not in partition_pb2.SeekTo.values():
        raise bad(f"to is {cmd.to}; name a SeekTo target (offset, timestamp, earliest, latest)")
    check_range(cmd.offset, "offset", 0)
    check_range(cmd.timestamp_ms, "timestamp_ms", 0)


def _create_schedule(cmd: partition_pb2.CreateSchedule) -> None:
    check_name(cmd.schedule.name, "schedule.name")
    problem = check_schedule(cmd.schedule)
    if problem:
        raise bad(problem)


def _named(cmd: partition_pb2.PauseSchedule | partition_pb2.DeleteSchedule) -> None:
    check_name(cmd.name, "name")


# The operations a broker forwards for a client call, and each one's check. The others
# (configure, retain, dead_letter_done, append_batch, fire_schedules) only a partition's
# leader proposes, from its own state: never accepted from another broker.
FORWARDED: dict[str, Callable[[Any], None]] = {
    "append": _append,
    "lease": _lease,
    "ack": _ack,
    "nack": _nack,
    "extend_lease": _extend_lease,
    "release": _release,
    "update_record": _update_record,
    "cancel_record": _cancel_record,
    "forget_group": _forget_group,
    "seek_group": _seek_group,
    "purge": lambda cmd: None,
    "create_schedule": _create_schedule,
    "pause_schedule": _named,
    "delete_schedule": _named,
}


def _known_fields_only(message: Message, what: str) -> None:
    if len(unknown_fields.UnknownFieldSet(message)):
        raise errors.MalformedCommand(
            f"{what} carries fields this broker does not know (a newer broker's?): refused, "
            "so no replica applies what another ignores; upgrade every broker first"
        )


def check_propose(r: internal_pb2.ProposeRequest) -> CheckedPropose:
    """A forwarded partition command's shape, before the leader proposes it. Raises
    MalformedCommand (an operation or field this broker does not know) or InvalidArgument
    (an operation never forwarded, a value out of range); neither changes anything."""
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0, PARTITIONS_MAX - 1)
    _known_fields_only(r, "the ProposeRequest")
    command = r.command
    _known_fields_only(command, "the command")
    op = command.WhichOneof("op")
    if op is None:
        raise errors.MalformedCommand("the command names no operation this broker knows")
    check = FORWARDED.get(op)
    if check is None:
        raise bad(f"{op} is proposed by a partition's leader itself, never forwarded")
    body = getattr(command, op)
    _known_fields_only(body, f"the {op}")
    check(body)
    if r.skip_if_idle and op != "lease":
        raise bad(f"skip_if_idle is for a lease, not {op}")
    return cast(CheckedPropose, r)


__all__ = ["FORWARDED", "CheckedPropose", "check_propose"]
