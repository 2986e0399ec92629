"""The Consumer family: Poll (a long poll leasing ready records), Ack, Nack, ExtendLease, and
JoinGroup, Heartbeat, LeaveGroup (broker/handlers/groups.py).

Poll, Ack, Nack and ExtendLease name (group, member, generation) and are fenced by
``GroupHandler.member``; an ack for a partition not assigned to the member in this generation
is FENCED per ref. Partition work runs on each partition's leader (broker/router.py).

Revocation: when a rebalance moves a partition away from a member, or a member leaves or its
session expires, its leases on those partitions are released at once (Release command) so the
new owner gets the records without waiting for lease expiry; the member's late acks then get
LEASE_EXPIRED. (Kept-until-expiry would let a slow old owner finish, but would stall the new
owner for up to lease_ms; Kafka's share groups release on revocation too.) A poll that passed
the generation check just before a rebalance can have its Lease applied after that Release, so
every Lease carries the poll's generation and every revoking Release the group's new
generation: the partition machine raises the group's fence to it and refuses FENCED a Lease from
an older generation, so a late Lease can never hold records of a revoked partition. (A poll still
re-checks ownership after each lease, and revoked partitions are released a second time
RELEASE_AGAIN_S later in case the first Release failed: broker/handlers/leases.py.)
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from raftq.handlers.common import ByteBudget, timeout
from raftq.handlers.groups import GroupHandler
from raftq.handlers.leases import Releases, batch_refs
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.proto.common_pb2 import ErrorCode
from raftq.router import Router
from raftq.transport.request_checks import (
    CheckedAck,
    CheckedExtendLease,
    CheckedNack,
    CheckedPoll,
)

logger = logging.getLogger("raftq.broker.consume")

POLL_SLICE_S = 0.1
# A Lease whose wait times out may still apply, leaving its records leased to a member that never
# got them until lease_ms runs out. So a poll waits up to this long for a proposed lease's
# outcome, even past its own max_wait_ms (within the call's deadline).
LEASE_OUTCOME_WAIT_S = 5.0
# A retried Nack's answers that describe a state the first attempt may have made itself.
NACK_AMBIGUOUS = frozenset(
    {ErrorCode.LEASE_EXPIRED, ErrorCode.NOT_LEASED, ErrorCode.RECORD_NOT_FOUND}
)
OUTCOME_UNKNOWN_HINT = errors.OutcomeUnknown.kind.hint

Leased = list[tuple[str, int, partition_pb2.CommandResult]]


class NewRecords:
    """Wakes long polls when a local replica applied new records. Thread-safe.

    Wake-ups are counted: a poll reads :meth:`seen` before it looks for records and waits
    only while that count is unchanged, so records that arrive between its look and its wait
    wake it at once (a bare condition would lose that notify, and the poll would sleep out
    its slice with records ready)."""

    def __init__(self) -> None:
        self._arrived = threading.Condition()
        self._count = 0

    def notify(self) -> None:
        """Never blocks for long (a replica's apply calls it)."""
        with self._arrived:
            self._count += 1
            self._arrived.notify_all()

    def seen(self) -> int:
        """How many wake-ups so far: pass it to :meth:`wait`."""
        with self._arrived:
            return self._count

    def wait(self, seen: int, timeout_s: float) -> bool:
        """Wait until a wake-up after ``seen`` was read, at most ``timeout_s``; whether one
        came."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self._count != seen, timeout_s)


def poll_response(leased: Leased, *, compact: bool) -> api_pb2.PollResponse:
    """A compact poll's batches carry the leaders' deliveries or columns as they are (one
    C-level copy per partition); otherwise one LeasedRecord per delivery."""
    response = api_pb2.PollResponse()
    for topic, partition, result in leased:
        if compact:
            if result.HasField("columns"):
                response.batches.add(topic=topic, partition=partition, columns=result.columns)
            else:
                response.batches.add(topic=topic, partition=partition, deliveries=result.deliveries)
            continue
        for delivery in result.deliveries:
            stored = delivery.record
            response.records.add(
                topic=topic,
                partition=partition,
                offset=stored.offset,
                delivery_count=delivery.delivery_count,
                lease_deadline_ms=delivery.lease_deadline_ms,
                timestamp_ms=stored.timestamp_ms,
                record=stored.record,
            )
    return response


class ConsumeHandler:
    """Implements the Consumer service (transport/grpc_server.py ConsumerHandler).
    Thread-safe: gRPC calls it from many threads."""

    def __init__(
        self,
        *,
        groups: GroupHandler,
        router: Router,
        releases: Releases,
        new_records: NewRecords,
        budget: ByteBudget,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic  # a long poll's deadline (the broker's Clock)
        self._groups = groups
        self._router = router
        self._releases = releases
        self._new_records = new_records
        self._budget = budget
        self._start = itertools.count(1)  # which partition a poll leases from first
        self.join_group = groups.join_group
        self.heartbeat = groups.heartbeat
        self.leave_group = groups.leave_group

    # -- Poll --------------------------------------------------------------------------------

    def poll(
        self,
        request: CheckedPoll,
        *,
        timeout_s: float | None,
        active: Callable[[], bool] = lambda: True,
    ) -> api_pb2.PollResponse:
        """Lease ready records of the member's partitions, long-polling up to max_wait_ms.
        A wait ends early, leasing nothing more, once ``active()`` is False (the caller
        cancelled: its thread and long-poll slot go back). Normal errors: UnknownMember,
        Fenced, Unavailable."""
        _, member = self._groups.member(request.group, request.member_id, request.generation)
        partitions = list(member.assignment)
        now = self._monotonic()
        deadline = now + min(request.max_wait_ms / 1000, timeout(timeout_s))
        outcome_deadline = now + min(LEASE_OUTCOME_WAIT_S, max(0.5, timeout(timeout_s) - 0.5))
        start = next(self._start)
        while True:
            seen = self._new_records.seen()  # before looking: what applies after it wakes us
            out = self._lease_round(
                request, partitions, start, max(deadline, outcome_deadline), member.start_from
            )
            if out or self._monotonic() >= deadline:
                response = self._deliverable(request, out)
                if out:
                    response.leader_hint = self._leader_elsewhere(out[0][0], out[0][1])
                return response
            left = max(0.0, deadline - self._monotonic())
            self._new_records.wait(seen, min(POLL_SLICE_S, left))
            if not active():
                return poll_response([], compact=request.compact)
            _, member = self._groups.member(request.group, request.member_id, request.generation)
            partitions = list(member.assignment)

    def _leader_elsewhere(self, topic: str, partition: int) -> str:
        """The client address of the partition's leader when this broker does not lead it
        (PollResponse.leader_hint), else ""."""
        if self._router.local_leader(topic, partition) is not None:
            return ""
        hint = self._router.leader_hint(topic, partition)
        return "" if hint == self._router.client_addr else hint

    def _lease_round(
        self,
        request: CheckedPoll,
        partitions: Sequence[tuple[str, int]],
        start: int,
        deadline: float,
        start_from: int = 0,
    ) -> Leased:
        """Lease from the member's partitions in turn until max_records: per partition that
        gave records, (topic, partition, the Lease's result: deliveries or columns)."""
        out: Leased = []
        got = 0
        want = request.max_records
        # Shared by the partitions in turn: the answer carries at most the budget plus the one
        # record that crossed it (each Lease answers at least one record, Kafka's rule).
        budget = self._budget(request.max_bytes)
        for i in range(len(partitions)):
            if want <= 0 or budget <= 0:
                break
            topic, partition = partitions[(start + i) % len(partitions)]
            lease = partition_pb2.Lease(
                group=request.group,
                member=request.member_id,
                max_records=want,
                lease_ms=request.lease_ms if request.HasField("lease_ms") else 0,
                max_bytes=budget,
                start_from=start_from,  # type: ignore[arg-type]
                generation=request.generation,
                columns=request.compact and request.columns,
            )
            try:
                response = self._router.propose(
                    topic,
                    partition,
                    partition_pb2.PartitionCommand(lease=lease),
                    max(0.5, deadline - self._monotonic()),
                    skip_if_idle=True,
                )
            except errors.RaftqError as exc:
                logger.info("[topic/partition=%s/%d] lease skipped: %s", topic, partition, exc)
                continue
            if response.skipped_idle or response.result.error:
                continue
            result = response.result
            taken = len(result.deliveries) or len(result.columns.offsets)
            if taken and not self._groups.still_owns(
                request.group, request.member_id, request.generation, topic, partition
            ):
                # A rebalance moved the partition while this lease was in flight; it may have
                # applied after the revocation's Release: give the records to the new owner.
                self._releases.release(topic, partition, request.group, request.member_id)
                continue
            if taken:
                out.append((topic, partition, result))
                got += taken
                budget -= result.ByteSize()
            want = request.max_records - got
        return out

    def _deliverable(self, request: CheckedPoll, out: Leased) -> api_pb2.PollResponse:
        """The poll's answer, within the gRPC message limit: a partition's leases that would
        not fit are taken back (never the first: the budget admits it), never left leased
        to a member that cannot receive them."""
        response = poll_response(out, compact=request.compact)
        while len(out) > 1 and response.ByteSize() > self._budget.message_bytes_max:
            topic, partition, result = out.pop()
            self._releases.undeliver(topic, partition, request.group, request.member_id, result)
            response = poll_response(out, compact=request.compact)
        return response

    def undeliver_poll(self, request: CheckedPoll, response: api_pb2.PollResponse) -> None:
        """A Poll's answer did not reach the client (it was gone when the answer was ready):
        take every delivery in it back (Release.undelivered), so none of them counts toward
        max_deliveries and the records are ready again at once."""
        group, member_id = request.group, request.member_id
        for batch in response.batches:
            refs = batch_refs(batch.deliveries, batch.columns)
            self._releases.undeliver_refs(batch.topic, batch.partition, group, member_id, refs)
        by_partition: dict[tuple[str, int], list[partition_pb2.DeliveryRef]] = defaultdict(list)
        for record in response.records:
            by_partition[(record.topic, record.partition)].append(
                partition_pb2.DeliveryRef(
                    offset=record.offset, delivery_count=record.delivery_count
                )
            )
        for (topic, partition), refs in by_partition.items():
            self._releases.undeliver_refs(topic, partition, group, member_id, refs)

    # -- settling ----------------------------------------------------------------------------

    def ack(self, request: CheckedAck, *, timeout_s: float | None) -> api_pb2.SettleResponse:
        if request.batches:
            return self._ack_batches(request, timeout(timeout_s))

        def command(refs: list[partition_pb2.DeliveryRef]) -> partition_pb2.PartitionCommand:
            return partition_pb2.PartitionCommand(
                ack=partition_pb2.Settle(group=request.group, member=request.member_id, refs=refs)
            )

        return self._settle(request, command, timeout_s)

    def nack(self, request: CheckedNack, *, timeout_s: float | None) -> api_pb2.SettleResponse:
        """A retried Nack (an attempt failed UNAVAILABLE: a leader that stopped answering may
        have applied it) answers OUTCOME_UNKNOWN where the record's state is what that nack
        would have left (not leased, lease over, dead-lettered): never a wrong definite
        error. Acks need no such care (the machine answers an acked record's retry OK), nor
        does ExtendLease (a lease it extended is still held at the retry)."""

        def command(refs: list[partition_pb2.DeliveryRef]) -> partition_pb2.PartitionCommand:
            nack = partition_pb2.Nack(group=request.group, member=request.member_id, refs=refs)
            if request.HasField("delay_ms"):
                nack.delay_ms = request.delay_ms
            return partition_pb2.PartitionCommand(nack=nack)

        return self._settle(request, command, timeout_s, ambiguous=NACK_AMBIGUOUS)

    def extend_lease(
        self, request: CheckedExtendLease, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        def command(refs: list[partition_pb2.DeliveryRef]) -> partition_pb2.PartitionCommand:
            extend = partition_pb2.ExtendLease(
                group=request.group, member=request.member_id, refs=refs, lease_ms=request.lease_ms
            )
            return partition_pb2.PartitionCommand(extend_lease=extend)

        # Each extended lease is answered with its partition's deadline (set by _settle).
        return self._settle(request, command, timeout_s)

    def _ack_batches(self, request: CheckedAck, left: float) -> api_pb2.SettleResponse:
        """The compact Ack: one Settle per partition with the packed offsets copied as they
        are; only the refs that failed are answered."""
        _, member = self._groups.member(request.group, request.member_id, request.generation)
        owned = set(member.assignment)
        response = api_pb2.SettleResponse()
        for batch in request.batches:
            topic, partition = batch.topic, batch.partition
            try:
                if (topic, partition) not in owned:
                    raise errors.Fenced(
                        f"{topic}/{partition} is not assigned to this member in generation "
                        f"{request.generation}: the record was released to its new owner"
                    )
                settle = partition_pb2.Settle(
                    group=request.group,
                    member=request.member_id,
                    offsets=batch.offsets,
                    delivery_counts=batch.delivery_counts,
                )
                command = partition_pb2.PartitionCommand(ack=settle)
                outcome = self._router.propose(topic, partition, command, left).result
                if outcome.error:
                    raise errors.error_for(outcome.error, outcome.message)
                if outcome.refs:
                    counts = dict(zip(batch.offsets, batch.delivery_counts, strict=True))
                    for r in outcome.refs:
                        ref = api_pb2.RecordRef(
                            topic=topic,
                            partition=partition,
                            offset=r.offset,
                            delivery_count=counts.get(r.offset, 0),
                        )
                        response.failed.add(ref=ref, error=r.error, message=r.message)
            except errors.RaftqError as exc:
                for offset, count in zip(batch.offsets, batch.delivery_counts, strict=True):
                    ref = api_pb2.RecordRef(
                        topic=topic, partition=partition, offset=offset, delivery_count=count
                    )
                    response.failed.add(
                        ref=ref, error=exc.code, message=exc.message, leader_hint=exc.leader_hint
                    )
        return response

    def _settle(
        self,
        request: Any,
        command: Callable[[list[partition_pb2.DeliveryRef]], partition_pb2.PartitionCommand],
        timeout_s: float | None,
        *,
        ambiguous: frozenset[int] = frozenset(),
    ) -> api_pb2.SettleResponse:
        """One settle command per partition on its leader. Per-ref answers in ``ambiguous``
        become OUTCOME_UNKNOWN when an earlier attempt's outcome was unknown (see nack)."""
        left = timeout(timeout_s)
        _, member = self._groups.member(request.group, request.member_id, request.generation)
        owned = set(member.assignment)
        results = [api_pb2.RefOutcome(ref=ref) for ref in request.refs]
        by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, ref in enumerate(request.refs):
            if (ref.topic, ref.partition) not in owned:
                results[i].error = ErrorCode.FENCED
                results[i].message = (
                    f"{ref.topic}/{ref.partition} is not assigned to this member in generation "
                    f"{request.generation}: the record was released to its new owner"
                )
                continue
            by_partition[(ref.topic, ref.partition)].append(i)
        for (topic, partition), indexes in sorted(by_partition.items()):
            refs = [
                partition_pb2.DeliveryRef(
                    offset=request.refs[i].offset, delivery_count=request.refs[i].delivery_count
                )
                for i in indexes
            ]
            unknown: list[bool] = []  # an attempt failed with its outcome unknown
            try:
                response = self._router.propose(
                    topic,
                    partition,
                    command(refs),
                    left,
                    on_unknown=partial(unknown.append, True),
                )
                outcome = response.result
                if outcome.error:
                    raise errors.error_for(outcome.error, outcome.message)
                for i, ref_result in zip(indexes, outcome.refs, strict=True):
                    results[i].error = ref_result.error
                    results[i].message = ref_result.message
                    results[i].dead_lettered = ref_result.dead_lettered
                    if ref_result.error == ErrorCode.OK:  # ExtendLease: partition time, 0 else
                        results[i].lease_deadline_ms = outcome.lease_deadline_ms
                    if unknown and ref_result.error in ambiguous:
                        results[i].error = ErrorCode.OUTCOME_UNKNOWN
                        results[i].message = f"{OUTCOME_UNKNOWN_HINT}; retry: {ref_result.message}"
            except errors.RaftqError as exc:
                for i in indexes:
                    results[i].error, results[i].message = exc.code, exc.message  # type: ignore[assignment]
                    results[i].leader_hint = exc.leader_hint
        return api_pb2.SettleResponse(results=results)
