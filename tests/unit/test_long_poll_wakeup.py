"""A long poll wakes for records applied while it was looking, not at the end of its slice.

``ConsumeHandler.poll`` looks for ready records (a Lease on each partition, skipped while the
replica has none), then waits on ``NewRecords`` until a local replica applies new ones. Records
applied between the look and the wait used to be missed: the notify came before anyone waited,
and the poll slept out its slice (``POLL_SLICE_S``, 100 ms) with the records ready, on every
broker where an apply raced a poll (issue 16, end-to-end latency). The partition's side is a
stand-in router here: its first Lease finds the partition idle while the replica applies new
records (the notify), its second leases them.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from raftq.handlers import consume
from raftq.handlers.common import ByteBudget
from raftq.handlers.consume import ConsumeHandler, NewRecords
from raftq.proto import api_pb2, internal_pb2, partition_pb2
from raftq.transport.request_checks import check_poll

WAIT_S = 20.0  # far beyond a poll that does not wait, far below the slice below


class _Partition:
    """The one partition's leader: idle at the first Lease, while records get applied (the
    replica's apply notifies ``NewRecords``); the records at the next Lease."""

    def __init__(self, new_records: NewRecords) -> None:
        self.new_records = new_records
        self.leases = 0

    def propose(self, topic: str, partition: int, command: Any, timeout_s: float, **_: Any) -> Any:
        assert command.WhichOneof("op") == "lease"
        self.leases += 1
        if self.leases == 1:
            self.new_records.notify()  # applied after the idle check, before the poll waits
            return internal_pb2.ProposeResponse(skipped_idle=True)
        result = partition_pb2.CommandResult()
        result.deliveries.add(delivery_count=1).record.offset = 0
        return internal_pb2.ProposeResponse(result=result)

    def local_leader(self, topic: str, partition: int) -> object:
        return self  # it leads here: the answer names no other broker


class _Groups:
    def __init__(self) -> None:
        self.join_group = self.heartbeat = self.leave_group = None

    def member(self, group: str, member_id: str, generation: int) -> tuple[None, Any]:
        return None, SimpleNamespace(assignment=[("t", 0)], start_from=0)

    def still_owns(self, *_: Any) -> bool:
        return True


def test_records_applied_between_the_look_and_the_wait_wake_the_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consume, "POLL_SLICE_S", 10 * WAIT_S)  # a lost wake-up would show
    new_records = NewRecords()
    partition = _Partition(new_records)
    handler = ConsumeHandler(
        groups=_Groups(),  # type: ignore[arg-type]
        router=partition,  # type: ignore[arg-type]
        releases=None,  # type: ignore[arg-type]
        new_records=new_records,
        budget=ByteBudget(1 << 20, 4 << 20),
    )
    request = check_poll(
        api_pb2.PollRequest(
            group="g", member_id="m", generation=1, max_records=10, max_wait_ms=300_000
        )
    )
    answers: list[api_pb2.PollResponse] = []
    poller = threading.Thread(
        target=lambda: answers.append(handler.poll(request, timeout_s=1000.0)), daemon=True
    )
    poller.start()
    poller.join(WAIT_S)
    assert not poller.is_alive(), "the poll slept through records applied while it looked"
    assert partition.leases == 2
    assert [r.offset for r in answers[0].records] == [0]


def test_a_wait_returns_at_once_for_an_apply_after_seen_and_times_out_without_one() -> None:
    new_records = NewRecords()
    seen = new_records.seen()
    assert new_records.wait(seen, 0.0) is False  # nothing applied since
    new_records.notify()
    assert new_records.wait(seen, WAIT_S) is True  # applied before the wait began: not lost
    assert new_records.wait(new_records.seen(), 0.01) is False
