"""The thread that runs every Raft group of a broker: poll → deliver → tick → sync → flush.

One `RaftDriver` owns one endpoint (`MuxEndpoint`, or a hub endpoint in the simulation tier)
and every group registered with it. Each loop iteration:

1. applies queued register/unregister/submit requests (thread-safe entry points);
2. ``endpoint.poll(timeout)``: waits for sockets, then delivers received messages into the
   groups' callbacks, on this thread, so each SyncObj stays single-threaded. Then the groups
   that received messages are synced (``node.sync()``, the group-commit fsync) and their
   replies flushed: an ack waits for its fsync only, not for the ticks that apply;
3. ticks (``node.tick(0)`` if the node has it, else ``node.doTick(0)``) the groups that have
   something to do, and no others: groups whose *tick deadline* has passed (checked once per
   `tick_interval_s` round, so the ticks of many groups share one flush), groups that received
   messages and are due after the delivery, woken and newly registered groups, every group at
   least once per `full_tick_interval_s` (staggered; any tick counts), and all groups in the
   round after a peer link came up or went down;
4. ``endpoint.flush_early()``: a leader's ``append_entries`` leave now, before the leader's own
   fsync (Raft §10.2.1; the leader counts itself toward commit only up to its fsync'd index);
5. calls ``node.sync()`` on every group that was ticked: with the syncs after the poll, those
   are the only places a group writes its journal;
6. ``endpoint.flush()``: only now do the replies (acks, votes) produced in 3 go on the wire;
7. runs what the groups ``defer()``red during the round (WAL checkpoints).

Each round also records how late it started (``lag``, lag.py), and each poll when it ended:
the groups read both through ``set_load_probe``; a follower of a broker that runs late waits
longer before it campaigns, and one ticked long after the poll looks again after the next
(membership.py).

Tick deadlines. A group's deadline (`syncobj_tick_deadline`, or the node's own
``tick_deadline()``) is the raft time after which it needs a tick: a leader's next heartbeat, a
follower's or candidate's election deadline, or ``-inf`` while it has something to do at once
(leader entries uncommitted, entries committed but not applied, commands queued, not yet ready).
A group is due once raft time is past its deadline (strictly, as pysyncobj's own checks).
It is read from a SyncObj's private timers and indices (pysyncobj is pinned to 0.3.17) after
every tick of the group and every delivery to it, and kept in a heap: a round pops the groups
whose deadline has passed, so an idle round costs O(due groups), not O(groups). An entry is
pushed only when a deadline moves earlier; one that moved later (a follower's election deadline
after each heartbeat) is found stale when it pops and is pushed again at the new time. A node
without a deadline is ticked every round. Skipping the ticks of idle groups is what keeps 1,000
groups per broker near 0.1 core (bench/idle_cpu.py); the price is that anything else a tick
does (leader fallback, log compaction, journal meta flush) runs at `full_tick_interval_s`
resolution, and that a command proposed from another thread waits for its group's deadline
unless the proposer calls `wake(name)` (RaftNode does, through the waker the driver installs).

Quiesced groups (quiescence.py): an idle group's replicas stop heartbeating and their
tick deadline becomes +inf. Such a group has no heap entry; it is filed under the peers whose
links keep it asleep (``node.quiesced_peers()``: a follower's leader, a leader's followers), and
each round checks those O(peers) links: a link that closed or fell silent (nothing heard for the
endpoint's ``silent_after_s``) gets its quiesced groups ticked, and they wake. A quiesced group's
safety-net tick comes every `quiet_full_tick_interval_s` (5 s by default) instead of every
`full_tick_interval_s`. Before a group is unregistered, ``node.before_unregister()`` lets a
quiesced leader wake its followers.

Because every flush follows the syncs of the groups whose replies it carries, a follower's
``next_node_idx`` ack for an entry never leaves the broker before that entry's fsync, and a
group whose sync raises has its buffered messages discarded.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj import SyncObj, SyncObjConf, replicated

from raftq.transport.raft.lag import SchedulingLag

logger = logging.getLogger("raftq.transport.raft.driver")

T = TypeVar("T")

_LEADER = 2  # pysyncobj.syncobj._RAFT_STATE.LEADER
AT_ONCE = -math.inf  # a tick deadline: the group has work now


class DriverEndpoint(Protocol):
    """What the driver needs from a broker endpoint (MuxEndpoint, HubEndpoint)."""

    def poll(self, timeout_s: float) -> set[str]: ...

    def flush(self) -> None: ...

    def flush_early(self) -> None: ...

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


def syncobj_tick_deadline(node: Any) -> Callable[[], float] | None:
    """A function "raft time after which `node` needs a tick" (``-inf`` when it has work at
    once) built on SyncObj 0.3.17's private state, or None (tick every round) when `node` does
    not have that state."""
    state = getattr(node, "__dict__", {})
    if not all(f in state for f in _SYNCOBJ_FIELDS):
        return None
    queue = getattr(state[_P + "commandsQueue"], "_FastQueue__queue", None)
    if queue is None:
        return None

    def deadline() -> float:
        commit = state[_P + "raftCommitIndex"]
        if state[_P + "raftState"] == _LEADER:
            if commit < state[_P + "raftLog"][-1][1]:
                return AT_ONCE
            at = state[_P + "newAppendEntriesTime"]
        else:
            at = state[_P + "raftElectionDeadline"]
        if commit > state[_P + "raftLastApplied"] or queue or not state[_P + "onReadyCalled"]:
            return AT_ONCE
        return float(at)

    return deadline


@dataclass(eq=False)
class _Group:
    name: str
    node: Any
    tick: Callable[[float], Any]
    sync: Callable[[], Any] | None
    deadline: Callable[[], float] | None  # None: tick every round
    next_full_tick: float  # driver clock; pushed out by every tick of the group
    failures: int = 0
    live: bool = True  # False once unregistered: its heap entries are stale
    due_at: float = 0.0  # raft time: the deadline last read
    heap_at: float = 0.0  # raft time of the live `_due_heap` entry (if heap_seq is set)
    heap_seq: int | None = None  # sequence number of the live `_due_heap` entry
    quiet_peers: tuple[str, ...] = ()  # quiesced: the peers whose silence must wake it


class RaftDriver:
    """Runs the groups of one endpoint on one thread. See the module docstring for the loop."""

    def __init__(
        self,
        endpoint: DriverEndpoint,
        *,
        tick_interval_s: float = 0.05,
        full_tick_interval_s: float = 1.0,
        quiet_full_tick_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "raft-driver",
    ) -> None:
        if quiet_full_tick_interval_s is None:  # quiesced groups: 5 s by default
            quiet_full_tick_interval_s = 5 * full_tick_interval_s
        if not 0 < tick_interval_s <= full_tick_interval_s <= quiet_full_tick_interval_s:
            raise ValueError(
                "need 0 < tick_interval_s <= full_tick_interval_s <= quiet_full_tick_interval_s"
            )
        self.endpoint = endpoint
        self.tick_interval_s = tick_interval_s
        self.full_tick_interval_s = full_tick_interval_s
        self.quiet_full_tick_interval_s = quiet_full_tick_interval_s
        self._seen_peer_generation = -1
        self._clock = clock
        self._name = name
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self._ops: list[tuple[str, str, Any, threading.Event | None]] = []
        self._calls: list[tuple[Callable[[], Any], Future[Any]]] = []
        self._woken: set[str] = set()
        self._next_round = 0.0
        # How late this driver's rounds start (a decaying max): a follower whose own broker
        # runs late gives its leader that much longer before it campaigns (lag.py).
        self.lag = SchedulingLag()
        self._polled_at = -math.inf  # driver clock: the end of the last poll
        # (raft time, seq, group): groups by tick deadline; stale entries are skipped on pop.
        self._due_heap: list[tuple[float, int, _Group]] = []
        # (driver clock, seq, group): groups by next full tick; stale entries re-pushed on pop.
        self._full_heap: list[tuple[float, int, _Group]] = []
        self._every_round: dict[str, _Group] = {}  # groups without a tick deadline
        self._deferred: list[Callable[[], None]] = []  # run after the round's flush (defer)
        # peer -> quiesced groups that sleep while that peer's link is heard (quiescence.py).
        self._quiet: dict[str, dict[str, _Group]] = {}
        self._quiesced = 0  # groups filed in _quiet (a thread-safe count for metrics)
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.sync_seconds = 0.0  # wall time inside group syncs (journal fsyncs), for metrics
        self.stats: dict[str, int] = dict.fromkeys(
            (
                "iterations",
                "rounds",
                "ticks",
                "ticks_deadline",
                "ticks_full",
                "ticks_skipped",
                "ticks_quiet_woken",
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
                if name in self._woken:
                    return  # whoever added it wakes the endpoint (or already has)
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

    def statistics(self) -> dict[str, float]:
        """Counters since start (``sync_seconds``: time spent in journal fsyncs), plus the
        gauges ``groups``, ``quiesced`` (groups asleep on a peer's link) and ``lag_seconds``
        (how late rounds have been starting lately, see :meth:`lag_s`). Safe from any
        thread."""
        return {
            **self.stats,
            "sync_seconds": self.sync_seconds,
            "groups": len(self._groups),
            "quiesced": self._quiesced,
            "lag_seconds": self.lag_s(),
        }

    def lag_s(self) -> float:
        """Driver thread: how late this driver's rounds have been starting lately, in seconds
        (lag.py: a decaying max of each round's lateness)."""
        return self.lag.value(self._clock())

    def since_poll_s(self) -> float:
        """Driver thread: seconds since this driver last read the sockets (a tick long after
        it may judge a leader silent whose messages are waiting unread)."""
        return self._clock() - self._polled_at

    def quiesced_groups(self) -> set[str]:
        """Driver thread (or a test stepping it): the groups asleep on a peer's link."""
        return {name for groups in self._quiet.values() for name in groups}

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
        self._polled_at = self._clock()
        if touched:
            # Answers first: a follower's ack waits for its fsync only, not for the ticks
            # below, which apply committed entries to the state machine.
            for name in sorted(touched):
                group_or_none = self._groups.get(name)
                if group_or_none is not None:
                    self._sync(group_or_none)
            self.endpoint.flush()
        now = self._clock()
        raft_time = raft_now()
        groups = self._groups
        generation = getattr(self.endpoint, "peer_generation", 0)
        if generation != self._seen_peer_generation:
            self._seen_peer_generation = generation
            woken |= groups.keys()  # reconcile connection state everywhere
        forced = {n: groups[n] for n in woken if n in groups}
        if now >= self._next_round:
            if self._next_round:  # not the first round
                self.lag.record(now - self._next_round, now)
            self._next_round = now + self.tick_interval_s
            self.stats["rounds"] += 1
            forced.update(self._every_round)
            self._pop_due(raft_time, forced)
            self._pop_full(now, forced)
            if self._quiet:
                self._wake_silent(forced)
        candidates = dict(forced)
        for name in touched:
            group = groups.get(name)
            if group is not None:
                candidates[name] = group
        ticked: list[_Group] = []
        for name in sorted(candidates):
            group = candidates[name]
            if name not in forced and group.deadline is not None:
                # It received messages: tick it only if the delivery made it due.
                due_at = group.deadline()
                if due_at >= raft_time:
                    self._schedule(group, due_at)
                    self.stats["ticks_skipped"] += 1
                    continue
            self._tick(group)
            if group.deadline is not None:
                self._schedule(group, group.deadline())
            # A quiesced group's safety-net tick comes less often: it has nothing to do.
            quiet = group.due_at == math.inf
            group.next_full_tick = now + (
                self.quiet_full_tick_interval_s if quiet else self.full_tick_interval_s
            )
            ticked.append(group)
        # A leader's append_entries go out now, so the followers' round trip overlaps the
        # leader's own fsync below; acks and votes wait for their group's fsync (step 5).
        self.endpoint.flush_early()
        for group in ticked:  # groups only delivered to were synced after the poll
            self._sync(group)
        self.endpoint.flush()
        if self._deferred:  # housekeeping the groups put off until their messages were out
            deferred, self._deferred = self._deferred, []
            for fn in deferred:
                try:
                    fn()
                except Exception:
                    logger.exception("deferred driver task failed")

    def defer(self, fn: Callable[[], None]) -> None:
        """Driver thread only (a callback, an apply): run ``fn`` at the end of this round,
        after its messages were sent. For work nothing waits on (WAL checkpoints)."""
        self._deferred.append(fn)

    def _schedule(self, group: _Group, due_at: float) -> None:
        """Record `group`'s tick deadline; push a heap entry only if it moved earlier. A
        deadline of +inf (a quiesced group) has no heap entry: the group is tracked by the
        peers whose silence wakes it instead."""
        group.due_at = due_at
        if due_at == math.inf:
            if not group.quiet_peers:
                self._track_quiet(group)
            return
        if group.quiet_peers:
            self._untrack_quiet(group)
        if group.heap_seq is None or due_at < group.heap_at:
            self._seq += 1
            group.heap_at, group.heap_seq = due_at, self._seq
            heapq.heappush(self._due_heap, (due_at, self._seq, group))

    def _pop_due(self, raft_time: float, into: dict[str, _Group]) -> None:
        """Move the groups whose tick deadline has passed from the heap into `into`."""
        heap = self._due_heap
        while heap and heap[0][0] < raft_time:
            _at, seq, group = heapq.heappop(heap)
            if not group.live or seq != group.heap_seq:
                continue  # unregistered, or superseded by an earlier entry
            group.heap_seq = None
            if group.due_at < raft_time:
                if group.name not in into:
                    self.stats["ticks_deadline"] += 1
                into[group.name] = group
            else:  # the deadline moved out since this entry was pushed
                self._schedule(group, group.due_at)

    def _track_quiet(self, group: _Group) -> None:
        peers = getattr(group.node, "quiesced_peers", None)
        group.quiet_peers = tuple(peers()) if peers is not None else ()
        for peer in group.quiet_peers:
            self._quiet.setdefault(peer, {})[group.name] = group
        if group.quiet_peers:
            self._quiesced += 1

    def _untrack_quiet(self, group: _Group) -> None:
        if group.quiet_peers:
            self._quiesced -= 1
        for peer in group.quiet_peers:
            groups = self._quiet.get(peer)
            if groups is not None:
                groups.pop(group.name, None)
                if not groups:
                    del self._quiet[peer]
        group.quiet_peers = ()

    def _wake_silent(self, into: dict[str, _Group]) -> None:
        """Tick the quiesced groups of every peer whose link closed or fell silent: they wake
        (quiescence.py) and resume heartbeats or election timers. O(peers) per round."""
        silence_of = getattr(self.endpoint, "link_silence_s", None)
        if silence_of is None:
            return
        silent_after_s = self.endpoint.silent_after_s  # type: ignore[attr-defined]
        for peer, groups in self._quiet.items():
            silence = silence_of(peer)
            if silence is None or silence >= silent_after_s:
                for name, group in groups.items():
                    if name not in into:
                        self.stats["ticks_quiet_woken"] += 1
                        into[name] = group

    def _pop_full(self, now: float, into: dict[str, _Group]) -> None:
        """Move the groups not ticked for `full_tick_interval_s` into `into`."""
        heap = self._full_heap
        while heap and heap[0][0] <= now:
            _at, _seq, group = heapq.heappop(heap)
            if not group.live:
                continue
            self._seq += 1
            if group.next_full_tick <= now:
                if group.name not in into:
                    self.stats["ticks_full"] += 1
                into[group.name] = group
                # The tick pushes next_full_tick out by the interval; follow it there.
                heapq.heappush(heap, (now + self.full_tick_interval_s, self._seq, group))
            else:  # ticked since: come back when its next full tick is due
                heapq.heappush(heap, (group.next_full_tick, self._seq, group))

    def _apply_requests(self) -> set[str]:
        with self._lock:
            ops, self._ops = self._ops, []
            calls, self._calls = self._calls, []
            woken, self._woken = self._woken, set()
        for op, name, node, done in ops:
            if op == "add":
                self._add(name, node)
            else:
                group = self._groups.pop(name, None)
                if group is not None:
                    before = getattr(group.node, "before_unregister", None)
                    if before is not None:
                        try:
                            before()
                        except Exception:
                            logger.exception("[group=%s] before_unregister failed", name)
                    group.live = False
                    self._every_round.pop(name, None)
                    self._untrack_quiet(group)
                    for hook in ("set_waker", "set_load_probe"):
                        setter = getattr(group.node, hook, None)
                        if setter is not None:
                            setter(None)
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

    def _add(self, name: str, node: Any) -> None:
        if name in self._groups:
            logger.error("[group=%s] registered twice; ignoring the second", name)
            return
        try:
            self.endpoint.activate(name)
        except KeyError:
            logger.exception("[group=%s] cannot register", name)
            return
        tick = getattr(node, "tick", None) or node.doTick
        deadline = getattr(node, "tick_deadline", None) or syncobj_tick_deadline(node)
        # Stagger the full ticks over one interval so they do not come in bursts.
        offset = (len(self._groups) * 0.618034 % 1.0) * self.full_tick_interval_s
        group = _Group(name, node, tick, getattr(node, "sync", None), deadline, 0.0)
        group.next_full_tick = self._clock() + offset
        self._groups[name] = group
        self._seq += 1
        heapq.heappush(self._full_heap, (group.next_full_tick, self._seq, group))
        if deadline is None:
            self._every_round[name] = group
        setter = getattr(node, "set_waker", None)
        if setter is not None:
            setter(lambda: self.wake(name))
        probe_setter = getattr(node, "set_load_probe", None)
        if probe_setter is not None:
            probe_setter(self)

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
        started = time.perf_counter()
        try:
            group.sync()
            self.sync_seconds += time.perf_counter() - started
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
