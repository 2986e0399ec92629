"""The Producer family: Send (unary and a send stream's requests).

A send resolves its partitions here (explicit, by key with murmur2, else one partition per
batch in turn), checks each record against its topic's config, and proposes one Append per
partition on the partition's leader (broker/router.py: the local replica, or forwarded). A
forwarded send's results name the leader (``leader_hint``), so the client sends there next.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from raftq.assignors.partitioner import partition_for
from raftq.handlers.common import timeout
from raftq.metadata.table import TopicInfo
from raftq.partitions.machine import check_record, check_values
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.router import Router
from raftq.transport.request_checks import (
    CheckedSend,
)

if TYPE_CHECKING:
    from raftq.metadata_client import MetadataClient


def values_answer(
    request: CheckedSend,
    partition: int,
    outcome: partition_pb2.CommandResult | None,
    error: errors.RaftqError | None,
    leader_hint: str = "",
) -> api_pb2.SendResponse:
    """The one SendResult of a values request: its range (with ``leader_hint`` when this
    broker forwarded it), or the error that stopped it."""
    count = len(request.values)
    result = api_pb2.SendResult(partition=partition, count=count)
    if error is None and outcome is not None and outcome.range.count != count:
        error = errors.OutOfOrderSequence(
            f"producer {request.producer_id!r} sequence {request.sequence} was used "
            f"for a batch of {outcome.range.count or len(outcome.records)} records, "
            f"not {count}: restart with a new producer id"
        )
    if error is not None or outcome is None:
        error = error or errors.Internal("no outcome")
        result.error, result.message = error.code, error.message  # type: ignore[assignment]
        result.leader_hint = error.leader_hint
    else:
        result.offset, result.duplicate = outcome.range.first_offset, outcome.range.duplicate
        result.leader_hint = leader_hint
    return api_pb2.SendResponse(results=[result], request_id=request.request_id)


class ProduceHandler:
    """Implements the Producer service (transport/grpc_server.py ProducerHandler).
    Thread-safe."""

    def __init__(self, *, metadata: MetadataClient, router: Router) -> None:
        self._metadata = metadata
        self._router = router
        self._spread = itertools.count(1)  # which partition a keyless batch goes to next

    def send(self, request: CheckedSend, *, timeout_s: float | None) -> api_pb2.SendResponse:
        """Raises (whole request) UnknownTopic, UnknownPartition, InvalidArgument (a value
        the topic's config refuses), Unavailable; per-record failures go in the results."""
        left = timeout(timeout_s)
        topic = self._metadata.topic(request.topic)
        config = topic.config
        assert request.HasField("partition") or not request.HasField("producer_id"), (
            "check_send: producer_id needs partition"
        )
        if request.HasField("partition"):
            self._router.check_partition(request.topic, request.partition)
        if request.values:
            return self._send_values(request, topic, left)
        results = [api_pb2.SendResult() for _ in request.records]
        by_partition: dict[int, list[int]] = defaultdict(list)
        spread = next(self._spread)
        for i, record in enumerate(request.records):
            problem = check_record(record, config)
            if problem is not None:
                results[i].error, results[i].message = problem.code, problem.message  # type: ignore[assignment]
                continue
            if request.HasField("partition"):
                partition = request.partition
            elif record.HasField("key"):
                partition = partition_for(record.key, topic.partition_count, 0)
            else:  # a batch without keys goes to one partition, the next one each time
                partition = spread % topic.partition_count
            results[i].partition = partition
            by_partition[partition].append(i)
        for partition, indexes in sorted(by_partition.items()):
            append = partition_pb2.Append(
                records=[request.records[i] for i in indexes],
                producer_id=request.producer_id,
                sequence=request.sequence,
            )
            try:
                outcome = self._append(request.topic, partition, append, left)
                hint = self._forwarded_to(request.topic, partition)
                for i, record_result in zip(indexes, outcome.records, strict=True):
                    results[i].offset = record_result.offset
                    results[i].duplicate = record_result.duplicate
                    results[i].error = record_result.error
                    results[i].message = record_result.message
                    results[i].leader_hint = hint
            except errors.RaftqError as exc:
                for i in indexes:
                    results[i].error, results[i].message = exc.code, exc.message  # type: ignore[assignment]
                    results[i].leader_hint = exc.leader_hint
        return api_pb2.SendResponse(results=results, request_id=request.request_id)

    def _send_values(
        self, request: CheckedSend, topic: TopicInfo, left: float
    ) -> api_pb2.SendResponse:
        """The bare-value fast path: one partition, one Append, one SendResult covering all."""
        partition, append = self._values_append(request, topic)
        try:
            outcome = self._append(request.topic, partition, append, left)
        except errors.RaftqError as exc:
            return values_answer(request, partition, None, exc)
        hint = self._forwarded_to(request.topic, partition)
        return values_answer(request, partition, outcome, None, hint)

    def _values_append(
        self, request: CheckedSend, topic: TopicInfo
    ) -> tuple[int, partition_pb2.Append]:
        """Check a values request against the topic's config; its partition and Append.
        Raises InvalidArgument (a value too large for the topic)."""
        assert not request.records, "check_send: records or values, not both"
        problem = check_values(request.values, topic.config)
        if problem is not None:
            raise errors.error_for(problem.code, problem.message)
        if request.HasField("partition"):
            partition = request.partition
        else:
            partition = next(self._spread) % topic.partition_count
        append = partition_pb2.Append(
            values=request.values, producer_id=request.producer_id, sequence=request.sequence
        )
        return partition, append

    def send_async(
        self,
        request: CheckedSend,
        on_done: Callable[[api_pb2.SendResponse], None],
    ) -> bool:
        """A send stream's fast path: a values request for a partition whose leader is on this
        broker goes straight to that replica's proposer, no thread waiting on it;
        ``on_done(response)`` runs once, here or on the Raft driver thread. False (nothing
        done) for any other request: ``send`` it. Raises like ``send`` for a bad request."""
        if not request.values or not request.HasField("partition"):
            return False
        replica = self._router.local_leader(request.topic, request.partition)
        if replica is None or not replica.configured():  # send waits for the config
            return False
        topic = self._metadata.topic(request.topic)
        self._router.check_partition(request.topic, request.partition)
        partition, append = self._values_append(request, topic)

        def done(
            outcome: partition_pb2.CommandResult | None, error: errors.RaftqError | None
        ) -> None:
            on_done(values_answer(request, partition, outcome, error))

        replica.append_async(append, done)
        return True

    def _append(
        self, topic: str, partition: int, append: partition_pb2.Append, left: float
    ) -> partition_pb2.CommandResult:
        """Propose an Append on the partition's leader; a whole-command error raises."""
        command = partition_pb2.PartitionCommand(append=append)
        outcome = self._router.propose(topic, partition, command, left).result
        if outcome.error:
            raise errors.error_for(outcome.error, outcome.message)
        return outcome

    def _forwarded_to(self, topic: str, partition: int) -> str:
        """After a send this broker forwarded: the leader's client address, so the client sends
        there directly from now on (a broker that leads answers ""). Kafka answers such a send
        NOT_LEADER and the client refreshes its metadata; forwarding keeps the send and still
        tells the client where to go."""
        if self._router.local_leader(topic, partition) is not None:
            return ""
        hint = self._router.leader_hint(topic, partition)
        return "" if hint == self._router.client_addr else hint
