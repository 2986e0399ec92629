"""The metadata Raft group: frontend -> state machine -> table -> backend.

- :mod:`raftq.metadata.frontend` validates a request against the table and plans it into MetaCommand
  bytes (topic ids, replica placement, defaults, ``now_ms``), raising typed errors before
  anything is proposed.
- :mod:`raftq.metadata.machine` applies committed MetaCommand bytes: pure, never raises.
- :mod:`raftq.metadata.table` is the materialised cluster state, immutable values.
- The backend (broker/) reconciles local partition replicas toward the table.

Imports no grpc, apsw, pysyncobj, dynaconf, socket, threading, time or random
(tests/unit/test_layering.py enforces it).
"""

from __future__ import annotations

from raftq.metadata.frontend import GroupLimits, MetadataFrontend, TopicDefaults, TopicSpec
from raftq.metadata.machine import MetadataMachine
from raftq.metadata.table import BrokerInfo, GroupInfo, MemberInfo, PartitionInfo, Table, TopicInfo

__all__ = [
    "BrokerInfo",
    "GroupInfo",
    "GroupLimits",
    "MemberInfo",
    "MetadataFrontend",
    "MetadataMachine",
    "PartitionInfo",
    "Table",
    "TopicDefaults",
    "TopicInfo",
    "TopicSpec",
]
