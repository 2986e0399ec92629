from raftq.proto import common_pb2 as _common_pb2
from raftq.proto import partition_pb2 as _partition_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClusterHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HEALTH_UNKNOWN: _ClassVar[ClusterHealth]
    HEALTHY: _ClassVar[ClusterHealth]
    DEGRADED: _ClassVar[ClusterHealth]
    UNHEALTHY: _ClassVar[ClusterHealth]
HEALTH_UNKNOWN: ClusterHealth
HEALTHY: ClusterHealth
DEGRADED: ClusterHealth
UNHEALTHY: ClusterHealth

class SendRequest(_message.Message):
    __slots__ = ("topic", "records", "partition", "producer_id", "sequence", "request_id", "values")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    partition: int
    producer_id: str
    sequence: int
    request_id: int
    values: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, topic: _Optional[str] = ..., records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ..., partition: _Optional[int] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., request_id: _Optional[int] = ..., values: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("partition", "offset", "error", "message", "duplicate", "leader_hint", "timestamp_ms", "count")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    LEADER_HINT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    error: _common_pb2.ErrorCode
    message: str
    duplicate: bool
    leader_hint: str
    timestamp_ms: int
    count: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., duplicate: _Optional[bool] = ..., leader_hint: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("results", "request_id", "error", "message", "leader_hint")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_HINT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    request_id: int
    error: _common_pb2.ErrorCode
    message: str
    leader_hint: str
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ..., request_id: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., leader_hint: _Optional[str] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group", "topics", "member_id", "session_timeout_ms", "start_from")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    START_FROM_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    member_id: str
    session_timeout_ms: int
    start_from: _partition_pb2.StartFrom
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., member_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., start_from: _Optional[_Union[_partition_pb2.StartFrom, str]] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("member_id", "generation", "assignment", "session_timeout_ms", "heartbeat_interval_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    generation: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    session_timeout_ms: int
    heartbeat_interval_ms: int
    def __init__(self, member_id: _Optional[str] = ..., generation: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., session_timeout_ms: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("generation", "assignment")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    generation: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, generation: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group", "member_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "max_records", "max_wait_ms", "lease_ms", "max_bytes", "compact", "columns")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    max_records: int
    max_wait_ms: int
    lease_ms: int
    max_bytes: int
    compact: bool
    columns: bool
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., max_records: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., lease_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ..., compact: _Optional[bool] = ..., columns: _Optional[bool] = ...) -> None: ...

class LeasedRecord(_message.Message):
    __slots__ = ("topic", "partition", "offset", "delivery_count", "lease_deadline_ms", "timestamp_ms", "record")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    delivery_count: int
    lease_deadline_ms: int
    timestamp_ms: int
    record: _common_pb2.Record
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delivery_count: _Optional[int] = ..., lease_deadline_ms: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., record: _Optional[_Union[_common_pb2.Record, _Mapping]] = ...) -> None: ...

class PollResponse(_message.Message):
    __slots__ = ("records", "batches", "leader_hint")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    LEADER_HINT_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[LeasedRecord]
    batches: _containers.RepeatedCompositeFieldContainer[PartitionDeliveries]
    leader_hint: str
    def __init__(self, records: _Optional[_Iterable[_Union[LeasedRecord, _Mapping]]] = ..., batches: _Optional[_Iterable[_Union[PartitionDeliveries, _Mapping]]] = ..., leader_hint: _Optional[str] = ...) -> None: ...

class PartitionDeliveries(_message.Message):
    __slots__ = ("topic", "partition", "deliveries", "columns")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    deliveries: _containers.RepeatedCompositeFieldContainer[_common_pb2.Delivery]
    columns: _common_pb2.DeliveryColumns
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., deliveries: _Optional[_Iterable[_Union[_common_pb2.Delivery, _Mapping]]] = ..., columns: _Optional[_Union[_common_pb2.DeliveryColumns, _Mapping]] = ...) -> None: ...

class PollStart(_message.Message):
    __slots__ = ("group", "member_id", "generation", "lease_ms", "max_bytes")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    lease_ms: int
    max_bytes: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., lease_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: int
    def __init__(self, records: _Optional[int] = ...) -> None: ...

class PollStreamRequest(_message.Message):
    __slots__ = ("start", "credit")
    START_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    start: PollStart
    credit: Credit
    def __init__(self, start: _Optional[_Union[PollStart, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ...) -> None: ...

class RecordRef(_message.Message):
    __slots__ = ("topic", "partition", "offset", "delivery_count")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    delivery_count: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delivery_count: _Optional[int] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "refs", "batches")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    refs: _containers.RepeatedCompositeFieldContainer[RecordRef]
    batches: _containers.RepeatedCompositeFieldContainer[PartitionRefs]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., refs: _Optional[_Iterable[_Union[RecordRef, _Mapping]]] = ..., batches: _Optional[_Iterable[_Union[PartitionRefs, _Mapping]]] = ...) -> None: ...

class PartitionRefs(_message.Message):
    __slots__ = ("topic", "partition", "offsets", "delivery_counts")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    delivery_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ..., delivery_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "refs", "delay_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    refs: _containers.RepeatedCompositeFieldContainer[RecordRef]
    delay_ms: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., refs: _Optional[_Iterable[_Union[RecordRef, _Mapping]]] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class ExtendLeaseRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "refs", "lease_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    refs: _containers.RepeatedCompositeFieldContainer[RecordRef]
    lease_ms: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., refs: _Optional[_Iterable[_Union[RecordRef, _Mapping]]] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class RefOutcome(_message.Message):
    __slots__ = ("ref", "error", "message", "dead_lettered", "lease_deadline_ms", "leader_hint")
    REF_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    LEADER_HINT_FIELD_NUMBER: _ClassVar[int]
    ref: RecordRef
    error: _common_pb2.ErrorCode
    message: str
    dead_lettered: bool
    lease_deadline_ms: int
    leader_hint: str
    def __init__(self, ref: _Optional[_Union[RecordRef, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., dead_lettered: _Optional[bool] = ..., lease_deadline_ms: _Optional[int] = ..., leader_hint: _Optional[str] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("results", "failed")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RefOutcome]
    failed: _containers.RepeatedCompositeFieldContainer[RefOutcome]
    def __init__(self, results: _Optional[_Iterable[_Union[RefOutcome, _Mapping]]] = ..., failed: _Optional[_Iterable[_Union[RefOutcome, _Mapping]]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_records", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_records: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_records: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("records", "log_start", "end")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.StoredRecord]
    log_start: int
    end: int
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.StoredRecord, _Mapping]]] = ..., log_start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("partition", "log_start", "end")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start: int
    end: int
    def __init__(self, partition: _Optional[int] = ..., log_start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ...) -> None: ...

class MovePartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "replicas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class MovePartitionResponse(_message.Message):
    __slots__ = ("replicas", "leader")
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    def __init__(self, replicas: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ...) -> None: ...

class BackupMetadataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupMetadataResponse(_message.Message):
    __slots__ = ("table", "applied_index", "cluster_id")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    table: bytes
    applied_index: int
    cluster_id: str
    def __init__(self, table: _Optional[bytes] = ..., applied_index: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class BackupPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "topic_id", "chunk_bytes", "have")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    HAVE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    topic_id: int
    chunk_bytes: int
    have: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., topic_id: _Optional[int] = ..., chunk_bytes: _Optional[int] = ..., have: _Optional[_Iterable[bytes]] = ...) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ("applied_index", "size_bytes", "chunks", "next_offset", "index", "sha256", "data")
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    size_bytes: int
    chunks: int
    next_offset: int
    index: int
    sha256: bytes
    data: bytes
    def __init__(self, applied_index: _Optional[int] = ..., size_bytes: _Optional[int] = ..., chunks: _Optional[int] = ..., next_offset: _Optional[int] = ..., index: _Optional[int] = ..., sha256: _Optional[bytes] = ..., data: _Optional[bytes] = ...) -> None: ...

class TopicConfigUpdate(_message.Message):
    __slots__ = ("ordering", "lease_ms", "max_deliveries", "dead_letter_topic", "retention_ms", "retention_bytes", "max_record_bytes", "dedup_window_ms", "nack_backoff_base_ms", "nack_backoff_max_ms", "ttl_ms", "ttl_action", "fair_key")
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORD_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    NACK_BACKOFF_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    NACK_BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_ACTION_FIELD_NUMBER: _ClassVar[int]
    FAIR_KEY_FIELD_NUMBER: _ClassVar[int]
    ordering: _common_pb2.Ordering
    lease_ms: int
    max_deliveries: int
    dead_letter_topic: str
    retention_ms: int
    retention_bytes: int
    max_record_bytes: int
    dedup_window_ms: int
    nack_backoff_base_ms: int
    nack_backoff_max_ms: int
    ttl_ms: int
    ttl_action: _common_pb2.TtlAction
    fair_key: str
    def __init__(self, ordering: _Optional[_Union[_common_pb2.Ordering, str]] = ..., lease_ms: _Optional[int] = ..., max_deliveries: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., max_record_bytes: _Optional[int] = ..., dedup_window_ms: _Optional[int] = ..., nack_backoff_base_ms: _Optional[int] = ..., nack_backoff_max_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., ttl_action: _Optional[_Union[_common_pb2.TtlAction, str]] = ..., fair_key: _Optional[str] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "replication_factor", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    replication_factor: int
    config: TopicConfigUpdate
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., config: _Optional[_Union[TopicConfigUpdate, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicSummary(_message.Message):
    __slots__ = ("name", "partitions", "replication_factor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    replication_factor: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicSummary]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicSummary, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "replicas", "leader", "leader_addr", "log_start", "end", "in_sync")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_addr: str
    log_start: int
    end: int
    in_sync: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_addr: _Optional[str] = ..., log_start: _Optional[int] = ..., end: _Optional[int] = ..., in_sync: _Optional[_Iterable[int]] = ...) -> None: ...

class TopicDescription(_message.Message):
    __slots__ = ("name", "replication_factor", "config", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    replication_factor: int
    config: _common_pb2.TopicConfig
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    def __init__(self, name: _Optional[str] = ..., replication_factor: _Optional[int] = ..., config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ...) -> None: ...

class AlterTopicConfigRequest(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: TopicConfigUpdate
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[TopicConfigUpdate, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("group", "generation", "members", "topics", "empty_since_ms", "deleting")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    EMPTY_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    DELETING_FIELD_NUMBER: _ClassVar[int]
    group: str
    generation: int
    members: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    empty_since_ms: int
    deleting: bool
    def __init__(self, group: _Optional[str] = ..., generation: _Optional[int] = ..., members: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., empty_since_ms: _Optional[int] = ..., deleting: _Optional[bool] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupSummary]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupSummary, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("member_id", "topics", "assignment", "session_timeout_ms", "last_heartbeat_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    session_timeout_ms: int
    last_heartbeat_ms: int
    def __init__(self, member_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., session_timeout_ms: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed", "end", "lag", "pending", "leased", "member_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed: int
    end: int
    lag: int
    pending: int
    leased: int
    member_id: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed: _Optional[int] = ..., end: _Optional[int] = ..., lag: _Optional[int] = ..., pending: _Optional[int] = ..., leased: _Optional[int] = ..., member_id: _Optional[str] = ...) -> None: ...

class GroupDescription(_message.Message):
    __slots__ = ("group", "generation", "members", "partitions", "empty_since_ms", "deleting")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    EMPTY_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    DELETING_FIELD_NUMBER: _ClassVar[int]
    group: str
    generation: int
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    empty_since_ms: int
    deleting: bool
    def __init__(self, group: _Optional[str] = ..., generation: _Optional[int] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ..., empty_since_ms: _Optional[int] = ..., deleting: _Optional[bool] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class AddPartitionsRequest(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class RebalanceLeadersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RebalanceLeadersResponse(_message.Message):
    __slots__ = ("moved", "remaining")
    MOVED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    moved: int
    remaining: int
    def __init__(self, moved: _Optional[int] = ..., remaining: _Optional[int] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("partitions", "pending")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    pending: int
    def __init__(self, partitions: _Optional[int] = ..., pending: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerDescription(_message.Message):
    __slots__ = ("id", "client_addr", "raft_addr", "rack", "alive", "metadata_voter")
    ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    METADATA_VOTER_FIELD_NUMBER: _ClassVar[int]
    id: int
    client_addr: str
    raft_addr: str
    rack: str
    alive: bool
    metadata_voter: bool
    def __init__(self, id: _Optional[int] = ..., client_addr: _Optional[str] = ..., raft_addr: _Optional[str] = ..., rack: _Optional[str] = ..., alive: _Optional[bool] = ..., metadata_voter: _Optional[bool] = ...) -> None: ...

class ClusterDescription(_message.Message):
    __slots__ = ("brokers", "metadata_leader", "health", "problems", "topics", "partitions", "partitions_without_leader", "under_replicated_partitions")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_LEADER_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_WITHOUT_LEADER_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerDescription]
    metadata_leader: int
    health: ClusterHealth
    problems: _containers.RepeatedScalarFieldContainer[str]
    topics: int
    partitions: int
    partitions_without_leader: int
    under_replicated_partitions: int
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerDescription, _Mapping]]] = ..., metadata_leader: _Optional[int] = ..., health: _Optional[_Union[ClusterHealth, str]] = ..., problems: _Optional[_Iterable[str]] = ..., topics: _Optional[int] = ..., partitions: _Optional[int] = ..., partitions_without_leader: _Optional[int] = ..., under_replicated_partitions: _Optional[int] = ...) -> None: ...

class UpdateRecordRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "priority", "deliver_at_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    priority: int
    deliver_at_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., priority: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class UpdateRecordResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CancelRecordRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CancelRecordResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemoveBrokerRequest(_message.Message):
    __slots__ = ("broker_id",)
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    def __init__(self, broker_id: _Optional[int] = ...) -> None: ...

class RemoveBrokerResponse(_message.Message):
    __slots__ = ("moved_partitions",)
    MOVED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    moved_partitions: int
    def __init__(self, moved_partitions: _Optional[int] = ...) -> None: ...

class CommitTxnRequest(_message.Message):
    __slots__ = ("app_id", "version", "scope")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    version: int
    scope: str
    def __init__(self, app_id: _Optional[str] = ..., version: _Optional[int] = ..., scope: _Optional[str] = ...) -> None: ...

class GetTxnRequest(_message.Message):
    __slots__ = ("app_id", "scope")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    scope: str
    def __init__(self, app_id: _Optional[str] = ..., scope: _Optional[str] = ...) -> None: ...

class TxnState(_message.Message):
    __slots__ = ("app_id", "known", "version", "scope")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    known: bool
    version: int
    scope: str
    def __init__(self, app_id: _Optional[str] = ..., known: _Optional[bool] = ..., version: _Optional[int] = ..., scope: _Optional[str] = ...) -> None: ...

class ProducerStateRequest(_message.Message):
    __slots__ = ("topic", "producer_id", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_id: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., producer_id: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class PartitionProducerState(_message.Message):
    __slots__ = ("partition", "known", "last_sequence", "last_offsets", "records")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    known: bool
    last_sequence: int
    last_offsets: _containers.RepeatedScalarFieldContainer[int]
    records: int
    def __init__(self, partition: _Optional[int] = ..., known: _Optional[bool] = ..., last_sequence: _Optional[int] = ..., last_offsets: _Optional[_Iterable[int]] = ..., records: _Optional[int] = ...) -> None: ...

class ProducerStateResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProducerState]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionProducerState, _Mapping]]] = ...) -> None: ...

class SeekGroupRequest(_message.Message):
    __slots__ = ("group", "topic", "partition", "to", "offset", "timestamp_ms", "force")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    to: _partition_pb2.SeekTo
    offset: int
    timestamp_ms: int
    force: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., to: _Optional[_Union[_partition_pb2.SeekTo, str]] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., force: _Optional[bool] = ...) -> None: ...

class PartitionSeek(_message.Message):
    __slots__ = ("partition", "offset", "dropped")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    dropped: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., dropped: _Optional[int] = ...) -> None: ...

class SeekGroupResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionSeek]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionSeek, _Mapping]]] = ...) -> None: ...

class PurgeTopicRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class PartitionPurge(_message.Message):
    __slots__ = ("partition", "log_start", "deleted")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start: int
    deleted: int
    def __init__(self, partition: _Optional[int] = ..., log_start: _Optional[int] = ..., deleted: _Optional[int] = ...) -> None: ...

class PurgeTopicResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionPurge]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionPurge, _Mapping]]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("topic", "schedule", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    schedule: _common_pb2.Schedule
    partition: int
    def __init__(self, topic: _Optional[str] = ..., schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ..., partition: _Optional[int] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("topic", "name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[_common_pb2.Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[_common_pb2.Schedule, _Mapping]]] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("topic", "name", "paused")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    paused: bool
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("topic", "name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
