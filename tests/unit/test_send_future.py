"""SendFuture and BatchOutcome on their own: the future semantics ``Producer.send`` promises
(result / exception / done / add_done_callback / cancel), no broker."""

from __future__ import annotations

import logging
import threading

import pytest

from raftq.client.send_future import BatchOutcome, RecordMetadata, SendFuture
from raftq.proto import errors

WAIT_S = 10


def futures(n: int, topic: str = "t", partition: int = 2) -> tuple[BatchOutcome, list[SendFuture]]:
    outcome = BatchOutcome(topic, partition)
    return outcome, [SendFuture(outcome, i) for i in range(n)]


def test_a_range_gives_each_record_its_offset() -> None:
    outcome, fs = futures(3)
    assert [f.done() for f in fs] == [False] * 3 and all(f.running() for f in fs)
    outcome.resolve_range(first_offset=40, timestamp_ms=7, duplicate=True)
    assert all(f.done() and not f.running() for f in fs)
    assert [f.result() for f in fs] == [RecordMetadata("t", 2, 40 + i, 7, True) for i in range(3)]
    assert [f.exception() for f in fs] == [None] * 3


def test_each_record_its_own_outcome() -> None:
    outcome, (ok, bad) = futures(2)
    error = errors.InvalidArgument("bad schedule")
    outcome.resolve_each([RecordMetadata("t", 1, 5), error])
    assert ok.result(0) == RecordMetadata("t", 1, 5) and ok.exception(0) is None
    assert bad.exception(0) is error
    with pytest.raises(errors.InvalidArgument, match="bad schedule"):
        bad.result(0)


def test_a_batch_error_fails_every_record_typed() -> None:
    outcome, fs = futures(2)
    outcome.fail(errors.Timeout("lost"))
    for f in fs:
        assert isinstance(f.exception(), errors.Timeout)
        with pytest.raises(errors.Timeout):
            f.result()
    failed = SendFuture.failed("t", errors.UnknownTopic("no such topic"))
    assert failed.done() and isinstance(failed.exception(), errors.UnknownTopic)


def test_waiting_times_out_then_wakes_when_resolved() -> None:
    outcome, (f,) = futures(1)
    with pytest.raises(TimeoutError):
        f.result(0.01)
    with pytest.raises(TimeoutError):
        f.exception(0)
    got: list[RecordMetadata] = []
    waiter = threading.Thread(target=lambda: got.append(f.result(WAIT_S)))
    waiter.start()
    outcome.resolve_range(9, 0, False)
    waiter.join(WAIT_S)
    assert got == [RecordMetadata("t", 2, 9)]


def test_callbacks_run_once_on_resolution_or_at_once_when_done() -> None:
    outcome, (a, b) = futures(2)
    seen: list[tuple[str, SendFuture]] = []
    a.add_done_callback(lambda f: seen.append(("a1", f)))
    b.add_done_callback(lambda f: seen.append(("b", f)))
    a.add_done_callback(lambda f: seen.append(("a2", f)))
    assert seen == []
    outcome.resolve_range(0, 0, False)
    assert seen == [("a1", a), ("b", b), ("a2", a)]
    a.add_done_callback(lambda f: seen.append(("late", f)))
    assert seen[-1] == ("late", a)


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcome, (f,) = futures(1)
    ran: list[SendFuture] = []

    def broken(_: SendFuture) -> None:
        raise ValueError("user bug")

    f.add_done_callback(broken)
    f.add_done_callback(ran.append)
    with caplog.at_level(logging.ERROR, logger="raftq.client"):
        outcome.resolve_range(0, 0, False)
    assert ran == [f] and "exception calling callback" in caplog.text


def test_never_cancellable_and_hashable() -> None:
    _, (a, b) = futures(2)
    assert a.cancel() is False and a.cancelled() is False
    assert len({a, b}) == 2 and "pending" in repr(a)


def test_resolving_twice_is_a_bug() -> None:
    outcome, _ = futures(1)
    outcome.fail(errors.Internal("x"))
    with pytest.raises(AssertionError):
        outcome.resolve_range(0, 0, False)
