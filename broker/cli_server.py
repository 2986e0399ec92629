"""``raftq serve`` (one broker), ``raftq dev up`` (a local cluster on loopback) and
``raftq dev ca`` (a dev CA, broker and client certificates, tokens and ACLs: broker/devca.py).
``raftq dev up`` checks its ports first, supervises its brokers (one that exits is reported,
the others keep serving) and takes ``raftq dev kill N`` / ``raftq dev start N`` from another
terminal. ``raftq dev up --tls`` creates them under ``<data-dir>/tls`` if missing and starts the
cluster with TLS on the client ports and tokens required (``--mtls``: client certificates too).

Imports of the broker itself happen inside the handlers, so client commands stay light.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLIENT_PORT_BASE = 7070
RAFT_PORT_BASE = 9070
METRICS_PORT_BASE = 9100
METADATA_VOTERS_MAX = 7


def serve_command(args: argparse.Namespace) -> int:
    from raftq import logs
    from raftq.config import ConfigError, load_config
    from raftq.server import run_until_signalled

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.stderr.write(f"error: bad configuration: {exc}\n")
        return 2
    logs.configure(args.log_level or config.log.level, config.log.format)
    return run_until_signalled(config)


def broker_env(
    index: int, brokers: int, data: Path, host: str = "127.0.0.1", ports: Ports | None = None
) -> dict[str, str]:
    """The RAFTQ_* settings of broker ``index`` (1-based) of a loopback dev cluster."""
    ports = ports or Ports()
    voters = min(brokers, METADATA_VOTERS_MAX)
    seeds = [f"{host}:{ports.raft + i}" for i in range(voters)]
    return {
        "RAFTQ_BROKER__ID": str(index),
        "RAFTQ_BROKER__CLIENT_ADDR": f"{host}:{ports.client + index - 1}",
        "RAFTQ_BROKER__RAFT_ADDR": f"{host}:{ports.raft + index - 1}",
        "RAFTQ_BROKER__METRICS_ADDR": f"{host}:{ports.metrics + index - 1}",
        "RAFTQ_BROKER__DATA_DIR": str(data / f"broker-{index}"),
        "RAFTQ_BROKER__SEEDS": json.dumps(seeds),
        "RAFTQ_TOPIC_DEFAULTS__REPLICATION_FACTOR": str(min(3, brokers)),
    }


@dataclass(frozen=True)
class Ports:
    """A dev cluster's port bases: broker N listens on base + N - 1."""

    client: int = CLIENT_PORT_BASE
    raft: int = RAFT_PORT_BASE
    metrics: int = METRICS_PORT_BASE

    def of(self, index: int) -> dict[str, int]:
        return {
            "client": self.client + index - 1,
            "raft": self.raft + index - 1,
            "metrics": self.metrics + index - 1,
        }


def taken_ports(ports: Ports, brokers: int, host: str = "127.0.0.1") -> list[str]:
    """Every port of the cluster that something else already listens on, named."""
    taken = []
    for index in range(1, brokers + 1):
        for role, port in ports.of(index).items():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((host, port))
                except OSError:
                    taken.append(f"{host}:{port} (broker {index} {role})")
    return taken


class DevCluster:
    """``raftq dev up``'s brokers: child processes it supervises, restarts on request.

    The running ``dev up`` keeps ``<data-dir>/dev.json`` (its pid, each broker's pid and
    addresses). ``raftq dev kill N`` signals broker N from that file; ``raftq dev start N``
    drops ``<data-dir>/control/start-N``, which the supervisor picks up within 0.2 s and
    starts broker N again as its own child. A broker that exits is reported, never fatal to
    the others: the dev cluster shows fault tolerance as a production one would.
    """

    def __init__(
        self, data: Path, brokers: int, ports: Ports, env: dict[str, str], log_level: str
    ) -> None:
        self.data = data
        self.brokers = brokers
        self.ports = ports
        self.env = env
        self.log_level = log_level
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.reported: set[int] = set()
        self.control = data / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        for stale in self.control.glob("start-*"):
            stale.unlink()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports.client + i}" for i in range(self.brokers))

    def start(self, index: int) -> None:
        env = {**os.environ, **broker_env(index, self.brokers, self.data, ports=self.ports)}
        log_path = self.data / f"broker-{index}.log"
        with log_path.open("ab") as log:
            self.procs[index] = subprocess.Popen(
                [sys.executable, "-m", "raftq.cli", "serve", "--log-level", self.log_level],
                env={**env, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.reported.discard(index)
        self.save()

    def save(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "brokers": {
                str(i): {"pid": p.pid, **self.ports.of(i)} for i, p in sorted(self.procs.items())
            },
        }
        tmp = self.data / "dev.json.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.data / "dev.json")

    def exited(self) -> list[tuple[int, int]]:
        """Brokers that exited since the last call, with their exit codes."""
        gone = []
        for index, proc in sorted(self.procs.items()):
            code = proc.poll()
            if code is not None and index not in self.reported:
                self.reported.add(index)
                gone.append((index, code))
        return gone

    def start_requested(self) -> list[int]:
        wanted = []
        for request in self.control.glob("start-*"):
            request.unlink(missing_ok=True)
            index = int(request.name.removeprefix("start-"))
            proc = self.procs.get(index)
            if 1 <= index <= self.brokers and (proc is None or proc.poll() is not None):
                wanted.append(index)
        return sorted(wanted)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        (self.data / "dev.json").unlink(missing_ok=True)


def _wait_for_cluster(
    cluster: DevCluster, timeout_s: float, client: dict[str, Any] | None = None
) -> Any:
    """Until every broker of ``cluster`` reports alive; fails at once if one of them exits."""
    from raftq.client import Admin
    from raftq.proto import errors

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    with Admin(cluster.bootstrap, request_timeout_ms=2_000, **(client or {})) as admin:
        while time.monotonic() < deadline:
            for index, code in cluster.exited():
                raise SystemExit(
                    f"broker {index} exited with code {code} while starting: "
                    f"see {cluster.data / f'broker-{index}.log'}"
                )
            try:
                described = admin.describe_cluster()
                if sum(1 for b in described.brokers if b.alive) >= cluster.brokers:
                    return described
            except errors.RaftqError as exc:
                last = exc
            time.sleep(0.2)
    raise SystemExit(f"the cluster did not come up in {timeout_s:.0f} s ({last})")


def dev_up_command(args: argparse.Namespace) -> int:
    if not 1 <= args.brokers <= METADATA_VOTERS_MAX:
        sys.stderr.write(f"error: --brokers must be 1..{METADATA_VOTERS_MAX}\n")
        return 2
    ports = Ports(args.client_port, args.raft_port, args.metrics_port)
    taken = taken_ports(ports, args.brokers)
    if taken:
        sys.stderr.write(
            "error: ports already in use: " + ", ".join(taken) + "\n"
            "hint: stop what listens there (another dev cluster?) or move this one with "
            "--client-port/--raft-port/--metrics-port\n"
        )
        return 2
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    security: dict[str, str] = {}
    client: dict[str, Any] = {}
    if args.tls or args.mtls:
        from raftq.devca import ensure_dev_pki

        pki = ensure_dev_pki(data / "tls")
        security = pki.broker_env(mutual=args.mtls)
        client = {"tls_ca_file": str(pki.ca), "token": pki.tokens()["admin"]}
        if args.mtls:
            client |= {"tls_cert_file": str(pki.client_cert), "tls_key_file": str(pki.client_key)}
        print(f"TLS and tokens on (certificates, tokens.json and auth.yaml in {pki.directory})")
    cluster = DevCluster(data, args.brokers, ports, security, args.log_level)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops it as Ctrl-C does
    try:
        for index in range(1, args.brokers + 1):
            cluster.start(index)
            print(
                f"broker {index}: client 127.0.0.1:{ports.client + index - 1}, "
                f"log {data / f'broker-{index}.log'}"
            )
        started = time.monotonic()
        _wait_for_cluster(cluster, 60, client)
        print(f"cluster up in {time.monotonic() - started:.1f} s (Ctrl-C stops it)")
        print(f"  export RAFTQ_BOOTSTRAP={cluster.bootstrap}")
        print("  raftq dev kill N / raftq dev start N: stop or restart broker N", flush=True)
        if client:
            _print_client_env(data / "tls", mutual=args.mtls)
        if args.demo:
            _demo(cluster.bootstrap, client)
        _supervise(cluster)
    except KeyboardInterrupt:
        print("\nstopping")
    finally:
        cluster.stop()
        print("cluster stopped", flush=True)
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _supervise(cluster: DevCluster) -> None:
    """Report brokers that exit; restart those ``raftq dev start N`` asks for. Runs until
    interrupted (Ctrl-C, SIGTERM)."""
    while True:
        for index, code in cluster.exited():
            print(
                f"broker {index} exited (code {code}); the others keep serving. "
                f"Log: {cluster.data / f'broker-{index}.log'}; restart: raftq dev start {index}",
                flush=True,
            )
        for index in cluster.start_requested():
            cluster.start(index)
            print(f"broker {index} started again", flush=True)
        time.sleep(0.2)


def _dev_state(data_dir: str) -> dict[str, Any]:
    path = Path(data_dir).resolve() / "dev.json"
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(
            f"no dev cluster runs with --data-dir {data_dir} ({path} is missing)"
        ) from None
    return state


def dev_kill_command(args: argparse.Namespace) -> int:
    state = _dev_state(args.data_dir)
    broker = state["brokers"].get(str(args.broker))
    if broker is None:
        sys.stderr.write(f"error: no broker {args.broker}; brokers: {sorted(state['brokers'])}\n")
        return 2
    try:
        os.kill(broker["pid"], getattr(signal, f"SIG{args.signal}"))
    except ProcessLookupError:
        print(f"broker {args.broker} is not running; raftq dev start {args.broker} starts it")
        return 1
    print(f"sent SIG{args.signal} to broker {args.broker} (pid {broker['pid']})")
    return 0


def dev_start_command(args: argparse.Namespace) -> int:
    state = _dev_state(args.data_dir)
    if str(args.broker) not in state["brokers"]:
        sys.stderr.write(f"error: no broker {args.broker}; brokers: {sorted(state['brokers'])}\n")
        return 2
    control = Path(args.data_dir).resolve() / "control"
    control.mkdir(exist_ok=True)
    (control / f"start-{args.broker}").touch()
    print(f"asked the dev cluster (pid {state['supervisor_pid']}) to start broker {args.broker}")
    return 0


def _print_client_env(directory: Path, *, mutual: bool) -> None:
    print(
        "clients need the CA and a token (principals and tokens: "
        f"{directory / 'tokens.json'}):\n"
        f"  export RAFTQ_TLS_CA={directory / 'ca.pem'}\n"
        f'  export RAFTQ_TOKEN=$(python -c "import json; print(json.load(open('
        f"'{directory / 'tokens.json'}'))['admin'])\")"
    )
    if mutual:
        print(f"  and --tls-cert {directory / 'client.pem'} --tls-key {directory / 'client.key'}")


def dev_ca_command(args: argparse.Namespace) -> int:
    from raftq.devca import DEV_PRINCIPALS, ensure_dev_pki

    directory = Path(args.dir or Path(args.data_dir) / "tls")
    pki = ensure_dev_pki(directory, hosts=tuple(args.host or ()), force=args.force)
    print(f"dev CA, broker and client certificates, tokens and ACLs in {pki.directory}:")
    for name in ("ca.pem", "broker.pem", "broker.key", "client.pem", "client.key"):
        print(f"  {pki.path(name)}")
    print(f"  {pki.auth_file}  (security.auth_file: token digests and ACLs)")
    print(f"  {pki.path('tokens.json')}  (the tokens, mode 0600)")
    for name, rules in DEV_PRINCIPALS.items():
        text = "; ".join(
            f"{'/'.join(ops)} on {key} {', '.join(names)}" for key, names, ops in rules
        )
        print(f"    principal {name}: {text}")
    print("broker settings:")
    for key, value in pki.broker_env().items():
        print(f"  {key}={value}")
    _print_client_env(pki.directory, mutual=False)
    return 0


def _demo(bootstrap: str, client: dict[str, Any] | None = None) -> None:
    from raftq.client import Admin
    from raftq.proto import errors

    with Admin(bootstrap, **(client or {})) as admin:
        try:
            admin.create_topic("demo", partitions=3)
            print("created topic 'demo' (3 partitions)")
        except errors.TopicExists:
            print("topic 'demo' exists")
    print(
        "\ntry it:\n"
        "  .venv/bin/raftq topic describe demo\n"
        "  seq 1 10 | .venv/bin/raftq produce demo\n"
        "  .venv/bin/raftq consume demo --group g --count 10\n"
        "  .venv/bin/raftq cluster status\n"
        "from Python:\n"
        "  from raftq.client import Producer, Consumer\n"
        "  with Producer('127.0.0.1:7070') as p: p.send('demo', b'hello').result()\n"
        "  with Consumer('127.0.0.1:7070', 'g', ['demo']) as c:\n"
        "      for m in c.poll(10, 1000): print(m.offset, m.value); m.ack()\n"
    )


def register(subparsers: Any) -> None:
    serve = subparsers.add_parser("serve", help="run one broker", description="run one broker")
    serve.add_argument("--config", help="YAML file (loaded after configs/default.yaml)")
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default: log.level)")
    serve.set_defaults(handler=serve_command)

    dev = subparsers.add_parser("dev", help="local development cluster")
    devs = dev.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    up = devs.add_parser(
        "up", help="run N brokers on 127.0.0.1 until Ctrl-C", description="run a dev cluster"
    )
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--data-dir", default="./data")
    up.add_argument("--demo", action="store_true", help="create a demo topic and show a tour")
    up.add_argument("--log-level", default="INFO")
    up.add_argument(
        "--tls",
        action="store_true",
        help="TLS on the client ports and tokens with ACLs (dev CA under DATA_DIR/tls)",
    )
    up.add_argument("--mtls", action="store_true", help="--tls plus client certificates")
    up.add_argument("--client-port", type=int, default=CLIENT_PORT_BASE, help="broker 1's; N: +N-1")
    up.add_argument("--raft-port", type=int, default=RAFT_PORT_BASE, help="broker 1's raft port")
    up.add_argument("--metrics-port", type=int, default=METRICS_PORT_BASE, help="broker 1's")
    up.set_defaults(handler=dev_up_command)
    kill = devs.add_parser("kill", help="signal broker N of the running dev cluster")
    kill.add_argument("broker", type=int, metavar="N")
    kill.add_argument("--signal", default="KILL", choices=("KILL", "TERM", "STOP", "CONT"))
    kill.add_argument("--data-dir", default="./data")
    kill.set_defaults(handler=dev_kill_command)
    start = devs.add_parser("start", help="start broker N of the running dev cluster again")
    start.add_argument("broker", type=int, metavar="N")
    start.add_argument("--data-dir", default="./data")
    start.set_defaults(handler=dev_start_command)
    ca = devs.add_parser(
        "ca",
        help="create a dev CA, certificates, tokens and ACLs",
        description="create a dev CA, broker and client certificates, tokens and ACLs",
    )
    ca.add_argument("--data-dir", default="./data", help="files go to DATA_DIR/tls")
    ca.add_argument("--dir", help="put the files here instead")
    ca.add_argument(
        "--host", action="append", help="another host name or IP for the broker certificate"
    )
    ca.add_argument("--force", action="store_true", help="replace existing files")
    ca.set_defaults(handler=dev_ca_command)
