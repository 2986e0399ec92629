"""Redrive: move dead letters back to where they came from (SQS's StartMessageMoveTask).

A dead letter in ``<topic>.dlq`` carries headers naming its origin (``raftq.dlq.topic``,
``raftq.dlq.partition``, ``raftq.dlq.offset``, ``.group``, ``.reason``). :func:`redrive`
consumes the dead-letter topic with its own consumer group (``raftq.redrive`` by default),
sends each dead letter back to its origin topic and partition (key, value, priority and
the application's headers as they were; ``raftq.redrive.*`` headers say where it came back
from), and acknowledges it in the dead-letter topic only after the send is acknowledged.

- Resumable: the redrive group's acknowledgements are its progress. Interrupted, it resumes
  where it stopped (a dead letter it was holding is leased until its lease runs out, then
  taken again).
- Nothing lost: a dead letter is acknowledged only once its copy is stored in the origin.
- Nothing doubled: each copy's idempotency key names the dead letter (dead-letter topic,
  partition, offset), so sending it again after an interruption between the send and the
  ack is deduplicated by the origin partition within its ``dedup_window_ms``.
- Rate-limited: ``rate`` records per second at most (0: unlimited), ``limit`` records at most.

A redriven record is a new record of its origin partition: every group of that topic sees
it (as a re-published Kafka dead letter, or an SQS message moved back to its queue).
A dead letter without origin headers (not written by raftq's dead-lettering) is skipped,
left unacknowledged in the redrive group, and counted.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from raftq.client.consumer import Consumer, Message
from raftq.client.producer import Producer
from raftq.client.send_future import SendFuture

REDRIVE_GROUP = "raftq.redrive"


@dataclass
class RedriveProgress:
    """What a redrive did so far (passed to ``on_progress`` after each batch)."""

    moved: int = 0  # stored in their origin and acknowledged in the dead-letter topic
    skipped: int = 0  # no origin headers: left in the dead-letter topic
    by_origin: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> moved
    seconds: float = 0.0


def redriven_record_key(dlq_topic: str, message: Message) -> str:
    """The idempotency key of a dead letter's copy: the same on every attempt."""
    name = f"{dlq_topic}\0{message.partition}\0{message.offset}".encode()
    return "redrive/" + hashlib.blake2b(name, digest_size=16).hexdigest()


def origin_of(message: Message) -> tuple[str, int] | None:
    """The (topic, partition) a dead letter came from, or None without origin headers."""
    try:
        topic = message.headers["raftq.dlq.topic"].decode()
        partition = int(message.headers["raftq.dlq.partition"])
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    return topic, partition


def redriven_headers(dlq_topic: str, message: Message) -> dict[str, bytes]:
    kept = {k: v for k, v in message.headers.items() if not k.startswith("raftq.dlq.")}
    dlq = message.headers
    kept["raftq.redrive.from"] = f"{dlq_topic}/{message.partition}@{message.offset}".encode()
    for name in ("reason", "group", "offset"):
        if f"raftq.dlq.{name}" in dlq:
            kept[f"raftq.redrive.{name}"] = dlq[f"raftq.dlq.{name}"]
    return kept


def redrive(
    bootstrap: str,
    dlq_topic: str,
    *,
    rate: float = 0.0,
    limit: int | None = None,
    group: str = REDRIVE_GROUP,
    idle_exit_ms: int = 2_000,
    on_progress: Callable[[RedriveProgress], None] | None = None,
    client: dict[str, object] | None = None,
) -> RedriveProgress:
    """Move the dead letters of ``dlq_topic`` back to their origins; returns the progress
    when the dead-letter topic has had nothing new for ``idle_exit_ms`` or ``limit`` were
    moved. Raises UnknownTopic (no such dead-letter topic), Unavailable... (retry: it
    resumes)."""
    options = dict(client or {})
    progress = RedriveProgress()
    started = time.monotonic()
    with (
        Consumer(bootstrap, group, [dlq_topic], **options) as consumer,  # type: ignore[arg-type]
        Producer(bootstrap, linger_ms=1, **options) as producer,  # type: ignore[arg-type]
    ):
        idle_since = time.monotonic()
        while limit is None or progress.moved < limit:
            wanted = 500 if limit is None else max(1, min(500, limit - progress.moved))
            if rate > 0:
                wanted = max(1, min(wanted, int(rate)))
            batch_started = time.monotonic()
            messages = consumer.poll(wanted, timeout_ms=min(1000, idle_exit_ms))
            if not messages:
                if (time.monotonic() - idle_since) * 1000 >= idle_exit_ms:
                    break
                continue
            idle_since = time.monotonic()
            _move(dlq_topic, messages, consumer, producer, progress)
            progress.seconds = time.monotonic() - started
            if on_progress is not None:
                on_progress(progress)
            if rate > 0:  # this batch may take len/rate seconds at most
                time.sleep(max(0.0, len(messages) / rate - (time.monotonic() - batch_started)))
    progress.seconds = time.monotonic() - started
    return progress


def _move(
    dlq_topic: str,
    messages: list[Message],
    consumer: Consumer,
    producer: Producer,
    progress: RedriveProgress,
) -> None:
    """Send each dead letter back, wait for every send, ack those stored (only those)."""
    sent: list[tuple[Message, tuple[str, int], SendFuture]] = []
    for message in messages:
        origin = origin_of(message)
        if origin is None:
            progress.skipped += 1
            continue
        future = producer.send(
            origin[0],
            message.value,
            key=message.key,
            headers=redriven_headers(dlq_topic, message),
            partition=origin[1],
            priority=message.priority,
            idempotency_key=redriven_record_key(dlq_topic, message),
        )
        sent.append((message, origin, future))
    producer.flush()
    for _, _, future in sent:
        error = future.exception()
        if error is not None:
            raise error  # not stored: nothing is acked, a rerun resumes with these
    outcomes = consumer.ack([message for message, _, _ in sent])
    for (_, (topic, partition), _), error in zip(sent, outcomes, strict=True):
        if error is None:  # else its lease ran out: taken again later, its copy deduplicated
            where = f"{topic}/{partition}"
            progress.by_origin[where] = progress.by_origin.get(where, 0) + 1
            progress.moved += 1


__all__ = ["REDRIVE_GROUP", "RedriveProgress", "origin_of", "redrive", "redriven_record_key"]
