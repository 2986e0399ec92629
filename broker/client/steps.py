"""The client's retry and rejoin logic as plans, run by the thread and the asyncio clients.

A plan is a generator that yields the I/O it needs (:class:`Attempt` one broker, :class:`Pause`,
:class:`CallAny`: a call any broker can answer) and is sent each answer back (or has the
typed error thrown in). It holds every decision: which broker next, how long to pause, when
to give up, when to rejoin a group and resend, how to read an answer after a retry. A driver
only performs the steps: :func:`run` with blocking calls and ``time.sleep``, :func:`run_async`
with ``await`` and ``asyncio.sleep``. So the two clients cannot drift apart (sans-I/O, as h11
and the hyper-h2 family separate protocol from I/O).

Plans here: :func:`any_broker` (what ``call_any`` does). The group member's plans (join,
rejoin, poll, settle) are :class:`raftq.client.member.Member`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from raftq.proto import errors

T = TypeVar("T")


@dataclass(frozen=True)
class Attempt:
    """Call ``fn(stubs, timeout_s)`` on one broker; answer its result or throw its error."""

    address: str
    fn: Callable[[Any, float], Any]
    timeout_s: float


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class CallAny:
    """A call any broker can answer (the :func:`any_broker` plan, until ``deadline_s``)."""

    fn: Callable[[Any, float], Any]
    deadline_s: float | None = None


Step = Attempt | Pause | CallAny
Plan = Generator[Step, Any, T]


def run(plan: Plan[T], perform: Callable[[Step], Any]) -> T:
    """Drive ``plan`` with blocking I/O: ``perform(step)`` returns the answer or raises."""
    answer: Any = None
    error: errors.RaftqError | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result
        answer, error = None, None
        try:
            answer = perform(step)
        except errors.RaftqError as exc:
            error = exc


async def run_async(plan: Plan[T], perform: Callable[[Step], Awaitable[Any]]) -> T:
    """Drive ``plan`` with asyncio: ``await perform(step)``."""
    answer: Any = None
    error: errors.RaftqError | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result
        answer, error = None, None
        try:
            answer = await perform(step)
        except errors.RaftqError as exc:
            error = exc


def any_broker(
    rounds: Any,  # channels.AnyBroker: the order, per-attempt timeouts and pauses
    bootstrap: Sequence[str],
    fn: Callable[[Any, float], Any],
    deadline_s: float | None = None,
) -> Plan[tuple[int, Any]]:
    """``fn`` against each bootstrap broker in turn until one answers: UNAVAILABLE and
    RESOURCE_EXHAUSTED (a broker at capacity for that kind of call) move on; every other
    answer is the cluster's. After a round in which every broker was unavailable, pause and
    go again until the request timeout, then raise the last Unavailable; after a round in
    which brokers refused for capacity, pause their retry hint with jitter, until
    ``deadline_s`` (monotonic; default: the request timeout), then raise the
    ResourceExhausted. Returns (index of the broker that answered, its answer)."""
    while True:
        last: errors.Unavailable | None = None
        exhausted: errors.ResourceExhausted | None = None
        for index, timeout_s in rounds.attempts():
            try:
                answer = yield Attempt(bootstrap[index], fn, timeout_s)
            except errors.ResourceExhausted as exc:
                exhausted = exc
                continue
            except errors.Unavailable as exc:
                last = exc
                continue
            return index, answer
        if exhausted is not None:
            pause_s = rounds.refused_pause_s(exhausted, deadline_s)
            if pause_s is None:
                raise exhausted
        else:
            assert last is not None
            pause_s = rounds.pause_s()
            if pause_s is None:
                raise last
        yield Pause(pause_s)


__all__ = ["Attempt", "CallAny", "Pause", "Plan", "Step", "any_broker", "run", "run_async"]
