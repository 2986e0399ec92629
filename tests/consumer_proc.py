"""A consumer group member in its own process, for the process tests (no mocks).

    python -m tests.consumer_proc --bootstrap 127.0.0.1:9092 --group g --topic t --log m1.jsonl

It joins the group, polls, acks, and appends one JSON line per event to ``--log``, flushed at
once (a SIGKILL loses at most the line being written):

- ``{"ev": "join", "member", "generation", "assignment", "wall_ms"}`` at start and whenever the
  consumer's generation or assignment changes (seen between polls);
- ``{"ev": "lease", "member", "topic", "partition", "offset", "delivery_count",
  "lease_deadline_ms", "value", "wall_ms"}`` for every record a poll returned;
- ``{"ev": "ack", ..., "ok", "error", "wall_ms"}`` for every ack outcome (``error`` is the
  catalogue name, e.g. "FENCED");
- ``{"ev": "closed", ...}`` after a clean stop (SIGTERM or SIGINT: leaves the group).

``--hold-ms`` keeps each batch leased that long before acking (a slow worker: a SIGKILL then
always finds leases to release). ``--ready-file`` is written once joined.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from raftq.client import Consumer, Message
from raftq.proto import errors

logger = logging.getLogger("raftq.tests.consumer_proc")


def wall_ms() -> int:
    return int(time.time() * 1000)


class EventLog:
    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, **fields, "wall_ms": wall_ms()}, sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class MembershipLog:
    """Writes a ``join`` event whenever the consumer's generation, member id or assignment
    differs from the last one written (checked between polls)."""

    def __init__(self, consumer: Consumer, log: EventLog) -> None:
        self._consumer = consumer
        self._log = log
        self._seen: tuple[int, str, list[tuple[str, int]]] = (-1, "", [])

    def note(self) -> None:
        c = self._consumer
        current = (c.generation, c.member_id, list(c.assignment))
        if current != self._seen:
            self._seen = current
            self._log.write(
                "join",
                member=current[1],
                generation=current[0],
                assignment=[[t, p] for t, p in current[2]],
            )


def log_leases(log: EventLog, member: str, messages: list[Message]) -> None:
    for m in messages:
        log.write(
            "lease",
            member=member,
            **_ref(m),
            lease_deadline_ms=m.lease_deadline_ms,
            value=m.value.decode(),
        )


def log_settled(
    log: EventLog,
    ev: str,
    member: str,
    messages: list[Message],
    outcomes: list[errors.RaftqError | None],
) -> None:
    for m, outcome in zip(messages, outcomes, strict=True):
        log.write(
            ev,
            member=member,
            **_ref(m),
            ok=outcome is None,
            error=outcome.kind.name if outcome is not None else "",
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.consumer_proc")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=2000)
    parser.add_argument("--heartbeat-ms", type=int, default=300)
    parser.add_argument("--lease-ms", type=int, default=60_000)
    parser.add_argument("--max-records", type=int, default=50)
    parser.add_argument("--hold-ms", type=int, default=0)
    parser.add_argument("--start-from", default="earliest", choices=["earliest", "latest"])
    parser.add_argument("--ready-file", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log = EventLog(args.log)
    consumer = Consumer(
        args.bootstrap,
        args.group,
        args.topic,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_records=args.max_records,
        lease_ms=args.lease_ms,
        start_from=args.start_from,
    )
    membership = MembershipLog(consumer, log)
    membership.note()
    if args.ready_file is not None:
        args.ready_file.write_text(consumer.member_id)
    logger.info("[group=%s] member %s joined", args.group, consumer.member_id)
    try:
        while not stop.is_set():
            try:
                messages = consumer.poll(timeout_ms=200)
            except errors.RaftqError as exc:
                log.write("poll_error", member=consumer.member_id, error=exc.kind.name)
                stop.wait(0.1)
                continue
            member = consumer.member_id
            log_leases(log, member, messages)
            membership.note()
            if messages and args.hold_ms:
                stop.wait(args.hold_ms / 1000)
            if messages:
                log_settled(log, "ack", member, messages, consumer.ack(messages))
    finally:
        consumer.close()
        log.write("closed", member=consumer.member_id)
        log.close()
    return 0


def _ref(m: Message) -> dict[str, Any]:
    return {
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "delivery_count": m.delivery_count,
    }


if __name__ == "__main__":
    sys.exit(main())
