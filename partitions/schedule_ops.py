"""The partition machine's schedule commands: create, pause/resume, delete, fire.

A partition keeps the schedules whose records land in it (``schedules`` in its store, a
common.proto ``Schedule`` each) and fires them itself, so a fired record and the schedule's
advance commit in one transaction on every replica: exactly one record per slot, whatever
the leader changes, restarts and repeated proposals (``FireSchedules`` names the revision it
planned against; the first one to apply moves it). Timing is the leader's
(partitions/schedules.py ``plan``); apply only checks that every slot is after the
schedule's ``after_ms`` and at or before its own clock, so nothing fires early by the
partition's clock, and never reads a time zone database.

Called by ``PartitionMachine`` inside its apply transaction; every function is pure with
respect to the world like apply itself, and raises ``Rejected`` (nothing changes) for a
command it refuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftq.partitions import machine as _machine
from raftq.partitions.schedules import (
    MAX_SCHEDULES,
    MAX_SLOTS_PER_FIRING,
    SCHEDULE_HEADER,
    SLOT_HEADER,
    check_definition,
)
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

if TYPE_CHECKING:
    from raftq.partitions.machine import PartitionMachine

INT64_MAX_DIGITS = 10**19 - 1  # a slot's header at its longest


def load(machine: PartitionMachine, name: str) -> common_pb2.Schedule | None:
    blob = machine.store.schedule_get(name)
    return None if blob is None else common_pb2.Schedule.FromString(blob)


def save(machine: PartitionMachine, schedule: common_pb2.Schedule) -> None:
    machine.store.schedule_put(schedule.name, schedule.SerializeToString(deterministic=True))


def on_create(
    machine: PartitionMachine, cmd: partition_pb2.CreateSchedule, now_ms: int, index: int
) -> partition_pb2.CommandResult:
    schedule = common_pb2.Schedule()
    schedule.CopyFrom(cmd.schedule)
    problem = check_definition(schedule)
    if problem:
        raise _machine.Rejected(ErrorCode.INVALID_ARGUMENT, problem)
    rejected = _machine.check_record(fired_record(schedule, INT64_MAX_DIGITS), machine.config)
    if rejected is not None:
        raise rejected
    if machine.store.schedule_get(schedule.name) is not None:
        raise _machine.Rejected(
            ErrorCode.SCHEDULE_EXISTS, f"a schedule named {schedule.name!r} exists"
        )
    if len(machine.store.schedules()) >= MAX_SCHEDULES:
        raise _machine.Rejected(
            ErrorCode.INVALID_ARGUMENT,
            f"a partition keeps at most {MAX_SCHEDULES} schedules: delete one first",
        )
    schedule.partition = machine.meta.partition
    schedule.paused = False
    schedule.after_ms = schedule.created_ms = now_ms
    schedule.fired = schedule.missed = schedule.last_slot_ms = 0
    schedule.next_slot_ms = 0
    schedule.revision = index
    save(machine, schedule)
    machine.schedule_count += 1
    return partition_pb2.CommandResult(count=1)


def on_pause(
    machine: PartitionMachine, cmd: partition_pb2.PauseSchedule, now_ms: int, index: int
) -> partition_pb2.CommandResult:
    """Pause, or resume from now (a paused time is not caught up). Pausing a paused schedule
    or resuming a running one changes nothing."""
    schedule = _existing(machine, cmd.name)
    if schedule.paused == cmd.paused:
        return partition_pb2.CommandResult(count=0)
    schedule.paused = cmd.paused
    if not cmd.paused:
        schedule.after_ms = max(schedule.after_ms, now_ms)
    schedule.revision = index
    save(machine, schedule)
    return partition_pb2.CommandResult(count=1)


def on_delete(
    machine: PartitionMachine, cmd: partition_pb2.DeleteSchedule, now_ms: int, index: int
) -> partition_pb2.CommandResult:
    _existing(machine, cmd.name)
    machine.store.schedule_delete(cmd.name)
    machine.schedule_count -= 1
    return partition_pb2.CommandResult(count=1)


def on_fire(
    machine: PartitionMachine, cmd: partition_pb2.FireSchedules, now_ms: int, index: int
) -> partition_pb2.CommandResult:
    """Fire each firing that still matches its schedule (see ``stale``); the others change
    nothing (a repeat of an applied proposal, a plan older than a pause or a delete). A
    template the topic's max_record_bytes no longer admits fires nothing: its slots count as
    missed. Result: count = records fired, records = their offsets."""
    result = partition_pb2.CommandResult()
    for firing in cmd.firings:
        schedule = load(machine, firing.name)
        if schedule is None or stale(schedule, firing, now_ms):
            continue
        if _machine.check_record(fired_record(schedule, INT64_MAX_DIGITS), machine.config):
            # the topic's max_record_bytes shrank below the template since its creation:
            # its slots pass, counted as missed (raising would stop every schedule here)
            schedule.missed += len(firing.slots_ms) + firing.missed
        else:
            for slot in firing.slots_ms:
                offset = _append(machine, schedule, slot, now_ms)
                result.records.add(offset=offset)
            schedule.fired += len(firing.slots_ms)
            schedule.missed += firing.missed
            if firing.slots_ms:
                schedule.last_slot_ms = firing.slots_ms[-1]
        schedule.after_ms = firing.after_ms
        schedule.revision = index
        save(machine, schedule)
    result.count = len(result.records)
    return result


def stale(schedule: common_pb2.Schedule, firing: partition_pb2.Firing, now_ms: int) -> bool:
    """Whether a firing must not apply: planned against another revision, for a paused
    schedule, or naming a slot that is not after the schedule's after_ms, not ascending, in
    the future of ``now_ms`` (early), too many slots, or an after_ms that goes back or ahead
    of ``now_ms``."""
    slots = firing.slots_ms
    if firing.revision != schedule.revision or schedule.paused:
        return True
    if len(slots) > MAX_SLOTS_PER_FIRING or firing.missed < 0:
        return True
    previous = schedule.after_ms
    for slot in slots:
        if slot <= previous:
            return True
        previous = slot
    return not previous <= firing.after_ms <= now_ms


def _append(
    machine: PartitionMachine, schedule: common_pb2.Schedule, slot_ms: int, now_ms: int
) -> int:
    """Append one fired record; its offset."""
    incoming = _machine.read_records([fired_record(schedule, slot_ms)], machine.config)
    offsets, rows, _, expiries = machine._plan_append(incoming, now_ms)
    machine.store.insert_records(rows)
    if expiries:
        machine.store.expiry_put(expiries)
    machine.meta.next_offset += len(rows)
    machine.meta.log_bytes += sum(r.size for r in rows)
    return offsets[0][0]


def fired_record(schedule: common_pb2.Schedule, slot_ms: int) -> common_pb2.Record:
    """The record a slot fires: the template, plus headers naming the schedule and slot."""
    record = common_pb2.Record()
    record.CopyFrom(schedule.template)
    record.headers[SCHEDULE_HEADER] = schedule.name.encode()
    record.headers[SLOT_HEADER] = str(slot_ms).encode()
    return record


def _existing(machine: PartitionMachine, name: str) -> common_pb2.Schedule:
    schedule = load(machine, name)
    if schedule is None:
        raise _machine.Rejected(ErrorCode.UNKNOWN_SCHEDULE, f"no schedule named {name!r} here")
    return schedule
