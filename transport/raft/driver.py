"""The thread that runs every Raft group of a broker: poll → deliver → tick → sync → flush.

One `RaftDriver` owns one endpoint (`MuxEndpoint`, or a hub endpoint in the simulation tier)
and every group registered with it. Each loop iteration:

1. applies queued register/unregister/submit requests (thread-safe entry points);
2. ``endpoint.poll(timeout)``: waits for sockets, then delivers received messages into the
   groups' callbacks, on this thread, so each SyncObj stays single-threaded;
3. ticks (``node.tick(0)`` if the node has it, else ``node.doTick(0)``) the groups that have
   something to do: once per `tick_interval_s` round, and right away for groups that received
   messages, every group whose *due predicate* says so; woken and newly registered groups
   always; every group at least once per `full_tick_interval_s` (staggered), and all groups in
   the round after a peer link came up or went down;
4. calls ``node.sync()`` (group-commit fsync, if the node has it) on every group that was ticked
   or received messages: those are the only places a group writes its journal;
5. ``endpoint.flush()``: only now do the replies and appends produced in 2-3 go on the wire.

The due predicate (`syncobj_tick_due`) reads a SyncObj's private timers and indices (pysyncobj
is pinned to 0.3.17): leader heartbeat due or entries uncommitted, follower election deadline
passed, entries committed but not applied, commands queued, not yet ready. A node may supply its
own ``tick_due(now)``. Skipping the ticks of idle groups is what keeps 1,000 groups per broker
within 0.1 core (bench/idle_cpu.py); the price is that anything else a tick does (leader
fallback, log compaction, journal meta flush) runs at `full_tick_interval_s` resolution.

Because 4 precedes 5, a follower's ``next_node_idx`` ack for an entry never leaves the broker
before that entry's fsync, and a group whose sync raises has its buffered messages discarded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj import SyncObj, SyncObjConf, replicated

logger = logging.getLogger("raftq.transport.raft.driver")

T = TypeVar("T")

_LEADER = 2  # pysyncobj.syncobj._RAFT_STATE.LEADER


class DriverEndpoint(Protocol):
    """What the driver needs from a broker endpoint (MuxEndpoint, HubEndpoint)."""

    def poll(self, timeout_s: float) -> set[str]: ...

    def flush(self) -> None: ...

    def wake(self) -> None: ...

    def activate(self, group: str) -> None: ...

    def deactivate(self, group: str) -> None: ...

    def discard_pending(self, group: str) -> int: ...


def raft_now() -> float:
    """pysyncobj's clock, looked up at call time so a patched manual clock (hub.py) applies."""
    return float(_pysyncobj_syncobj.monotonicTime())


_P = "_SyncObj__"
_SYNCOBJ_FIELDS = tuple(
    _P + f
    for f in (
        "raftState",
        "newAppendEntriesTime",
        "raftElectionDeadline",
        "raftCommitIndex",
        "raftLastApplied",
        "raftLog",
        "commandsQueue",
        "onReadyCalled",
    )
)


def syncobj_tick_due(node: Any) -> Callable[[float], bool] | None:
    """A predicate "does `node` need a tick at raft time `now`?" built on SyncObj 0.3.17's
    private state, or None (tick always) when `node` does not have that state."""
    state = getattr(node, "__dict__", {})
    if not all(f in state for f in _SYNCOBJ_FIELDS):
        return None
    queue = getattr(state[_P + "commandsQueue"], "_FastQueue__queue", None)
    if queue is None:
        return None

    def due(now: float) -> bool:
        if state[_P + "raftState"] == _LEADER:
            if now > state[_P + "newAppendEntriesTime"]:
                return True
            if state[_P + "raftCommitIndex"] < state[_P + "raftLog"][-1][1]:
                return True
        elif state[_P + "raftElectionDeadline"] < now:
            return True
        return (
            state[_P + "raftCommitIndex"] > state[_P + "raftLastApplied"]
            or bool(queue)
            or not state[_P + "onReadyCalled"]
        )

    return due


@dataclass(eq=False)
class _Group:
    name: str
    node: Any
    tick: Callable[[float], Any]
    sync: Callable[[], Any] | None
    due: Callable[[float], bool] | None
    next_full_tick: float
    failures: int = 0


class RaftDriver:
    """Runs the groups of one endpoint on one thread. See the module docstring for the loop."""

    def __init__(
        self,
        endpoint: DriverEndpoint,
        *,
        tick_interval_s: float = 0.05,
        full_tick_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        name: str = "raft-driver",
    ) -> None:
        if not 0 < tick_interval_s <= full_tick_interval_s:
            raise ValueError("need 0 < tick_interval_s <= full_tick_interval_s")
        self.endpoint = endpoint
        self.tick_interval_s = tick_interval_s
        self.full_tick_interval_s = full_tick_interval_s
        self._seen_peer_generation = -1
        self._clock = clock
        self._name = name
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self._ops: list[tuple[str, str, Any, threading.Event | None]] = []
        self._calls: list[tuple[Callable[[], Any], Future[Any]]] = []
        self._woken: set[str] = set()
        self._next_round = 0.0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.stats: dict[str, int] = dict.fromkeys(
            (
                "iterations",
                "rounds",
                "ticks",
                "ticks_skipped",
                "syncs",
                "tick_errors",
                "sync_errors",
            ),
            0,
        )

    # -- thread-safe API -------------------------------------------------------------------------

    def register(self, name: str, node: Any) -> None:
        """Start running `node` (a SyncObj with autoTick=False whose transport came from this
        driver's endpoint for group `name`). Takes effect at the next iteration."""
        with self._lock:
            self._ops.append(("add", name, node, None))
            self._woken.add(name)
        self.endpoint.wake()

    def unregister(self, name: str, *, timeout_s: float = 5.0) -> bool:
        """Stop ticking `name` and delivering to it. Waits for the driver thread unless called on
        it (or the driver is not running); True if it has taken effect. The caller still owns the
        node and should `destroy()` it afterwards."""
        done = threading.Event()
        with self._lock:
            self._ops.append(("remove", name, None, done))
        self.endpoint.wake()
        if self._thread is None or threading.current_thread() is self._thread:
            return done.is_set()
        return done.wait(timeout_s)

    def wake(self, name: str | None = None) -> None:
        """Tick `name` (e.g. after proposing a command from another thread) at the next
        iteration instead of waiting for the next round."""
        if name is not None:
            with self._lock:
                self._woken.add(name)
        self.endpoint.wake()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run `fn` on the driver thread between iterations (safe reads of SyncObj state)."""
        fut: Future[T] = Future()
        with self._lock:
            self._calls.append((fn, fut))
        self.endpoint.wake()
        return fut

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("driver already started")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self.endpoint.wake()
        thread.join(timeout_s)
        self._thread = None

    @property
    def group_names(self) -> list[str]:
        return list(self._groups)

    def statistics(self) -> dict[str, int]:
        return {**self.stats, "groups": len(self._groups)}

    # -- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        logger.info("raft driver %s started", self._name)
        while not self._stopping:
            try:
                self.run_once(self.tick_interval_s)
            except Exception:  # a bug in the loop itself: log, breathe, keep the broker alive
                logger.exception("raft driver iteration failed")
                time.sleep(self.tick_interval_s)
        logger.info("raft driver %s stopped", self._name)

    def run_once(self, timeout_s: float) -> None:
        """One iteration. Public so the simulation tier can step a driver by hand."""
        self.stats["iterations"] += 1
        woken = self._apply_requests()
        now = self._clock()
        wait = 0.0 if woken else max(0.0, min(timeout_s, self._next_round - now))
        touched = self.endpoint.poll(wait)
        now = self._clock()
        raft_time = raft_now()
        groups = self._groups
        generation = getattr(self.endpoint, "peer_generation", 0)
        if generation != self._seen_peer_generation:
            self._seen_peer_generation = generation
            woken |= groups.keys()  # reconcile connection state everywhere
        if now >= self._next_round:
            self._next_round = now + self.tick_interval_s
            self.stats["rounds"] += 1
            candidates: Iterable[_Group] = groups.values()
        else:
            candidates = [groups[n] for n in sorted(touched | woken) if n in groups]
        ticked: list[_Group] = []
        for group in candidates:
            if (
                group.name in woken
                or group.due is None
                or now >= group.next_full_tick
                or group.due(raft_time)
            ):
                if now >= group.next_full_tick:
                    group.next_full_tick = now + self.full_tick_interval_s
                self._tick(group)
                ticked.append(group)
            else:
                self.stats["ticks_skipped"] += 1
        synced = {g.name for g in ticked}
        for group in ticked:
            self._sync(group)
        for name in sorted(touched - synced):
            group_or_none = groups.get(name)
            if group_or_none is not None:
                self._sync(group_or_none)
        self.endpoint.flush()

    def _apply_requests(self) -> set[str]:
        with self._lock:
            ops, self._ops = self._ops, []
            calls, self._calls = self._calls, []
            woken, self._woken = self._woken, set()
        for op, name, node, done in ops:
            if op == "add":
                if name in self._groups:
                    logger.error("[group=%s] registered twice; ignoring the second", name)
                    continue
                try:
                    self.endpoint.activate(name)
                except KeyError:
                    logger.exception("[group=%s] cannot register", name)
                    continue
                tick = getattr(node, "tick", None) or node.doTick
                due = getattr(node, "tick_due", None) or syncobj_tick_due(node)
                # Stagger the full ticks over one interval so they do not come in bursts.
                offset = (len(self._groups) * 0.618034 % 1.0) * self.full_tick_interval_s
                first_full = self._clock() + offset
                self._groups[name] = _Group(
                    name, node, tick, getattr(node, "sync", None), due, first_full
                )
            else:
                self._groups.pop(name, None)
                self.endpoint.deactivate(name)
                if done is not None:
                    done.set()
        for fn, fut in calls:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:
                    fut.set_exception(exc)
        return woken

    def _tick(self, group: _Group) -> None:
        self.stats["ticks"] += 1
        try:
            group.tick(0.0)
        except Exception:
            self.stats["tick_errors"] += 1
            group.failures += 1
            if group.failures <= 3 or group.failures % 1000 == 0:
                logger.exception("[group=%s] tick failed (%d times)", group.name, group.failures)

    def _sync(self, group: _Group) -> None:
        if group.sync is None:
            return
        self.stats["syncs"] += 1
        try:
            group.sync()
        except Exception:
            self.stats["sync_errors"] += 1
            dropped = self.endpoint.discard_pending(group.name)
            logger.exception(
                "[group=%s] sync failed; discarded %d unsent messages", group.name, dropped
            )


# ------------------------------------------------------------------------------------------------
# A journal-less group for tests and benchmarks (the product uses RaftNode from node.py).
# ------------------------------------------------------------------------------------------------


def group_conf(**overrides: Any) -> SyncObjConf:
    """A SyncObjConf for a driver-run group: autoTick off, and `connectionTimeout` raised to
    `raftMaxTimeout` (pysyncobj validates it; the mux transport does not use it)."""
    overrides.setdefault("autoTick", False)
    if overrides["autoTick"]:
        raise ValueError("driver-run groups need autoTick=False")
    conf = SyncObjConf(**overrides)
    conf.connectionTimeout = max(conf.connectionTimeout, conf.raftMaxTimeout)
    return conf


class ListGroup(SyncObj):
    """A replicated list of byte strings, without journal: the stand-in Raft group used by the
    transport tests and bench/idle_cpu.py. `apply(data)` is the one replicated method."""

    def __init__(
        self,
        name: str,
        self_addr: str,
        addrs: Iterable[str],
        transport_class: Callable[..., Any],
        *,
        clock: Callable[[], float] = time.monotonic,
        **conf: Any,
    ) -> None:
        self.name = name
        self.became_leader_at: float | None = None
        self._leader_clock = clock
        conf["onStateChanged"] = self._on_state_changed
        super().__init__(
            self_addr,
            [a for a in addrs if a != self_addr],
            conf=group_conf(**conf),
            transportClass=transport_class,
        )
        self.applied: list[bytes] = []

    @replicated
    def apply(self, data: bytes) -> int:
        self.applied.append(data)
        return len(self.applied)

    def leader(self) -> str | None:
        node = self._getLeader()
        return None if node is None else str(node.id)

    def is_leader(self) -> bool:
        return bool(self._isLeader())

    def _on_state_changed(self, old: int, new: int) -> None:
        if new == _LEADER:
            self.became_leader_at = self._leader_clock()
