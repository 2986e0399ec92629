"""The recurring records' RPCs (Admin): Create, List, Pause and DeleteSchedule.

A schedule lives in the partition its records land in (partitions/schedules.py,
schedule_ops.py): the request's partition, else murmur2 of the template's key (the Producer's
routing), else murmur2 of the schedule's name. Create checks the definition here (cron, time
zone: what the partition machine cannot) and reads every partition first, so a name is unique
in its topic (the partition refuses a name it holds atomically; two racing creates of one
name on two partitions is the one gap, as with any read-then-write). Pause, resume and delete
find the schedule's partition by reading each; list reads every partition's leader. Runs on
any broker (the router forwards to each partition's leader).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from raftq.assignors.partitioner import partition_for
from raftq.metadata.table import Table, TopicInfo
from raftq.partitions.machine import check_record
from raftq.partitions.schedule_ops import INT64_MAX_DIGITS, fired_record
from raftq.partitions.schedules import check_schedule, next_slot
from raftq.proto import api_pb2, common_pb2, errors, internal_pb2, partition_pb2
from raftq.transport.request_checks import (
    CheckedCreateSchedule,
    CheckedDeleteSchedule,
    CheckedListSchedules,
    CheckedPauseSchedule,
)

logger = logging.getLogger("raftq.broker.schedules")

# (topic, partition, command, timeout_s) -> the partition leader's answer
Propose = Callable[[str, int, partition_pb2.PartitionCommand, float], internal_pb2.ProposeResponse]
Read = Callable[[internal_pb2.ReadRequest, float], internal_pb2.ReadResponse]


def home_partition(request: CheckedCreateSchedule, partition_count: int) -> int:
    """Where a new schedule lives and fires: see the module docstring."""
    if request.HasField("partition"):
        if not 0 <= request.partition < partition_count:
            raise errors.UnknownPartition(
                f"the topic has partitions 0..{partition_count - 1}, not {request.partition}"
            )
        return request.partition
    template = request.schedule.template
    if template.HasField("key"):
        return partition_for(template.key, partition_count, 0)
    return partition_for(request.schedule.name.encode(), partition_count, 0)


def _name(schedule: common_pb2.Schedule) -> str:
    return schedule.name


def with_next_slot(schedule: common_pb2.Schedule) -> common_pb2.Schedule:
    """The schedule with ``next_slot_ms`` filled in (0 when paused or not computable)."""
    if not schedule.paused:
        try:
            schedule.next_slot_ms = next_slot(schedule, schedule.after_ms)
        except ValueError:
            schedule.next_slot_ms = 0
    return schedule


class ScheduleAdmin:
    """The four RPCs over a metadata table, a partition proposer and a partition reader."""

    def __init__(
        self,
        table: Callable[[], Table],
        propose: Propose,
        read: Read,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic  # deadlines of the calls' steps
        self._table = table
        self._propose = propose
        self._read = read

    def create_schedule(
        self, request: CheckedCreateSchedule, timeout_s: float
    ) -> api_pb2.ScheduleResponse:
        """The definition was checked at the edge (check_create_schedule); the fired record's
        size is judged here, by the topic's config. Raises (normal): ScheduleExists,
        UnknownTopic, UnknownPartition, RecordTooLarge, Unavailable, Timeout."""
        deadline = self._monotonic() + timeout_s
        assert check_schedule(request.schedule) is None, "check_create_schedule: a definition"
        info = self._topic(request.topic)
        biggest = fired_record(request.schedule, INT64_MAX_DIGITS)
        too_big = check_record(biggest, info.config)  # as the partition will judge it
        if too_big is not None:
            raise errors.error_for(too_big.code, too_big.message)
        partition = home_partition(request, info.partition_count)
        found = self._find(info, request.schedule.name, deadline)
        if found is not None:
            raise errors.ScheduleExists(
                f"topic {info.name!r} has a schedule named {request.schedule.name!r} "
                f"(partition {found.partition})"
            )
        command = partition_pb2.PartitionCommand(
            create_schedule=partition_pb2.CreateSchedule(schedule=request.schedule)
        )
        self._command(info, partition, command, deadline)
        created = self._find(info, request.schedule.name, deadline, [partition])
        if created is None:  # deleted again meanwhile
            raise errors.UnknownSchedule(f"schedule {request.schedule.name!r} is gone already")
        logger.info(
            "[topic/partition=%s/%d] schedule %r created", info.name, partition, created.name
        )
        return api_pb2.ScheduleResponse(schedule=created)

    def list_schedules(
        self, request: CheckedListSchedules, timeout_s: float
    ) -> api_pb2.ListSchedulesResponse:
        """Raises (normal): UnknownTopic, Unavailable, Timeout."""
        deadline = self._monotonic() + timeout_s
        info = self._topic(request.topic)
        found = self._read_all(info, request.name, deadline)
        found.sort(key=_name)
        return api_pb2.ListSchedulesResponse(schedules=found)

    def pause_schedule(
        self, request: CheckedPauseSchedule, timeout_s: float
    ) -> api_pb2.ScheduleResponse:
        """Pause or resume. Raises (normal): UnknownSchedule, UnknownTopic, Unavailable."""
        deadline = self._monotonic() + timeout_s
        info = self._topic(request.topic)
        schedule = self._existing(info, request.name, deadline)
        pause = partition_pb2.PauseSchedule(name=request.name, paused=request.paused)
        command = partition_pb2.PartitionCommand(pause_schedule=pause)
        self._command(info, schedule.partition, command, deadline)
        after = self._existing(info, request.name, deadline, [schedule.partition])
        return api_pb2.ScheduleResponse(schedule=after)

    def delete_schedule(
        self, request: CheckedDeleteSchedule, timeout_s: float
    ) -> api_pb2.DeleteScheduleResponse:
        """Raises (normal): UnknownSchedule, UnknownTopic, Unavailable, Timeout."""
        deadline = self._monotonic() + timeout_s
        info = self._topic(request.topic)
        schedule = self._existing(info, request.name, deadline)
        command = partition_pb2.PartitionCommand(
            delete_schedule=partition_pb2.DeleteSchedule(name=request.name)
        )
        self._command(info, schedule.partition, command, deadline)
        logger.info("[topic=%s] schedule %r deleted", info.name, request.name)
        return api_pb2.DeleteScheduleResponse()

    # -- helpers --------------------------------------------------------------------------

    def _topic(self, name: str) -> TopicInfo:
        info = self._table().topic(name)
        if info is None:
            raise errors.UnknownTopic(f"topic {name!r} does not exist")
        return info

    def _command(
        self,
        info: TopicInfo,
        partition: int,
        command: partition_pb2.PartitionCommand,
        deadline: float,
    ) -> partition_pb2.CommandResult:
        left = max(0.001, deadline - self._monotonic())
        result = self._propose(info.name, partition, command, left).result
        if result.error:
            raise errors.error_for(result.error, result.message)
        return result

    def _read_all(
        self, info: TopicInfo, name: str, deadline: float, partitions: list[int] | None = None
    ) -> list[common_pb2.Schedule]:
        found: list[common_pb2.Schedule] = []
        for partition in range(info.partition_count) if partitions is None else partitions:
            request = internal_pb2.ReadRequest(
                topic=info.name,
                partition=partition,
                schedules=internal_pb2.SchedulesRead(name=name),
            )
            left = max(0.001, deadline - self._monotonic())
            found.extend(with_next_slot(s) for s in self._read(request, left).schedules)
        return found

    def _find(
        self, info: TopicInfo, name: str, deadline: float, partitions: list[int] | None = None
    ) -> common_pb2.Schedule | None:
        found = self._read_all(info, name, deadline, partitions)
        return found[0] if found else None

    def _existing(
        self, info: TopicInfo, name: str, deadline: float, partitions: list[int] | None = None
    ) -> common_pb2.Schedule:
        assert name, "check_pause_schedule, check_delete_schedule: a schedule name"
        found = self._find(info, name, deadline, partitions)
        if found is None:
            raise errors.UnknownSchedule(f"topic {info.name!r} has no schedule named {name!r}")
        return found
