"""The futures ``Producer.send`` returns: one small object per record, the waiting per batch.

A ``concurrent.futures.Future`` per record costs a Condition and an RLock each, a third of the
client's CPU per record when producing 100k+ records/s. Here the records of a batch share one
:class:`BatchOutcome` (one Event, one lock, the batch's answer) and a :class:`SendFuture` is
that outcome plus the record's index in the batch; its :class:`RecordMetadata` is built when
asked for (a values batch is answered with one first offset: record ``i`` is at
``first_offset + i``).

A :class:`SendFuture` has the ``concurrent.futures.Future`` methods a caller of ``send`` uses
(``result``, ``exception``, ``done``, ``add_done_callback``, ``cancel``, ``cancelled``,
``running``); it is not one, so ``concurrent.futures.wait``/``as_completed`` do not take it
(``Producer.flush`` waits for them all). ``result``/``exception`` raise ``TimeoutError`` (the
builtin, which ``concurrent.futures.TimeoutError`` is) when the record is not done in time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from raftq.proto import errors

log = logging.getLogger("raftq.client")


@dataclass(frozen=True)
class RecordMetadata:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int = 0  # 0 when the broker did not say
    duplicate: bool = False  # answered from dedup state: the record was written earlier


class BatchOutcome:
    """The answer for one batch's records, set once by the producer's sender: a range (values
    batch: ``first_offset``, one timestamp and duplicate flag for all), one outcome per record
    (records batch) or one error for all. Thread-safe; callbacks run in the thread that
    resolves it, outside its lock."""

    __slots__ = (
        "_callbacks",
        "_event",
        "_lock",
        "done",
        "duplicate",
        "each",
        "error",
        "first_offset",
        "partition",
        "timestamp_ms",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.first_offset = 0
        self.timestamp_ms = 0
        self.duplicate = False
        self.error: errors.RaftqError | None = None
        self.each: list[RecordMetadata | errors.RaftqError] | None = None
        self.done = False  # written last, under _lock: a reader that sees True sees the rest
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[tuple[SendFuture, Callable[[SendFuture], object]]] = []

    def resolve_range(self, first_offset: int, timestamp_ms: int, duplicate: bool) -> None:
        """Record ``i`` of the batch is at ``first_offset + i``."""
        self.first_offset, self.timestamp_ms, self.duplicate = first_offset, timestamp_ms, duplicate
        self._finish()

    def resolve_each(self, each: list[RecordMetadata | errors.RaftqError]) -> None:
        """Record ``i`` of the batch has outcome ``each[i]``."""
        self.each = each
        self._finish()

    def fail(self, error: errors.RaftqError) -> None:
        """Every record of the batch failed with ``error``."""
        self.error = error
        self._finish()

    def outcome(self, index: int) -> RecordMetadata | errors.RaftqError:
        assert self.done, "outcome() of a batch that is not resolved"
        if self.error is not None:
            return self.error
        if self.each is not None:
            return self.each[index]
        return RecordMetadata(
            self.topic, self.partition, self.first_offset + index, self.timestamp_ms, self.duplicate
        )

    def error_of(self, index: int) -> errors.RaftqError | None:
        """Record ``index``'s error, None when it was acknowledged (no metadata built)."""
        assert self.done, "error_of() of a batch that is not resolved"
        if self.error is not None or self.each is None:
            return self.error
        outcome = self.each[index]
        return None if isinstance(outcome, RecordMetadata) else outcome

    def wait(self, timeout: float | None) -> None:
        if not self.done and not self._event.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")

    def add_callback(self, future: SendFuture, fn: Callable[[SendFuture], object]) -> None:
        with self._lock:
            if not self.done:
                self._callbacks.append((future, fn))
                return
        _call(future, fn)

    def _finish(self) -> None:
        with self._lock:
            assert not self.done, "a batch resolved twice"
            self.done = True
            callbacks, self._callbacks = self._callbacks, []
        self._event.set()
        for future, fn in callbacks:
            _call(future, fn)


def _call(future: SendFuture, fn: Callable[[SendFuture], object]) -> None:
    try:
        fn(future)
    except Exception:  # as concurrent.futures does: a callback's bug is logged, not raised
        log.exception("exception calling callback for %r", future)


class SendFuture:
    """The outcome of one ``Producer.send``: :class:`RecordMetadata` once the record is
    committed, or a typed :class:`raftq.proto.errors.RaftqError`. Never cancellable."""

    __slots__ = ("_index", "_outcome")

    def __init__(self, outcome: BatchOutcome, index: int) -> None:
        self._outcome = outcome
        self._index = index

    @classmethod
    def failed(cls, topic: str, error: errors.RaftqError) -> SendFuture:
        """A future that failed before its record joined a batch."""
        outcome = BatchOutcome(topic, -1)
        outcome.fail(error)
        return cls(outcome, 0)

    def done(self) -> bool:
        return self._outcome.done

    def running(self) -> bool:
        """True until the record is acknowledged or failed (it cannot be cancelled)."""
        return not self._outcome.done

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        """A record handed to the producer cannot be taken back: always False."""
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; raises its typed error, or TimeoutError after ``timeout``
        seconds (None: wait as long as it takes)."""
        self._outcome.wait(timeout)
        outcome = self._outcome.outcome(self._index)
        if isinstance(outcome, RecordMetadata):
            return outcome
        raise outcome

    def exception(self, timeout: float | None = None) -> errors.RaftqError | None:
        """The record's typed error, None if it was acknowledged; TimeoutError as result()."""
        self._outcome.wait(timeout)
        return self._outcome.error_of(self._index)

    def add_done_callback(self, fn: Callable[[SendFuture], object]) -> None:
        """Call ``fn(self)`` once done: at once if it is, else in the producer's thread that
        resolves the batch (keep it short; an exception it raises is logged)."""
        self._outcome.add_callback(self, fn)

    def __repr__(self) -> str:
        state = "done" if self._outcome.done else "pending"
        return f"<SendFuture {self._outcome.topic}/{self._outcome.partition}#{self._index} {state}>"
