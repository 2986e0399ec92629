"""The Log family: Fetch (a read of the log by offset, no group), ListOffsets, ProducerState.
Each read runs on the partition's leader (broker/router.py: local, or forwarded)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftq.handlers.common import ByteBudget, timeout
from raftq.proto import api_pb2, internal_pb2
from raftq.router import Router
from raftq.transport.request_checks import (
    CheckedFetch,
    CheckedListOffsets,
    CheckedProducerState,
)

if TYPE_CHECKING:
    from raftq.metadata_client import MetadataClient


class LogHandler:
    """Implements the Log service (transport/grpc_server.py LogHandler). Thread-safe."""

    def __init__(self, *, metadata: MetadataClient, router: Router, budget: ByteBudget) -> None:
        self._metadata = metadata
        self._router = router
        self._budget = budget

    def fetch(self, request: CheckedFetch, *, timeout_s: float | None) -> api_pb2.FetchResponse:
        """Raises UnknownTopic, UnknownPartition, NotLeader, Unavailable, Timeout."""
        read = internal_pb2.ReadRequest(
            topic=request.topic,
            partition=request.partition,
            fetch=internal_pb2.FetchRead(
                offset=request.offset,
                max_records=request.max_records,
                max_bytes=self._budget(request.max_bytes),
            ),
        )
        response = self._router.read(read, timeout(timeout_s))
        return api_pb2.FetchResponse(
            records=response.records, log_start=response.log_start, end=response.end
        )

    def list_offsets(
        self, request: CheckedListOffsets, *, timeout_s: float | None
    ) -> api_pb2.ListOffsetsResponse:
        topic = self._metadata.topic(request.topic)
        out = api_pb2.ListOffsetsResponse()
        for partition in range(topic.partition_count):
            read = internal_pb2.ReadRequest(
                topic=request.topic, partition=partition, offsets=internal_pb2.OffsetsRead()
            )
            response = self._router.read(read, timeout(timeout_s))
            out.partitions.add(partition=partition, log_start=response.log_start, end=response.end)
        return out

    def producer_state(
        self, request: CheckedProducerState, *, timeout_s: float | None
    ) -> api_pb2.ProducerStateResponse:
        """An idempotent producer's last applied batch per partition, read on each leader."""
        topic = self._metadata.topic(request.topic)
        partitions = list(request.partitions) or list(range(topic.partition_count))
        out = api_pb2.ProducerStateResponse()
        for partition in partitions:
            self._router.check_partition(request.topic, partition)
            read = internal_pb2.ReadRequest(
                topic=request.topic,
                partition=partition,
                producer=internal_pb2.ProducerRead(producer_id=request.producer_id),
            )
            response = self._router.read(read, timeout(timeout_s))
            out.partitions.add(
                partition=partition,
                known=response.producer_known,
                last_sequence=response.producer_last_sequence,
                last_offsets=response.producer_last_offsets,
                records=response.producer_records if response.producer_known else 0,
            )
        return out
