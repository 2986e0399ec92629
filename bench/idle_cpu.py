"""Idle CPU of many Raft groups over the multiplexed transport, and re-election after kill -9.

Starts 3 broker processes on 127.0.0.1, each with one MuxEndpoint + one RaftDriver and
`--groups` journal-less Raft groups (RF 3: every group on every broker, autoTick off). Waits until
every group has a leader, measures each broker's CPU time (utime+stime from /proc) over a
`--window-s` window while nothing else happens, then kill -9's the broker that leads the most
groups and measures how long its groups take to elect a new leader on the survivors.

    .venv/bin/python -m bench.idle_cpu                  # 1000 groups, 20 s window
    .venv/bin/python -m bench.idle_cpu --groups 100 --window-s 5

The child mode (`--child`) is also used by tests/process/test_raft_mux.py for its kill -9 test.

Registered as ``python -m bench idle_cpu`` (``run`` below), the same figure is measured with
REAL broker processes (tests/cluster.py, default raft timings, fsync on): topics of
``--idle-topic-partitions`` partitions each at RF 3, totalling ``--idle-partitions`` (1,000;
100 with --quick), on 3 brokers; once every partition is led by its preferred leader (the
backend's balancing), each broker process's CPU (utime+stime from /proc/<pid>/stat) is taken
over ``--idle-window-s`` (20 s; 5 with --quick) while no client does anything.

    python -m bench idle_cpu [--idle-partitions 1000] [--idle-window-s 20]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.common import Result
    from tests.cluster import ProcessCluster

NAME = "idle_cpu"
GOAL_CORES = 0.1

SECRET_HEX = "72616674712d62656e63682d73656372657421"  # "raftq-bench-secret!"


@dataclass(frozen=True)
class Settings:
    """Raft timing for the figure. See the report in bench/RESULTS.md for why these values."""

    append_entries_period_s: float = 0.5
    raft_min_timeout_s: float = 1.6
    raft_max_timeout_s: float = 2.4
    tick_interval_s: float = 0.1


# ------------------------------------------------------------------------------------------------
# Child: one broker.
# ------------------------------------------------------------------------------------------------


def _child(args: argparse.Namespace) -> None:
    from raftq.transport.raft.driver import ListGroup, RaftDriver
    from raftq.transport.raft.mux import MuxEndpoint

    addrs = args.addrs.split(",")
    me = addrs[args.index]
    s = Settings(**json.loads(args.settings))
    endpoint = MuxEndpoint(me, bytes.fromhex(args.secret))
    driver = RaftDriver(endpoint, tick_interval_s=s.tick_interval_s, name=f"raft-driver-{me}")
    groups: dict[str, ListGroup] = {}
    for i in range(args.groups):
        name = f"g{i:04d}"
        groups[name] = ListGroup(
            name,
            me,
            addrs,
            endpoint.transport_class(name),
            appendEntriesPeriod=s.append_entries_period_s,
            raftMinTimeout=s.raft_min_timeout_s,
            raftMaxTimeout=s.raft_max_timeout_s,
        )
        driver.register(name, groups[name])
    driver.start()

    def status() -> dict[str, Any]:
        led = {n: g.became_leader_at for n, g in groups.items() if g.is_leader()}
        known = sum(1 for g in groups.values() if g.leader() is not None)
        return {"led": led, "known": known, "threads": _threads(os.getpid())}

    def replicate(name: str) -> dict[str, Any]:
        groups[name].apply(b"x")
        driver.wake(name)
        return {}

    _reply(sys.stdout, {"ready": me})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "status":
            _reply(sys.stdout, driver.submit(status).result(timeout=30))
        elif cmd[0] == "apply":
            fut = driver.submit(functools.partial(replicate, cmd[1]))
            _reply(sys.stdout, fut.result(timeout=30))
        elif cmd[0] == "applied":
            counts = driver.submit(lambda: {n: len(g.applied) for n, g in groups.items()})
            _reply(sys.stdout, {"applied": counts.result(timeout=30)})
        elif cmd[0] == "stats":
            _reply(sys.stdout, {**endpoint.statistics(), **driver.statistics()})
        elif cmd[0] == "quit":
            break
    driver.stop()
    endpoint.close()


def _reply(out: IO[str], obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


# ------------------------------------------------------------------------------------------------
# Parent: the cluster of broker processes.
# ------------------------------------------------------------------------------------------------


class Broker:
    def __init__(self, index: int, addrs: list[str], groups: int, settings: Settings) -> None:
        self.addr = addrs[index]
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cmd = [
            sys.executable,
            "-m",
            "bench.idle_cpu",
            "--child",
            "--index",
            str(index),
            "--addrs",
            ",".join(addrs),
            "--groups",
            str(groups),
            "--secret",
            SECRET_HEX,
            "--settings",
            json.dumps(asdict(settings)),
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.ready = self._read()["ready"]

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"broker {self.addr} exited (rc={self.proc.poll()})")
        return dict(json.loads(line))

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError, OSError):
                self.ask("quit")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_cluster(groups: int, settings: Settings, addrs: list[str]) -> list[Broker]:
    brokers: list[Broker] = []
    try:
        for i in range(len(addrs)):
            brokers.append(Broker(i, addrs, groups, settings))
    except BaseException:
        for b in brokers:
            b.close()
        raise
    return brokers


def wait_settled(brokers: list[Broker], groups: int, deadline_s: float) -> float:
    """Until every live broker knows a leader for every group and exactly one leader per group
    is claimed. Returns seconds waited."""
    t0 = time.monotonic()
    while True:
        statuses = [b.ask("status") for b in brokers]
        led = [n for s in statuses for n in s["led"]]
        one_each = len(led) == groups and sorted(led) == sorted(set(led))
        if one_each and all(s["known"] == groups for s in statuses):
            return time.monotonic() - t0
        if time.monotonic() - t0 > deadline_s:
            raise TimeoutError(f"not settled after {deadline_s}s: {[s['known'] for s in statuses]}")
        time.sleep(0.5)


def measure_reelection(
    brokers: list[Broker], deadline_s: float = 60.0
) -> tuple[Broker, dict[str, float]]:
    """kill -9 the broker leading the most groups; per group it led, seconds until a survivor
    became leader."""
    statuses = {b.addr: b.ask("status") for b in brokers}
    victim = max(brokers, key=lambda b: len(statuses[b.addr]["led"]))
    orphans = set(statuses[victim.addr]["led"])
    survivors = [b for b in brokers if b is not victim]
    t_kill = time.monotonic()
    victim.kill9()
    elected: dict[str, float] = {}
    while orphans - elected.keys():
        if time.monotonic() - t_kill > deadline_s:
            raise TimeoutError(f"{len(orphans - elected.keys())} groups without a new leader")
        time.sleep(0.1)
        for b in survivors:
            for name, at in b.ask("status")["led"].items():
                if name in orphans and at is not None and at > t_kill:
                    elected[name] = at - t_kill
    return victim, elected


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--addrs", default="", help=argparse.SUPPRESS)
    p.add_argument("--secret", default=SECRET_HEX, help=argparse.SUPPRESS)
    p.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--base-port", type=int, default=29100)
    p.add_argument("--append-entries-period-s", type=float, default=None)
    p.add_argument("--raft-min-timeout-s", type=float, default=None)
    p.add_argument("--raft-max-timeout-s", type=float, default=None)
    p.add_argument("--tick-interval-s", type=float, default=None)
    p.add_argument("--no-kill", action="store_true", help="skip the re-election measurement")
    args = p.parse_args(argv)
    if args.child:
        _child(args)
        return 0

    overrides = {
        k: v for k, v in vars(args).items() if k in Settings.__dataclass_fields__ and v is not None
    }
    settings = Settings(**overrides)
    print(f"settings: {asdict(settings)}  groups={args.groups} rf=3 brokers=3", flush=True)
    t0 = time.monotonic()
    addrs = [f"127.0.0.1:{args.base_port + i}" for i in range(3)]
    brokers = start_cluster(args.groups, settings, addrs)
    try:
        print(f"started 3 brokers in {time.monotonic() - t0:.1f}s", flush=True)
        waited = wait_settled(brokers, args.groups, deadline_s=120)
        leaders = {b.addr: len(b.ask("status")["led"]) for b in brokers}
        threads = {b.addr: b.ask("status")["threads"] for b in brokers}
        print(f"elections settled after {waited:.1f}s more; leaders per broker: {leaders}")
        time.sleep(2.0)  # let post-election catch-up traffic drain
        cpu0 = [b.cpu_s() for b in brokers]
        w0 = time.monotonic()
        time.sleep(args.window_s)
        wall = time.monotonic() - w0
        cores = [(b.cpu_s() - c) / wall for b, c in zip(brokers, cpu0, strict=True)]
        print(f"threads per broker: {threads}")
        for b, c in zip(brokers, cores, strict=True):
            print(f"idle cpu {b.addr}: {c:.3f} cores over {wall:.1f}s")
        print(f"FIGURE idle_cpu_cores_per_broker max={max(cores):.3f} mean={sum(cores) / 3:.3f}")
        if not args.no_kill:
            victim, elected = measure_reelection(brokers)
            times = sorted(elected.values())
            print(
                f"FIGURE reelection_after_kill9 victim={victim.addr} groups={len(times)} "
                f"median={statistics.median(times):.2f}s "
                f"p90={times[int(0.9 * (len(times) - 1))]:.2f}s max={times[-1]:.2f}s"
            )
    finally:
        for b in brokers:
            b.close()
    return 0


# ------------------------------------------------------------------------------------------------
# Registered benchmark: real broker processes.
# ------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--idle-partitions", type=int, default=1000, help="partitions in all")
    parser.add_argument("--idle-topic-partitions", type=int, default=100, help="per topic")
    parser.add_argument("--idle-window-s", type=float, default=20.0, help="CPU window")


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topics(
    cluster: ProcessCluster, partitions: int, per_topic: int, prefix: str = "idle"
) -> list[str]:
    """Topics of ``per_topic`` partitions at RF 3 totalling ``partitions``; their names."""
    admin = cluster.admin()
    names = []
    for i in range(0, partitions, per_topic):
        name = f"{prefix}-{i // per_topic:03d}"
        admin.create_topic(name, partitions=min(per_topic, partitions - i), replication_factor=3)
        cluster.wait_leaders(name, timeout_s=300)
        names.append(name)
    return names


def leaders_per_broker(cluster: ProcessCluster, topics: list[str]) -> dict[int, int] | None:
    """Partitions each broker leads, once every partition of ``topics`` has a live leader."""
    from raftq.proto import errors

    admin = cluster.admin(cluster.live_bootstrap())
    counts = dict.fromkeys((i for i in cluster.procs if cluster.alive(i)), 0)
    for topic in topics:
        try:
            described = admin.describe_topic(topic)
        except errors.RaftqError:
            return None
        for p in described.partitions:
            if p.leader not in counts:
                return None
            counts[p.leader] += 1
    return counts


def wait_preferred_leaders(cluster: ProcessCluster, topics: list[str], timeout_s: float) -> bool:
    """Until every partition is led by its preferred (first) replica; False on timeout."""
    from raftq.proto import errors

    admin = cluster.admin(cluster.live_bootstrap())

    def settled() -> bool:
        for topic in topics:
            try:
                described = admin.describe_topic(topic)
            except errors.RaftqError:
                return False
            if any(p.leader != p.replicas[0] for p in described.partitions):
                return False
        return True

    deadline = time.monotonic() + timeout_s
    while not settled():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def measure_brokers(root: Path, partitions: int, per_topic: int, window_s: float) -> dict[str, Any]:
    from tests.cluster import ProcessCluster

    with ProcessCluster(root, brokers=3, fast=False) as cluster:
        cluster.wait_ready()
        t0 = time.monotonic()
        topics = create_topics(cluster, partitions, per_topic)
        led_s = time.monotonic() - t0
        balanced = wait_preferred_leaders(cluster, topics, timeout_s=120)
        settled_s = time.monotonic() - t0
        leaders = leaders_per_broker(cluster, topics) or {}
        print(
            f"{partitions} partitions led after {led_s:.1f}s, balanced={balanced} after "
            f"{settled_s:.1f}s; leaders per broker {leaders}",
            flush=True,
        )
        time.sleep(2.0)  # let the catch-up traffic after the last transfers drain
        pids = {i: cluster.procs[i].pid for i in sorted(cluster.procs)}
        cpu0 = {i: process_cpu_s(pid) for i, pid in pids.items()}
        w0 = time.monotonic()
        time.sleep(window_s)
        wall = time.monotonic() - w0
        cores = {i: (process_cpu_s(pid) - cpu0[i]) / wall for i, pid in pids.items()}
        for i, c in cores.items():
            print(f"broker {i}: {c:.3f} cores over {wall:.1f}s", flush=True)
        return {"cores": cores, "leaders": leaders, "balanced": balanced, "settled_s": settled_s}


def run(options: argparse.Namespace) -> list[Result]:
    import tempfile

    from bench.common import Result

    partitions = 100 if options.quick else options.idle_partitions
    window_s = 5.0 if options.quick else options.idle_window_s
    per_topic = min(options.idle_topic_partitions, partitions)
    samples = []
    for _ in range(options.repeat):
        with tempfile.TemporaryDirectory(prefix="raftq-idle-") as tmp:
            samples.append(measure_brokers(Path(tmp), partitions, per_topic, window_s))
    busiest = statistics.median(max(s["cores"].values()) for s in samples)
    mean = statistics.median(statistics.mean(s["cores"].values()) for s in samples)
    note = (
        f"{partitions} partitions RF 3, 3 broker processes, {window_s:.0f} s window, "
        f"default raft timings; leaders per broker {samples[-1]['leaders']}"
    )
    return [
        Result(
            "idle cpu: busiest broker",
            busiest,
            "cores",
            f"<= {GOAL_CORES}",
            busiest <= GOAL_CORES,
            note,
        ),
        Result("idle cpu: mean broker", mean, "cores"),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
