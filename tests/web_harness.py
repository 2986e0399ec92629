"""A real cluster with tokens required and a real ``raftq console`` process in front of it.

    with secured_console(tmp_path) as (cluster, console):
        httpx.get(console.url + "/api/v1/topics", headers=console.auth("admin"))

Principals: ``admin`` (every right on every topic, group and txn app) and ``reader``
(consume on every topic and group: no produce, no admin). Tokens are ``token-<name>``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from raftq.transport.auth import token_digest
from tests.cluster import ProcessCluster
from tests.helpers import free_port, stop_processes, wait_until

PRINCIPALS = {
    "admin": [
        ("topics", "produce, consume, admin"),
        ("groups", "consume, admin"),
        ("txn_apps", "produce, admin"),
    ],
    "reader": [("topics", "consume"), ("groups", "consume")],
}


def token(principal: str) -> str:
    return f"token-{principal}"


def write_auth_file(path: Path) -> Path:
    lines = ["principals:"]
    for name, rules in PRINCIPALS.items():
        lines += [f"  {name}:", f'    token_sha256: "{token_digest(token(name))}"', "    acls:"]
        for kind, operations in rules:
            lines += [f"      - {kind}: ['*']", f"        operations: [{operations}]"]
    path.write_text("\n".join(lines) + "\n")
    return path


class ConsoleProcess:
    """``python -m raftq.cli console`` on a free port, its log in ``<root>/console.log``."""

    def __init__(self, root: Path, bootstrap: str, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "console.log"
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raftq.cli", "console", "--bootstrap", bootstrap,
             "--listen", f"127.0.0.1:{self.port}", *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        def answers() -> bool:
            assert self.proc.poll() is None, self.log()
            try:
                return httpx.get(self.url + "/api/v1/openapi.json", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(answers, timeout_s, f"console answering\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @staticmethod
    def auth(principal: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token(principal)}"}

    def stop(self) -> None:
        stop_processes([self.proc], 15)


@contextmanager
def secured_console(
    root: Path, brokers: int = 3
) -> Iterator[tuple[ProcessCluster, ConsoleProcess]]:
    root.mkdir(parents=True, exist_ok=True)
    auth_file = write_auth_file(root / "auth.yaml")
    env = {"RAFTQ_SECURITY__AUTH_REQUIRED": "true", "RAFTQ_SECURITY__AUTH_FILE": str(auth_file)}
    with ProcessCluster(root, brokers, env=env, client={"token": token("admin")}) as cluster:
        console = ConsoleProcess(root, cluster.bootstrap)
        try:
            cluster.wait_ready()
            console.wait_ready()
            yield cluster, console
        finally:
            console.stop()
