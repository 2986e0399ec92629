"""Real brokers on 127.0.0.1 for tests and benchmarks (no mocks): one cluster with knobs.
A test takes the ``cluster`` fixture (tests/conftest.py; knobs from
``@pytest.mark.cluster(...)``), a module shares one through a fixture calling ``make_cluster``.

    with make_cluster(tmp_path, brokers=3, processes=True) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        cluster.kill(2)            # processes: SIGKILL, like a crash; in-process: Broker.stop()
        cluster.start(2)           # same data directory: it rejoins
        cluster.leader_of("t", 0)  # broker id leading t/0 (from DescribeTopic)

Knobs: ``brokers`` (1 or 3 ...), ``processes`` (ProcessCluster: ``python -m raftq.cli serve``
per broker, for crashes and signals; else InProcessCluster: ``raftq.server.Broker`` objects in
this process, for the API, client and CLI suites), ``auth`` (an AuthPolicy: tokens and ACLs
required, written to ``<root>/auth.yaml``), ``env`` (more RAFTQ_* settings), ``metrics``
(a Prometheus endpoint per broker, ``metrics_url(i)``), ``interceptors`` (in-process only: gRPC
server interceptors added to each broker's client port, such as tests/wiretap.py's).

``client={...}`` are the keyword arguments of every client the harness makes (``tls_ca_file``,
``token``... for a cluster started with security settings in ``env``).

Each broker's settings are RAFTQ_* variables (``env(i)``); a process logs to
``<root>/broker-N.log`` (printed on failure by ``logs()``); data lives in ``<root>/broker-N``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

from raftq.client import Admin
from raftq.clock import SYSTEM_CLOCK, Clock
from raftq.config import load_config
from raftq.proto import errors
from raftq.server import Broker
from raftq.transport.auth import RESOURCE_KEYS, AuthPolicy
from tests.helpers import free_port, stop_processes, wait_until

# gRPC server interceptors for every broker, or a function of the broker id giving its own.
Interceptors = Sequence[grpc.ServerInterceptor] | Callable[[int], Sequence[grpc.ServerInterceptor]]
FAST_RAFT = {
    "RAFTQ_RAFT__ELECTION_TIMEOUT_MIN_MS": "400",
    "RAFTQ_RAFT__ELECTION_TIMEOUT_MAX_MS": "800",
    "RAFTQ_RAFT__HEARTBEAT_MS": "100",
}


def auth_file_text(policy: AuthPolicy) -> str:
    """``policy`` as a ``security.auth_file`` (JSON is YAML)."""
    keys = {resource: key for key, resource in RESOURCE_KEYS.items()}
    principals = {
        p.name: {
            "token_sha256": p.token_sha256.hex(),
            "acls": [
                {keys[rule.resource]: list(rule.names), "operations": sorted(rule.operations)}
                for rule in p.acls
            ],
        }
        for p in policy.principals
    }
    return json.dumps({"principals": principals}, indent=1)


class Cluster:
    """What every kind of cluster shares: addresses, settings, clients and readiness. A kind
    says how a broker starts, stops and reports liveness."""

    def __init__(
        self,
        root: Path,
        brokers: int = 3,
        *,
        env: dict[str, str] | None = None,
        fast: bool = True,
        metrics: bool = False,
        client: dict[str, Any] | None = None,
        seeds: int | None = None,
        auth: AuthPolicy | None = None,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.n = brokers
        # Brokers 1..seeds bootstrap the metadata group; the others join through the seeds.
        self.seeds = min(brokers, 3) if seeds is None else seeds
        self.client_ports = {i: free_port() for i in range(1, brokers + 1)}
        self.raft_ports = {i: free_port() for i in range(1, brokers + 1)}
        self.metrics_ports = {i: free_port() for i in range(1, brokers + 1)} if metrics else {}
        self.extra_env = {**(FAST_RAFT if fast else {}), **(env or {})}
        if auth is not None:
            auth_file = self.root / "auth.yaml"
            auth_file.write_text(auth_file_text(auth))
            self.extra_env["RAFTQ_SECURITY__AUTH_REQUIRED"] = "true"
            self.extra_env["RAFTQ_SECURITY__AUTH_FILE"] = str(auth_file)
        self.client_options: dict[str, Any] = dict(client or {})
        self._admins: list[Admin] = []

    # -- addresses ----------------------------------------------------------------------------

    def client_addr(self, broker: int) -> str:
        return f"127.0.0.1:{self.client_ports[broker]}"

    def raft_addr(self, broker: int) -> str:
        return f"127.0.0.1:{self.raft_ports[broker]}"

    def metrics_url(self, broker: int) -> str:
        return f"http://127.0.0.1:{self.metrics_ports[broker]}/metrics"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.client_addr(i) for i in sorted(self.client_ports))

    def add_broker(self) -> int:
        """Allocate addresses for one more broker (it joins the cluster); ``start`` it."""
        broker = max(self.client_ports) + 1
        self.client_ports[broker] = free_port()
        self.raft_ports[broker] = free_port()
        if self.metrics_ports:
            self.metrics_ports[broker] = free_port()
        return broker

    def env(self, broker: int) -> dict[str, str]:
        seeds = [self.raft_addr(i) for i in sorted(self.raft_ports)][: self.seeds]
        joins = [self.client_addr(i) for i in sorted(self.client_ports)][: self.seeds]
        return {
            **os.environ,
            "RAFTQ_BROKER__ID": str(broker),
            "RAFTQ_BROKER__CLIENT_ADDR": self.client_addr(broker),
            "RAFTQ_BROKER__RAFT_ADDR": self.raft_addr(broker),
            "RAFTQ_BROKER__METRICS_ADDR": (
                f"127.0.0.1:{self.metrics_ports[broker]}" if self.metrics_ports else ""
            ),
            "RAFTQ_BROKER__DATA_DIR": str(self.root / f"broker-{broker}"),
            "RAFTQ_BROKER__SEEDS": json.dumps(seeds),
            "RAFTQ_BROKER__JOIN_ADDRS": json.dumps(joins),
            "RAFTQ_TOPIC_DEFAULTS__REPLICATION_FACTOR": str(min(3, self.n)),
            **self.extra_env,
        }

    # -- cluster state ------------------------------------------------------------------------

    def admin(self, bootstrap: str | None = None) -> Admin:
        admin = Admin(bootstrap or self.bootstrap, **self.client_options)
        self._admins.append(admin)
        return admin

    def live_bootstrap(self) -> str:
        return ",".join(self.client_addr(i) for i in sorted(self.running()))

    def wait_ready(self, timeout_s: float = 60.0) -> Any:
        """Every running broker registered and alive in DescribeCluster."""
        admin = self.admin()
        running = self.running()

        def ready() -> Any:
            try:
                cluster = admin.describe_cluster()
            except errors.RaftqError:
                return None
            alive = {b.id for b in cluster.brokers if b.alive}
            return cluster if running <= alive else None

        return wait_until(ready, timeout_s, f"brokers {sorted(running)} alive\n{self.logs()}")

    def wait_leaders(self, topic: str, timeout_s: float = 30.0) -> Any:
        """Every partition of ``topic`` has a leader on a running broker."""
        admin = self.admin(self.live_bootstrap())

        def led() -> Any:
            try:
                described = admin.describe_topic(topic)
            except errors.RaftqError:
                return None
            ok = all(p.leader and self.alive(p.leader) for p in described.partitions)
            return described if ok else None

        return wait_until(led, timeout_s, f"leaders for {topic}\n{self.logs()}")

    def leader_of(self, topic: str, partition: int) -> int:
        described = self.wait_leaders(topic)
        leader: int = described.partitions[partition].leader
        return leader

    # -- the kind's part ----------------------------------------------------------------------

    def start(self, broker: int | None = None) -> None:
        """Start ``broker`` (default: every broker) on its data directory."""
        raise NotImplementedError

    def kill(self, broker: int, sig: int = signal.SIGKILL) -> None:
        raise NotImplementedError

    def alive(self, broker: int) -> bool:
        raise NotImplementedError

    def running(self) -> set[int]:
        return {i for i in self.client_ports if self.alive(i)}

    def stop(self) -> None:
        """Stop every broker and close the harness's clients."""
        for admin in self._admins:
            admin.close()

    def logs(self, lines: int = 40) -> str:
        return ""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if exc is not None:
            sys.stderr.write(self.logs())


class InProcessCluster(Cluster):
    """Each broker a ``raftq.server.Broker`` in this process: the real broker code (gRPC,
    Raft over the TCP mux, SQLite), started in about a second; ``kill`` stops one as
    ``raftq serve`` does on SIGTERM. ``interceptors`` go on every broker's client port;
    ``clock`` is every broker's (broker/clock.py: a test may skew or jump its wall clock)."""

    def __init__(
        self,
        root: Path,
        brokers: int = 1,
        *,
        interceptors: Interceptors = (),
        clock: Clock = SYSTEM_CLOCK,
        **kwargs: Any,
    ) -> None:
        super().__init__(root, brokers, **kwargs)
        self.interceptors = interceptors
        self.clock = clock
        self.brokers: dict[int, Broker] = {}

    def start(self, broker: int | None = None) -> None:
        for i in [broker] if broker is not None else sorted(self.client_ports):
            assert not self.alive(i), f"broker {i} runs"
            config = load_config(env=self.env(i))
            chain = self.interceptors(i) if callable(self.interceptors) else self.interceptors
            self.brokers[i] = Broker(config, interceptors=chain, clock=self.clock)

    def kill(self, broker: int, sig: int = signal.SIGKILL) -> None:
        self.brokers.pop(broker).stop(grace_s=0.0 if sig == signal.SIGKILL else 1.0)

    def alive(self, broker: int) -> bool:
        return broker in self.brokers

    def stop(self) -> None:
        super().stop()
        for i in sorted(self.brokers):
            self.kill(i, signal.SIGTERM)

    def broker(self, broker: int = 1) -> Broker:
        return self.brokers[broker]

    def wait_ready(self, timeout_s: float = 60.0) -> Any:
        """Every running broker ready for clients (registered, hears the metadata leader and
        a majority) and heard by the others: DescribeCluster says them all alive."""
        wait_until(
            lambda: all(b.not_ready() is None for b in self.brokers.values()),
            timeout_s,
            "every broker ready",
        )
        if self.client_options.get("token") is None and self.extra_env.get(
            "RAFTQ_SECURITY__AUTH_REQUIRED"
        ):
            return None  # no token to ask DescribeCluster with: ready is all we know
        return super().wait_ready(timeout_s)


class ProcessCluster(Cluster):
    """Each broker a ``python -m raftq.cli serve`` process: crashes, signals, restarts."""

    serve_module = "raftq.cli"  # tests/chaos runs a shim that binds raft elsewhere

    def __init__(self, root: Path, brokers: int = 3, **kwargs: Any) -> None:
        super().__init__(root, brokers, **kwargs)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    # -- processes ----------------------------------------------------------------------------

    def start(self, broker: int | None = None) -> None:
        for i in [broker] if broker is not None else sorted(self.client_ports):
            assert i not in self.procs or self.procs[i].poll() is not None, f"broker {i} runs"
            log = (self.root / f"broker-{i}.log").open("ab")
            self.procs[i] = subprocess.Popen(
                [sys.executable, "-m", self.serve_module, "serve", "--log-level", "INFO"],
                env=self.env(i),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()

    def kill(self, broker: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[broker]
        proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.wait(timeout=30)

    def alive(self, broker: int) -> bool:
        return broker in self.procs and self.procs[broker].poll() is None

    def stop(self) -> None:
        super().stop()
        stop_processes(self.procs.values(), 15)

    def logs(self, lines: int = 40) -> str:
        out = []
        for i in sorted(self.client_ports):
            path = self.root / f"broker-{i}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"---- broker {i} ({path}) ----\n" + "\n".join(tail))
        return "\n".join(out) + "\n"


def make_cluster(root: Path, brokers: int = 1, *, processes: bool = False, **knobs: Any) -> Cluster:
    """The one cluster builder: ``processes`` picks ProcessCluster, else InProcessCluster;
    the other knobs are theirs (``auth``, ``env``, ``metrics``, ``client``, ``interceptors``
    for in-process brokers). Use it as a context manager."""
    kind = ProcessCluster if processes else InProcessCluster
    return kind(root, brokers, **knobs)


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
