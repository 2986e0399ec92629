from raftq.proto import common_pb2 as _common_pb2
from raftq.proto import metadata_pb2 as _metadata_pb2
from raftq.proto import partition_pb2 as _partition_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProposeRequest(_message.Message):
    __slots__ = ("topic", "partition", "command", "skip_if_idle")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SKIP_IF_IDLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    command: _partition_pb2.PartitionCommand
    skip_if_idle: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., command: _Optional[_Union[_partition_pb2.PartitionCommand, _Mapping]] = ..., skip_if_idle: _Optional[bool] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ("result", "skipped_idle")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_IDLE_FIELD_NUMBER: _ClassVar[int]
    result: _partition_pb2.CommandResult
    skipped_idle: bool
    def __init__(self, result: _Optional[_Union[_partition_pb2.CommandResult, _Mapping]] = ..., skipped_idle: _Optional[bool] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("topic", "partition", "fetch", "offsets", "lag", "producer", "schedules")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fetch: FetchRead
    offsets: OffsetsRead
    lag: LagRead
    producer: ProducerRead
    schedules: SchedulesRead
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fetch: _Optional[_Union[FetchRead, _Mapping]] = ..., offsets: _Optional[_Union[OffsetsRead, _Mapping]] = ..., lag: _Optional[_Union[LagRead, _Mapping]] = ..., producer: _Optional[_Union[ProducerRead, _Mapping]] = ..., schedules: _Optional[_Union[SchedulesRead, _Mapping]] = ...) -> None: ...

class SchedulesRead(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class FetchRead(_message.Message):
    __slots__ = ("offset", "max_records", "max_bytes")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    offset: int
    max_records: int
    max_bytes: int
    def __init__(self, offset: _Optional[int] = ..., max_records: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class OffsetsRead(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LagRead(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ProducerRead(_message.Message):
    __slots__ = ("producer_id",)
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    def __init__(self, producer_id: _Optional[str] = ...) -> None: ...

class GroupLagRead(_message.Message):
    __slots__ = ("group", "committed", "end", "lag", "pending", "leased", "known")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    group: str
    committed: int
    end: int
    lag: int
    pending: int
    leased: int
    known: bool
    def __init__(self, group: _Optional[str] = ..., committed: _Optional[int] = ..., end: _Optional[int] = ..., lag: _Optional[int] = ..., pending: _Optional[int] = ..., leased: _Optional[int] = ..., known: _Optional[bool] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("records", "log_start", "end", "lags", "producer_known", "producer_last_sequence", "producer_last_offsets", "producer_records", "schedules")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LAGS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_KNOWN_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_LAST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_RECORDS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.StoredRecord]
    log_start: int
    end: int
    lags: _containers.RepeatedCompositeFieldContainer[GroupLagRead]
    producer_known: bool
    producer_last_sequence: int
    producer_last_offsets: _containers.RepeatedScalarFieldContainer[int]
    producer_records: int
    schedules: _containers.RepeatedCompositeFieldContainer[_common_pb2.Schedule]
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.StoredRecord, _Mapping]]] = ..., log_start: _Optional[int] = ..., end: _Optional[int] = ..., lags: _Optional[_Iterable[_Union[GroupLagRead, _Mapping]]] = ..., producer_known: _Optional[bool] = ..., producer_last_sequence: _Optional[int] = ..., producer_last_offsets: _Optional[_Iterable[int]] = ..., producer_records: _Optional[int] = ..., schedules: _Optional[_Iterable[_Union[_common_pb2.Schedule, _Mapping]]] = ...) -> None: ...

class MetaProposeRequest(_message.Message):
    __slots__ = ("command",)
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: _metadata_pb2.MetaCommand
    def __init__(self, command: _Optional[_Union[_metadata_pb2.MetaCommand, _Mapping]] = ...) -> None: ...

class MetaProposeResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _metadata_pb2.MetaResult
    def __init__(self, result: _Optional[_Union[_metadata_pb2.MetaResult, _Mapping]] = ...) -> None: ...

class ForwardRequest(_message.Message):
    __slots__ = ("method", "request", "principal")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    method: str
    request: bytes
    principal: str
    def __init__(self, method: _Optional[str] = ..., request: _Optional[bytes] = ..., principal: _Optional[str] = ...) -> None: ...

class ForwardResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bytes
    def __init__(self, response: _Optional[bytes] = ...) -> None: ...

class ReplicaReport(_message.Message):
    __slots__ = ("topic", "partition", "topic_id", "leader", "leader_raft_addr", "log_start", "end", "applied_index", "healthy", "term", "members")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    topic_id: int
    leader: bool
    leader_raft_addr: str
    log_start: int
    end: int
    applied_index: int
    healthy: bool
    term: int
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., topic_id: _Optional[int] = ..., leader: _Optional[bool] = ..., leader_raft_addr: _Optional[str] = ..., log_start: _Optional[int] = ..., end: _Optional[int] = ..., applied_index: _Optional[int] = ..., healthy: _Optional[bool] = ..., term: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class BrokerReport(_message.Message):
    __slots__ = ("broker_id", "replicas", "sent_ms")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaReport]
    sent_ms: int
    def __init__(self, broker_id: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaReport, _Mapping]]] = ..., sent_ms: _Optional[int] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("metadata_leader", "draining")
    METADATA_LEADER_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    metadata_leader: int
    draining: bool
    def __init__(self, metadata_leader: _Optional[int] = ..., draining: _Optional[bool] = ...) -> None: ...

class MetaMembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MetaMembersResponse(_message.Message):
    __slots__ = ("members", "leader_raft_addr", "leader_client_addr", "added", "learners")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LEADER_RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    LEADER_CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedScalarFieldContainer[str]
    leader_raft_addr: str
    leader_client_addr: str
    added: bool
    learners: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, members: _Optional[_Iterable[str]] = ..., leader_raft_addr: _Optional[str] = ..., leader_client_addr: _Optional[str] = ..., added: _Optional[bool] = ..., learners: _Optional[_Iterable[str]] = ...) -> None: ...

class JoinClusterRequest(_message.Message):
    __slots__ = ("broker_id", "raft_addr")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    raft_addr: str
    def __init__(self, broker_id: _Optional[int] = ..., raft_addr: _Optional[str] = ...) -> None: ...
