"""Hardened Raft on pysyncobj 0.3.17: one :class:`RaftNode` per Raft group replica.

Only this package imports pysyncobj. Consensus: ``node`` the RaftNode API, ``hardened`` the
hardened SyncObj stacked from its layers (``durability``, ``snapshots``, ``quiescence``,
``membership``; ``pinned`` the pysyncobj release they override), ``journal`` the fsync'd journal,
``snapshot`` the snapshot files, ``entries`` membership entries, ``clocks`` the quorum clock,
``timings`` the RaftTimings knobs.
Its network: ``mux`` the broker's raft endpoint (``codec`` frames, ``connection`` a
connection's state and handshake steps, ``handshake`` keys and ciphers, ``group_transport``
the per-group view), ``driver`` the thread that runs every group, ``hub`` the in-memory twin.
``testing``: test doubles and stock references.
"""

from raftq.transport.raft.node import ApplyError, FailReason, RaftNode
from raftq.transport.raft.timings import RaftTimings

__all__ = ["ApplyError", "FailReason", "RaftNode", "RaftTimings"]
