"""The chaos workload: producer threads whose every operation and outcome is a JSON line.

Records are identified by their value, unique per run: ``R-<producer>-<n>`` (acked by the
consumers) or ``P-<producer>-<n>`` (poison: nacked every time, so dead-lettered after
``max_deliveries``). A ``send`` line is written before each attempt and a ``sent`` line with
its outcome (``ok``, partition, offset, or the error's catalogue name). An error is
indeterminate: the record may or may not be in the log.

Some records carry an ``idempotency_key``: a failed attempt is sent again with the same key (up
to `IDEM_ATTEMPTS`), and a few acknowledged ones are deliberately sent again; every
acknowledged attempt of one key must name the same offset. Some records are delayed
(``deliver_at_ms`` in the near future); on the priority topic each has a random priority.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from typing import Any

from raftq.client import Producer, SendFuture
from raftq.proto import errors
from tests.consumer_proc import EventLog, wall_ms

IDEM_ATTEMPTS = 3


class ProducerLoad:
    """One idempotent Producer sending ``rate`` records a second to ``topic`` from a thread."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        log: EventLog,
        *,
        seed: int,
        rate: float,
        priorities: bool,
        keys: int = 16,
        poison_ratio: float = 0.03,
        delay_ratio: float = 0.12,
        idem_ratio: float = 0.2,
    ) -> None:
        self.name, self.topic, self.log = name, topic, log
        self.rate, self.priorities, self.keys = rate, priorities, keys
        self.poison_ratio, self.delay_ratio, self.idem_ratio = poison_ratio, delay_ratio, idem_ratio
        self.rng = random.Random(f"{seed}/{name}")
        self.producer = Producer(bootstrap, linger_ms=5, request_timeout_ms=8000, retries=10)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._again: list[tuple[dict[str, Any], int]] = []  # (record, attempt) to send again
        self._pending: set[SendFuture] = set()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name=f"load-{name}", daemon=True)

    def start(self) -> ProducerLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        try:
            self.producer.flush(timeout_s=60)
        except errors.RaftqError as exc:
            self.log.write("flush_error", producer=self.name, error=exc.kind.name)
        self.producer.close()

    def _record(self, n: int) -> dict[str, Any]:
        rng = self.rng
        kind = "P" if rng.random() < self.poison_ratio else "R"
        record: dict[str, Any] = {
            "id": f"{kind}-{self.name}-{n}",
            "topic": self.topic,
            "producer": self.name,
            "seq": n,
            "key": f"k{rng.randrange(self.keys)}",
            "priority": rng.randrange(10) if self.priorities else 0,
            "deliver_at_ms": 0,
            "idem": "",
        }
        if rng.random() < self.delay_ratio:
            record["deliver_at_ms"] = wall_ms() + rng.randrange(300, 4000)
        if rng.random() < self.idem_ratio:
            record["idem"] = f"idem-{record['id']}"
        return record

    def _send(self, record: dict[str, Any], attempt: int) -> None:
        self.log.write("send", attempt=attempt, **record)
        future = self.producer.send(
            self.topic,
            record["id"].encode(),
            key=record["key"].encode(),
            priority=record["priority"],
            deliver_at_ms=record["deliver_at_ms"],
            idempotency_key=record["idem"],
        )
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(lambda f: self._done(record, attempt, f))
        self.sent += 1

    def _done(self, record: dict[str, Any], attempt: int, future: SendFuture) -> None:
        with self._lock:
            self._pending.discard(future)
        try:
            meta = future.result()
        except errors.RaftqError as exc:
            self.log.write("sent", id=record["id"], attempt=attempt, ok=False, error=exc.kind.name)
            if record["idem"] and attempt < IDEM_ATTEMPTS:
                with self._lock:
                    self._again.append((record, attempt + 1))
            return
        self.log.write(
            "sent",
            id=record["id"],
            attempt=attempt,
            ok=True,
            partition=meta.partition,
            offset=meta.offset,
        )
        if record["idem"] and attempt == 1 and zlib.crc32(record["id"].encode()) % 10 == 0:
            with self._lock:
                self._again.append((record, IDEM_ATTEMPTS + 1))  # a deliberate duplicate

    def _run(self) -> None:
        start = time.monotonic()
        n = 0
        while not self._stop.is_set():
            with self._lock:
                again, self._again = self._again, []
            for record, attempt in again:
                self._send(record, attempt)
            due = start + n / self.rate
            if time.monotonic() < due:
                self._stop.wait(min(0.05, due - time.monotonic()))
                continue
            self._send(self._record(n), 1)
            n += 1
