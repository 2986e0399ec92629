from raftq.proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartFrom(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EARLIEST: _ClassVar[StartFrom]
    LATEST: _ClassVar[StartFrom]

class SeekTo(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEEK_OFFSET: _ClassVar[SeekTo]
    SEEK_TIMESTAMP: _ClassVar[SeekTo]
    SEEK_EARLIEST: _ClassVar[SeekTo]
    SEEK_LATEST: _ClassVar[SeekTo]
EARLIEST: StartFrom
LATEST: StartFrom
SEEK_OFFSET: SeekTo
SEEK_TIMESTAMP: SeekTo
SEEK_EARLIEST: SeekTo
SEEK_LATEST: SeekTo

class PartitionCommand(_message.Message):
    __slots__ = ("now_ms", "clock_skew_ms", "append", "lease", "ack", "nack", "extend_lease", "release", "update_record", "cancel_record", "configure", "retain", "dead_letter_done", "append_batch", "forget_group", "seek_group", "purge", "create_schedule", "pause_schedule", "delete_schedule", "fire_schedules")
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SKEW_MS_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    EXTEND_LEASE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_RECORD_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RECORD_FIELD_NUMBER: _ClassVar[int]
    CONFIGURE_FIELD_NUMBER: _ClassVar[int]
    RETAIN_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_DONE_FIELD_NUMBER: _ClassVar[int]
    APPEND_BATCH_FIELD_NUMBER: _ClassVar[int]
    FORGET_GROUP_FIELD_NUMBER: _ClassVar[int]
    SEEK_GROUP_FIELD_NUMBER: _ClassVar[int]
    PURGE_FIELD_NUMBER: _ClassVar[int]
    CREATE_SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    DELETE_SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    FIRE_SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    now_ms: int
    clock_skew_ms: int
    append: Append
    lease: Lease
    ack: Settle
    nack: Nack
    extend_lease: ExtendLease
    release: Release
    update_record: UpdateRecord
    cancel_record: CancelRecord
    configure: Configure
    retain: Retain
    dead_letter_done: DeadLetterDone
    append_batch: AppendBatch
    forget_group: ForgetGroup
    seek_group: SeekGroup
    purge: Purge
    create_schedule: CreateSchedule
    pause_schedule: PauseSchedule
    delete_schedule: DeleteSchedule
    fire_schedules: FireSchedules
    def __init__(self, now_ms: _Optional[int] = ..., clock_skew_ms: _Optional[int] = ..., append: _Optional[_Union[Append, _Mapping]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., ack: _Optional[_Union[Settle, _Mapping]] = ..., nack: _Optional[_Union[Nack, _Mapping]] = ..., extend_lease: _Optional[_Union[ExtendLease, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., update_record: _Optional[_Union[UpdateRecord, _Mapping]] = ..., cancel_record: _Optional[_Union[CancelRecord, _Mapping]] = ..., configure: _Optional[_Union[Configure, _Mapping]] = ..., retain: _Optional[_Union[Retain, _Mapping]] = ..., dead_letter_done: _Optional[_Union[DeadLetterDone, _Mapping]] = ..., append_batch: _Optional[_Union[AppendBatch, _Mapping]] = ..., forget_group: _Optional[_Union[ForgetGroup, _Mapping]] = ..., seek_group: _Optional[_Union[SeekGroup, _Mapping]] = ..., purge: _Optional[_Union[Purge, _Mapping]] = ..., create_schedule: _Optional[_Union[CreateSchedule, _Mapping]] = ..., pause_schedule: _Optional[_Union[PauseSchedule, _Mapping]] = ..., delete_schedule: _Optional[_Union[DeleteSchedule, _Mapping]] = ..., fire_schedules: _Optional[_Union[FireSchedules, _Mapping]] = ...) -> None: ...

class Append(_message.Message):
    __slots__ = ("records", "producer_id", "sequence", "values")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    producer_id: str
    sequence: int
    values: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., values: _Optional[_Iterable[bytes]] = ...) -> None: ...

class AppendBatch(_message.Message):
    __slots__ = ("appends",)
    APPENDS_FIELD_NUMBER: _ClassVar[int]
    appends: _containers.RepeatedCompositeFieldContainer[Append]
    def __init__(self, appends: _Optional[_Iterable[_Union[Append, _Mapping]]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("group", "member", "max_records", "lease_ms", "start_from", "max_bytes", "generation", "columns")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    START_FROM_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    max_records: int
    lease_ms: int
    start_from: StartFrom
    max_bytes: int
    generation: int
    columns: bool
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., max_records: _Optional[int] = ..., lease_ms: _Optional[int] = ..., start_from: _Optional[_Union[StartFrom, str]] = ..., max_bytes: _Optional[int] = ..., generation: _Optional[int] = ..., columns: _Optional[bool] = ...) -> None: ...

class DeliveryRef(_message.Message):
    __slots__ = ("offset", "delivery_count")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    offset: int
    delivery_count: int
    def __init__(self, offset: _Optional[int] = ..., delivery_count: _Optional[int] = ...) -> None: ...

class Settle(_message.Message):
    __slots__ = ("group", "member", "refs", "offsets", "delivery_counts")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    refs: _containers.RepeatedCompositeFieldContainer[DeliveryRef]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    delivery_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., refs: _Optional[_Iterable[_Union[DeliveryRef, _Mapping]]] = ..., offsets: _Optional[_Iterable[int]] = ..., delivery_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ("group", "member", "refs", "delay_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    refs: _containers.RepeatedCompositeFieldContainer[DeliveryRef]
    delay_ms: int
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., refs: _Optional[_Iterable[_Union[DeliveryRef, _Mapping]]] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class ExtendLease(_message.Message):
    __slots__ = ("group", "member", "refs", "lease_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    refs: _containers.RepeatedCompositeFieldContainer[DeliveryRef]
    lease_ms: int
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., refs: _Optional[_Iterable[_Union[DeliveryRef, _Mapping]]] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("group", "member", "generation", "undelivered")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    UNDELIVERED_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    generation: int
    undelivered: _containers.RepeatedCompositeFieldContainer[DeliveryRef]
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., generation: _Optional[int] = ..., undelivered: _Optional[_Iterable[_Union[DeliveryRef, _Mapping]]] = ...) -> None: ...

class UpdateRecord(_message.Message):
    __slots__ = ("offset", "priority", "deliver_at_ms")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    priority: int
    deliver_at_ms: int
    def __init__(self, offset: _Optional[int] = ..., priority: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class CancelRecord(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class Configure(_message.Message):
    __slots__ = ("config", "topic", "partition")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    topic: str
    partition: int
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class Retain(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeadLetterDone(_message.Message):
    __slots__ = ("up_to_seq",)
    UP_TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    up_to_seq: int
    def __init__(self, up_to_seq: _Optional[int] = ...) -> None: ...

class ForgetGroup(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class SeekGroup(_message.Message):
    __slots__ = ("group", "to", "offset", "timestamp_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    to: SeekTo
    offset: int
    timestamp_ms: int
    def __init__(self, group: _Optional[str] = ..., to: _Optional[_Union[SeekTo, str]] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class Purge(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateSchedule(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class PauseSchedule(_message.Message):
    __slots__ = ("name", "paused")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    paused: bool
    def __init__(self, name: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class DeleteSchedule(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class FireSchedules(_message.Message):
    __slots__ = ("firings",)
    FIRINGS_FIELD_NUMBER: _ClassVar[int]
    firings: _containers.RepeatedCompositeFieldContainer[Firing]
    def __init__(self, firings: _Optional[_Iterable[_Union[Firing, _Mapping]]] = ...) -> None: ...

class Firing(_message.Message):
    __slots__ = ("name", "revision", "slots_ms", "after_ms", "missed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_MS_FIELD_NUMBER: _ClassVar[int]
    AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    revision: int
    slots_ms: _containers.RepeatedScalarFieldContainer[int]
    after_ms: int
    missed: int
    def __init__(self, name: _Optional[str] = ..., revision: _Optional[int] = ..., slots_ms: _Optional[_Iterable[int]] = ..., after_ms: _Optional[int] = ..., missed: _Optional[int] = ...) -> None: ...

class RecordResult(_message.Message):
    __slots__ = ("offset", "error", "message", "duplicate")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    error: _common_pb2.ErrorCode
    message: str
    duplicate: bool
    def __init__(self, offset: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class RefResult(_message.Message):
    __slots__ = ("offset", "error", "message", "dead_lettered")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    offset: int
    error: _common_pb2.ErrorCode
    message: str
    dead_lettered: bool
    def __init__(self, offset: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., dead_lettered: _Optional[bool] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("error", "message", "records", "deliveries", "refs", "count", "skipped", "batch_results", "range", "columns", "lease_deadline_ms", "offset")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    BATCH_RESULTS_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.ErrorCode
    message: str
    records: _containers.RepeatedCompositeFieldContainer[RecordResult]
    deliveries: _containers.RepeatedCompositeFieldContainer[_common_pb2.Delivery]
    refs: _containers.RepeatedCompositeFieldContainer[RefResult]
    count: int
    skipped: bool
    batch_results: _containers.RepeatedCompositeFieldContainer[CommandResult]
    range: RecordRange
    columns: _common_pb2.DeliveryColumns
    lease_deadline_ms: int
    offset: int
    def __init__(self, error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., records: _Optional[_Iterable[_Union[RecordResult, _Mapping]]] = ..., deliveries: _Optional[_Iterable[_Union[_common_pb2.Delivery, _Mapping]]] = ..., refs: _Optional[_Iterable[_Union[RefResult, _Mapping]]] = ..., count: _Optional[int] = ..., skipped: _Optional[bool] = ..., batch_results: _Optional[_Iterable[_Union[CommandResult, _Mapping]]] = ..., range: _Optional[_Union[RecordRange, _Mapping]] = ..., columns: _Optional[_Union[_common_pb2.DeliveryColumns, _Mapping]] = ..., lease_deadline_ms: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class RecordRange(_message.Message):
    __slots__ = ("first_offset", "count", "duplicate")
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    first_offset: int
    count: int
    duplicate: bool
    def __init__(self, first_offset: _Optional[int] = ..., count: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...
