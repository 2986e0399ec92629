"""Stability under CPU contention (issue 16): a produce+consume run with CPU hogs beside it.

Three real broker processes (tests/cluster.py ``ProcessCluster``, the broker's DEFAULT raft
timings: heartbeat 250 ms, elections 800-1300 ms), one topic of 3 partitions at RF 3, fsync
on. One producer thread sends 100-byte records (``raftq.client.Producer``, at most 2,000 in
flight) and one group member polls and acks, first on a quiet machine for ``--quiet-seconds``,
then beside ``--hogs`` busy-looping processes (same priority) for ``--contention-seconds``.

Counted per phase: records acknowledged and consumed per second, the elections (the sum over
every Raft group, metadata included, of how far its term moved: one per election, failed or
not; read from each broker's ``/metrics``), and errors the clients saw, retriable (a timeout,
a leader change) and not (the goal: none for a valid request). Goals: no election, no
non-retriable error, and contended throughput >= 50 % of quiet. At the end the brokers' log
lines saying why each term moved are printed to stderr (``term change: ...``, in time order,
after the phases' start times), so every election counted can be traced to its cause.

    python -m bench contention [--hogs 4] [--quiet-seconds 60] [--contention-seconds 300]
    python -m bench contention --quick        (10 s + 10 s)
"""

from __future__ import annotations

import argparse
import functools
import logging
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Result
from raftq.client import Consumer, Producer, SendFuture
from raftq.proto import errors
from tests.cluster import ProcessCluster

NAME = "contention"
RATIO_GOAL = 0.5
IN_FLIGHT_MAX = 2_000
log = logging.getLogger("raftq.bench.contention")
TERM = re.compile(r"^raftq_raft_term\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.M)


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--hogs", type=int, default=4, help="busy-looping processes beside")
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--contention-seconds", type=float, default=300.0)


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    acked: int = 0
    consumed: int = 0
    elections: int = 0
    retriable: Counter[str] = field(default_factory=Counter)
    final: Counter[str] = field(default_factory=Counter)


def terms(cluster: ProcessCluster) -> dict[str, int]:
    """Each Raft group's term: the highest any broker reports (labels name the group)."""
    out: dict[str, int] = {}
    for broker in sorted(cluster.metrics_ports):
        try:
            with urllib.request.urlopen(cluster.metrics_url(broker), timeout=10) as answer:
                text = answer.read().decode()
        except OSError as exc:
            log.warning("metrics of broker %d unreadable: %s", broker, exc)
            continue
        for match in TERM.finditer(text):
            group = match["labels"]
            out[group] = max(out.get(group, 0), int(float(match["value"])))
    return out


def elections_between(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(term - before.get(group, term) for group, term in after.items())


class Load:
    """One producer thread and one consumer thread, counting what they achieve and see."""

    def __init__(self, cluster: ProcessCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.phase = Phase("warm-up")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._produce, name="bench-producer", daemon=True),
            threading.Thread(target=self._consume, name="bench-consumer", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def count_into(self, phase: Phase) -> Phase:
        """From now on count into ``phase``; returns the phase counted until now."""
        with self._lock:
            previous, self.phase = self.phase, phase
        return previous

    def _error(self, exc: BaseException) -> None:
        with self._lock:
            kind = type(exc).__name__
            if isinstance(exc, errors.RaftqError) and exc.retriable:
                self.phase.retriable[kind] += 1
            else:
                self.phase.final[f"{kind}: {exc}"[:160]] += 1

    def _settled(self, future: SendFuture, room: threading.Semaphore) -> None:
        room.release()
        self._acked(future)

    def _acked(self, future: SendFuture) -> None:
        exc = future.exception()
        if exc is not None:
            self._error(exc)
            return
        with self._lock:
            self.phase.acked += 1

    def _produce(self) -> None:
        room = threading.Semaphore(IN_FLIGHT_MAX)
        value = b"v" * 100
        with Producer(self.cluster.bootstrap) as producer:
            while not self._stop.is_set():
                if not room.acquire(timeout=0.5):
                    continue
                try:
                    future = producer.send(self.topic, value)
                except errors.RaftqError as exc:
                    room.release()
                    self._error(exc)
                    continue
                future.add_done_callback(functools.partial(self._settled, room=room))

    def _consume(self) -> None:
        with Consumer(self.cluster.bootstrap, "contention", [self.topic]) as consumer:
            while not self._stop.is_set():
                try:
                    batch = consumer.poll(max_records=1_000, timeout_ms=500)
                except errors.RaftqError as exc:
                    self._error(exc)
                    continue
                if not batch:
                    continue
                failures = [e for e in consumer.ack(batch) if e is not None]
                for failure in failures:
                    self._error(failure)
                with self._lock:
                    self.phase.consumed += len(batch) - len(failures)


def measure(cluster: ProcessCluster, load: Load, name: str, seconds: float) -> Phase:
    phase = Phase(name)
    before = terms(cluster)
    started = time.monotonic()
    print(f"phase {name!r} starts at {time.strftime('%H:%M:%S')}", file=sys.stderr)
    load.count_into(phase)
    time.sleep(seconds)
    load.count_into(Phase("between"))
    phase.seconds = time.monotonic() - started
    phase.elections = elections_between(before, terms(cluster))
    log.info(
        "%s: %.0f s, %d acked, %d consumed, %d elections, retriable %s, final %s",
        name, phase.seconds, phase.acked, phase.consumed, phase.elections,
        dict(phase.retriable), dict(phase.final),
    )  # fmt: skip
    return phase


def start_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run_phases(root: Path, hogs: int, quiet_s: float, contended_s: float) -> tuple[Phase, Phase]:
    topic = f"contention-{uuid.uuid4().hex[:6]}"
    with ProcessCluster(root, fast=False, metrics=True) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic(topic, partitions=3, replication_factor=3)
        cluster.wait_leaders(topic)
        load = Load(cluster, topic)
        load.start()
        try:
            time.sleep(min(5.0, quiet_s))  # warm-up: connections, metadata, the group's join
            quiet = measure(cluster, load, "quiet", quiet_s)
            hogging = start_hogs(hogs)
            try:
                contended = measure(cluster, load, f"{hogs} CPU hogs", contended_s)
            finally:
                for hog in hogging:
                    hog.kill()
                    hog.wait()
        finally:
            load.stop()
    return quiet, contended


# What the brokers log when a term moves or a leader steps down (transport/raft), and why.
TERM_CHANGE = re.compile(r"standing for term|stepping down|closed: election within")
TERM_CHANGES_SHOWN_MAX = 100


def term_changes(root: Path) -> list[str]:
    """Every broker's log lines saying why a term moved (a timer and how late, when the leader
    was last heard; a transfer; a closed link; leader fallback), in time order, so each
    election a run counts can be told apart."""
    lines = []
    for path in sorted(root.glob("broker-*.log")):
        with path.open(errors="replace") as handle:
            lines += [f"{path.stem}: {row.strip()}" for row in handle if TERM_CHANGE.search(row)]
    lines.sort(key=lambda row: row.split(": ", 1)[1])
    return lines[:TERM_CHANGES_SHOWN_MAX]


def _rate(phase: Phase) -> float:
    return (phase.acked + phase.consumed) / max(phase.seconds, 1e-9)


def run(options: argparse.Namespace) -> list[Result]:
    quiet_s = 10.0 if options.quick else options.quiet_seconds
    contended_s = 10.0 if options.quick else options.contention_seconds
    hogs = getattr(options, "hogs", 4)
    with tempfile.TemporaryDirectory(prefix="raftq-contention-") as tmp:
        quiet, contended = run_phases(Path(tmp), hogs, quiet_s, contended_s)
        for line in term_changes(Path(tmp)):
            print(f"term change: {line}", file=sys.stderr)
    ratio = _rate(contended) / max(_rate(quiet), 1e-9)
    final = sum(contended.final.values()) + sum(quiet.final.values())
    shown = dict(contended.final) or dict(quiet.final)
    return [
        Result("contention: quiet produce+consume", _rate(quiet), "rec/s",
               note=f"{quiet.seconds:.0f} s, elections {quiet.elections}"),
        Result(f"contention: beside {hogs} CPU hogs", _rate(contended), "rec/s",
               note=f"{contended.seconds:.0f} s; retriable errors {dict(contended.retriable)}"),
        Result("contention: contended / quiet", ratio, "x", f">= {RATIO_GOAL}",
               ratio >= RATIO_GOAL),
        Result("contention: elections under contention", contended.elections, "", "0",
               contended.elections == 0, "term moves summed over every raft group"),
        Result("contention: non-retriable errors", final, "", "0", final == 0,
               str(shown)[:200] if final else ""),
    ]  # fmt: skip
