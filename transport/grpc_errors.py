"""Typed raftq errors over gRPC, both ways.

Server side, :func:`abort` turns a :class:`~raftq.proto.errors.RaftqError` into a gRPC status: the
status code named by the error catalogue (``proto/errors.py``), the error's message as the
details, and trailing metadata::

    raftq-code       the ErrorCode number, e.g. "1" for NOT_LEADER
    raftq-retriable  "true" or "false"
    raftq-leader     the leader's client address (NOT_LEADER), else absent
    raftq-retry-after-ms  when to try again (RESOURCE_EXHAUSTED), else absent

Client side, :func:`from_rpc_error` turns a ``grpc.RpcError`` back into the same typed error.
A status without ``raftq-code`` (a proxy, a dead broker, the client's own deadline) becomes
:class:`~raftq.proto.errors.Unavailable` for UNAVAILABLE and DEADLINE_EXCEEDED (retriable), the
matching class for UNAUTHENTICATED and PERMISSION_DENIED, and :class:`~raftq.proto.errors.Internal`
otherwise; the gRPC status name is kept in the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import grpc

from raftq.proto import errors

CODE_KEY = "raftq-code"
RETRIABLE_KEY = "raftq-retriable"
LEADER_KEY = "raftq-leader"
RETRY_AFTER_KEY = "raftq-retry-after-ms"

_UNTYPED: dict[grpc.StatusCode, type[errors.RaftqError]] = {
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.Unavailable,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
}


def status_code(error: errors.RaftqError) -> grpc.StatusCode:
    """The gRPC status an error travels as (the catalogue names it)."""
    code: grpc.StatusCode = getattr(grpc.StatusCode, error.kind.grpc_status)
    return code


def trailing_metadata(error: errors.RaftqError) -> tuple[tuple[str, str], ...]:
    metadata = [
        (CODE_KEY, str(error.code)),
        (RETRIABLE_KEY, "true" if error.retriable else "false"),
    ]
    if error.leader_hint:
        metadata.append((LEADER_KEY, error.leader_hint))
    if error.retry_after_ms > 0:
        metadata.append((RETRY_AFTER_KEY, str(error.retry_after_ms)))
    return tuple(metadata)


def abort(context: grpc.ServicerContext, error: errors.RaftqError) -> NoReturn:
    """End the RPC with ``error`` (raises, as ``context.abort`` does)."""
    context.set_trailing_metadata(trailing_metadata(error))
    context.abort(status_code(error), error.message)
    raise AssertionError("grpc context.abort returned")  # pragma: no cover


abort_with = abort  # the name transport/internal.py uses


def _metadata_dict(metadata: Sequence[tuple[str, str | bytes]] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in metadata or ():
        out[key] = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return out


def from_rpc_error(exc: grpc.RpcError) -> errors.RaftqError:
    """The typed error a failed call stands for. Never raises."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    trailers = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    metadata = _metadata_dict(trailers)
    leader = metadata.get(LEADER_KEY, "")
    raw = metadata.get(CODE_KEY, "")
    retry_after = metadata.get(RETRY_AFTER_KEY, "")
    if raw.lstrip("-").isdigit():
        return errors.error_for(
            int(raw),
            details,
            leader_hint=leader,
            retry_after_ms=int(retry_after) if retry_after.isdigit() else 0,
        )
    cls = _UNTYPED.get(code, errors.Internal)
    name = code.name if isinstance(code, grpc.StatusCode) else str(code)
    return cls(f"gRPC {name}: {details}" if details else f"gRPC {name}", leader_hint=leader)


def raise_from_rpc_error(exc: grpc.RpcError) -> NoReturn:
    """Raise the typed error ``exc`` stands for, chained to it."""
    raise from_rpc_error(exc) from exc


__all__ = [
    "CODE_KEY",
    "LEADER_KEY",
    "RETRIABLE_KEY",
    "RETRY_AFTER_KEY",
    "abort",
    "abort_with",
    "from_rpc_error",
    "raise_from_rpc_error",
    "status_code",
    "trailing_metadata",
]
