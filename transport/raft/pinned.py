"""The pysyncobj release the Raft hardening overrides, and the names its parts share.

The hardened node (hardened.py and its layers durability.py, snapshots.py, quiescence.py,
membership.py) replaces name-mangled internals of exactly pysyncobj 0.3.17: the version is
asserted on import. Here too: pysyncobj's clock (looked up per call, so a simulation's patched
clock applies to raftq's code as well: hub.pysyncobj_time), its raft states and entry types,
raftq's command format, and the results a proposer gets (:class:`FailReason`,
:class:`ApplyError`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pysyncobj.syncobj as _pso
from pysyncobj.config import FAIL_REASON
from pysyncobj.syncobj import _COMMAND_TYPE, _RAFT_STATE

# The hardening overrides name-mangled internals of exactly this release.
assert _pso.VERSION == "0.3.17", _pso.VERSION


def monotonic_time() -> float:
    """pysyncobj's clock, looked up per call so a simulation's patched clock applies here too."""
    return float(_pso.monotonicTime())


RAW_V1 = b"R"  # command format marker after the pysyncobj type byte; append-only
REGULAR = bytes([_COMMAND_TYPE.REGULAR])
NO_OP = bytes([_COMMAND_TYPE.NO_OP])
LEADER = _RAFT_STATE.LEADER
# Seconds within which a follower campaigns after the link to its leader closed.
DISCONNECT_ELECTION_SPREAD_S = 0.2


class FailReason(enum.IntEnum):
    """pysyncobj's FAIL_REASON codes, as passed to propose callbacks."""

    SUCCESS = FAIL_REASON.SUCCESS
    QUEUE_FULL = FAIL_REASON.QUEUE_FULL
    MISSING_LEADER = FAIL_REASON.MISSING_LEADER
    DISCARDED = FAIL_REASON.DISCARDED
    NOT_LEADER = FAIL_REASON.NOT_LEADER
    LEADER_CHANGED = FAIL_REASON.LEADER_CHANGED
    REQUEST_DENIED = FAIL_REASON.REQUEST_DENIED
    UNKNOWN_OUTCOME = FAIL_REASON.UNKNOWN_OUTCOME


@dataclass(frozen=True)
class ApplyError:
    """The result of an entry whose ``apply`` raised (logged; the group keeps going)."""

    index: int
    message: str
