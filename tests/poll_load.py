"""Many long polls kept outstanding against one broker with gRPC futures (no thread per poll),
for tests/process/test_overload.py and bench/overload.py.

Each poll is re-issued as soon as it ends; one refused RESOURCE_EXHAUSTED is re-issued after its
retry hint times a random factor in [0.5, 1.5), as the Python client does.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from typing import Any

import grpc

from raftq.proto import api_pb2, api_pb2_grpc
from raftq.transport.grpc_errors import from_rpc_error


class HeldPolls:
    """``count`` long polls of ``groups`` one-member groups on ``topic`` at ``address``."""

    def __init__(
        self, address: str, topic: str, *, groups: int, count: int, max_wait_ms: int
    ) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = api_pb2_grpc.ConsumerStub(self._channel)
        self._requests = []
        for g in range(groups):
            joined = self._stub.JoinGroup(
                api_pb2.JoinGroupRequest(group=f"held-{topic}-{g}", topics=[topic]), timeout=30
            )
            self._requests.append(
                api_pb2.PollRequest(
                    group=f"held-{topic}-{g}",
                    member_id=joined.member_id,
                    generation=joined.generation,
                    max_records=10,
                    max_wait_ms=max_wait_ms,
                )
            )
        self._timeout_s = max_wait_ms / 1000 + 10
        self._count = count
        self._lock = threading.Lock()
        self._later: list[tuple[float, int]] = []  # (monotonic time, poll index)
        self._stop = threading.Event()
        self._futures: dict[int, Any] = {}
        self.answered = 0
        self.refused = 0
        self.failed: dict[str, int] = {}
        self._timer = threading.Thread(target=self._run_later, daemon=True)

    def start(self) -> None:
        for i in range(self._count):
            self._issue(i)
        self._timer.start()

    def _issue(self, i: int) -> None:
        if self._stop.is_set():
            return
        request = self._requests[i % len(self._requests)]
        future = self._stub.Poll.future(request, timeout=self._timeout_s)
        with self._lock:
            self._futures[i] = future
        future.add_done_callback(lambda f, i=i: self._done(i, f))

    def _done(self, i: int, future: Any) -> None:
        if self._stop.is_set():
            return
        error = future.exception()
        if error is None:
            with self._lock:
                self.answered += 1
            self._issue(i)
            return
        typed = from_rpc_error(error)
        with self._lock:
            if typed.retry_after_ms:
                self.refused += 1
            else:
                name = type(typed).__name__
                self.failed[name] = self.failed.get(name, 0) + 1
            pause_s = (typed.retry_after_ms or 100) / 1000 * (0.5 + random.random())
            heapq.heappush(self._later, (time.monotonic() + pause_s, i))

    def _run_later(self) -> None:
        while not self._stop.wait(0.01):
            now = time.monotonic()
            due = []
            with self._lock:
                while self._later and self._later[0][0] <= now:
                    due.append(heapq.heappop(self._later)[1])
            for i in due:
                self._issue(i)

    def stop(self) -> None:
        self._stop.set()
        if self._timer.is_alive():
            self._timer.join()
        with self._lock:
            futures = list(self._futures.values())
        for future in futures:
            future.cancel()
        self._channel.close()
