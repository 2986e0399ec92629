"""``raftq serve`` (one broker), ``raftq dev up`` (a local cluster on loopback) and
``raftq dev ca`` (a dev CA, broker and client certificates, tokens and ACLs: broker/devca.py).
``raftq dev up --tls`` creates them under ``<data-dir>/tls`` if missing and starts the cluster
with TLS on the client ports and tokens required (``--mtls``: client certificates too).

Imports of the broker itself happen inside the handlers, so client commands stay light.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CLIENT_PORT_BASE = 7070
RAFT_PORT_BASE = 9070
METRICS_PORT_BASE = 9100
METADATA_VOTERS_MAX = 7


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=LOG_FORMAT)


def serve_command(args: argparse.Namespace) -> int:
    from broker.config import ConfigError, load_config
    from broker.server import run_until_signalled

    configure_logging(args.log_level)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.stderr.write(f"error: bad configuration: {exc}\n")
        return 2
    return run_until_signalled(config)


def broker_env(index: int, brokers: int, data: Path, host: str = "127.0.0.1") -> dict[str, str]:
    """The RAFTQ_* settings of broker ``index`` (1-based) of a loopback dev cluster."""
    voters = min(brokers, METADATA_VOTERS_MAX)
    seeds = [f"{host}:{RAFT_PORT_BASE + i}" for i in range(voters)]
    return {
        "RAFTQ_BROKER__ID": str(index),
        "RAFTQ_BROKER__CLIENT_ADDR": f"{host}:{CLIENT_PORT_BASE + index - 1}",
        "RAFTQ_BROKER__RAFT_ADDR": f"{host}:{RAFT_PORT_BASE + index - 1}",
        "RAFTQ_BROKER__METRICS_ADDR": f"{host}:{METRICS_PORT_BASE + index - 1}",
        "RAFTQ_BROKER__DATA_DIR": str(data / f"broker-{index}"),
        "RAFTQ_BROKER__SEEDS": json.dumps(seeds),
        "RAFTQ_TOPIC_DEFAULTS__REPLICATION_FACTOR": str(min(3, brokers)),
    }


def _wait_for_cluster(
    bootstrap: str, brokers: int, timeout_s: float, client: dict[str, Any] | None = None
) -> Any:
    from broker.client import Admin
    from proto import errors

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    with Admin(bootstrap, **(client or {})) as admin:
        while time.monotonic() < deadline:
            try:
                cluster = admin.describe_cluster()
                if sum(1 for b in cluster.brokers if b.alive) >= brokers:
                    return cluster
            except errors.RaftqError as exc:
                last = exc
            time.sleep(0.2)
    raise SystemExit(f"the cluster did not come up in {timeout_s:.0f} s ({last})")


def dev_up_command(args: argparse.Namespace) -> int:
    if not 1 <= args.brokers <= METADATA_VOTERS_MAX:
        sys.stderr.write(f"error: --brokers must be 1..{METADATA_VOTERS_MAX}\n")
        return 2
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    security: dict[str, str] = {}
    client: dict[str, Any] = {}
    if args.tls or args.mtls:
        from broker.devca import ensure_dev_pki

        pki = ensure_dev_pki(data / "tls")
        security = pki.broker_env(mutual=args.mtls)
        client = {"tls_ca_file": str(pki.ca), "token": pki.tokens()["admin"]}
        if args.mtls:
            client |= {"tls_cert_file": str(pki.client_cert), "tls_key_file": str(pki.client_key)}
        print(f"TLS and tokens on (certificates, tokens.json and auth.yaml in {pki.directory})")
    procs: list[subprocess.Popen[bytes]] = []
    for index in range(1, args.brokers + 1):
        env = {**os.environ, **broker_env(index, args.brokers, data), **security}
        log_path = data / f"broker-{index}.log"
        log = log_path.open("ab")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "broker.cli", "serve", "--log-level", args.log_level],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        print(f"broker {index}: client 127.0.0.1:{CLIENT_PORT_BASE + index - 1}, log {log_path}")
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    bootstrap = ",".join(f"127.0.0.1:{CLIENT_PORT_BASE + i}" for i in range(args.brokers))
    try:
        started = time.monotonic()
        _wait_for_cluster(bootstrap, args.brokers, 60, client)
        print(f"cluster up in {time.monotonic() - started:.1f} s (Ctrl-C stops it)")
        if client:
            _print_client_env(data / "tls", mutual=args.mtls)
        if args.demo:
            _demo(bootstrap, client)
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        dead = [i + 1 for i, p in enumerate(procs) if p.poll() is not None]
        if dead and not stopping:
            print(f"broker(s) {dead} exited: see {data}/broker-N.log; stopping the others")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        print("cluster stopped")
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
    from broker.devca import DEV_PRINCIPALS, ensure_dev_pki

    directory = Path(args.dir or Path(args.data_dir) / "tls")
    pki = ensure_dev_pki(directory, hosts=tuple(args.host or ()), force=args.force)
    print(f"dev CA, broker and client certificates, tokens and ACLs in {pki.directory}:")
    for name in ("ca.pem", "broker.pem", "broker.key", "client.pem", "client.key"):
        print(f"  {pki.path(name)}")
    print(f"  {pki.auth_file}  (security.auth_file: token digests and ACLs)")
    print(f"  {pki.path('tokens.json')}  (the tokens, mode 0600)")
    for name, rules in DEV_PRINCIPALS.items():
        text = "; ".join(f"{'/'.join(ops)} on {', '.join(topics)}" for topics, ops in rules)
        print(f"    principal {name}: {text}")
    print("broker settings:")
    for key, value in pki.broker_env().items():
        print(f"  {key}={value}")
    _print_client_env(pki.directory, mutual=False)
    return 0


def _demo(bootstrap: str, client: dict[str, Any] | None = None) -> None:
    from broker.client import Admin
    from proto import errors

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
        "  from broker.client import Producer, Consumer\n"
        "  with Producer('127.0.0.1:7070') as p: p.send('demo', b'hello').result()\n"
        "  with Consumer('127.0.0.1:7070', 'g', ['demo']) as c:\n"
        "      for m in c.poll(10, 1000): print(m.offset, m.value); m.ack()\n"
    )


def register(subparsers: Any) -> None:
    serve = subparsers.add_parser("serve", help="run one broker", description="run one broker")
    serve.add_argument("--config", help="YAML file (loaded after configs/default.yaml)")
    serve.add_argument("--log-level", default="INFO")
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
    up.set_defaults(handler=dev_up_command)
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
