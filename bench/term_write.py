"""What a Raft term/vote write costs on the driver: in place or through a rename?

Every election stores the term and the vote before any message reflects them
(transport/raft/journal.py). The earlier way wrote a tmp file, fsynced it, renamed it over
``<journal>.meta`` and fsynced the directory; the journal now overwrites the older of two
checksummed slots and fdatasyncs. One process, one thread, fsync on, interleaved: each round
times one write each way in a fresh directory under ``--term-dir`` (default a tmp dir, on the
disk the brokers use). With ``--term-busy-mb`` a helper thread keeps writing and
fdatasyncing a file of that many MiB beside them (the disk of a follower installing a
snapshot), the case where elections cascaded.

    python -m bench term_write [--term-writes 300] [--term-busy-mb 0]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from bench.common import Result
from raftq.transport.raft.journal import DurableJournal, write_file_durably

NAME = "term_write"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--term-writes", type=int, default=300, help="writes each way")
    group.add_argument(
        "--term-busy-mb", type=int, default=0, help="MiB a helper writes and syncs beside them"
    )
    group.add_argument("--term-dir", default=None, help="where the files go (default: a tmp dir)")


def _busy(path: Path, megabytes: int, stop: threading.Event) -> None:
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        while not stop.is_set():
            f.seek(0)
            for _ in range(megabytes):
                f.write(chunk)
                if stop.is_set():
                    break
            f.flush()
            os.fdatasync(f.fileno())


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(root: Path, writes: int, busy_mb: int) -> dict[str, list[float]]:
    journal = DurableJournal(root / "g.journal", fsync=True, group="g")
    old_meta = root / "old.journal.meta"
    stop = threading.Event()
    helper = None
    if busy_mb:
        helper = threading.Thread(target=_busy, args=(root / "busy", busy_mb, stop), daemon=True)
        helper.start()
    times: dict[str, list[float]] = {"rename": [], "in place": []}
    try:
        journal.setCurrentTerm(1, None)  # the slot file exists from here on
        for term in range(2, writes + 2):
            data = f'{{"commit_index": 1, "term": {term}, "voted_for": "127.0.0.1:9"}}'.encode()
            started = time.perf_counter()
            write_file_durably(old_meta, data, fsync=True)
            times["rename"].append(time.perf_counter() - started)
            started = time.perf_counter()
            journal.setCurrentTerm(term, "127.0.0.1:9")
            times["in place"].append(time.perf_counter() - started)
    finally:
        stop.set()
        if helper is not None:
            helper.join()
        journal._destroy()
    return times


def run(options: argparse.Namespace) -> list[Result]:
    writes = 20 if options.quick else options.term_writes
    busy_mb = min(options.term_busy_mb, 8) if options.quick else options.term_busy_mb
    with tempfile.TemporaryDirectory(dir=options.term_dir, prefix="raftq-term-") as tmp:
        times = measure(Path(tmp), writes, busy_mb)
    note = f"{writes} writes each way, interleaved" + (
        f", beside {busy_mb} MiB written and synced in a loop" if busy_mb else ""
    )
    results = []
    for how in ("rename", "in place"):
        for q in (0.5, 0.99):
            value = _percentile(times[how], q) * 1000
            results.append(Result(f"term write {how}: p{int(q * 100)}", value, "ms", note=note))
    ratio = _percentile(times["rename"], 0.5) / max(_percentile(times["in place"], 0.5), 1e-9)
    results.append(Result("term write: rename / in place (p50)", ratio, "x", note=note))
    return results
