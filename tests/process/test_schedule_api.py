"""Recurring records' API (issue 19): Admin and AsyncAdmin create/list/pause/resume/delete and
``raftq schedule ...`` against a real broker (the ``cluster`` fixture: one in this process).
Bad input is a typed error and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from raftq import cli
from raftq.client import Admin
from raftq.client.aio import AsyncAdmin
from raftq.proto import errors
from tests.cluster import Cluster


@pytest.fixture
def server(cluster: Cluster) -> Iterator[str]:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("jobs", partitions=4, replication_factor=1)
    cluster.wait_leaders("jobs")
    yield cluster.bootstrap


def test_create_list_pause_resume_delete(server: str) -> None:
    with Admin(server) as admin:
        nightly = admin.create_schedule(
            "jobs",
            "nightly",
            b"go",
            cron="0 3 * * *",
            time_zone="Europe/Berlin",
            headers={"kind": b"batch"},
            priority=2,
        )
        assert nightly.cron == "0 3 * * *" and nightly.time_zone == "Europe/Berlin"
        assert nightly.next_slot_ms > nightly.created_ms and not nightly.paused
        assert nightly.catch_up == "CATCH_UP_ONCE"
        keyed = admin.create_schedule(
            "jobs", "ping", b"p", interval_ms=1000, key=b"host-1", catch_up="skip"
        )
        assert keyed.next_slot_ms == keyed.created_ms + 1000
        assert keyed.catch_up == "CATCH_UP_SKIP"
        pinned = admin.create_schedule("jobs", "pinned", b"x", interval_ms=5000, partition=3)
        assert pinned.partition == 3
        # the same key always lands in the same partition, as a Producer would send it
        again = admin.create_schedule("jobs", "ping2", b"p", interval_ms=1000, key=b"host-1")
        assert again.partition == keyed.partition

        names = [s.name for s in admin.list_schedules("jobs")]
        assert names == ["nightly", "ping", "ping2", "pinned"]
        (only,) = admin.list_schedules("jobs", "ping")
        assert only.template.key == b"host-1"

        paused = admin.pause_schedule("jobs", "ping")
        assert paused.paused and paused.next_slot_ms == 0
        resumed = admin.resume_schedule("jobs", "ping")
        assert not resumed.paused and resumed.next_slot_ms > resumed.after_ms

        admin.delete_schedule("jobs", "ping")
        assert [s.name for s in admin.list_schedules("jobs")] == ["nightly", "ping2", "pinned"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cron": "61 * * * *"}, errors.InvalidArgument, "cron"),
        ({"cron": "* * * * *", "time_zone": "Nowhere/Atlantis"}, errors.InvalidArgument, "IANA"),
        ({"interval_ms": 0}, errors.InvalidArgument, "exactly one"),
        ({"interval_ms": 999}, errors.InvalidArgument, "interval_ms"),
        ({"interval_ms": 1000, "cron": "* * * * *"}, errors.InvalidArgument, "exactly one"),
        ({"interval_ms": 1000, "partition": 4}, errors.UnknownPartition, "0..3"),
        ({"interval_ms": 1000, "catch_up": "twice"}, errors.InvalidArgument, "once or skip"),
        ({"interval_ms": 1000, "value": b"x" * (2 << 20)}, errors.RecordTooLarge, "max_record"),
        ({"interval_ms": 1000, "name": "taken"}, errors.ScheduleExists, "taken"),
        ({"interval_ms": 1000, "topic": "nope"}, errors.UnknownTopic, "nope"),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    server: str, kwargs: dict[str, object], error: type[errors.RaftqError], match: str
) -> None:
    with Admin(server) as admin:
        admin.create_schedule("jobs", "taken", b"v", interval_ms=60_000)
        before = admin.list_schedules("jobs")
        topic = str(kwargs.pop("topic", "jobs"))
        name = str(kwargs.pop("name", "new"))
        value = kwargs.pop("value", b"v")
        assert isinstance(value, bytes)
        with pytest.raises(error, match=match):
            admin.create_schedule(topic, name, value, **kwargs)  # type: ignore[arg-type]
        assert admin.list_schedules("jobs") == before


def test_unknown_schedules(server: str) -> None:
    with Admin(server) as admin:
        for call in (admin.pause_schedule, admin.resume_schedule, admin.delete_schedule):
            with pytest.raises(errors.UnknownSchedule, match="ghost"):
                call("jobs", "ghost")
        assert admin.list_schedules("jobs", "ghost") == []
        with pytest.raises(errors.InvalidArgument, match="name"):
            admin.pause_schedule("jobs", "")


def test_async_admin(server: str) -> None:
    async def run() -> list[str]:
        async with AsyncAdmin(server) as admin:
            await admin.create_schedule("jobs", "a", b"v", cron="@hourly")
            await admin.pause_schedule("jobs", "a")
            (paused,) = await admin.list_schedules("jobs")
            assert paused.paused
            await admin.resume_schedule("jobs", "a")
            await admin.delete_schedule("jobs", "a")
            return [s.name for s in await admin.list_schedules("jobs")]

    assert asyncio.run(run()) == []


def test_cli(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    def run(*argv: str) -> tuple[int, str]:
        code = cli.main([*argv, "--bootstrap", server])
        return code, capsys.readouterr().out

    code, out = run(
        "schedule", "create", "jobs", "nightly", "--cron", "0 3 * * *",
        "--time-zone", "Europe/Berlin", "--value", "go", "--header", "kind=batch",
    )  # fmt: skip
    assert code == 0 and "nightly: cron '0 3 * * *' Europe/Berlin" in out, out
    code, out = run("schedule", "create", "jobs", "tick", "--interval-ms", "1000", "--json")
    created = json.loads(out)
    assert created["interval_ms"] == 1000 and created["catch_up"] == "CATCH_UP_ONCE"
    code, out = run("schedule", "pause", "jobs", "tick")
    assert code == 0 and "paused" in out
    code, out = run("schedule", "list", "jobs", "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert [(s["name"], s["paused"]) for s in listed] == [("nightly", False), ("tick", True)]
    assert run("schedule", "resume", "jobs", "tick")[0] == 0
    code, out = run("schedule", "delete", "jobs", "tick")
    assert code == 0 and "deleted schedule tick" in out
    code, out = run("schedule", "list", "jobs")
    assert "tick" not in out and "nightly" in out
    assert cli.main(["schedule", "create", "jobs", "bad", "--cron", "nope", "--bootstrap", server])
    assert "cron" in capsys.readouterr().err
