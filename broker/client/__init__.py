"""The raftq Python client: :class:`Producer`, :class:`Consumer` and :class:`Admin` over gRPC.

``bootstrap`` is ``"host:port[,host:port...]"``: brokers' client addresses. Calls that any
broker can answer (metadata, admin, groups) try them in turn, starting with the last one that
answered; sends go straight to each partition's leader, learnt from ``DescribeTopic``.
Channels are created lazily, one per address, never at import. Clients are thread-safe.
An :class:`Admin` pickles as its bootstrap (channels are re-created where it lands); a
:class:`Producer` or :class:`Consumer` owns threads and in-flight state and refuses to be
pickled: create it inside the Spark executor (or process) that uses it.

Errors are the typed :mod:`raftq.proto.errors` (``RaftqError`` subclasses), whatever the broker or
the network did; ``err.retriable`` says whether trying again can help and ``err.kind.hint``
says what to do. Every client takes ``tls_ca_file``, ``tls_cert_file``, ``tls_key_file`` and
``token``: see :mod:`raftq.client.channels`.

Import the clients from here. The package's modules:

- :mod:`raftq.client.channels`: bootstrap parsing, one channel per broker address, trying
  brokers in turn, avoiding unanswering ones, TLS and token (``channel_security``).
- :mod:`raftq.client.admin`: :class:`Admin`.
- :mod:`raftq.client.types`: what Admin and AsyncAdmin answer: frozen, printable dataclasses
  (:class:`TopicInfo`, :class:`PartitionOffsets`, :class:`GroupInfo`, :class:`ClusterInfo`...),
  re-exported here and from :mod:`raftq`.
- :mod:`raftq.client.producer`: :class:`Producer`: batching, ordering, retries, idempotence.
- :mod:`raftq.client.consumer`: :class:`Consumer` and :class:`Message`: at-least-once
  delivery with leases, rebalances.
- :mod:`raftq.client.aio`: :class:`AsyncProducer`, :class:`AsyncConsumer` (``async for``),
  :class:`AsyncAdmin` for asyncio, on ``grpc.aio``, sharing the pure parts above.
- :mod:`raftq.client.admin_calls`: what each admin call sends and returns (pure).
- :mod:`raftq.client.member`, :mod:`raftq.client.steps`: a group member's state and plans
  (join, rejoin, poll, settle) and the broker-retry plan, run by both clients (sans-I/O).
- :class:`SendFuture` and :class:`RecordMetadata` are :mod:`raftq.client.send_future`'s.

Tuning constants (``DOWN_S``, ``RETRY_BACKOFF_MS``, ``POLL_WAIT_MS_MAX``...) are re-exported
for reading; the module that uses one is where to patch it.
"""

from __future__ import annotations

from raftq.client.admin import Admin
from raftq.client.channels import DEFAULT_BOOTSTRAP as DEFAULT_BOOTSTRAP
from raftq.client.channels import DOWN_S as DOWN_S
from raftq.client.channels import channel_security as channel_security
from raftq.client.channels import parse_bootstrap
from raftq.client.consumer import Consumer, Message
from raftq.client.member import POLL_WAIT_MS_MAX as POLL_WAIT_MS_MAX
from raftq.client.producer import RETRY_BACKOFF_MAX_MS as RETRY_BACKOFF_MAX_MS
from raftq.client.producer import RETRY_BACKOFF_MS as RETRY_BACKOFF_MS
from raftq.client.producer import Producer
from raftq.client.send_future import RecordMetadata, SendFuture
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
    "RecordMetadata",
    "RecordTemplate",
    "Schedule",
    "SendFuture",
    "StoredRecord",
    "TopicConfig",
    "TopicInfo",
    "TopicListing",
    "TopicPartitions",
    "parse_bootstrap",
]
