"""The in-memory twin of the mux transport, for the one-process simulation tier.

A `Hub` connects N broker endpoints (`HubEndpoint`) in one process. Groups use the same
`GroupTransport` view as over TCP (``transportClass=ep.transport_class(name)``); only the endpoint
differs. Nothing moves unless the test says so:

- `ManualClock` is the only clock. `pysyncobj_time(clock, rng)` patches pysyncobj's clock and
  election randomness (the documented hook: ``pysyncobj.syncobj.monotonicTime`` and the
  ``random`` module it calls ``random.random()`` on) for the groups created and ticked inside it.
- `Hub.step()` flushes every endpoint's buffered messages into flight and delivers those that are
  due at the current clock; groups are ticked by hand (or by `RaftDriver.run_once`, which accepts
  a HubEndpoint and a manual clock).
- Faults: `partition(a, b)`, `isolate(a)`, `heal()`, `drop(probability)`, `delay(ms, jitter_ms)`,
  `crash(addr)` / `restart(addr)`. A cut link looks like a dead TCP connection: the views
  announce the peer disconnected and messages in flight on it are lost. A hung broker (SIGSTOP:
  its links stay open, nothing comes out of them) is one whose driver the test stops running.
- Link liveness, as over TCP: every `HubEndpoint.flush` (one per driver iteration) also sends
  each connected peer a PING at most every `ping_interval_s`, subject to delay and drops (drawn
  from their own rng, so the message schedule of a seed does not change). `link_silence_s` is
  the time since anything (message or PING) from the peer was delivered, or since the link came
  up; a peer whose driver stopped running falls silent, and after `dead_after_s` of silence
  the link closes (as the mux closes a connection that received nothing for that long) until
  both ends run again.
  `link_lag_s` is how much more than two ping intervals deliveries on the link have lately
  been apart (a decaying max, lag.py), as the mux's.
- The rest of the endpoint contract is the mux's (tests/contract/test_endpoint_contract.py): a
  group receives only while registered (`activate` .. `deactivate`), messages for a group not
  registered are counted and dropped, a message whose one-message frame would exceed
  `frame_bytes_max` is dropped, `close()` is idempotent and frees the address (a new
  `hub.endpoint(address)` is a restarted process), the statistics carry the same names.

Determinism: every random decision (drop, jitter) comes from ``random.Random(seed)`` and is taken
in an order that does not depend on set iteration or string hashing: each flush sorts messages by
(sender, receiver) keeping per-link send order, and deliveries are ordered by (due time, sender,
receiver, per-link sequence). Links are FIFO, like TCP. Given the same seed and the same sequence of
test actions, a run is the same in every process (`test_raft_hub.py` checks this across
PYTHONHASHSEEDs). Messages are pickled at flush and unpickled with `loads_data` at delivery, so
groups never share objects and only plain data can travel, as on the wire.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pysyncobj.syncobj as _pysyncobj_syncobj

from .codec import FRAME_BYTES_MAX_DEFAULT, dumps_data, loads_data
from .group_transport import BULK_BYTES_PER_ROUND_DEFAULT, GroupTransport, sendable_before_sync
from .handshake import SEAL_OVERHEAD_BYTES
from .lag import SchedulingLag
from .snapshot import written_inline

logger = logging.getLogger("raftq.transport.raft.hub")


class ManualClock:
    """Seconds that advance only when told to. Callable, like `time.monotonic`."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self._now = start_s

    def __call__(self) -> float:
        return self._now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._now += seconds
        return self._now


@contextmanager
def pysyncobj_time(clock: Callable[[], float], rng: random.Random) -> Iterator[None]:
    """Make pysyncobj read `clock` and draw election timeouts from `rng` inside the block.

    pysyncobj 0.3.17 reads time only through ``pysyncobj.syncobj.monotonicTime`` (a module-level
    name) and randomness only through ``random.random()`` in ``__generateRaftTimeout``. The patch
    is process-wide: do not run TCP groups (real time) while it is active.
    """
    saved_time = _pysyncobj_syncobj.monotonicTime
    saved_random = _pysyncobj_syncobj.random
    _pysyncobj_syncobj.monotonicTime = clock
    _pysyncobj_syncobj.random = rng
    try:
        yield
    finally:
        _pysyncobj_syncobj.monotonicTime = saved_time
        _pysyncobj_syncobj.random = saved_random


@dataclass(order=True)
class _InFlight:
    due_s: float
    src: str
    dst: str
    seq: int
    group: str = field(compare=False)
    payload: bytes = field(compare=False)
    ping: bool = field(default=False, compare=False)


class HubEndpoint:
    """One broker's side of the hub. Implements what `GroupTransport` and `RaftDriver` need."""

    def __init__(self, hub: Hub, address: str) -> None:
        self.address = address
        self._hub = hub
        self._created: dict[str, GroupTransport] = {}  # constructed, not yet registered
        self._views: dict[str, GroupTransport] = {}  # registered: receive messages
        self._outbox: list[tuple[str, str, Any]] = []  # (peer, group, message) in send order
        self._bulk_queued: dict[str, int] = {}  # bulk bytes enqueued per peer since a flush
        self.up = True
        self.closed = False
        self.stats: dict[str, int] = dict.fromkeys(
            (
                "messages_sent",
                "messages_received",
                "messages_dropped_not_connected",
                "messages_dropped_unknown_group",
                "messages_dropped_too_large",
                "callback_errors",
            ),
            0,
        )

    # -- ViewHost --------------------------------------------------------------------------------

    @property
    def peer_generation(self) -> int:
        return self._hub.generation

    def connected_peers(self) -> frozenset[str]:
        return frozenset(p for p in self._hub.addresses if self._hub.connected(self.address, p))

    @property
    def silent_after_s(self) -> float:
        return self._hub.silent_after_s

    def link_silence_s(self, peer: str) -> float | None:
        return self._hub.link_silence_s(peer, self.address)

    def link_lag_s(self, peer: str) -> float:
        return self._hub.link_lag_s(peer, self.address)

    def enqueue(self, peer: str, group: str, message: Any, bulk_bytes: int = 0) -> bool:
        if not self._hub.connected(self.address, peer):
            self.stats["messages_dropped_not_connected"] += 1
            return False
        self._outbox.append((peer, group, message))
        if bulk_bytes:
            self._bulk_queued[peer] = self._bulk_queued.get(peer, 0) + bulk_bytes
        return True

    def bulk_room(self, peer: str) -> int:
        """As the mux's, with nothing ever left unwritten: the default budget less the bulk
        queued since the last flush; 0 without a link."""
        if not self._hub.connected(self.address, peer):
            return 0
        return BULK_BYTES_PER_ROUND_DEFAULT - self._bulk_queued.get(peer, 0)

    def view_created(self, group: str, view: GroupTransport) -> None:
        if group in self._views or group in self._created:
            raise ValueError(f"[group={group}] already has a transport on {self.address}")
        self._created[group] = view

    def view_destroyed(self, group: str, view: GroupTransport) -> None:
        if self._views.get(group) is view:
            del self._views[group]
        if self._created.get(group) is view:
            del self._created[group]

    def add_peer(self, peer: str) -> None:
        pass  # every hub endpoint can reach every other one unless a fault says otherwise

    # -- DriverEndpoint ----------------------------------------------------------------------------

    def transport_class(self, group: str) -> Callable[[Any, Any, Iterable[Any]], GroupTransport]:
        def make(syncObj: Any, selfNode: Any, otherNodes: Iterable[Any]) -> GroupTransport:
            return GroupTransport(self, group, syncObj, selfNode, otherNodes)

        return make

    def poll(self, timeout_s: float) -> set[str]:
        """Deliver the messages due for this endpoint now (never blocks)."""
        return self._hub.deliver_due(only=self.address)

    def flush_early(self) -> None:
        self._bulk_queued = {}  # bulk travels as append_entries: it leaves now
        self._hub.flush(self, early_only=True)

    def flush(self) -> None:
        self._bulk_queued = {}
        self._hub.flush(self)
        self._hub.ping(self)

    def wake(self) -> None:
        pass

    def activate(self, group: str) -> None:
        """Start delivering messages to `group` (the driver, at registration)."""
        view = self._created.pop(group, None)
        if view is None:
            raise KeyError(f"[group={group}] no transport was created for this group")
        self._views[group] = view

    def deactivate(self, group: str) -> None:
        self._views.pop(group, None)
        self._created.pop(group, None)

    def discard_pending(self, group: str) -> int:
        """Drop `group`'s buffered messages that wait for its sync (as the mux: those
        `sendable_before_sync` may leave anyway)."""
        before = len(self._outbox)
        self._outbox = [m for m in self._outbox if m[1] != group or sendable_before_sync(m[2])]
        return before - len(self._outbox)

    def close(self) -> None:
        """The process is gone: links close, nothing more is sent or delivered, and the
        address is free for a new `hub.endpoint(address)`. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._hub.detach(self)

    def statistics(self) -> dict[str, int]:
        out = dict(self.stats)
        out["peers_connected"] = len(self.connected_peers())
        out["groups_registered"] = len(self._views)
        return out

    # -- hub side ----------------------------------------------------------------------------------

    def _take_outbox(self, early_only: bool = False) -> list[tuple[str, str, Any]]:
        out, self._outbox = self._outbox, []
        if not early_only:
            return out
        early: list[tuple[str, str, Any]] = []  # as MuxEndpoint.flush_early; the rest waits
        for message in out:
            (early if sendable_before_sync(message[2]) else self._outbox).append(message)
        return early

    def _deliver(self, src: str, group: str, message: Any) -> str | None:
        self.stats["messages_received"] += 1
        view = self._views.get(group)
        if view is None:
            self.stats["messages_dropped_unknown_group"] += 1
            return None
        try:
            view.deliver(src, message)
        except Exception:
            self.stats["callback_errors"] += 1
            logger.exception("[group=%s] [peer=%s] message handler failed", group, src)
        return group


class Hub:
    """N in-process broker endpoints with seeded, scriptable faults. See the module docstring."""

    def __init__(
        self,
        seed: int,
        clock: ManualClock | None = None,
        *,
        ping_interval_s: float = 0.1,
        silent_after_s: float = 0.4,
        dead_after_s: float = 5.0,
        frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
    ) -> None:
        if not 0 < ping_interval_s < silent_after_s < dead_after_s:
            raise ValueError("need 0 < ping_interval_s < silent_after_s < dead_after_s")
        self.seed = seed
        self.clock = clock or ManualClock()
        self.ping_interval_s = ping_interval_s
        self.silent_after_s = silent_after_s
        self.dead_after_s = dead_after_s
        self.frame_bytes_max = frame_bytes_max
        self._ran: dict[str, float] = {}  # address -> last flush (its driver ran)
        self._dead: set[frozenset[str]] = set()  # links closed by silence, until both run
        self.rng = random.Random(seed)  # network faults
        self.ping_rng = random.Random(seed * 7 + 3)  # drops of PINGs: self.rng stays untouched
        self._heard: dict[tuple[str, str], float] = {}  # (src, dst) -> last delivery time
        # (src, dst) -> how far apart deliveries came beyond 2 pings (the mux's link_lag_s)
        self._gaps: dict[tuple[str, str], SchedulingLag] = {}
        self._pinged: dict[tuple[str, str], float] = {}  # (src, dst) -> last PING sent
        self._up_since: dict[frozenset[str], float] = {}  # connected pair -> since when
        self.raft_rng = random.Random(seed * 1_000_003 + 7)  # election timeouts (pysyncobj_time)
        self._endpoints: dict[str, HubEndpoint] = {}
        self._cuts: set[frozenset[str]] = set()
        self._drop_probability = 0.0
        self._delay_s = 0.0
        self._jitter_s = 0.0
        self._inflight: list[_InFlight] = []
        self._link_seq: dict[tuple[str, str], int] = {}
        self._link_last_due: dict[tuple[str, str], float] = {}
        self.generation = 0
        self.stats: dict[str, int] = dict.fromkeys(
            ("flushed", "delivered", "dropped_random", "dropped_cut", "pings"), 0
        )

    @contextmanager
    def time(self) -> Iterator[None]:
        """``with hub.time():`` = `pysyncobj_time` with this hub's clock and raft rng, and
        snapshots written inline (`snapshot.written_inline`): a run is a function of its seed."""
        with pysyncobj_time(self.clock, self.raft_rng), written_inline():
            yield

    # -- topology ----------------------------------------------------------------------------------

    def endpoint(self, address: str) -> HubEndpoint:
        ep = self._endpoints.get(address)
        if ep is None:
            ep = self._endpoints[address] = HubEndpoint(self, address)
            self.generation += 1
            self._track_links()
        return ep

    @property
    def addresses(self) -> list[str]:
        return sorted(self._endpoints)

    def connected(self, a: str, b: str) -> bool:
        ea, eb = self._endpoints.get(a), self._endpoints.get(b)
        return (
            a != b
            and ea is not None
            and eb is not None
            and ea.up
            and eb.up
            and frozenset((a, b)) not in self._cuts
            and frozenset((a, b)) not in self._dead
        )

    # -- faults ------------------------------------------------------------------------------------

    def partition(self, a: str, b: str) -> None:
        """Cut the link between brokers `a` and `b` (both directions)."""
        self._cuts.add(frozenset((a, b)))
        self._topology_changed()

    def isolate(self, a: str) -> None:
        for b in self._endpoints:
            if b != a:
                self._cuts.add(frozenset((a, b)))
        self._topology_changed()

    def heal(self) -> None:
        """Remove every cut (crashed endpoints stay down)."""
        self._cuts.clear()
        self._topology_changed()

    def drop(self, probability: float) -> None:
        """Lose each message independently with `probability` (0 disables)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be within [0, 1]")
        self._drop_probability = probability

    def delay(self, ms: float, jitter_ms: float = 0.0) -> None:
        """Deliver each message `ms` (+ uniform 0..`jitter_ms`) after its flush; links stay FIFO."""
        if ms < 0 or jitter_ms < 0:
            raise ValueError("delays are not negative")
        self._delay_s, self._jitter_s = ms / 1000.0, jitter_ms / 1000.0

    def crash(self, address: str) -> None:
        """The broker is gone: nothing to or from it, its unsent messages are lost. The caller
        stops ticking (and later recreates) its groups."""
        ep = self._endpoints[address]
        ep.up = False
        ep._take_outbox()
        self._topology_changed()

    def restart(self, address: str) -> None:
        self._endpoints[address].up = True
        self._topology_changed()

    def detach(self, ep: HubEndpoint) -> None:
        """`ep` closed: its links go down and its address is free (`HubEndpoint.close`)."""
        if self._endpoints.get(ep.address) is ep:
            ep.up = False
            ep._take_outbox()
            del self._endpoints[ep.address]
            self._dead = {pair for pair in self._dead if ep.address not in pair}
            self._topology_changed()

    def link_silence_s(self, src: str, dst: str) -> float | None:
        """Seconds since `dst` last heard from `src` (None: not connected). See the module
        docstring: a link that came up counts as heard at that moment."""
        if not self.connected(src, dst):
            return None
        heard = max(
            self._heard.get((src, dst), -1.0), self._up_since.get(frozenset((src, dst)), -1.0)
        )
        return max(0.0, self.clock.now() - heard)

    def link_lag_s(self, src: str, dst: str) -> float:
        """How much longer than two ping intervals deliveries from `src` to `dst` have lately
        been apart (a decaying max, lag.py; 0 without a link), as the mux's ``link_lag_s``."""
        gaps = self._gaps.get((src, dst))
        if gaps is None or not self.connected(src, dst):
            return 0.0
        return gaps.value(self.clock.now())

    def _track_links(self) -> None:
        now = self.clock.now()
        addrs = self.addresses
        for i, a in enumerate(addrs):
            for b in addrs[i + 1 :]:
                pair = frozenset((a, b))
                if not self.connected(a, b):
                    self._up_since.pop(pair, None)
                    self._gaps.pop((a, b), None)
                    self._gaps.pop((b, a), None)
                elif pair not in self._up_since:
                    self._up_since[pair] = now

    def _topology_changed(self) -> None:
        self.generation += 1
        self._track_links()
        kept = [m for m in self._inflight if self.connected(m.src, m.dst)]
        self.stats["dropped_cut"] += sum(1 for m in self._inflight if not m.ping) - sum(
            1 for m in kept if not m.ping
        )
        heapq.heapify(kept)
        self._inflight = kept

    # -- stepping ----------------------------------------------------------------------------------

    def flush(self, ep: HubEndpoint | None = None, *, early_only: bool = False) -> int:
        """Put buffered messages (of `ep`, or of every endpoint; with `early_only` only those
        `sendable_before_sync`) in flight. Returns how many."""
        endpoints = [ep] if ep is not None else [self._endpoints[a] for a in self.addresses]
        now = self.clock.now()
        count = 0
        for source in endpoints:
            outbox = source._take_outbox(early_only)
            outbox.sort(key=lambda m: m[0])  # stable: per-link order survives
            for peer, group, message in outbox:
                link = (source.address, peer)
                if not self.connected(*link):
                    self.stats["dropped_cut"] += 1
                    source.stats["messages_dropped_not_connected"] += 1
                    continue
                payload = dumps_data(message)
                if not self._fits(group, message, payload):
                    source.stats["messages_dropped_too_large"] += 1
                    logger.error(
                        "[group=%s] [peer=%s] dropped a message: above frame_bytes_max",
                        group,
                        peer,
                    )
                    continue
                if self._drop_probability and self.rng.random() < self._drop_probability:
                    self.stats["dropped_random"] += 1
                    continue
                due = now + self._delay_s
                if self._jitter_s:
                    due += self.rng.uniform(0.0, self._jitter_s)
                due = max(due, self._link_last_due.get(link, due))
                self._link_last_due[link] = due
                seq = self._link_seq.get(link, 0) + 1
                self._link_seq[link] = seq
                heapq.heappush(
                    self._inflight, _InFlight(due, link[0], link[1], seq, group, payload)
                )
                source.stats["messages_sent"] += 1
                count += 1
        self.stats["flushed"] += count
        return count

    def _fits(self, group: str, message: Any, payload: bytes) -> bool:
        """Whether `message` alone fits a mux frame (a sealed one-message BATCH)."""
        margin = 64 + len(group)  # what the one-message batch adds (list, tuple, name)
        if len(payload) + margin + 1 + SEAL_OVERHEAD_BYTES <= self.frame_bytes_max:
            return True  # clearly fits; near the limit, measure the batch exactly
        body = dumps_data([(group, message)])
        return len(body) + 1 + SEAL_OVERHEAD_BYTES <= self.frame_bytes_max

    def _liveness(self, source: HubEndpoint) -> None:
        """`source` runs: links closed by silence revive where the peer runs too; an open link
        on which `source` heard nothing for `dead_after_s` closes (as the mux's)."""
        now = self.clock.now()
        self._ran[source.address] = now
        changed = False
        for peer in self.addresses:
            pair = frozenset((source.address, peer))
            if pair in self._dead:
                if now - self._ran.get(peer, -1e18) <= self.ping_interval_s:
                    self._dead.discard(pair)
                    changed = True
                continue
            silence = self.link_silence_s(peer, source.address)
            if silence is not None and silence > self.dead_after_s:
                self._dead.add(pair)
                changed = True
        if changed:
            self._topology_changed()

    def ping(self, source: HubEndpoint) -> None:
        """Send `source`'s PINGs that are due, after closing and reviving links by silence
        (see the module docstring)."""
        self._liveness(source)
        now = self.clock.now()
        for peer in self.addresses:
            link = (source.address, peer)
            if (
                not self.connected(*link)
                or now - self._pinged.get(link, -1e18) < self.ping_interval_s
            ):
                continue
            self._pinged[link] = now
            if self._drop_probability and self.ping_rng.random() < self._drop_probability:
                continue
            due = max(now + self._delay_s, self._link_last_due.get(link, now))
            self._link_last_due[link] = due
            seq = self._link_seq.get(link, 0) + 1
            self._link_seq[link] = seq
            heapq.heappush(self._inflight, _InFlight(due, link[0], link[1], seq, "", b"", True))
            self.stats["pings"] += 1

    def deliver_due(self, only: str | None = None) -> set[str]:
        """Deliver, in order, every in-flight message due by now (to `only`, if given). Messages
        produced while delivering wait for the next flush. Returns the touched group names."""
        now = self.clock.now()
        touched: set[str] = set()
        if only is None:
            ready = []
            while self._inflight and self._inflight[0].due_s <= now:
                ready.append(heapq.heappop(self._inflight))
        else:
            ready = sorted(m for m in self._inflight if m.due_s <= now and m.dst == only)
            if ready:
                taken = set(map(id, ready))
                self._inflight = [m for m in self._inflight if id(m) not in taken]
                heapq.heapify(self._inflight)
        for m in ready:
            if not self.connected(m.src, m.dst):
                if not m.ping:
                    self.stats["dropped_cut"] += 1
                continue
            link = (m.src, m.dst)
            heard = max(self._heard.get(link, -1.0), self._up_since.get(frozenset(link), -1.0))
            if heard >= 0:
                gap_s = now - heard - 2 * self.ping_interval_s
                self._gaps.setdefault(link, SchedulingLag()).record(gap_s, now)
            self._heard[link] = now
            if m.ping:
                continue
            group = self._endpoints[m.dst]._deliver(m.src, m.group, loads_data(m.payload))
            self.stats["delivered"] += 1
            if group is not None:
                touched.add(group)
        return touched

    def step(self) -> int:
        """Flush every endpoint, then deliver what is due. Returns how many were delivered."""
        self.flush()
        before = self.stats["delivered"]
        self.deliver_due()
        return self.stats["delivered"] - before

    @property
    def in_flight(self) -> int:
        """Messages in flight (PINGs not counted)."""
        return sum(1 for m in self._inflight if not m.ping)
