"""``raftq schedule create|list|pause|resume|delete``: recurring records (Admin.*_schedule).

raftq schedule create jobs nightly --cron "0 3 * * *" --time-zone Europe/Berlin --value go
raftq schedule create jobs heartbeat --interval-ms 10000 --value ping --key host-1
raftq schedule list jobs
raftq schedule pause jobs nightly
raftq schedule resume jobs nightly
raftq schedule delete jobs nightly
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable
from typing import Any

from raftq.client import Admin, Schedule, types


def schedule_create(args: argparse.Namespace) -> int:
    headers = {}
    for header in args.header or []:
        name, sep, value = header.partition("=")
        if not sep:
            raise SystemExit(f"--header {header!r}: use NAME=VALUE")
        headers[name] = value.encode()
    with args.make_admin(args) as admin:
        created = admin.create_schedule(
            args.topic,
            args.name,
            args.value.encode(),
            cron=args.cron,
            time_zone=args.time_zone or "",
            interval_ms=args.interval_ms,
            key=None if args.key is None else args.key.encode(),
            headers=headers,
            priority=args.priority,
            ttl_ms=args.ttl_ms,
            partition=args.partition,
            catch_up=args.catch_up,
        )
    _print([created], args)
    return 0


def schedule_list(args: argparse.Namespace) -> int:
    with args.make_admin(args) as admin:
        schedules = admin.list_schedules(args.topic, args.name or "")
    _print(schedules, args)
    return 0


def schedule_pause(args: argparse.Namespace) -> int:
    with args.make_admin(args) as admin:
        _print([admin.pause_schedule(args.topic, args.name)], args)
    return 0


def schedule_resume(args: argparse.Namespace) -> int:
    with args.make_admin(args) as admin:
        _print([admin.resume_schedule(args.topic, args.name)], args)
    return 0


def schedule_delete(args: argparse.Namespace) -> int:
    with args.make_admin(args) as admin:
        admin.delete_schedule(args.topic, args.name)
    if args.json:
        _emit({"topic": args.topic, "deleted": args.name})
    else:
        print(f"deleted schedule {args.name} of {args.topic}")
    return 0


def _print(schedules: list[Schedule], args: argparse.Namespace) -> None:
    if args.json:
        for schedule in schedules:
            _emit(types.to_dict(schedule))
        return
    for s in schedules:
        when = f"cron {s.cron!r} {s.time_zone or 'UTC'}" if s.cron else f"every {s.interval_ms} ms"
        state = "paused" if s.paused else f"next {_instant(s.next_slot_ms)}"
        print(
            f"{s.name}: {when}, partition {s.partition}, {state}, fired {s.fired}, "
            f"missed {s.missed}, catch-up {s.catch_up[9:].lower()}"
        )


def _emit(value: Any) -> None:
    sys.stdout.write(json.dumps(value, sort_keys=True) + "\n")


def _instant(ms: int) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _add(
    actions: Any, name: str, handler: Callable[[argparse.Namespace], int], help_: str, common: Any
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=help_, description=help_, parents=common
    )
    parser.set_defaults(handler=handler)
    return parser


def register(
    subparsers: Any, common: list[Any], make_admin: Callable[[argparse.Namespace], Admin]
) -> None:
    """``raftq schedule ...``; ``make_admin(args)``: an Admin for the client options."""
    parser = subparsers.add_parser(
        "schedule", help="recurring records: create, list, pause, resume, delete schedules"
    )
    parser.set_defaults(make_admin=make_admin)
    actions = parser.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    create = _add(
        actions,
        "create",
        schedule_create,
        "fire a record into a topic at every slot of a cron expression or an interval",
        common,
    )
    create.add_argument("topic")
    create.add_argument("name")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help='5 fields ("*/5 * * * *") or @hourly, @daily, ...')
    when.add_argument("--interval-ms", type=int, help="a fixed interval (at least 1000)")
    create.add_argument("--time-zone", help="IANA zone of --cron (default UTC)")
    create.add_argument("--value", default="", help="the record's value (default empty)")
    create.add_argument("--key", help="the record's key (also picks its partition)")
    create.add_argument("--header", action="append", metavar="NAME=VALUE")
    create.add_argument("--priority", type=int)
    create.add_argument("--ttl-ms", type=int)
    create.add_argument("--partition", type=int, help="default: by key, else by name")
    create.add_argument(
        "--catch-up",
        choices=("once", "skip"),
        default="once",
        help="slots an outage missed: one record for them all (default) or none",
    )
    listing = _add(actions, "list", schedule_list, "a topic's schedules", common)
    listing.add_argument("topic")
    listing.add_argument("name", nargs="?", help="only this schedule")
    for name, handler, help_ in (
        ("pause", schedule_pause, "stop firing until resumed"),
        ("resume", schedule_resume, "fire again from the next slot (no catch-up)"),
        ("delete", schedule_delete, "delete a schedule (its records stay)"),
    ):
        action = _add(actions, name, handler, help_, common)
        action.add_argument("topic")
        action.add_argument("name")
