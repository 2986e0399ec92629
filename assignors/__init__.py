"""Pure assignment functions: replica placement and the sticky consumer-group assignor.

Imports no grpc, apsw or pysyncobj (tests/test_layering.py enforces it).
"""

from __future__ import annotations

from raftq.assignors.placement import (
    Broker,
    BrokerId,
    ClusterPlacement,
    LeaderTransfer,
    Placement,
    Reassignment,
    leader_plan,
    place_replicas,
    reassign_without,
)
from raftq.assignors.sticky import Assignment, TopicPartition, assign, moved, owners

__all__ = [
    "Assignment",
    "Broker",
    "BrokerId",
    "ClusterPlacement",
    "LeaderTransfer",
    "Placement",
    "Reassignment",
    "TopicPartition",
    "assign",
    "leader_plan",
    "moved",
    "owners",
    "place_replicas",
    "reassign_without",
]
