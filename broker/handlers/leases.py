"""Taking leases back: a revoked member's (rebalance, leave, session expiry) and those of an
answer that never reached its member (Release.undelivered: delivery counts restored).

Both are best effort: a Release that fails leaves the leases to expire on their own. Revoked
partitions are released on the broker's small background pool, at once and once more
RELEASE_AGAIN_S later (see ``revoke``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor

from raftq.handlers.common import DEFAULT_TIMEOUT_S
from raftq.metadata.table import GroupInfo, Table
from raftq.proto import common_pb2, errors, partition_pb2
from raftq.router import Router

logger = logging.getLogger("raftq.broker.leases")

# A revoked partition is released at once and once more this much later: a Lease proposed by a
# poll that passed the generation check just before the rebalance may apply after the first
# Release (see Releases.revoke).
RELEASE_AGAIN_S = 1.0
# An undelivered take-back's log line names at most this many runs of offsets.
OFFSET_RANGES_LOGGED = 100


def batch_refs(
    deliveries: Sequence[common_pb2.Delivery], columns: common_pb2.DeliveryColumns
) -> list[partition_pb2.DeliveryRef]:
    """The (offset, delivery_count) of each delivery of one partition's lease answer."""
    if columns.offsets:
        return [
            partition_pb2.DeliveryRef(offset=o, delivery_count=c)
            for o, c in zip(columns.offsets, columns.delivery_counts, strict=True)
        ]
    return [
        partition_pb2.DeliveryRef(offset=d.record.offset, delivery_count=d.delivery_count)
        for d in deliveries
    ]


def assigned_partitions(table: Table, group: str, member_id: str) -> list[tuple[str, int]]:
    info = table.group(group)
    if info is None or member_id not in info.members:
        return []
    return list(info.members[member_id].assignment)


class Releases:
    """See the module docstring. Thread-safe."""

    def __init__(self, router: Router, table: Callable[[], Table], background: Executor) -> None:
        """``background``: the broker's small pool (it raises RuntimeError once shut down)."""
        self._router = router
        self._table = table
        self._background = background

    def revoke(self, before: GroupInfo | None, after: GroupInfo | None) -> None:
        """Release the leases of members that lost partitions between ``before`` and ``after``
        (asynchronously, best effort: leases also expire on their own)."""
        if before is None:
            return
        revoked: list[tuple[str, int, str]] = []
        for member_id, member in before.members.items():
            kept = after.members.get(member_id) if after is not None else None
            still = set(kept.assignment) if kept is not None else set()
            revoked += [(t, p, member_id) for t, p in member.assignment if (t, p) not in still]
        group = before.name
        generation = after.generation if after is not None else before.generation + 1
        for topic, partition, member_id in revoked:
            self._background.submit(self.release, topic, partition, group, member_id, generation)
        if revoked:
            again = threading.Timer(
                RELEASE_AGAIN_S, self._release_again, (group, revoked, generation)
            )
            again.daemon = True
            again.start()

    def _release_again(
        self, group: str, revoked: list[tuple[str, int, str]], generation: int
    ) -> None:
        """The second release of revoked partitions, skipping any the member owns again. A
        poll that checked the member's generation before the rebalance can have its Lease
        applied after the first Release; without this its records would wait for lease_ms."""
        for topic, partition, member_id in revoked:
            if (topic, partition) not in assigned_partitions(self._table(), group, member_id):
                try:
                    self._background.submit(
                        self.release, topic, partition, group, member_id, generation
                    )
                except RuntimeError:  # shut down
                    return

    def release(
        self, topic: str, partition: int, group: str, member_id: str, generation: int = 0
    ) -> None:
        """End every lease ``member_id`` holds on the partition (best effort: leases also
        expire on their own); a ``generation`` also fences Leases from older generations."""
        command = partition_pb2.PartitionCommand(
            release=partition_pb2.Release(group=group, member=member_id, generation=generation)
        )
        try:
            response = self._router.propose(topic, partition, command, DEFAULT_TIMEOUT_S)
        except errors.RaftqError as exc:
            logger.warning(
                "[group=%s topic/partition=%s/%d] release for %s failed (%s): leases will expire",
                group,
                topic,
                partition,
                member_id,
                exc,
            )
            return
        if response.result.count:
            logger.info(
                "[group=%s topic/partition=%s/%d] released %d leases of %s",
                group,
                topic,
                partition,
                response.result.count,
                member_id,
            )

    def undeliver(
        self,
        topic: str,
        partition: int,
        group: str,
        member_id: str,
        result: partition_pb2.CommandResult,
    ) -> None:
        """Take back the deliveries of one Lease's ``result`` (never received)."""
        refs = batch_refs(result.deliveries, result.columns)
        self.undeliver_refs(topic, partition, group, member_id, refs)

    def undeliver_refs(
        self,
        topic: str,
        partition: int,
        group: str,
        member_id: str,
        refs: list[partition_pb2.DeliveryRef],
    ) -> None:
        """Best effort: a Release.undelivered that fails leaves the leases to expire. The
        offsets are logged before the Release is proposed, so a log that survives a crash
        names every delivery that may have been taken back."""
        if not refs:
            return
        logger.info(
            "[group=%s topic/partition=%s/%d] taking back %d undelivered leases of %s (offsets %s)",
            group,
            topic,
            partition,
            len(refs),
            member_id,
            offset_ranges(ref.offset for ref in refs),
        )
        release = partition_pb2.Release(group=group, member=member_id, undelivered=refs)
        command = partition_pb2.PartitionCommand(release=release)
        try:
            response = self._router.propose(topic, partition, command, DEFAULT_TIMEOUT_S)
        except errors.RaftqError as exc:
            logger.warning(
                "[group=%s topic/partition=%s/%d] %d undelivered leases of %s not taken back "
                "(%s): they will expire",
                group,
                topic,
                partition,
                len(refs),
                member_id,
                exc,
            )
            return
        logger.info(
            "[group=%s topic/partition=%s/%d] took back %d undelivered leases of %s",
            group,
            topic,
            partition,
            response.result.count,
            member_id,
        )


def offset_ranges(offsets: Iterable[int], most: int = OFFSET_RANGES_LOGGED) -> str:
    """Offsets as sorted runs, e.g. ``"3-7,9"``; beyond ``most`` runs ``",... (N more)"``. The
    chaos checker (tests/chaos/checker.py) reads the undelivered offsets from these lines: a
    record whose delivery was taken back is leased again with the same delivery_count, so
    its next lease is no first delivery (fifo order)."""
    runs: list[list[int]] = []
    for offset in sorted(set(offsets)):
        if runs and offset == runs[-1][1] + 1:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset])
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:most]]
    if len(runs) > most:
        shown.append(f"... ({len(runs) - most} more)")
    return ",".join(shown)
