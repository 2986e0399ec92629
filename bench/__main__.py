"""``python -m bench [names...] [--quick] [--record]`` — run benchmarks, print one table.

Adding a benchmark is one line in BENCHMARKS: a module under bench/ with ``NAME``, ``run`` and
optionally ``add_arguments`` (see bench/common.py).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from types import ModuleType

from bench.common import Result, append_results, load_average, machine_description, print_report

BENCHMARKS = [
    "bench.partition_apply",
    "bench.replicated_append",
    "bench.failover",
    "bench.tls_overhead",
    "bench.e2e",
    "bench.idle_cpu",
    "bench.cluster_append",
    "bench.spark_write",
    "bench.group_join",
    "bench.aio_client",
    "bench.overload",
    "bench.vs_nats",
    "bench.snapshot_stall",
    "bench.http_api",
    "bench.backup",
    "bench.contention",
    "bench.admin_answers",
    "bench.term_write",
    "bench.disk",
    "bench.big_records",
    "bench.wal_idle",
]


def load(modules: list[str]) -> dict[str, ModuleType]:
    loaded = {}
    for path in modules:
        module = importlib.import_module(path)
        loaded[module.NAME] = module
    return loaded


def main(argv: list[str] | None = None) -> int:
    benchmarks = load(BENCHMARKS)
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="name",
        help=f"benchmarks to run (default: all of {', '.join(benchmarks)})",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (for tests)")
    parser.add_argument(
        "--record", action="store_true", help="append the results to bench/RESULTS.md"
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="measurements per figure (median reported)"
    )
    for module in benchmarks.values():
        if hasattr(module, "add_arguments"):
            module.add_arguments(parser.add_argument_group(module.NAME))
    options = parser.parse_args(argv)
    if options.repeat is None:
        options.repeat = 1 if options.quick else 3
    unknown = [n for n in options.names if n not in benchmarks]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {sorted(benchmarks)}")
    chosen = options.names or list(benchmarks)

    load_before = load_average()
    results: list[Result] = []
    for name in chosen:
        print(f"== {name}", flush=True)
        results += benchmarks[name].run(options)
    machine = machine_description()
    machine["load average (1/5/15 min)"] = f"{load_before} before, {load_average()} after"
    print_report(machine, results)
    if options.record:
        command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
        append_results(command.strip(), machine, results, [f"median of {options.repeat}"])
        print("appended to bench/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
