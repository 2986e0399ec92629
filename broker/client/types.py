"""What :class:`raftq.Admin` and :class:`raftq.aio.AsyncAdmin` answer: frozen dataclasses.

Each is read from the API's protobuf once (:mod:`raftq.client.admin_calls`, shared by both
clients) and prints as its fields, zero values included::

    >>> print(admin.list_offsets("jobs"))
    [PartitionOffsets(partition=0, log_start=0, end=3)]

Field names are the API's (``proto/api.proto``) except where Kafka's admin client has a name
for the same thing: ``PartitionInfo.isr`` (the API's ``in_sync``), ``GroupListing.group_id``
and ``GroupInfo.group_id`` (the API's ``group``). Enumerations are the API's names as strings
(``"PRIORITY"``, ``"HEALTHY"``, ``"CATCH_UP_ONCE"``). Repeated fields are tuples; bytes stay
bytes. :func:`to_dict` gives the JSON shape the HTTP API and ``raftq ... --json`` print: the
API's field names, bytes as base64. Pure: no protobuf, no I/O.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Ordering = Literal["FIFO", "PRIORITY", "FAIR"]
TtlAction = Literal["TTL_DROP", "TTL_DEAD_LETTER"]
CatchUp = Literal["CATCH_UP_ONCE", "CATCH_UP_SKIP"]
ClusterHealth = Literal["HEALTH_UNKNOWN", "HEALTHY", "DEGRADED", "UNHEALTHY"]


def _api_name(name: str) -> dict[str, str]:
    """Field metadata: the API's (and the JSON's) name of a field named after Kafka's."""
    return {"api_name": name}


# --- topics ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's effective settings (README's topic settings)."""

    ordering: Ordering
    lease_ms: int
    max_deliveries: int  # 0 = unlimited
    dead_letter_topic: str
    retention_ms: int  # 0 = keep forever
    retention_bytes: int  # 0 = unbounded
    max_record_bytes: int
    dedup_window_ms: int
    nack_backoff_base_ms: int
    nack_backoff_max_ms: int
    ttl_ms: int  # 0 = never
    ttl_action: TtlAction
    fair_key: str  # ordering=FAIR: the header naming a record's fair key; "" = the record key


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a :class:`TopicInfo` (Kafka's ``TopicPartitionInfo``)."""

    partition: int
    replicas: tuple[int, ...]  # broker ids; the first is the preferred leader
    leader: int  # broker id; 0 = no leader known
    leader_addr: str  # the leader's client address; "" = none
    log_start: int
    end: int  # the next offset to be assigned
    isr: tuple[int, ...] = field(metadata=_api_name("in_sync"))  # replicas caught up


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """``describe_topic``, ``create_topic``, ``alter_topic_config``, ``add_partitions``
    (Kafka's ``TopicDescription``)."""

    name: str
    replication_factor: int
    config: TopicConfig
    partitions: tuple[PartitionInfo, ...]  # by partition number


@dataclass(frozen=True, slots=True)
class TopicListing:
    """One row of ``list_topics`` (Kafka's ``TopicListing``)."""

    name: str
    partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One row of ``list_offsets``: records are at offsets [log_start, end)."""

    partition: int
    log_start: int
    end: int


@dataclass(frozen=True, slots=True)
class PartitionPurge:
    """One row of ``purge_topic``."""

    partition: int
    log_start: int  # the new log start (the end offset when purged)
    deleted: int  # records deleted


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a ``fetch`` (Kafka's ``ConsumerRecord``, without group state)."""

    offset: int
    timestamp_ms: int  # the leader's append time
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    priority: int
    deliver_at_ms: int  # 0 = at once
    idempotency_key: str
    ttl_ms: int  # 0 = the topic's


@dataclass(frozen=True, slots=True)
class FetchResult:
    """``fetch``: records in offset order (cancelled ones leave gaps) and the log's bounds."""

    records: tuple[StoredRecord, ...]
    log_start: int
    end: int


@dataclass(frozen=True, slots=True)
class ProducerState:
    """An idempotent producer's last applied batch on one partition (``producer_state``)."""

    partition: int
    known: bool  # False: no batch of this producer is remembered here
    last_sequence: int
    last_offsets: tuple[int, ...]  # the offsets that batch was written at
    records: int  # ``spark:`` producer ids: its records in the log; else -1


# --- groups ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One row of ``list_groups`` (Kafka's ``ConsumerGroupListing``)."""

    group_id: str = field(metadata=_api_name("group"))
    generation: int
    members: int
    topics: tuple[str, ...]
    empty_since_ms: int  # Unix ms the last member left; 0 = has members
    deleting: bool  # a delete_group is under way


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One member of a :class:`GroupInfo` (Kafka's ``MemberDescription``)."""

    member_id: str
    topics: tuple[str, ...]
    assignment: tuple[TopicPartitions, ...]
    session_timeout_ms: int
    last_heartbeat_ms: int  # Unix ms, as the metadata leader saw it; 0 = unknown


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position on one partition."""

    topic: str
    partition: int
    committed: int  # the lowest unacknowledged offset
    end: int
    lag: int  # end - committed
    pending: int  # records not yet acknowledged
    leased: int  # records under a live lease
    member_id: str  # the assigned member; "" = none


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """``describe_group`` (Kafka's ``ConsumerGroupDescription``)."""

    group_id: str = field(metadata=_api_name("group"))
    generation: int
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]
    empty_since_ms: int
    deleting: bool


@dataclass(frozen=True, slots=True)
class GroupDeletion:
    """``delete_group``."""

    partitions: int  # partitions that forgot the group
    pending: int  # pending (unacknowledged or leased) records dropped with it


@dataclass(frozen=True, slots=True)
class PartitionSeek:
    """One row of ``seek_group``."""

    partition: int
    offset: int  # the group's committed offset there now
    dropped: int  # pending records replaced


# --- schedules ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordTemplate:
    """What each record a :class:`Schedule` fires carries."""

    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    priority: int
    deliver_at_ms: int
    idempotency_key: str
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring record (``create_schedule``, ``list_schedules``...)."""

    name: str
    cron: str  # "" = every interval_ms
    time_zone: str  # "" = UTC
    interval_ms: int
    template: RecordTemplate
    partition: int
    catch_up: CatchUp
    paused: bool
    after_ms: int  # the next slot is the first one after this instant
    created_ms: int
    fired: int  # records fired
    missed: int  # slots missed
    last_slot_ms: int  # 0 = none yet
    revision: int
    next_slot_ms: int


# --- cluster --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One broker of a :class:`ClusterInfo` (Kafka's ``Node``)."""

    id: int
    client_addr: str
    raft_addr: str
    rack: str
    alive: bool
    metadata_voter: bool  # False: a learner of the metadata group


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """``describe_cluster``."""

    brokers: tuple[BrokerInfo, ...]
    metadata_leader: int  # broker id (Kafka's active controller); 0 = none known
    health: ClusterHealth
    problems: tuple[str, ...]  # sentences saying what is wrong
    topics: int
    partitions: int
    partitions_without_leader: int
    under_replicated_partitions: int


@dataclass(frozen=True, slots=True)
class LeaderRebalance:
    """``rebalance_leaders``."""

    moved: int  # partitions whose leadership moved to their preferred replica
    remaining: int  # partitions still led elsewhere


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """``move_partition``: the partition's replicas now and its leader (0: none reported)."""

    replicas: tuple[int, ...]
    leader: int


@dataclass(frozen=True, slots=True)
class MetadataBackup:
    """``backup_metadata``: the metadata table (a ``ClusterSnapshot``) at ``applied_index``."""

    table: bytes = field(repr=False)
    applied_index: int
    cluster_id: str


@dataclass(frozen=True, slots=True)
class BackupChunk:
    """One message of ``backup_partition``: the first describes the copy (``applied_index``,
    ``size_bytes``, ``chunks``, ``next_offset``); each later one is chunk ``index``."""

    applied_index: int
    size_bytes: int
    chunks: int
    next_offset: int
    index: int
    sha256: bytes
    data: bytes = field(repr=False)


def to_dict(value: Any) -> Any:
    """``value`` (an answer above, or a list or dict of them) as JSON-ready data: the API's
    field names, tuples as lists, bytes as base64, None as null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.metadata.get("api_name", f.name): to_dict(getattr(value, f.name))
            for f in dataclasses.fields(value)
        }
    if isinstance(value, list | tuple):
        return [to_dict(v) for v in value]
    if isinstance(value, dict):
        return {k: to_dict(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


__all__ = [
    "BackupChunk",
    "BrokerInfo",
    "CatchUp",
    "ClusterHealth",
    "ClusterInfo",
    "FetchResult",
    "GroupDeletion",
    "GroupInfo",
    "GroupListing",
    "LeaderRebalance",
    "MemberInfo",
    "MetadataBackup",
    "Ordering",
    "PartitionInfo",
    "PartitionLag",
    "PartitionMove",
    "PartitionOffsets",
    "PartitionPurge",
    "PartitionSeek",
    "ProducerState",
    "RecordTemplate",
    "Schedule",
    "StoredRecord",
    "TopicConfig",
    "TopicInfo",
    "TopicListing",
    "TopicPartitions",
    "TtlAction",
    "to_dict",
]
