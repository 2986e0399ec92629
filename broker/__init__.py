"""raftq: a fault-tolerant, partitioned message broker (see README.md and ARCHITECTURE.md).

The folder ``broker/`` is this package's root (pyproject's package-dir); the other folders are
its subpackages: :mod:`raftq.partitions`, :mod:`raftq.metadata`, :mod:`raftq.assignors`,
:mod:`raftq.transport`, :mod:`raftq.proto`. Users import the clients from here::

    from raftq import Admin, Consumer, Producer
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
    from raftq.proto.errors import RaftqError

_EXPORTS = {
    "Admin": "raftq.client",
    "Consumer": "raftq.client",
    "Message": "raftq.client",
    "Producer": "raftq.client",
    "RecordMetadata": "raftq.client",
    "SendFuture": "raftq.client",
    "RaftqError": "raftq.proto.errors",
}

__all__ = [
    "Admin",
    "Consumer",
    "Message",
    "Producer",
    "RaftqError",
    "RecordMetadata",
    "SendFuture",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raftq' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
