from proto import common_pb2 as _common_pb2
from proto import partition_pb2 as _partition_pb2
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
    __slots__ = ("topic", "partition", "fetch", "offsets", "lag")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fetch: FetchRead
    offsets: OffsetsRead
    lag: LagRead
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fetch: _Optional[_Union[FetchRead, _Mapping]] = ..., offsets: _Optional[_Union[OffsetsRead, _Mapping]] = ..., lag: _Optional[_Union[LagRead, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("records", "log_start", "end", "lags")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LAGS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.StoredRecord]
    log_start: int
    end: int
    lags: _containers.RepeatedCompositeFieldContainer[GroupLagRead]
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.StoredRecord, _Mapping]]] = ..., log_start: _Optional[int] = ..., end: _Optional[int] = ..., lags: _Optional[_Iterable[_Union[GroupLagRead, _Mapping]]] = ...) -> None: ...
