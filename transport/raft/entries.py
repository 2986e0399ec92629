"""Membership-change entries: raftq's own encoding, so pysyncobj never unpickles a log entry.

pysyncobj stores a membership change as ``MEMBERSHIP | pickle(['add', addr, TCPNode])`` and
runs plain ``pickle.loads`` on every entry of that type it appends, replicates or applies
(``__parseChangeClusterRequest``): whoever could append to a log (a peer holding the cluster
secret) or edit a journal file could run code on every replica. raftq writes::

    MEMBERSHIP | b"P" | raft_pb2.MembershipChange

and :class:`~raftq.transport.raft.node.RaftNode` routes every parse through
:func:`decode_membership`.
Journals written before this encoding hold stock pickles; those are read by an unpickler that
resolves exactly one global, pysyncobj's ``TCPNode``, to an inert stand-in (no methods, no
``__setstate__``), so a pickle naming anything else (``os.system``, ``builtins.open``, ...) is
refused before it can run. A refused entry stays in the log (replicas must agree on the log)
and changes nothing on any replica, deterministically.
"""

from __future__ import annotations

import io
import logging
import pickle
from typing import Any

from google.protobuf.message import DecodeError
from pysyncobj.syncobj import _COMMAND_TYPE

from raftq.proto import raft_pb2

logger = logging.getLogger(__name__)

MEMBERSHIP = bytes([_COMMAND_TYPE.MEMBERSHIP])
PROTO_V1 = b"P"  # format marker after the type byte; append-only
_OPS = {
    "add": raft_pb2.MembershipChange.ADD,
    "rem": raft_pb2.MembershipChange.REMOVE,
    "learner": raft_pb2.MembershipChange.ADD_LEARNER,
    "promote": raft_pb2.MembershipChange.PROMOTE,
}
_NAMES = {v: k for k, v in _OPS.items()}
_LEGACY_OPS = ("add", "rem")  # what stock pysyncobj wrote
_LEGACY_NODE = ("pysyncobj.node", "TCPNode")


def encode_membership(op: str, addr: str) -> bytes:
    """The stored command (type byte included) of one change: ``op`` is "add" (a voter),
    "rem", "learner" (a non-voting member) or "promote" (a learner becomes a voter)."""
    change = raft_pb2.MembershipChange(op=_OPS[op], addr=addr)
    return MEMBERSHIP + PROTO_V1 + change.SerializeToString()


def is_membership(command: bytes) -> bool:
    return command[:1] == MEMBERSHIP


def decode_membership(command: bytes) -> list[str] | None:
    """``[op, addr]`` (an ``encode_membership`` op) of a membership entry; None for any other
    entry and for a membership entry that is not a valid change (logged: refused, never
    executed)."""
    if command[:1] != MEMBERSHIP:
        return None
    body = bytes(command[1:])
    try:
        if body[:1] == PROTO_V1:
            return _decode_proto(body[1:])
        return _decode_legacy(body)
    except (DecodeError, pickle.UnpicklingError, ValueError, EOFError, TypeError) as exc:
        logger.error("membership entry refused (%s): %r", exc, body[:64])
        return None


def _decode_proto(data: bytes) -> list[str]:
    change = raft_pb2.MembershipChange.FromString(data)
    if change.op not in _NAMES or not _valid_addr(change.addr):
        raise ValueError(f"invalid change {change.op}/{change.addr!r}")
    return [_NAMES[change.op], change.addr]


class _InertNode:
    """What a legacy pickle's TCPNode becomes: a bag of attributes, never called."""


class _LegacyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == _LEGACY_NODE:
            return _InertNode
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def _decode_legacy(data: bytes) -> list[str]:
    """A stock pysyncobj entry, ``['add'|'rem', addr, TCPNode]``, read without running code."""
    value = _LegacyUnpickler(io.BytesIO(data)).load()
    if not (isinstance(value, list) and len(value) in (2, 3)):
        raise ValueError("not a membership list")
    op, addr = value[0], value[1]
    if op not in _LEGACY_OPS or not isinstance(addr, str) or not _valid_addr(addr):
        raise ValueError(f"invalid change {op!r}/{addr!r}")
    return [op, addr]


def _valid_addr(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)
