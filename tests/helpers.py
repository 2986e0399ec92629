"""Small helpers shared by tests: ports and waiting with a deadline.

Import them as ``from tests.helpers import wait_until``; conftest.py also exposes fixtures.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago. Bind it soon: another process may take it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
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
