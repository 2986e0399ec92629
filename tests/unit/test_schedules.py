"""Recurring records (issue 19): the pure planner (partitions/schedules.py) and the partition
machine's schedule commands (partitions/schedule_ops.py) on both stores.

A leader plans a FireSchedules from its replica's state and clock; every replica applies it.
Each slot fires exactly one record, never before the slot by the partition's clock, whatever
the leader changes (a stale or repeated plan fires nothing), with the documented catch-up
policy for slots an outage missed.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import zoneinfo
from collections.abc import Callable
from pathlib import Path

import pytest

from raftq.partitions.machine import DEFAULT_CONFIG, PartitionMachine
from raftq.partitions.schedules import (
    MAX_SCHEDULES,
    MISFIRE_GRACE_MS,
    SCHEDULE_HEADER,
    SLOT_HEADER,
    check_schedule,
    next_slot,
    plan_fire,
)
from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore, PartitionStore
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

T0_MS = 1_764_000_000_000  # 2025-11-24 16:00 UTC
MINUTE_MS = 60_000
DAY_MS = 24 * 3600 * 1000


def utc_ms(*args: int, tz: str = "UTC") -> int:
    zone: dt.tzinfo = zoneinfo.ZoneInfo(tz) if tz != "UTC" else dt.UTC
    return round(dt.datetime(*args, tzinfo=zone).timestamp() * 1000)  # type: ignore[arg-type,misc]


def schedule(name: str = "s", **fields: object) -> common_pb2.Schedule:
    fields.setdefault("template", common_pb2.Record(key=b"k", value=b"tick", priority=3))
    if "cron" not in fields:
        fields.setdefault("interval_ms", 1000)
    return common_pb2.Schedule(name=name, **fields)  # type: ignore[arg-type]


def topic_config(**fields: object) -> common_pb2.TopicConfig:
    config = common_pb2.TopicConfig()
    config.CopyFrom(DEFAULT_CONFIG)
    config.ordering = common_pb2.PRIORITY
    for name, value in fields.items():
        setattr(config, name, value)
    return config


class Replicas:
    """Partition replicas fed the same committed log (a leader and followers alike)."""

    def __init__(self, new_store: Callable[[], PartitionStore], count: int = 2) -> None:
        self.machines = [PartitionMachine(new_store()) for _ in range(count)]
        self.log: list[bytes] = []
        self.applied = [0] * count
        result = self.commit(T0_MS, configure=partition_pb2.Configure(config=topic_config()))
        assert result.error == ErrorCode.OK, result

    def commit(self, now_ms: int, **op: object) -> partition_pb2.CommandResult:
        """Append a command to the log and apply it on replica 0 (others catch up later)."""
        command = partition_pb2.PartitionCommand(now_ms=now_ms, clock_skew_ms=2000, **op)  # type: ignore[arg-type]
        self.log.append(command.SerializeToString())
        results = self.catch_up(0)
        return results[-1]

    def catch_up(self, i: int) -> list[partition_pb2.CommandResult]:
        results = []
        while self.applied[i] < len(self.log):
            self.applied[i] += 1
            results.append(self.machines[i].apply(self.log[self.applied[i] - 1], self.applied[i]))
        return results

    def fire(self, now_ms: int, planner: int = 0) -> partition_pb2.CommandResult | None:
        """What a leader's tick does: plan from replica ``planner``'s state and commit it."""
        fire, problems = plan_fire(self.machines[planner].schedules(), now_ms)
        assert not problems
        if fire is None:
            return None
        return self.commit(now_ms, fire_schedules=fire)

    def fired(self, i: int = 0) -> list[tuple[int, int, str]]:
        """(slot, record timestamp, schedule) of every fired record on replica ``i``."""
        records = self.machines[i].fetch(0, 1_000_000)
        return [
            (
                int(r.record.headers[SLOT_HEADER]),
                r.timestamp_ms,
                r.record.headers[SCHEDULE_HEADER].decode(),
            )
            for r in records
            if SLOT_HEADER in r.record.headers
        ]

    def check_converged(self) -> None:
        for i in range(len(self.machines)):
            self.catch_up(i)
        dumps = [m.store.dump() for m in self.machines]
        assert all(d == dumps[0] for d in dumps[1:])


def create(replicas: Replicas, now_ms: int, s: common_pb2.Schedule) -> None:
    result = replicas.commit(now_ms, create_schedule=partition_pb2.CreateSchedule(schedule=s))
    assert result.error == ErrorCode.OK, result


# -- the planner ------------------------------------------------------------------------------


def test_interval_slots_count_from_creation() -> None:
    s = schedule(interval_ms=1000, created_ms=T0_MS, after_ms=T0_MS)
    assert next_slot(s, T0_MS) == T0_MS + 1000
    assert next_slot(s, T0_MS + 999) == T0_MS + 1000
    assert next_slot(s, T0_MS + 1000) == T0_MS + 2000  # strictly after
    assert next_slot(s, T0_MS - 5) == T0_MS + 1000


@pytest.mark.parametrize(
    ("cron", "tz", "start", "expected"),
    [
        # spring forward in Berlin (2026-03-29 02:00 -> 03:00): 02:30 fires at 03:00 CEST
        (
            "30 2 * * *",
            "Europe/Berlin",
            (2026, 3, 28, 12),
            [(2026, 3, 29, 1, 0), (2026, 3, 30, 0, 30)],
        ),
        # autumn (2026-10-25 03:00 -> 02:00): the repeated 02:30 fires once
        (
            "30 2 * * *",
            "Europe/Berlin",
            (2026, 10, 24, 12),
            [(2026, 10, 25, 0, 30), (2026, 10, 26, 1, 30)],
        ),
        # every half hour fires on every real half hour, both passes of the repeated hour too
        (
            "*/30 * * * *",
            "Europe/Berlin",
            (2026, 10, 24, 23, 10),
            [
                (2026, 10, 24, 23, 30),
                (2026, 10, 25, 0, 0),
                (2026, 10, 25, 0, 30),
                (2026, 10, 25, 1, 0),
                (2026, 10, 25, 1, 30),
            ],
        ),
        # 9:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer (2026-03-08)
        (
            "0 9 * * *",
            "America/New_York",
            (2026, 3, 7, 0),
            [(2026, 3, 7, 14, 0), (2026, 3, 8, 13, 0)],
        ),
        ("@hourly", "", (2026, 1, 1, 0, 0), [(2026, 1, 1, 1, 0), (2026, 1, 1, 2, 0)]),
    ],
)
def test_cron_slots_in_a_time_zone(
    cron: str, tz: str, start: tuple[int, ...], expected: list[tuple[int, ...]]
) -> None:
    s = schedule(cron=cron, time_zone=tz)
    assert check_schedule(s) is None
    after = utc_ms(*start)
    slots = []
    for _ in expected:
        after = next_slot(s, after)
        slots.append(after)
    assert slots == [utc_ms(*e) for e in expected]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"cron": "61 * * * *"}, "not a valid cron"),
        ({"cron": "* * * * * *"}, "5 fields"),
        ({"cron": "0 0 30 2 *"}, "names no instant"),
        ({"cron": "* * * * *", "time_zone": "Mars/Olympus"}, "IANA"),
        ({"cron": "* * * * *", "time_zone": "../../etc/passwd"}, "IANA"),
        ({"interval_ms": 0}, "exactly one"),
        ({"interval_ms": 999}, "interval_ms"),
        ({"interval_ms": -1000}, "interval_ms"),
        ({"cron": "* * * * *", "interval_ms": 1000}, "exactly one"),
        ({"interval_ms": 1000, "time_zone": "UTC"}, "time_zone"),
        ({"template": common_pb2.Record(value=b"x", idempotency_key="k")}, "idempotency_key"),
        ({"template": common_pb2.Record(value=b"x", deliver_at_ms=5)}, "deliver_at_ms"),
        ({"name": ""}, "name"),
        ({"name": "x" * 256}, "name"),
        ({"catch_up": 7}, "catch_up"),
    ],
)
def test_bad_definitions_are_named(fields: dict[str, object], problem: str) -> None:
    name = fields.pop("name", "s")
    s = schedule(str(name), **fields)
    found = check_schedule(s)
    assert found is not None and problem in found, found


# -- the machine ------------------------------------------------------------------------------


def test_each_slot_fires_once_and_never_early(new_store: Callable[[], PartitionStore]) -> None:
    replicas = Replicas(new_store)
    create(replicas, T0_MS, schedule(interval_ms=1000))
    assert replicas.fire(T0_MS + 999) is None  # nothing due before the first slot
    replicas.catch_up(1)  # replica 1 has the schedule, and no firing yet
    result = replicas.fire(T0_MS + 2500)
    assert result is not None and result.count == 2
    # replica 1, leader now, plans from its lagging state: the same slots, the old revision
    assert replicas.fire(T0_MS + 2600, planner=1) is not None
    assert len(replicas.fired()) == 2
    replicas.fire(T0_MS + 3100)
    # a slot ahead of the partition's clock is refused even with the right revision
    revision = replicas.machines[0].schedules()[0].revision
    early = partition_pb2.FireSchedules(
        firings=[
            partition_pb2.Firing(
                name="s", revision=revision, slots_ms=[T0_MS + 4000], after_ms=T0_MS + 4000
            )
        ]
    )
    assert replicas.commit(T0_MS + 3999, fire_schedules=early).count == 0
    assert replicas.fire(T0_MS + 4000) is not None
    fired = replicas.fired()
    assert [slot for slot, _, _ in fired] == [
        T0_MS + 1000,
        T0_MS + 2000,
        T0_MS + 3000,
        T0_MS + 4000,
    ]
    assert all(ts >= slot for slot, ts, _ in fired)
    records = replicas.machines[0].fetch(0, 10)
    assert records[0].record.key == b"k" and records[0].record.priority == 3
    (state,) = replicas.machines[0].schedules()
    assert (state.fired, state.last_slot_ms, state.after_ms) == (4, T0_MS + 4000, T0_MS + 4000)
    replicas.check_converged()


def test_a_day_of_a_minute_schedule_across_leader_changes(tmp_path: Path) -> None:
    """1,440 records for a day of ``* * * * *``, each slot once, none early, with leaders
    changing at random: a new leader plans from its own (possibly lagging) replica, and an
    old leader's plan may commit after the new one's."""
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(1 << 32)))
    print(f"seed={seed} (RAFTQ_SEED replays)")
    rng = random.Random(seed)
    files = iter(range(3))
    replicas = Replicas(
        lambda: SqliteStore(str(tmp_path / f"p{next(files)}.db"), synchronous="OFF"), count=3
    )
    start = utc_ms(2026, 5, 1)
    create(replicas, start - 1, schedule(cron="* * * * *", time_zone="Europe/Berlin"))
    now, leader, changes, behind = start, 0, 0, False
    while now < start + DAY_MS:
        now += rng.randint(200, 20_000)  # the leader's ticks, uneven
        if rng.random() < 0.02:  # a leader change: the new leader may not have applied all
            leader, changes = rng.randrange(3), changes + 1
            if rng.random() < 0.5:
                replicas.catch_up(leader)
        # a lagging leader's plan is stale and fires nothing; it lags at most one tick in a
        # row (a longer lag would be an outage: slots later than the grace count as missed)
        if leader != 0 and (behind or rng.random() < 0.7):
            replicas.catch_up(leader)
        behind = replicas.applied[leader] < len(replicas.log)
        stale_plan = plan_fire(replicas.machines[leader].schedules(), now)[0]
        replicas.fire(now, planner=leader)
        if stale_plan is not None and rng.random() < 0.1:  # the same plan committed twice
            replicas.commit(now, fire_schedules=stale_plan)
    now = start + DAY_MS + 1
    replicas.catch_up(0)
    replicas.fire(now)
    fired = [f for f in replicas.fired() if f[0] < start + DAY_MS]
    slots = [slot for slot, _, _ in fired]
    assert len(slots) == 1440 and len(set(slots)) == 1440, (len(slots), changes)
    assert slots == [start + i * MINUTE_MS for i in range(1440)]
    assert all(ts >= slot for slot, ts, _ in fired)
    assert replicas.machines[0].schedules()[0].missed == 0
    replicas.check_converged()


@pytest.mark.parametrize(
    ("catch_up", "fired_for_missed"),
    [(common_pb2.CATCH_UP_ONCE, 1), (common_pb2.CATCH_UP_SKIP, 0)],
)
def test_catch_up_after_an_outage(
    new_store: Callable[[], PartitionStore], catch_up: int, fired_for_missed: int
) -> None:
    replicas = Replicas(new_store)
    start = utc_ms(2026, 5, 1)
    create(replicas, start, schedule(cron="* * * * *", catch_up=catch_up))
    replicas.fire(start + MINUTE_MS)  # on time
    outage_end = start + 30 * MINUTE_MS + 10_000  # 10 s after the 30th minute's slot
    replicas.fire(outage_end)
    fired = replicas.fired()
    missed_slots = [s for s, _, _ in fired if outage_end - s > MISFIRE_GRACE_MS]
    on_time = [s for s, _, _ in fired if outage_end - s <= MISFIRE_GRACE_MS]
    # slot 1 fired on time; slots 2..29 missed (more than the grace late); 30 is within it
    assert missed_slots == [start + MINUTE_MS] + ([start + 29 * MINUTE_MS] * fired_for_missed)
    assert on_time == [start + 30 * MINUTE_MS]
    (state,) = replicas.machines[0].schedules()
    assert state.missed == 28
    replicas.fire(start + 31 * MINUTE_MS)  # the next slot on time
    assert replicas.fired()[-1][0] == start + 31 * MINUTE_MS
    assert len(replicas.fired()) == 3 + fired_for_missed
    replicas.check_converged()


def test_pause_resume_delete(new_store: Callable[[], PartitionStore]) -> None:
    replicas = Replicas(new_store)
    create(replicas, T0_MS, schedule(interval_ms=1000))
    planned, _ = plan_fire(replicas.machines[0].schedules(), T0_MS + 1000)
    pause = partition_pb2.PauseSchedule(name="s", paused=True)
    assert replicas.commit(T0_MS + 500, pause_schedule=pause).count == 1
    assert replicas.commit(T0_MS + 1000, fire_schedules=planned).count == 0  # planned before
    assert replicas.fire(T0_MS + 10_000) is None  # paused: nothing due
    resume = partition_pb2.PauseSchedule(name="s", paused=False)
    assert replicas.commit(T0_MS + 10_500, pause_schedule=resume).count == 1
    replicas.fire(T0_MS + 12_000)
    # the paused time is not caught up: the first slot after the resume
    assert [s for s, _, _ in replicas.fired()] == [T0_MS + 11_000, T0_MS + 12_000]
    planned, _ = plan_fire(replicas.machines[0].schedules(), T0_MS + 13_000)
    delete = partition_pb2.DeleteSchedule(name="s")
    assert replicas.commit(T0_MS + 12_500, delete_schedule=delete).count == 1
    assert replicas.commit(T0_MS + 12_550, fire_schedules=planned).count == 0  # gone
    assert replicas.machines[0].schedules() == []
    # a new schedule of the same name is not fired by the deleted one's plan, though the
    # plan's slot (13,000) lies after the new one's creation (12,600) and before now
    create(replicas, T0_MS + 12_600, schedule(interval_ms=1000))
    assert replicas.commit(T0_MS + 13_700, fire_schedules=planned).count == 0
    replicas.fire(T0_MS + 13_700)
    assert [s for s, _, _ in replicas.fired()][-1] == T0_MS + 13_600
    replicas.check_converged()


def test_bad_commands_change_nothing(new_store: Callable[[], PartitionStore]) -> None:
    replicas = Replicas(new_store)
    create(replicas, T0_MS, schedule("a"))
    before = replicas.machines[0].store.dump()
    ops: list[tuple[dict[str, object], int]] = [
        (
            {"create_schedule": partition_pb2.CreateSchedule(schedule=schedule("a"))},
            ErrorCode.SCHEDULE_EXISTS,
        ),
        (
            {
                "create_schedule": partition_pb2.CreateSchedule(
                    schedule=schedule("b", interval_ms=0)
                )
            },
            ErrorCode.INVALID_ARGUMENT,
        ),
        (
            {
                "create_schedule": partition_pb2.CreateSchedule(
                    schedule=schedule("b", template=common_pb2.Record(value=b"x" * (1 << 20)))
                )
            },
            ErrorCode.RECORD_TOO_LARGE,
        ),
        (
            {"pause_schedule": partition_pb2.PauseSchedule(name="zz", paused=True)},
            ErrorCode.UNKNOWN_SCHEDULE,
        ),
        ({"delete_schedule": partition_pb2.DeleteSchedule(name="zz")}, ErrorCode.UNKNOWN_SCHEDULE),
    ]
    for op, code in ops:
        result = replicas.commit(T0_MS + 1, **op)
        assert result.error == code, (op, result)
        replicas.log.pop()  # a refused entry still sits in the raft log; drop it to compare
        replicas.applied[0] -= 1
        after = replicas.machines[0].store.dump()
        assert after == before


def test_at_most_max_schedules_per_partition() -> None:
    replicas = Replicas(MemoryStore, count=1)
    for i in range(MAX_SCHEDULES):
        create(replicas, T0_MS, schedule(f"s{i}"))
    result = replicas.commit(
        T0_MS, create_schedule=partition_pb2.CreateSchedule(schedule=schedule("one-more"))
    )
    assert result.error == ErrorCode.INVALID_ARGUMENT and "at most" in result.message
    assert len(replicas.machines[0].schedules()) == MAX_SCHEDULES


def test_a_template_the_topic_no_longer_admits_misses_its_slots(
    new_store: Callable[[], PartitionStore],
) -> None:
    """A topic whose max_record_bytes shrank below a template: that schedule's slots count as
    missed; the partition's other schedules fire as before."""
    replicas = Replicas(new_store)
    big = common_pb2.Record(value=b"x" * 5000)
    create(replicas, T0_MS, schedule("big", template=big))
    create(replicas, T0_MS, schedule("small"))
    shrunk = partition_pb2.Configure(config=topic_config(max_record_bytes=1000))
    assert replicas.commit(T0_MS + 1, configure=shrunk).error == ErrorCode.OK
    result = replicas.fire(T0_MS + 2000)
    assert result is not None and result.error == ErrorCode.OK and result.count == 2
    assert {name for _, _, name in replicas.fired()} == {"small"}
    big_state, small_state = replicas.machines[0].schedules()
    assert (big_state.fired, big_state.missed, big_state.after_ms) == (0, 2, T0_MS + 2000)
    assert (small_state.fired, small_state.missed) == (2, 0)
    replicas.check_converged()
