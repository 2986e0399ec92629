"""``raftq dev up`` as a user runs it: a real process with real brokers on loopback.

It must refuse ports that are taken (naming them) instead of reporting the cluster of whoever
listens there, supervise its brokers so that one dying is reported and the others keep
serving, restart one on ``raftq dev start N``, print the bootstrap of every broker, and stop
cleanly on Ctrl-C at any moment, taking its brokers with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from raftq.client import Admin, Producer
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_bases(brokers: int) -> tuple[int, int, int]:
    """Three port bases whose ``brokers`` consecutive ports are all free on 127.0.0.1."""
    rng = random.Random()
    for _ in range(200):
        bases = tuple(rng.randrange(20_000, 60_000, 10) for _ in range(3))
        ports = [base + i for base in bases for i in range(brokers)]
        if len(set(ports)) == len(ports) and all(_bindable(p) for p in ports):
            return bases  # type: ignore[return-value]
    raise AssertionError("no free port bases")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def dev_up_argv(
    data: Path, brokers: int, bases: tuple[int, int, int], python: str = sys.executable
) -> list[str]:
    client, raft, metrics = (str(base) for base in bases)
    return [
        *(python, "-m", "raftq.cli", "dev", "up", "--brokers", str(brokers)),
        *("--data-dir", str(data), "--client-port", client),
        *("--raft-port", raft, "--metrics-port", metrics),
    ]


class DevUp:
    """A running ``raftq dev up``; its stdout lines arrive on a queue. ``python`` and ``cwd``
    default to this checkout's interpreter and root (tests/process/test_wheel.py runs an installed
    wheel's instead)."""

    def __init__(
        self,
        data: Path,
        brokers: int,
        bases: tuple[int, int, int],
        python: str = sys.executable,
        cwd: Path = ROOT,
    ) -> None:
        self.data = data
        self.proc = subprocess.Popen(
            [*dev_up_argv(data, brokers, bases, python), "--log-level", "WARNING"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stdout: TextIO) -> None:
        for line in stdout:
            self.lines.put(line)

    def expect(self, fragment: str, timeout_s: float = 60) -> str:
        def arrived() -> str | None:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                return None
            self.seen.append(line)
            return line if fragment in line else None

        line = wait_until(arrived, timeout_s, f"{fragment!r} from dev up; saw {self.seen}")
        assert line is not None
        return line

    def broker_pids(self) -> dict[str, int]:
        state = json.loads((self.data / "dev.json").read_text())
        return {index: broker["pid"] for index, broker in state["brokers"].items()}

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "raftq.cli", *argv, "--data-dir", str(self.data)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=60)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[DevUp, tuple[int, int, int]]]:
    bases = free_bases(3)
    dev = DevUp(tmp_path / "data", 3, bases)
    try:
        yield dev, bases
    finally:
        if dev.proc.poll() is None:
            dev.proc.kill()
            dev.proc.wait()
        for pid in dev.broker_pids().values() if (dev.data / "dev.json").exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie has exited


def test_a_taken_port_is_named_and_nothing_starts(tmp_path: Path) -> None:
    client, raft, metrics = free_bases(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", raft + 1))
        squatter.listen()
        done = subprocess.run(
            dev_up_argv(tmp_path, 2, (client, raft, metrics)),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done
    assert f"127.0.0.1:{raft + 1} (broker 2 raft)" in done.stderr and "--raft-port" in done.stderr
    assert "cluster up" not in done.stdout and not list(tmp_path.glob("broker-*.log"))


def test_supervised_brokers_survive_one_dying_and_it_restarts(
    running: tuple[DevUp, tuple[int, int, int]],
) -> None:
    dev, (client, _, _) = running
    line = dev.expect("export RAFTQ_BOOTSTRAP=")
    bootstrap = line.split("=", 1)[1].strip()
    assert bootstrap.split(",") == [f"127.0.0.1:{client + i}" for i in range(3)]
    with Admin(bootstrap) as admin:
        admin.create_topic("survivor", partitions=1)
    pids = dev.broker_pids()

    killed = dev.cli("dev", "kill", "2")
    assert killed.returncode == 0, killed.stderr
    dev.expect("broker 2 exited")
    assert dev.proc.poll() is None and _alive(pids["1"]) and _alive(pids["3"])
    with Producer(bootstrap) as producer:  # two of three replicas: writes go on
        assert producer.send("survivor", b"still here").result(30).offset == 0

    started = dev.cli("dev", "start", "2")
    assert started.returncode == 0, started.stderr
    dev.expect("broker 2 started again")
    with Admin(bootstrap) as admin:
        wait_until(
            lambda: sum(b.alive for b in admin.describe_cluster().brokers) == 3,
            60,
            "broker 2 back in the cluster",
        )
    pids = dev.broker_pids()
    assert dev.stop() == 0
    dev.expect("cluster stopped")
    assert not any(_alive(pid) for pid in pids.values())


def test_ctrl_c_while_starting_stops_every_broker(
    running: tuple[DevUp, tuple[int, int, int]],
) -> None:
    dev, _ = running
    dev.expect("broker 3: client")
    pids = dev.broker_pids()
    assert dev.stop() == 0
    dev.expect("cluster stopped")
    assert not any(_alive(pid) for pid in pids.values())
