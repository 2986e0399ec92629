"""A chaos consumer-group member in its own process: polls, acks, nacks poison records, and
logs every outcome as a JSON line (the format of tests/consumer_proc.py, plus nacks).

    python -m tests.chaos.consumer --bootstrap A,B,C --group g --topic t1 --topic t2 --log m.jsonl

Events (one line each, flushed at once; ``wall_ms`` on every line):
- ``join``: member, generation, assignment — at start and whenever they change;
- ``lease``: member, topic, partition, offset, delivery_count, lease_deadline_ms, value;
- ``ack`` / ``nack``: member, topic, partition, offset, delivery_count, ok, error (the
  catalogue name; a whole-call failure such as UNAVAILABLE is logged for every ref: the broker
  may or may not have applied it);
- ``poll_error`` / ``join_error``: error; ``closed`` after a clean stop.

A value starting with ``P`` is poison: it is nacked (``--nack-delay-ms``) on every delivery, so
it must end in the dead-letter topic after ``max_deliveries``. Everything else is acked.
Unlike tests/consumer_proc.py this member survives broker faults: every call's failure is
logged and retried, never fatal.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from raftq.client import Consumer, Message
from raftq.proto import errors
from tests.consumer_proc import EventLog, MembershipLog, log_leases, log_settled

logger = logging.getLogger("raftq.tests.chaos.consumer")
POISON_PREFIX = "P"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.consumer")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--heartbeat-ms", type=int, default=300)
    parser.add_argument("--lease-ms", type=int, default=4000)
    parser.add_argument("--max-records", type=int, default=20)
    parser.add_argument("--nack-delay-ms", type=int, default=50)
    parser.add_argument("--request-timeout-ms", type=int, default=5000)
    return parser.parse_args(argv)


def join(args: argparse.Namespace, log: EventLog, stop: threading.Event) -> Consumer | None:
    while not stop.is_set():
        try:
            return Consumer(
                args.bootstrap,
                args.group,
                args.topic,
                session_timeout_ms=args.session_timeout_ms,
                heartbeat_interval_ms=args.heartbeat_ms,
                max_poll_records=args.max_records,
                lease_ms=args.lease_ms,
                request_timeout_ms=args.request_timeout_ms,
            )
        except errors.RaftqError as exc:
            log.write("join_error", error=exc.kind.name)
            stop.wait(0.2)
    return None


def settle(
    consumer: Consumer, log: EventLog, ev: str, messages: list[Message], delay_ms: int
) -> None:
    member = consumer.member_id
    try:
        if ev == "ack":
            outcomes = consumer.ack(messages)
        else:
            outcomes = consumer.nack(messages, delay_ms=delay_ms)
    except errors.RaftqError as exc:  # the whole call failed: applied or not, we cannot tell
        outcomes = [exc for _ in messages]
    log_settled(log, ev, member, messages, outcomes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log = EventLog(args.log)
    consumer = join(args, log, stop)
    if consumer is None:
        log.close()
        return 0
    membership = MembershipLog(consumer, log)
    membership.note()
    try:
        while not stop.is_set():
            try:
                messages = consumer.poll(timeout_ms=200)
            except errors.RaftqError as exc:
                log.write("poll_error", member=consumer.member_id, error=exc.kind.name)
                stop.wait(0.1)
                membership.note()
                continue
            log_leases(log, consumer.member_id, messages)
            membership.note()
            poison = [m for m in messages if m.value.startswith(POISON_PREFIX.encode())]
            good = [m for m in messages if not m.value.startswith(POISON_PREFIX.encode())]
            if good:
                settle(consumer, log, "ack", good, 0)
            if poison:
                settle(consumer, log, "nack", poison, args.nack_delay_ms)
    finally:
        try:
            consumer.close()
        except errors.RaftqError as exc:
            log.write("close_error", error=exc.kind.name)
        log.write("closed", member=consumer.member_id)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
