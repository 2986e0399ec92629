"""Whole brokers in the simulation: N `raftq.server.Broker`s on the hub, on simulated time.

What is real: every `Broker` is the production class built from injected collaborators
(``Broker(config, endpoint=, clock=, internal=, raft_thread=False, serve_clients=False)``):
its metadata replica and group, `RaftDriver`, `Backend` (register, reconcile, leader duties,
session expiry, reports), `Membership`, the request handlers (the API: calls go through the
same edge checks as gRPC, ``transport.grpc_server._call``), the router and metadata client with
their forwarding, PartitionReplicas over SQLite files and journals in each broker's data_dir.

What is simulated: the network (`Hub`: seeded drops, partitions, crashes), time (one
`ManualClock` patched into pysyncobj; each broker's wall clock is it plus that broker's offset,
so one broker can run skewed or jump), the Internal service (`LocalInternal`: a call to
another broker runs that broker's ``handlers.internal`` in this process, failing UNAVAILABLE when
the hub cuts the two brokers' link or the broker is down), and crashes (a crashed broker's
endpoint closes at once: nothing more leaves it; it then stops and restarts from its data_dir).

Stepping: the test's thread advances the clock and runs each live broker's ``driver.run_once``
in a fixed order, so the raft groups (metadata and partitions), the network and the fault
schedule are a function of the seed. Still on threads of their own, as in production, and
therefore NOT deterministic in how they interleave with the steps: each broker's backend and
reporter threads, its background pool (lease releases, group deletions), and the client calls
(`SimBrokers.call` runs a handler on a worker thread while the test steps, since a handler
blocks until its proposal commits). Their waits and sleeps follow simulated time
(`SimTime.sleep` / `SimTime.wait`), so their cadence is the production cadence in simulated
seconds. A seed replays the faults and the workload's choices, not the exact interleaving.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from raftq.clock import Clock
from raftq.config import load_config
from raftq.proto import errors, internal_pb2
from raftq.server import Broker
from raftq.transport.internal import InternalClient
from raftq.transport.propose_checks import check_propose
from raftq.transport.raft.hub import Hub, ManualClock

WALL_EPOCH_S = 1_750_000_000.0  # the simulated wall clock starts here (plus the manual clock)
STEP_S = 0.01
TEARDOWN_S = 86_400.0
FAST_RAFT = {
    "RAFTQ_RAFT__ELECTION_TIMEOUT_MIN_MS": "300",
    "RAFTQ_RAFT__ELECTION_TIMEOUT_MAX_MS": "600",
    "RAFTQ_RAFT__HEARTBEAT_MS": "50",
}


class SimTime:
    """The manual clock, with sleeps and waits for the broker threads that follow it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self.stopping = False

    def now(self) -> float:
        """The brokers' monotonic clock. After teardown every reading moves it on a little:
        a thread waiting out a simulated deadline on a real event still gets there."""
        if self.stopping:
            with self._cond:
                self.clock.advance(STEP_S)
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        with self._cond:
            self.clock.advance(seconds)
            self._cond.notify_all()

    def sleep(self, seconds: float) -> None:
        if self.stopping:  # after teardown a sleeper moves time itself: its loops end
            with self._cond:
                self.clock.advance(max(0.0, seconds))
            return
        until = self.clock.now() + max(0.0, seconds)
        with self._cond:
            while not self.stopping and self.clock.now() < until:
                self._cond.wait(0.5)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if self.stopping:
            self.sleep(seconds)
            return event.is_set()
        until = self.clock.now() + max(0.0, seconds)
        with self._cond:
            while not event.is_set() and not self.stopping and self.clock.now() < until:
                self._cond.wait(0.005)  # an event does not notify: look again soon
        return event.is_set()

    def stop(self) -> None:
        """Teardown: a day passes, so every retry loop on a simulated deadline ends, and from
        now on a sleep or wait returns at once, advancing the clock by its length itself (a
        call started after this still reaches its deadline)."""
        with self._cond:
            self.stopping = True
            self.clock.advance(TEARDOWN_S)
            self._cond.notify_all()

    def broker_clock(self, offset_s: Callable[[], float]) -> Clock:
        return Clock(
            wall_s=lambda: WALL_EPOCH_S + self.now() + offset_s(),
            monotonic_s=self.now,
            sleep_s=self.sleep,
            wait_s=self.wait,
        )


class LocalInternal(InternalClient):
    """The Internal service without gRPC: the target broker's handlers, in this process.
    Requests and answers are copied through their bytes, as on the wire."""

    def __init__(self, sim: SimBrokers, caller: int) -> None:
        super().__init__(sim.secret, broker_id=caller)
        self._sim = sim
        self._caller = caller

    def _call(self, address: str, name: str, request: Any, timeout_s: float) -> Any:
        target = self._sim.reachable(self._caller, address)
        if target is None:
            raise errors.Unavailable(f"{address} unreachable from broker {self._caller}")
        host = target.handlers.internal
        request = type(request).FromString(request.SerializeToString())
        answer: Any
        if name == "Propose":
            answer = host.propose_local(check_propose(request), timeout_s=timeout_s)
        elif name == "Read":
            answer = host.read_local(request)
        elif name == "MetaPropose":
            result = host.meta_propose_local(request.command, timeout_s=timeout_s)
            answer = internal_pb2.MetaProposeResponse(result=result)
        elif name == "Forward":
            response = host.forward_local(
                request.method, request.request, timeout_s=timeout_s, principal=request.principal
            )
            answer = internal_pb2.ForwardResponse(response=response)
        elif name == "Report":
            answer = host.report_local(request)
        elif name == "MetaMembers":
            answer = host.meta_members_local()
        elif name == "JoinCluster":
            answer = host.join_cluster_local(request, timeout_s=timeout_s)
        else:
            raise errors.Internal(f"LocalInternal: no method {name}")
        return type(answer).FromString(answer.SerializeToString())


class SimBroker:
    """One broker's slot: its addresses, data_dir and clock offset; `broker` while it runs."""

    def __init__(self, sim: SimBrokers, broker_id: int) -> None:
        self.sim = sim
        self.id = broker_id
        self.raft_addr = f"10.0.0.{broker_id}:7000"
        self.client_addr = f"10.0.0.{broker_id}:9000"
        self.data_dir = sim.root / f"broker-{broker_id}"
        self.clock_offset_s = 0.0  # this broker's wall clock = the simulation's + this
        self.broker: Broker | None = None
        self._stopping: threading.Thread | None = None

    def env(self) -> dict[str, str]:
        return {
            "RAFTQ_BROKER__ID": str(self.id),
            "RAFTQ_BROKER__CLIENT_ADDR": self.client_addr,
            "RAFTQ_BROKER__RAFT_ADDR": self.raft_addr,
            "RAFTQ_BROKER__METRICS_ADDR": "",
            "RAFTQ_BROKER__DATA_DIR": str(self.data_dir),
            "RAFTQ_BROKER__SEEDS": json.dumps([b.raft_addr for b in self.sim.slots]),
            "RAFTQ_BROKER__CLUSTER_SECRET": self.sim.secret,
            "RAFTQ_TOPIC_DEFAULTS__REPLICATION_FACTOR": "3",
            **FAST_RAFT,
        }

    def start(self) -> None:
        if self._stopping is not None:  # the crashed process must be gone before its files
            self._stopping.join()
            self._stopping = None
        sim = self.sim
        self.broker = Broker(
            load_config(env=self.env()),
            endpoint=sim.hub.endpoint(self.raft_addr),
            clock=sim.time.broker_clock(lambda: self.clock_offset_s),
            internal=LocalInternal(sim, self.id),
            raft_thread=False,
            serve_clients=False,
        )

    def crash(self) -> None:
        """Nothing leaves the broker from now on (its endpoint closes); it then stops on a
        thread of its own (its duties may wait out proposals that can no longer commit)."""
        broker, self.broker = self.broker, None
        assert broker is not None
        broker.endpoint.close()
        self._stopping = threading.Thread(
            target=lambda: broker.stop(grace_s=0.0), name=f"sim-stop-{self.id}", daemon=True
        )
        self._stopping.start()

    def stop(self) -> None:
        if self.broker is not None:
            self.crash()
        if self._stopping is not None:
            self._stopping.join()
            self._stopping = None


class SimBrokers:
    """N whole brokers on one hub. `step()` advances simulated time by `STEP_S` and runs one
    driver iteration of every live broker; `call()` runs a handler while stepping."""

    def __init__(self, seed: int, root: Path, *, brokers: int = 3) -> None:
        self.seed = seed
        self.root = root
        self.secret = "raftq-simulation-cluster-secret"
        self.hub = Hub(seed)
        self.time = SimTime(self.hub.clock)
        self.slots = [SimBroker(self, i + 1) for i in range(brokers)]
        self.steps = 0
        self.checks: list[Callable[[], None]] = []  # run after every step
        self._calls = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sim-call")

    @contextlib.contextmanager
    def running(self) -> Iterator[SimBrokers]:
        with self.hub.time():
            try:
                for slot in self.slots:
                    slot.start()
                yield self
            finally:
                self.time.stop()
                for slot in self.slots:  # all at once: each may wait out a proposal
                    if slot.broker is not None:
                        slot.crash()
                for slot in self.slots:
                    slot.stop()
                self._calls.shutdown(wait=True, cancel_futures=True)

    def live(self) -> list[Broker]:
        return [s.broker for s in self.slots if s.broker is not None]

    def slot_of(self, address: str) -> SimBroker | None:
        for slot in self.slots:
            if address in (slot.client_addr, slot.raft_addr):
                return slot
        return None

    def reachable(self, caller: int, address: str) -> Broker | None:
        """The broker at ``address`` if it runs and the hub links it with ``caller``."""
        target = self.slot_of(address)
        if target is None or target.broker is None:
            return None
        if target.id != caller and not self.hub.connected(
            self.slots[caller - 1].raft_addr, target.raft_addr
        ):
            return None
        return target.broker

    # -- stepping ----------------------------------------------------------------------------

    def step(self) -> None:
        self.steps += 1
        self.time.advance(STEP_S)
        for broker in self.live():
            broker.driver.run_once(0.0)
        for check in self.checks:
            check()

    def until(self, done: Callable[[], bool], what: str, max_s: float = 60.0) -> None:
        start = self.hub.clock.now()
        while not done():
            if self.hub.clock.now() - start > max_s:
                raise AssertionError(f"seed={self.seed}: {what} not within {max_s} s simulated")
            self.step()

    def call(self, fn: Callable[[], Any], max_s: float = 30.0) -> Any:
        """Run ``fn`` (a handler call) on a worker thread, stepping until it returns; its
        answer or raised error comes back here."""
        future: Future[Any] = self._calls.submit(fn)
        self.until(future.done, "a call's answer", max_s)
        return future.result()

    def meta_leader(self) -> Broker | None:
        leaders = [b for b in self.live() if b.meta.node.is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    def ready(self) -> bool:
        """A metadata leader, every live broker registered and healthy (Broker.not_ready)."""
        live = self.live()
        return (
            self.meta_leader() is not None
            and all(b.not_ready() is None for b in live)
            and all(len(b.meta.table.brokers) == len(self.slots) for b in live)
        )
