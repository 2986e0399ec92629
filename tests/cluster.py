"""Real broker processes on 127.0.0.1 for tests and benchmarks (no mocks).

    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        cluster.kill(2)            # SIGKILL, like a crash or power loss of that process
        cluster.start(2)           # same data directory: it rejoins
        cluster.leader_of("t", 0)  # broker id leading t/0 (from DescribeTopic)

``client={...}`` are the keyword arguments of every client the harness makes (``tls_ca_file``,
``token``... for a cluster started with security settings in ``env``).

``metrics=True`` gives each broker a Prometheus endpoint (``metrics_url(i)``); off by default.

Each broker runs ``python -m raftq.cli serve`` with its settings in RAFTQ_* variables, its log
in ``<root>/broker-N.log`` (printed on failure by ``logs()``), data in ``<root>/broker-N``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from raftq.client import Admin
from raftq.proto import errors
from tests.helpers import free_port, stop_processes, wait_until

FAST_RAFT = {
    "RAFTQ_RAFT__ELECTION_TIMEOUT_MIN_MS": "400",
    "RAFTQ_RAFT__ELECTION_TIMEOUT_MAX_MS": "800",
    "RAFTQ_RAFT__HEARTBEAT_MS": "100",
}


class ProcessCluster:
    serve_module = "raftq.cli"  # tests/chaos runs a shim that binds raft elsewhere

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
        self.client_options: dict[str, Any] = dict(client or {})
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
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
        for admin in self._admins:
            admin.close()
        stop_processes(self.procs.values(), 15)

    def __enter__(self) -> ProcessCluster:
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

    def logs(self, lines: int = 40) -> str:
        out = []
        for i in sorted(self.client_ports):
            path = self.root / f"broker-{i}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"---- broker {i} ({path}) ----\n" + "\n".join(tail))
        return "\n".join(out) + "\n"

    # -- cluster state ------------------------------------------------------------------------

    def admin(self, bootstrap: str | None = None) -> Admin:
        admin = Admin(bootstrap or self.bootstrap, **self.client_options)
        self._admins.append(admin)
        return admin

    def live_bootstrap(self) -> str:
        return ",".join(self.client_addr(i) for i in sorted(self.procs) if self.alive(i))

    def wait_ready(self, timeout_s: float = 60.0) -> Any:
        """Every running broker registered and alive in DescribeCluster."""
        admin = self.admin()
        running = {i for i in self.procs if self.alive(i)}

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


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
