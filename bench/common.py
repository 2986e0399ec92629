"""What every benchmark shares: the machine description, results, the table, RESULTS.md.

A benchmark module exposes::

    NAME: str                                            # what `python -m bench NAME` runs
    def add_arguments(parser: argparse.ArgumentParser) -> None   # optional, its own flags
    def run(options: argparse.Namespace) -> list[Result]

and ``options.quick`` asks for a short smoke run (seconds, used by tests).
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS_PATH = Path(__file__).with_name("RESULTS.md")


@dataclass(frozen=True)
class Result:
    """One reported figure. ``passed`` is None when the metric has no goal."""

    metric: str
    value: float
    unit: str
    goal: str = ""
    passed: bool | None = None
    note: str = ""

    def verdict(self) -> str:
        if self.passed is None:
            return ""
        return "pass" if self.passed else "FAIL"


def at_least(metric: str, value: float, unit: str, goal: float, note: str = "") -> Result:
    """A result whose goal is ``value >= goal``."""
    return Result(metric, value, unit, f">= {format_number(goal)}", value >= goal, note)


def median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples))


def repeat(times: int, measure: Callable[[], float]) -> list[float]:
    """Run ``measure`` ``times`` times; the caller reports the median (noisy shared machine)."""
    return [measure() for _ in range(times)]


def format_number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


# -- the machine --------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def fsync_latency(samples: int = 200) -> str:
    """p50 / p99 of fsync after a small write in the temp directory: the floor under every
    durable write's latency (a replicated append waits for two or three in a row)."""
    times = []
    with tempfile.NamedTemporaryFile() as f:
        for _ in range(samples):
            f.write(b"x" * 128)
            f.flush()
            started = time.perf_counter()
            os.fsync(f.fileno())
            times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return f"p50 {times[len(times) // 2]:.2f} ms, p99 {times[int(len(times) * 0.99)]:.2f} ms"


def machine_description() -> dict[str, str]:
    """CPU, cores, OS, Python and SQLite versions, and the load when asked."""
    from raftq.partitions.sqlite_store import sqlite_versions  # the one module that imports apsw

    versions = sqlite_versions()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    return {
        "cpu": cpu_model(),
        "cores": f"{os.cpu_count()} (usable by this process: {usable})",
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "sqlite": f"{versions['sqlite']} (apsw {versions['apsw']})",
        "load average (1/5/15 min)": load_average(),
        "fsync (temp dir)": fsync_latency(),
    }


# -- output -------------------------------------------------------------------------------------


def table_lines(results: Sequence[Result]) -> list[str]:
    """A Markdown table (readable as plain text too): metric, value, goal, pass/fail."""
    header = ("metric", "value", "goal", "result", "note")
    rows = [
        (r.metric, f"{format_number(r.value)} {r.unit}".strip(), r.goal, r.verdict(), r.note)
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]


def machine_lines(machine: dict[str, str]) -> list[str]:
    return [f"- {name}: {value}" for name, value in machine.items()]


def print_report(machine: dict[str, str], results: Sequence[Result]) -> None:
    print()
    print("\n".join(machine_lines(machine)))
    print()
    print("\n".join(table_lines(results)))
    print()


def append_results(
    command: str,
    machine: dict[str, str],
    results: Sequence[Result],
    notes: Sequence[str] = (),
    path: Path = RESULTS_PATH,
    now: datetime.datetime | None = None,
) -> None:
    """Append a dated section (command, machine, table, notes) to bench/RESULTS.md."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "",
        f"## {stamp}",
        "",
        f"Command: `{command}`",
        "",
        *machine_lines(machine),
        "",
        *table_lines(results),
    ]
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    if not path.exists():
        path.write_text("# Benchmark results\n\nAppended by `python -m bench --record`.\n")
    with path.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
