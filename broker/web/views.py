"""What the HTTP API and the console show, as JSON-ready dicts (pure: no I/O).

- :func:`answer_dict`: an Admin answer (:mod:`raftq.client.types`) as a dict with the API's
  field names, integers as JSON numbers, enums by name, bytes as base64.
- :func:`record_dict`: a stored record with its key and value both as text (``null`` when not
  UTF-8) and as base64, so nothing is lost or invented for binary values.
- A dequeued record's id is ``topic/partition/offset/delivery_count`` (:func:`message_id`):
  topic names never contain ``/``, and the delivery count makes an id name one delivery, so
  an ack of an older delivery fails (LEASE_EXPIRED) as it does over gRPC.
- :class:`LagHistory`: each group's total lag sampled over time, for the console's chart.
"""

from __future__ import annotations

import base64
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raftq.client import types
from raftq.proto import errors

DLQ_HEADER_PREFIX = "raftq.dlq."


def text(data: bytes | None) -> str | None:
    """``data`` as UTF-8 text; None when absent or not valid UTF-8 (see the ``_b64`` twin)."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def answer_dict(answer: Any) -> Any:
    """An Admin answer (a :mod:`raftq.client.types` dataclass, or a list of them) as JSON:
    the API's field names, integers as JSON numbers, enums by name, bytes as base64."""
    return types.to_dict(answer)


def headers_dict(headers: Mapping[str, bytes]) -> dict[str, str]:
    """Header values as text (bytes that are not UTF-8 shown with backslash escapes)."""
    return {k: v.decode("utf-8", "backslashreplace") for k, v in sorted(headers.items())}


def record_dict(stored: types.StoredRecord) -> dict[str, Any]:
    """A fetched record as a dict."""
    return {
        "offset": stored.offset,
        "timestamp_ms": stored.timestamp_ms,
        "key": text(stored.key),
        "key_b64": b64(stored.key),
        "value": text(stored.value),
        "value_b64": b64(stored.value),
        "value_bytes": len(stored.value),
        "headers": headers_dict(stored.headers),
        "priority": stored.priority,
        "deliver_at_ms": stored.deliver_at_ms,
        "ttl_ms": stored.ttl_ms,
        "idempotency_key": stored.idempotency_key,
    }


def dead_letter_dict(
    stored: types.StoredRecord, partition: int, redriven_below: int
) -> dict[str, Any]:
    """A record of a dead-letter topic with its origin and reason lifted from its headers.
    ``redriven`` is true below the redrive group's committed offset on that partition."""
    row = record_dict(stored)
    dlq = {
        k[len(DLQ_HEADER_PREFIX) :]: v
        for k, v in row["headers"].items()
        if k.startswith(DLQ_HEADER_PREFIX)
    }
    row.update(
        partition=partition,
        reason=dlq.get("reason", ""),
        origin_topic=dlq.get("topic", ""),
        origin_partition=int(dlq["partition"]) if dlq.get("partition", "").isdigit() else None,
        origin_offset=int(dlq["offset"]) if dlq.get("offset", "").isdigit() else None,
        origin_group=dlq.get("group", ""),
        redriven=stored.offset < redriven_below,
    )
    return row


def message_id(topic: str, partition: int, offset: int, delivery_count: int) -> str:
    return f"{topic}/{partition}/{offset}/{delivery_count}"


@dataclass(frozen=True)
class MessageRef:
    topic: str
    partition: int
    offset: int
    delivery_count: int


def parse_message_id(value: str) -> MessageRef:
    """The delivery a :func:`message_id` names; InvalidArgument for anything else."""
    parts = value.split("/")
    if len(parts) != 4 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        raise errors.InvalidArgument(
            f"message id {value!r} is not topic/partition/offset/delivery_count"
        )
    return MessageRef(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))


def delivery_dict(message: Any) -> dict[str, Any]:
    """A dequeued :class:`raftq.client.Message` as a dict, with its id."""
    return {
        "id": message_id(message.topic, message.partition, message.offset, message.delivery_count),
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "delivery_count": message.delivery_count,
        "lease_deadline_ms": message.lease_deadline_ms,
        "timestamp_ms": message.timestamp_ms,
        "key": text(message.key),
        "key_b64": b64(message.key),
        "value": text(message.value),
        "value_b64": b64(message.value),
        "headers": headers_dict(message.headers),
        "priority": message.priority,
        "deliver_at_ms": message.deliver_at_ms,
    }


def error_dict(error: errors.RaftqError) -> dict[str, Any]:
    return {"code": error.kind.name, "message": error.message, "retriable": error.retriable}


class LagHistory:
    """Each group's total lag at the times it was sampled (the console samples on every view
    of the group), at most ``samples_max`` per group, for at most ``groups_max`` groups (the
    least recently sampled is forgotten)."""

    def __init__(self, samples_max: int = 240, groups_max: int = 256) -> None:
        self.samples_max = samples_max
        self.groups_max = groups_max
        self._by_group: dict[str, deque[tuple[int, int]]] = {}

    def record(self, group: str, now_ms: int, lag: int) -> None:
        samples = self._by_group.pop(group, None)
        if samples is None:
            samples = deque(maxlen=self.samples_max)
            while len(self._by_group) >= self.groups_max:
                del self._by_group[next(iter(self._by_group))]
        self._by_group[group] = samples  # most recently sampled last
        samples.append((now_ms, lag))

    def samples(self, group: str) -> list[tuple[int, int]]:
        return list(self._by_group.get(group, ()))


def sparkline_points(samples: Iterable[tuple[int, int]], width: int, height: int) -> str:
    """SVG polyline points of (time, lag) samples scaled into width x height (lag 0 at the
    bottom); "" for no sample."""
    samples = list(samples)
    if not samples:
        return ""
    t0, t1 = samples[0][0], samples[-1][0]
    top = max(lag for _, lag in samples) or 1
    span = (t1 - t0) or 1
    return " ".join(
        f"{(t - t0) * width / span:.1f},{height - lag * height / top:.1f}" for t, lag in samples
    )
