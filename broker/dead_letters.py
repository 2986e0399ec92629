"""What a dead letter (a partition's outbox row) becomes in its dead-letter topic: the record,
its origin headers, and the partition it goes to (the backend's forwarder sends it; DESIGN §
Consuming)."""

from __future__ import annotations

import hashlib
from typing import Any

from raftq.assignors.partitioner import partition_for
from raftq.proto import common_pb2


def dead_letter_headers(topic: str, partition: int, row: Any) -> dict[str, bytes]:
    """Headers naming a dead letter's origin and reason (DESIGN § Consuming)."""
    return {
        "raftq.dlq.topic": topic.encode(),
        "raftq.dlq.partition": str(partition).encode(),
        "raftq.dlq.offset": str(row.offset).encode(),
        "raftq.dlq.group": row.group.encode(),
        "raftq.dlq.reason": row.reason.encode(),
        "raftq.dlq.delivery_count": str(row.delivery_count).encode(),
    }


def dead_letter_record(
    topic: str, partition: int, row: Any, topic_id: int = 0
) -> common_pb2.Record:
    """The record a dead letter (an outbox row) becomes in the dead-letter topic. Its
    idempotency key names the dead letter (source topic id, partition, group, offset) in a
    fixed 36 characters, so a forward repeated by a new leader (the old one died between
    forwarding and ``DeadLetterDone``) is deduplicated by the dead-letter partition."""
    stored = common_pb2.StoredRecord.FromString(row.record)
    record = common_pb2.Record()
    record.CopyFrom(stored.record)
    record.deliver_at_ms = 0
    name = f"{topic}\0{topic_id}\0{partition}\0{row.group}\0{row.offset}".encode()
    record.idempotency_key = "dlq/" + hashlib.blake2b(name, digest_size=16).hexdigest()
    record.headers.update(dead_letter_headers(topic, partition, row))
    return record


def dead_letter_partition(record: common_pb2.Record, source_partition: int, partitions: int) -> int:
    """Where a dead letter goes, the same on every attempt (idempotency keys are kept per
    partition): by its key as a producer's record would, else the source partition's
    number modulo the dead-letter topic's partitions (never spread: a retry would land
    elsewhere and be stored twice)."""
    if record.HasField("key"):
        return partition_for(record.key, partitions, 0)
    return source_partition % partitions
