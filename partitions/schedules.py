"""Recurring records' timing: where a schedule's slots fall and what a leader proposes to fire.

A schedule (common.proto ``Schedule``) fires its record template at every *slot*: every
``interval_ms`` from its creation instant, or every instant its 5-field ``cron`` expression
names in its IANA ``time_zone`` (croniter over zoneinfo). Its partition keeps ``after_ms``: the
next slot is the first one after it.

The leader plans (``plan``, here) and the machine checks (partitions/schedule_ops.py):
apply never computes a slot, it fires the slots a ``FireSchedules`` names when the schedule
still has the revision the plan read and every slot lies in ``(after_ms, now_ms]``. So the
time zone database (which may differ between brokers) and croniter steer only what the leader
proposes, never how replicas apply it; a repeated or stale proposal fires nothing.

Catch-up (``CatchUp``): a slot the partition's clock passed by more than ``MISFIRE_GRACE_MS``
(Quartz's misfire threshold, 60 s) before it could fire is *missed* — an outage, a partition
without a leader. ``CATCH_UP_ONCE`` (the default, as a Kubernetes CronJob or Quartz's
fire-now: the job still runs once) fires one record for all missed slots together;
``CATCH_UP_SKIP`` fires nothing for them. Later slots fire on time either way. A slot fired
within the grace is on time (a failover, a busy leader): one record each, late but never early.

Daylight saving time, in a cron's zone: a wall-clock time the spring change skips fires at the
first instant after the gap (02:30 on a 02:00 → 03:00 night fires at 03:00, as Vixie cron
does); a wall-clock time the autumn change repeats fires once, at its first occurrence, unless
the expression's hour field is ``*`` (every hour: ``*/30 * * * *`` fires on every real half
hour, both passes included).

Pure: functions of (schedule, instants); no clock.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

from croniter import croniter
from croniter.croniter import CroniterError

from raftq.proto import common_pb2, partition_pb2

MAX_SCHEDULES = 1_000  # per partition: a create beyond it is refused INVALID_ARGUMENT
MIN_INTERVAL_MS = 1_000  # NATS's @every minimum
MAX_INTERVAL_MS = 366 * 24 * 3600 * 1000
MISFIRE_GRACE_MS = 60_000
MAX_SLOTS_PER_FIRING = 1_000  # one FireSchedules fires at most this many records per schedule
MAX_SLOTS_PER_COMMAND = 10_000  # ... and this many in all (the rest fire at the next tick)
FIRE_BYTES_MAX = 8 << 20  # ... and about this many record bytes in all, at least one record
MAX_CRON_STEPS = 10_000  # slots a plan walks through one by one; past it, it jumps
MAX_NAME_CHARS = 255
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# Headers every fired record carries besides its template's.
SCHEDULE_HEADER = "raftq-schedule"
SLOT_HEADER = "raftq-schedule-slot-ms"

_UTC = dt.UTC


def check_schedule(schedule: common_pb2.Schedule) -> str | None:
    """Why a schedule's definition is invalid (the message of an INVALID_ARGUMENT), or None.

    Checks what the leader needs to plan it: the name, exactly one of cron and interval_ms,
    the cron expression (5 fields or an alias, naming some instant) and its time zone, the
    interval's bounds, the catch-up policy, and the template's fields a schedule cannot use
    (idempotency_key, deliver_at_ms). The record's size is the partition's to judge."""
    problem = check_definition(schedule)
    if problem:
        return problem
    if schedule.cron:
        fields = schedule.cron.split()
        if not (len(fields) == 5 or (len(fields) == 1 and fields[0].lower() in ALIASES)):
            return (
                f"cron {schedule.cron!r}: 5 fields (minute hour day month weekday) or one of "
                f"{', '.join(ALIASES)}; use interval_ms below a minute"
            )
        try:
            zone = _zone(schedule.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return f"time_zone {schedule.time_zone!r}: not an IANA time zone (e.g. Europe/Berlin)"
        if not croniter.is_valid(schedule.cron):
            return f"cron {schedule.cron!r}: not a valid cron expression"
        try:
            _cron_after(schedule.cron, zone, 0)
        except (CroniterError, ValueError, OverflowError):
            return f"cron {schedule.cron!r}: names no instant"
    return None


def check_definition(schedule: common_pb2.Schedule) -> str | None:
    """The part of ``check_schedule`` that needs no cron parser or time zone database: what the
    partition machine itself re-checks on CreateSchedule."""
    if not schedule.name or len(schedule.name) > MAX_NAME_CHARS:
        return f"schedule name: 1 to {MAX_NAME_CHARS} characters"
    if not schedule.name.isprintable():
        return "schedule name: printable characters only"
    if bool(schedule.cron) == (schedule.interval_ms != 0):
        return "a schedule has a cron expression or an interval_ms, exactly one"
    if not schedule.cron:
        if not MIN_INTERVAL_MS <= schedule.interval_ms <= MAX_INTERVAL_MS:
            return f"interval_ms: {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS}"
        if schedule.time_zone:
            return "time_zone applies to a cron expression, not to interval_ms"
    if schedule.catch_up not in common_pb2.CatchUp.values():
        return f"catch_up {schedule.catch_up}: CATCH_UP_ONCE or CATCH_UP_SKIP"
    if schedule.template.idempotency_key:
        return "a schedule's record has no idempotency_key (each firing is a new record)"
    if schedule.template.deliver_at_ms:
        return "a schedule's record has no deliver_at_ms (the schedule says when)"
    if schedule.template.ttl_ms < 0:
        return "ttl_ms: 0 or more"
    return None


def next_slot(schedule: common_pb2.Schedule, after_ms: int) -> int:
    """The schedule's first slot after ``after_ms`` (Unix ms). Raises ValueError for a
    definition ``check_schedule`` refuses."""
    if schedule.interval_ms > 0:
        if after_ms < schedule.created_ms:
            return schedule.created_ms + schedule.interval_ms
        steps = (after_ms - schedule.created_ms) // schedule.interval_ms + 1
        return schedule.created_ms + steps * schedule.interval_ms
    if not schedule.cron:
        raise ValueError("a schedule without cron or interval_ms")
    try:
        return _cron_after(schedule.cron, _zone(schedule.time_zone), after_ms)
    except (CroniterError, zoneinfo.ZoneInfoNotFoundError, OverflowError) as exc:
        raise ValueError(f"schedule {schedule.name!r}: {exc}") from exc


def plan_fire(
    schedules: list[common_pb2.Schedule], now_ms: int
) -> tuple[partition_pb2.FireSchedules | None, list[tuple[str, str]]]:
    """The FireSchedules a partition leader proposes at ``now_ms`` (None: nothing due), and
    (name, problem) for each schedule it could not plan (a definition no check let through).
    Bounded by MAX_SLOTS_PER_COMMAND and FIRE_BYTES_MAX; what does not fit fires next time."""
    fire = partition_pb2.FireSchedules()
    problems: list[tuple[str, str]] = []
    slots_left, bytes_left = MAX_SLOTS_PER_COMMAND, FIRE_BYTES_MAX
    for schedule in schedules:
        size = max(1, schedule.template.ByteSize())
        limit = min(MAX_SLOTS_PER_FIRING, slots_left, max(1, bytes_left // size))
        if limit <= 0 or (bytes_left < size and fire.firings):
            break
        try:
            planned = plan(schedule, now_ms, limit)
        except ValueError as exc:
            problems.append((schedule.name, str(exc)))
            continue
        if planned is None:
            continue
        slots, after_ms, missed = planned
        fire.firings.add(
            name=schedule.name,
            revision=schedule.revision,
            slots_ms=slots,
            after_ms=after_ms,
            missed=missed,
        )
        slots_left -= len(slots)
        bytes_left -= len(slots) * size
    return (fire if fire.firings else None), problems


def plan(
    schedule: common_pb2.Schedule, now_ms: int, limit: int = MAX_SLOTS_PER_FIRING
) -> tuple[list[int], int, int] | None:
    """The firing due for ``schedule`` at ``now_ms``: (slots to fire, its new after_ms, slots
    missed), or None when nothing is due or it is paused. Slots ascend, lie in
    ``(after_ms, now_ms]`` and number at most ``limit`` (the rest fire next time);
    missed slots (the clock passed them by more than MISFIRE_GRACE_MS) fire nothing under
    CATCH_UP_SKIP and one slot, the last of them, under CATCH_UP_ONCE. Raises ValueError for
    a definition ``check_schedule`` refuses."""
    if schedule.paused:
        return None
    first = next_slot(schedule, schedule.after_ms)
    if first > now_ms:
        return None
    slots: list[int] = []
    missed = 0
    after = schedule.after_ms
    cutoff = now_ms - MISFIRE_GRACE_MS  # a slot below it is missed
    if first < cutoff:
        last_missed, missed = _missed(schedule, first, cutoff)
        if schedule.catch_up == common_pb2.CATCH_UP_ONCE:
            slots.append(last_missed)
        after = max(last_missed, cutoff - 1)
    while len(slots) < limit:
        slot = next_slot(schedule, after)
        if slot > now_ms:
            break
        slots.append(slot)
        after = slot
    return slots, after, missed


def _missed(schedule: common_pb2.Schedule, first: int, cutoff: int) -> tuple[int, int]:
    """(the last slot before ``cutoff``, how many from ``first`` on), given ``first`` <
    cutoff. Intervals count exactly; a cron counts at most MAX_CRON_STEPS slots and then
    takes ``cutoff - 1`` for the last (the instant right before the grace)."""
    if schedule.interval_ms > 0:
        count = (cutoff - 1 - first) // schedule.interval_ms + 1
        return first + (count - 1) * schedule.interval_ms, count
    last, count = first, 1
    while count < MAX_CRON_STEPS:
        slot = next_slot(schedule, last)
        if slot >= cutoff:
            return last, count
        last, count = slot, count + 1
    return cutoff - 1, count


def _zone(name: str) -> dt.tzinfo:
    return zoneinfo.ZoneInfo(name) if name else _UTC


def _cron_after(expression: str, zone: dt.tzinfo, after_ms: int) -> int:
    """The first instant after ``after_ms`` that ``expression`` names in ``zone`` (see the
    module docstring for the daylight saving rules)."""
    start = dt.datetime.fromtimestamp(after_ms / 1000, zone)
    walk = croniter(expression, start)
    every_hour = walk.expressions[1] == "*"
    for _ in range(4):  # a repeated wall-clock time is skipped at most once in a row
        slot: dt.datetime = walk.get_next(dt.datetime)
        if slot.fold == 1 and not every_hour and _ambiguous(slot):
            continue
        ms = round(slot.timestamp() * 1000)
        if ms > after_ms:
            return ms
    raise ValueError(f"cron {expression!r}: no slot after {after_ms}")


def _ambiguous(slot: dt.datetime) -> bool:
    return slot.replace(fold=0).utcoffset() != slot.replace(fold=1).utcoffset()
