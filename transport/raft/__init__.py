"""Hardened Raft on pysyncobj 0.3.17: one :class:`RaftNode` per Raft group replica.

Only this package imports pysyncobj. ``node`` holds the hardened SyncObj and the RaftNode API,
``journal`` the fsync'd journal, ``snapshot`` the snapshot file format, ``testing`` the test
doubles and stock references.
"""

from raftq.transport.raft.node import ApplyError, FailReason, RaftNode, RaftTimings

__all__ = ["ApplyError", "FailReason", "RaftNode", "RaftTimings"]
