"""Small helpers shared by tests: ports and waiting with a deadline.

Import them as ``from tests.helpers import wait_until``; conftest.py also exposes fixtures.
"""

from __future__ import annotations

import itertools
import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


_HANDED_OUT: set[int] = set()
_NAMES = itertools.count(1)


def unique_name(base: str) -> str:
    """``base-N``, never the same twice in this process: tests sharing one broker keep their
    topics and groups apart."""
    return f"{base}-{next(_NAMES)}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, and never one this process was given before:
    the kernel may answer the same free port to two binds in a row (a cluster's brokers then
    got one port twice). Bind it soon: another process may take it."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.005,
    interval_max_s: float = 0.1,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Polls at once, then with a growing interval (``interval_s`` doubling up to
    ``interval_max_s``) until ``timeout_s`` has passed on the monotonic clock; then raises
    AssertionError saying ``what`` was awaited. An exception from ``predicate`` propagates.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(min(interval_s, remaining))
        interval_s = min(interval_s * 2, interval_max_s)


def stop_processes(procs: Iterable[subprocess.Popen[Any]], timeout_s: float) -> None:
    """SIGTERM every live process, then wait for each; one still running after ``timeout_s``
    is killed."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of an event log, skipping the line a SIGKILL cut short."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
