"""The one error catalogue of raftq, shared by brokers, the state machines and the client.

Every error a client can see has a code (``proto/common.proto`` ``ErrorCode``), a message that says
what to do, whether retrying can help, and the gRPC status it travels as. This module imports no
gRPC: the status is named here and looked up by the transport.

    RaftqError                      code            retriable  gRPC status
    ├── NotLeader                   NOT_LEADER      yes        UNAVAILABLE   (+ leader hint)
    ├── Unavailable                 UNAVAILABLE     yes        UNAVAILABLE
    ├── Timeout                     TIMEOUT         yes        DEADLINE_EXCEEDED
    ├── UnknownTopic                UNKNOWN_TOPIC   no         NOT_FOUND
    ├── UnknownPartition            UNKNOWN_PARTITION no       NOT_FOUND
    ├── UnknownGroup                UNKNOWN_GROUP   no         NOT_FOUND
    ├── UnknownMember               UNKNOWN_MEMBER  no         NOT_FOUND
    ├── RecordNotFound              RECORD_NOT_FOUND no        NOT_FOUND
    ├── UnknownSchedule             UNKNOWN_SCHEDULE no        NOT_FOUND
    ├── TopicExists                 TOPIC_EXISTS    no         ALREADY_EXISTS
    ├── ScheduleExists              SCHEDULE_EXISTS no         ALREADY_EXISTS
    ├── InvalidArgument             INVALID_ARGUMENT no        INVALID_ARGUMENT
    │   ├── RecordTooLarge          RECORD_TOO_LARGE no        INVALID_ARGUMENT
    │   └── MalformedCommand        MALFORMED_COMMAND no       INVALID_ARGUMENT
    ├── OutOfOrderSequence          OUT_OF_ORDER_SEQUENCE no   FAILED_PRECONDITION
    ├── LeaseExpired                LEASE_EXPIRED   no         FAILED_PRECONDITION
    ├── NotLeased                   NOT_LEASED      no         FAILED_PRECONDITION
    ├── Fenced                      FENCED          no         FAILED_PRECONDITION
    ├── GroupNotEmpty               GROUP_NOT_EMPTY no         FAILED_PRECONDITION
    ├── OutcomeUnknown              OUTCOME_UNKNOWN no         ABORTED
    ├── Unauthenticated             UNAUTHENTICATED no         UNAUTHENTICATED
    ├── PermissionDenied            PERMISSION_DENIED no       PERMISSION_DENIED
    ├── ResourceExhausted           RESOURCE_EXHAUSTED yes     RESOURCE_EXHAUSTED (+ retry_after_ms)
    ├── BadBackup                   BAD_BACKUP      no         FAILED_PRECONDITION
    └── Internal                    INTERNAL        no         INTERNAL

A refusal for load (ResourceExhausted) carries ``retry_after_ms``, the broker's hint of when to
try again (``raftq-retry-after-ms`` trailer); the client backs off that long, with jitter.

Assertions are for bugs; these exceptions are for failures a caller must expect.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftq.proto import common_pb2

ErrorCode = common_pb2.ErrorCode


@dataclass(frozen=True)
class ErrorKind:
    code: int
    name: str
    retriable: bool
    grpc_status: str  # a grpc.StatusCode member name
    hint: str  # what the caller should do


CATALOGUE: dict[int, ErrorKind] = {}


def _kind(name: str, retriable: bool, grpc_status: str, hint: str) -> ErrorKind:
    code = common_pb2.ErrorCode.Value(name)
    kind = ErrorKind(code, name, retriable, grpc_status, hint)
    CATALOGUE[code] = kind
    return kind


class RaftqError(Exception):
    """Base of every typed raftq error. ``kind`` carries code, retriable flag and gRPC status."""

    kind: ErrorKind

    def __init__(
        self, message: str = "", *, leader_hint: str = "", retry_after_ms: int = 0
    ) -> None:
        self.message = message or self.kind.hint
        self.leader_hint = leader_hint
        self.retry_after_ms = retry_after_ms  # > 0: try again no sooner (ResourceExhausted)
        super().__init__(f"{self.kind.name}: {self.message}")

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def retriable(self) -> bool:
        return self.kind.retriable


class NotLeader(RaftqError):
    kind = _kind("NOT_LEADER", True, "UNAVAILABLE", "not the leader: retry against the leader hint")


class Unavailable(RaftqError):
    kind = _kind("UNAVAILABLE", True, "UNAVAILABLE", "no quorum or broker unreachable: retry")


class Timeout(RaftqError):
    kind = _kind("TIMEOUT", True, "DEADLINE_EXCEEDED", "outcome unknown: retry idempotently")


class UnknownTopic(RaftqError):
    kind = _kind("UNKNOWN_TOPIC", False, "NOT_FOUND", "no such topic: create it first")


class UnknownPartition(RaftqError):
    kind = _kind("UNKNOWN_PARTITION", False, "NOT_FOUND", "no such partition of the topic")


class UnknownGroup(RaftqError):
    kind = _kind("UNKNOWN_GROUP", False, "NOT_FOUND", "no such consumer group: join it first")


class UnknownMember(RaftqError):
    kind = _kind("UNKNOWN_MEMBER", False, "NOT_FOUND", "member not in the group: join again")


class RecordNotFound(RaftqError):
    kind = _kind("RECORD_NOT_FOUND", False, "NOT_FOUND", "no pending record at that offset")


class TopicExists(RaftqError):
    kind = _kind("TOPIC_EXISTS", False, "ALREADY_EXISTS", "a topic with that name exists")


class UnknownSchedule(RaftqError):
    kind = _kind("UNKNOWN_SCHEDULE", False, "NOT_FOUND", "no such schedule on the topic")


class ScheduleExists(RaftqError):
    kind = _kind("SCHEDULE_EXISTS", False, "ALREADY_EXISTS", "a schedule with that name exists")


class InvalidArgument(RaftqError):
    kind = _kind("INVALID_ARGUMENT", False, "INVALID_ARGUMENT", "invalid request: fix the field")


class RecordTooLarge(InvalidArgument):
    kind = _kind(
        "RECORD_TOO_LARGE", False, "INVALID_ARGUMENT", "record over max_record_bytes: split it"
    )


class MalformedCommand(InvalidArgument):
    kind = _kind(
        "MALFORMED_COMMAND", False, "INVALID_ARGUMENT", "command bytes do not decode: a bug"
    )


class OutOfOrderSequence(RaftqError):
    kind = _kind(
        "OUT_OF_ORDER_SEQUENCE",
        False,
        "FAILED_PRECONDITION",
        "producer sequence gap or too old: restart the producer with a new producer id",
    )


class LeaseExpired(RaftqError):
    kind = _kind(
        "LEASE_EXPIRED",
        False,
        "FAILED_PRECONDITION",
        "the lease ended before this call: the record will be (or was) redelivered",
    )


class NotLeased(RaftqError):
    kind = _kind(
        "NOT_LEASED", False, "FAILED_PRECONDITION", "the record is not leased to this member"
    )


class Fenced(RaftqError):
    kind = _kind(
        "FENCED",
        False,
        "FAILED_PRECONDITION",
        "stale generation or partition no longer assigned: rejoin the group",
    )


class GroupNotEmpty(RaftqError):
    kind = _kind(
        "GROUP_NOT_EMPTY",
        False,
        "FAILED_PRECONDITION",
        "the group has live members: stop its consumers (or let their sessions expire) first",
    )


class OutcomeUnknown(RaftqError):
    """A settle (ack, nack) retried after an attempt whose reply was lost (a leader or broker
    that stopped answering): the record's state no longer tells whether that attempt was
    applied, so no definite error (LEASE_EXPIRED, NOT_LEASED, RECORD_NOT_FOUND, FENCED) is
    claimed. Not retriable: a retry cannot tell either."""

    kind = _kind(
        "OUTCOME_UNKNOWN",
        False,
        "ABORTED",
        "outcome unknown: an earlier attempt may have been applied before its reply was lost "
        "(the record is redelivered if it was not)",
    )


class Unauthenticated(RaftqError):
    kind = _kind("UNAUTHENTICATED", False, "UNAUTHENTICATED", "missing or wrong credentials")


class PermissionDenied(RaftqError):
    kind = _kind("PERMISSION_DENIED", False, "PERMISSION_DENIED", "the token lacks this ACL")


class ResourceExhausted(RaftqError):
    kind = _kind(
        "RESOURCE_EXHAUSTED",
        True,
        "RESOURCE_EXHAUSTED",
        "the broker is at capacity for this kind of call: retry after retry_after_ms",
    )


class BadBackup(RaftqError):
    """``raftq backup`` / ``raftq restore``: the directory is missing, a manifest or chunk is
    corrupt, it holds another cluster's backups, or the target is not fresh."""

    kind = _kind(
        "BAD_BACKUP",
        False,
        "FAILED_PRECONDITION",
        "backup directory missing, corrupt or of another cluster: check the path",
    )


class Internal(RaftqError):
    kind = _kind("INTERNAL", False, "INTERNAL", "a broker bug: report it with the broker log")


_BY_CODE: dict[int, type[RaftqError]] = {
    cls.kind.code: cls
    for cls in (
        NotLeader,
        Unavailable,
        Timeout,
        UnknownTopic,
        UnknownPartition,
        UnknownGroup,
        UnknownMember,
        RecordNotFound,
        TopicExists,
        UnknownSchedule,
        ScheduleExists,
        InvalidArgument,
        RecordTooLarge,
        MalformedCommand,
        OutOfOrderSequence,
        LeaseExpired,
        NotLeased,
        Fenced,
        GroupNotEmpty,
        OutcomeUnknown,
        Unauthenticated,
        PermissionDenied,
        ResourceExhausted,
        BadBackup,
        Internal,
    )
}


def error_for(
    code: int, message: str = "", *, leader_hint: str = "", retry_after_ms: int = 0
) -> RaftqError:
    """The exception for a wire error code (unknown codes become Internal)."""
    cls = _BY_CODE.get(code, Internal)
    return cls(message, leader_hint=leader_hint, retry_after_ms=retry_after_ms)


def error_class(code: int) -> type[RaftqError]:
    return _BY_CODE.get(code, Internal)
