from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[ErrorCode]
    NOT_LEADER: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC: _ClassVar[ErrorCode]
    INVALID_ARGUMENT: _ClassVar[ErrorCode]
    RECORD_TOO_LARGE: _ClassVar[ErrorCode]
    LEASE_EXPIRED: _ClassVar[ErrorCode]
    FENCED: _ClassVar[ErrorCode]
    UNAVAILABLE: _ClassVar[ErrorCode]
    UNAUTHENTICATED: _ClassVar[ErrorCode]
    PERMISSION_DENIED: _ClassVar[ErrorCode]
    UNKNOWN_PARTITION: _ClassVar[ErrorCode]
    RECORD_NOT_FOUND: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE: _ClassVar[ErrorCode]
    MALFORMED_COMMAND: _ClassVar[ErrorCode]
    NOT_LEASED: _ClassVar[ErrorCode]
    TOPIC_EXISTS: _ClassVar[ErrorCode]
    UNKNOWN_GROUP: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER: _ClassVar[ErrorCode]
    TIMEOUT: _ClassVar[ErrorCode]
    INTERNAL: _ClassVar[ErrorCode]
    GROUP_NOT_EMPTY: _ClassVar[ErrorCode]
    OUTCOME_UNKNOWN: _ClassVar[ErrorCode]
    RESOURCE_EXHAUSTED: _ClassVar[ErrorCode]
    UNKNOWN_SCHEDULE: _ClassVar[ErrorCode]
    SCHEDULE_EXISTS: _ClassVar[ErrorCode]
    BAD_BACKUP: _ClassVar[ErrorCode]

class Ordering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FIFO: _ClassVar[Ordering]
    PRIORITY: _ClassVar[Ordering]
    FAIR: _ClassVar[Ordering]

class TtlAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TTL_DROP: _ClassVar[TtlAction]
    TTL_DEAD_LETTER: _ClassVar[TtlAction]

class CatchUp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATCH_UP_ONCE: _ClassVar[CatchUp]
    CATCH_UP_SKIP: _ClassVar[CatchUp]
OK: ErrorCode
NOT_LEADER: ErrorCode
UNKNOWN_TOPIC: ErrorCode
INVALID_ARGUMENT: ErrorCode
RECORD_TOO_LARGE: ErrorCode
LEASE_EXPIRED: ErrorCode
FENCED: ErrorCode
UNAVAILABLE: ErrorCode
UNAUTHENTICATED: ErrorCode
PERMISSION_DENIED: ErrorCode
UNKNOWN_PARTITION: ErrorCode
RECORD_NOT_FOUND: ErrorCode
OUT_OF_ORDER_SEQUENCE: ErrorCode
MALFORMED_COMMAND: ErrorCode
NOT_LEASED: ErrorCode
TOPIC_EXISTS: ErrorCode
UNKNOWN_GROUP: ErrorCode
UNKNOWN_MEMBER: ErrorCode
TIMEOUT: ErrorCode
INTERNAL: ErrorCode
GROUP_NOT_EMPTY: ErrorCode
OUTCOME_UNKNOWN: ErrorCode
RESOURCE_EXHAUSTED: ErrorCode
UNKNOWN_SCHEDULE: ErrorCode
SCHEDULE_EXISTS: ErrorCode
BAD_BACKUP: ErrorCode
FIFO: Ordering
PRIORITY: Ordering
FAIR: Ordering
TTL_DROP: TtlAction
TTL_DEAD_LETTER: TtlAction
CATCH_UP_ONCE: CatchUp
CATCH_UP_SKIP: CatchUp

class Record(_message.Message):
    __slots__ = ("key", "value", "headers", "priority", "deliver_at_ms", "idempotency_key", "ttl_ms")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    headers: _containers.ScalarMap[str, bytes]
    priority: int
    deliver_at_ms: int
    idempotency_key: str
    ttl_ms: int
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, bytes]] = ..., priority: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class StoredRecord(_message.Message):
    __slots__ = ("offset", "timestamp_ms", "record")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    offset: int
    timestamp_ms: int
    record: Record
    def __init__(self, offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("record", "delivery_count", "lease_deadline_ms")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    record: StoredRecord
    delivery_count: int
    lease_deadline_ms: int
    def __init__(self, record: _Optional[_Union[StoredRecord, _Mapping]] = ..., delivery_count: _Optional[int] = ..., lease_deadline_ms: _Optional[int] = ...) -> None: ...

class DeliveryColumns(_message.Message):
    __slots__ = ("offsets", "delivery_counts", "timestamps_ms", "values", "lease_deadline_ms")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_MS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    delivery_counts: _containers.RepeatedScalarFieldContainer[int]
    timestamps_ms: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    lease_deadline_ms: int
    def __init__(self, offsets: _Optional[_Iterable[int]] = ..., delivery_counts: _Optional[_Iterable[int]] = ..., timestamps_ms: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[bytes]] = ..., lease_deadline_ms: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
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
    ordering: Ordering
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
    ttl_action: TtlAction
    fair_key: str
    def __init__(self, ordering: _Optional[_Union[Ordering, str]] = ..., lease_ms: _Optional[int] = ..., max_deliveries: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., max_record_bytes: _Optional[int] = ..., dedup_window_ms: _Optional[int] = ..., nack_backoff_base_ms: _Optional[int] = ..., nack_backoff_max_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., ttl_action: _Optional[_Union[TtlAction, str]] = ..., fair_key: _Optional[str] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("name", "cron", "time_zone", "interval_ms", "template", "partition", "catch_up", "paused", "after_ms", "created_ms", "fired", "missed", "last_slot_ms", "revision", "next_slot_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    LAST_SLOT_MS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    NEXT_SLOT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    cron: str
    time_zone: str
    interval_ms: int
    template: Record
    partition: int
    catch_up: CatchUp
    paused: bool
    after_ms: int
    created_ms: int
    fired: int
    missed: int
    last_slot_ms: int
    revision: int
    next_slot_ms: int
    def __init__(self, name: _Optional[str] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., interval_ms: _Optional[int] = ..., template: _Optional[_Union[Record, _Mapping]] = ..., partition: _Optional[int] = ..., catch_up: _Optional[_Union[CatchUp, str]] = ..., paused: _Optional[bool] = ..., after_ms: _Optional[int] = ..., created_ms: _Optional[int] = ..., fired: _Optional[int] = ..., missed: _Optional[int] = ..., last_slot_ms: _Optional[int] = ..., revision: _Optional[int] = ..., next_slot_ms: _Optional[int] = ...) -> None: ...
