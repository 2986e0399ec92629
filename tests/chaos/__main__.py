"""``python -m tests.chaos run [--duration S] [--root DIR] [--seed N]`` / ``check DIR``.

Exit status 1 on any violation (the seed is printed; ``RAFTQ_SEED`` or ``--seed`` replays the
fault schedule), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
from pathlib import Path

from tests.chaos.checker import check
from tests.chaos.harness import Harness, Options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="a chaos run, then the checker")
    run.add_argument("--duration", type=float, default=120.0, help="seconds of load and faults")
    run.add_argument("--seed", type=int, default=None, help="default: $RAFTQ_SEED or random")
    run.add_argument("--root", type=Path, default=None, help="run directory (default: a temp dir)")
    run.add_argument("--rate", type=float, default=25.0, help="records/s per producer (2 of them)")
    run.add_argument("--consumers", type=int, default=3)
    again = sub.add_parser("check", help="check a run directory again, offline")
    again.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    # SIGTERM (timeout, CI cancel) unwinds like Ctrl-C: the broker processes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.command == "check":
        report = check(args.root)
        print(report.render())
        return 0 if report.ok else 1
    seed = args.seed
    if seed is None:
        seed = int(os.environ.get("RAFTQ_SEED") or random.SystemRandom().randrange(1 << 31))
    root = args.root or Path(tempfile.mkdtemp(prefix=f"raftq-chaos-{seed}-"))
    print(f"chaos: seed={seed} (replay: RAFTQ_SEED={seed}) dir={root}", flush=True)
    options = Options(seed=seed, duration_s=args.duration, consumers=args.consumers, rate=args.rate)
    report = Harness(root, options).run()
    print(report.render(), flush=True)
    print(f"chaos: seed={seed} dir={root} {'PASS' if report.ok else 'FAIL'}", flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
