"""raftq for asyncio: ``from raftq.aio import AsyncAdmin, AsyncConsumer, AsyncProducer``.

The same semantics and typed errors as :mod:`raftq`'s thread clients; the implementation is
:mod:`raftq.client.aio`.
"""

from __future__ import annotations

from raftq.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer

__all__ = ["AsyncAdmin", "AsyncConsumer", "AsyncProducer"]
