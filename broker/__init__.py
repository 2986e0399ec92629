"""raftq: a fault-tolerant, partitioned message broker (see README.md and ARCHITECTURE.md).

The folder ``broker/`` is this package's root (pyproject's package-dir); the other folders are
its subpackages: :mod:`raftq.partitions`, :mod:`raftq.metadata`, :mod:`raftq.assignors`,
:mod:`raftq.transport`, :mod:`raftq.proto`. Users import the clients from here::

    from raftq import Admin, Consumer, Producer
    from raftq import TopicInfo, PartitionOffsets, GroupInfo  # what Admin answers
    from raftq.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
    from raftq.spark import register

The names are loaded on first use, so the server's modules (``raftq.server``...) do not pull
the client in, and ``import raftq`` alone costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftq.client import Admin, Consumer, Message, Producer, RecordMetadata, SendFuture
    from raftq.client.types import (
        BackupChunk,
        BrokerInfo,
        ClusterInfo,
        FetchResult,
        GroupDeletion,
        GroupInfo,
        GroupListing,
        LeaderRebalance,
        MemberInfo,
        MetadataBackup,
        PartitionInfo,
        PartitionLag,
        PartitionMove,
        PartitionOffsets,
        PartitionPurge,
        PartitionSeek,
        ProducerState,
        RecordTemplate,
        Schedule,
        StoredRecord,
        TopicConfig,
        TopicInfo,
        TopicListing,
        TopicPartitions,
    )
    from raftq.proto.errors import RaftqError

_EXPORTS = {
    "Admin": "raftq.client",
    "Consumer": "raftq.client",
    "Message": "raftq.client",
    "Producer": "raftq.client",
    "RecordMetadata": "raftq.client",
    "SendFuture": "raftq.client",
    "RaftqError": "raftq.proto.errors",
    "BackupChunk": "raftq.client.types",
    "BrokerInfo": "raftq.client.types",
    "ClusterInfo": "raftq.client.types",
    "FetchResult": "raftq.client.types",
    "GroupDeletion": "raftq.client.types",
    "GroupInfo": "raftq.client.types",
    "GroupListing": "raftq.client.types",
    "LeaderRebalance": "raftq.client.types",
    "MemberInfo": "raftq.client.types",
    "MetadataBackup": "raftq.client.types",
    "PartitionInfo": "raftq.client.types",
    "PartitionLag": "raftq.client.types",
    "PartitionMove": "raftq.client.types",
    "PartitionOffsets": "raftq.client.types",
    "PartitionPurge": "raftq.client.types",
    "PartitionSeek": "raftq.client.types",
    "ProducerState": "raftq.client.types",
    "RecordTemplate": "raftq.client.types",
    "Schedule": "raftq.client.types",
    "StoredRecord": "raftq.client.types",
    "TopicConfig": "raftq.client.types",
    "TopicInfo": "raftq.client.types",
    "TopicListing": "raftq.client.types",
    "TopicPartitions": "raftq.client.types",
}

__all__ = [
    "Admin",
    "BackupChunk",
    "BrokerInfo",
    "ClusterInfo",
    "Consumer",
    "FetchResult",
    "GroupDeletion",
    "GroupInfo",
    "GroupListing",
    "LeaderRebalance",
    "MemberInfo",
    "Message",
    "MetadataBackup",
    "PartitionInfo",
    "PartitionLag",
    "PartitionMove",
    "PartitionOffsets",
    "PartitionPurge",
    "PartitionSeek",
    "Producer",
    "ProducerState",
    "RaftqError",
    "RecordMetadata",
    "RecordTemplate",
    "Schedule",
    "SendFuture",
    "StoredRecord",
    "TopicConfig",
    "TopicInfo",
    "TopicListing",
    "TopicPartitions",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raftq' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
