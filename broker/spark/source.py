"""The Spark source's engine, without pyspark: offsets, read limits and ranged reads.

Offsets are ``{topic: {"<partition>": next_offset}}`` (JSON object keys are strings): the
next offset to read in each partition. A micro-batch reads ``[start, end)`` per partition
through ``Log.Fetch``; ``Log.ListOffsets`` gives each partition's log start and end. Nothing
here touches consumer-group state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftq.client import Admin, StoredRecord
from raftq.proto import errors
from raftq.spark.common import (
    SECURITY_OPTIONS,
    Security,
    bootstrap_option,
    check_known,
    int_option,
)

log = logging.getLogger("raftq.spark")

Offsets = dict[str, dict[str, int]]
FETCH_RECORDS_MAX = 2_000


SOURCE_OPTIONS = (
    "bootstrap",
    "bootstrap.servers",
    "topic",
    "topics",
    "subscribe",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "fetchMaxBytes",
    "requestTimeoutMs",
    *SECURITY_OPTIONS,
)
# A Fetch's byte budget (one record over it still comes back); Kafka's
# max.partition.fetch.bytes. At most 3 MiB: the answer, with its framing, must stay under
# gRPC's 4 MiB message limit (a 4 MiB budget was seen answered with 4,199,831 bytes).
FETCH_BYTES_DEFAULT = 1 << 20
FETCH_BYTES_MAX = 3 << 20


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    topics: tuple[str, ...]
    starting: str | Offsets = "earliest"  # streaming default: earliest (work-queue semantics)
    ending: str | Offsets = "latest"  # batch reads only
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    fetch_max_bytes: int = FETCH_BYTES_DEFAULT
    request_timeout_ms: int = 30_000
    security: Security = field(default_factory=Security)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Raises InvalidArgument naming the option to fix (an unknown one too)."""
        opts = {k.lower(): v for k, v in options.items()}
        check_known(opts, SOURCE_OPTIONS, "reader")
        bootstrap = bootstrap_option(opts)
        raw_topics = opts.get("topic") or opts.get("topics") or opts.get("subscribe") or ""
        topics = tuple(t.strip() for t in raw_topics.split(",") if t.strip())
        if not topics:
            raise errors.InvalidArgument("option topic names no topic: topic=a[,b...]")
        limit = opts.get("maxoffsetspertrigger")
        max_offsets = None
        if limit:
            if not limit.isdigit() or int(limit) < 1:
                raise errors.InvalidArgument(f"maxOffsetsPerTrigger={limit!r}: a count >= 1")
            max_offsets = int(limit)
        fail = (opts.get("failondataloss") or "true").lower()
        if fail not in ("true", "false"):
            raise errors.InvalidArgument(f"failOnDataLoss={fail!r}: true or false")
        return cls(
            bootstrap=bootstrap,
            topics=topics,
            starting=_offsets_option(opts.get("startingoffsets"), "earliest", topics),
            ending=_offsets_option(opts.get("endingoffsets"), "latest", topics),
            max_offsets_per_trigger=max_offsets,
            fail_on_data_loss=fail == "true",
            fetch_max_bytes=int_option(
                opts, "fetchMaxBytes", FETCH_BYTES_DEFAULT, 1, FETCH_BYTES_MAX
            ),
            request_timeout_ms=int_option(opts, "requestTimeoutMs", 30_000, 1),
            security=Security.parse(opts),
        )


def _offsets_option(raw: str | None, default: str, topics: Sequence[str]) -> str | Offsets:
    if raw is None or not raw.strip():
        return default
    value = raw.strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        raise errors.InvalidArgument(
            f"offsets {value!r}: earliest, latest, or JSON like "
            '{"topic": {"0": 42}} (-2 = earliest, -1 = latest)'
        ) from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise errors.InvalidArgument(f'offsets {value!r}: a JSON object {{"topic": {{"0": 42}}}}')
    unknown = sorted(set(parsed) - set(topics))
    if unknown:
        raise errors.InvalidArgument(f"offsets name topics not read: {unknown}")
    return {t: {str(int(p)): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


@dataclass(frozen=True)
class PartitionBounds:
    log_start: int
    end: int


def list_bounds(admin: Admin, topics: Sequence[str]) -> dict[str, dict[str, PartitionBounds]]:
    """Each partition's log start and end, per topic (ListOffsets)."""
    out: dict[str, dict[str, PartitionBounds]] = {}
    for topic in topics:
        out[topic] = {
            str(p.partition): PartitionBounds(p.log_start, p.end) for p in admin.list_offsets(topic)
        }
    return out


def resolve(spec: str | Offsets, bounds: Mapping[str, Mapping[str, PartitionBounds]]) -> Offsets:
    """Concrete offsets for ``earliest`` / ``latest`` / JSON (partitions a JSON spec leaves
    out start at earliest; -2 = earliest, -1 = latest). Raises InvalidArgument when the JSON
    names a partition the topic does not have (Kafka's connector fails the same way)."""
    out: Offsets = {}
    for topic, parts in bounds.items():
        named = spec.get(topic, {}) if isinstance(spec, dict) else {}
        missing = sorted(set(named) - set(parts), key=int)
        if missing:
            raise errors.InvalidArgument(
                f"offsets name partitions {', '.join(missing)} of topic {topic!r}, which has "
                f"partitions 0..{len(parts) - 1}"
            )
        out[topic] = {}
        for p, b in parts.items():
            if isinstance(spec, str):
                out[topic][p] = b.log_start if spec == "earliest" else b.end
            else:
                wanted = named.get(p, -2)
                out[topic][p] = b.log_start if wanted == -2 else b.end if wanted == -1 else wanted
    return out


def limit_offsets(start: Offsets, latest: Offsets, max_records: int | None) -> Offsets:
    """The end of the next micro-batch: ``latest``, or at most ``max_records`` records past
    ``start`` shared out fairly (water-filling: every partition with records gets an equal
    share; what a short partition does not use goes to the others). Pure."""
    end: Offsets = {t: dict(parts) for t, parts in latest.items()}
    if max_records is None:
        return end
    lanes = []
    for topic, parts in latest.items():
        for p, last in parts.items():
            first = start.get(topic, {}).get(p, last)
            lanes.append((topic, p, first, max(0, last - first)))
    budget = max_records
    grant = {(t, p): 0 for t, p, _, _ in lanes}
    open_lanes = sorted(((t, p, avail) for t, p, _, avail in lanes if avail > 0))
    while budget > 0 and open_lanes:
        share = max(1, budget // len(open_lanes))
        still = []
        for t, p, avail in open_lanes:
            if budget == 0:
                still.append((t, p, avail))
                continue
            take = min(share, avail - grant[(t, p)], budget)
            grant[(t, p)] += take
            budget -= take
            if grant[(t, p)] < avail:
                still.append((t, p, avail))
        open_lanes = still
    for t, p, first, _ in lanes:
        end[t][p] = first + grant[(t, p)]
    return end


def cap(offsets: Offsets, ceiling: Offsets) -> Offsets:
    """``offsets`` lowered to ``ceiling`` partition by partition (Trigger.AvailableNow)."""
    return {
        t: {p: min(o, ceiling.get(t, {}).get(p, o)) for p, o in parts.items()}
        for t, parts in offsets.items()
    }


@dataclass(frozen=True)
class Range:
    """One Spark input partition: ``[start, end)`` of one raftq partition."""

    topic: str
    partition: int
    start: int
    end: int


def ranges(start: Offsets, end: Offsets) -> list[Range]:
    out = []
    for topic in sorted(end):
        for p in sorted(end[topic], key=int):
            first = start.get(topic, {}).get(p, end[topic][p])
            if end[topic][p] > first:
                out.append(Range(topic, int(p), first, end[topic][p]))
    return out


def read_range(
    admin: Admin, r: Range, fail_on_data_loss: bool, max_bytes: int = FETCH_BYTES_DEFAULT
) -> Iterator[StoredRecord]:
    """Every record of ``r`` in offset order (cancelled records leave gaps), fetched in
    answers of at most ``max_bytes`` (or one record, if it alone is larger). Records below
    the log start are gone (retention): DataLoss raises, or is logged and skipped."""
    offset = r.start
    while offset < r.end:
        response = admin.fetch(
            r.topic, r.partition, offset, min(FETCH_RECORDS_MAX, r.end - offset), max_bytes
        )
        if offset < response.log_start:
            message = (
                f"{r.topic}/{r.partition}: offsets {offset}..{response.log_start - 1} are gone "
                "(retention); set failOnDataLoss=false to skip them"
            )
            if fail_on_data_loss:
                raise errors.InvalidArgument(message)
            log.warning("%s: skipped", message)
            offset = response.log_start
            continue
        records = [rec for rec in response.records if rec.offset < r.end]
        if not records:
            if response.end <= offset:  # the range was planned past the log's end
                message = f"{r.topic}/{r.partition}: end {response.end} is below {r.end}"
                if fail_on_data_loss:
                    raise errors.InvalidArgument(message + " (the topic was recreated?)")
                log.warning("%s: stopped", message)
                return
            break  # the rest of the range was cancelled
        yield from records
        offset = records[-1].offset + 1


def to_json(offsets: Offsets) -> dict[str, Any]:
    return {t: dict(parts) for t, parts in offsets.items()}
