"""The chaos run: 3 broker processes behind raft proxies, producers, a consumer group of
processes, a seeded fault schedule, then a settled final state for the offline checker.

Layout of a run directory (everything the checker reads; ``python -m tests.chaos check DIR``):

    workload.jsonl        the harness: config, send/sent, faults and heals
    consumer-<k>.jsonl    each consumer process (tests/chaos/consumer.py); k counts restarts
    final.json            after healing: every log read back by Fetch, the group's lag
    replicas.json         after a clean stop: each partition replica's applied index and the
                          SHA-256 of its canonical dump (partitions/sqlite_store.SqliteStore)
    cluster/broker-N{,.log}  data directories and broker logs
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftq.client import Admin
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import errors
from tests.chaos.broker_shim import BIND_ENV
from tests.chaos.checker import Report, check
from tests.chaos.proxy import RaftProxy
from tests.chaos.schedule import Fault, make_schedule
from tests.chaos.workload import EventLog, ProducerLoad
from tests.cluster import ProcessCluster
from tests.helpers import free_port, stop_processes, wait_until

GROUP = "chaos"
FIFO, PRIO = "chaos.fifo", "chaos.prio"
TOPICS = (FIFO, PRIO)
MAX_DELIVERIES = 4
LEASE_MS = 4000
BROKER_ENV = {
    "RAFTQ_GROUPS__SESSION_TIMEOUT_MIN_MS": "500",
    "RAFTQ_GROUPS__SESSION_TIMEOUT_MS": "3000",
    "RAFTQ_GROUPS__HEARTBEAT_INTERVAL_MS": "300",
    "RAFTQ_RAFT__FSYNC": "true",  # the power-loss model needs it (it is the default)
}


class ChaosCluster(ProcessCluster):
    """A ProcessCluster whose brokers advertise a proxy address as their raft address and
    bind their real raft port behind it (tests/chaos/broker_shim.py)."""

    serve_module = "tests.chaos.broker_shim"

    def __init__(self, root: Path, brokers: int = 3, **kwargs: Any) -> None:
        super().__init__(root, brokers, **kwargs)
        self.proxy_ports = {i: free_port() for i in self.client_ports}

    def raft_addr(self, broker: int) -> str:
        return f"127.0.0.1:{self.proxy_ports[broker]}"

    def real_raft_addr(self, broker: int) -> str:
        return f"127.0.0.1:{self.raft_ports[broker]}"

    def env(self, broker: int) -> dict[str, str]:
        return {**super().env(broker), BIND_ENV: self.real_raft_addr(broker)}

    def routes(self) -> dict[int, tuple[str, str]]:
        return {i: (self.raft_addr(i), self.real_raft_addr(i)) for i in self.client_ports}


class Consumers:
    """Consumer processes; slot k's n-th incarnation logs to ``consumer-<k>-<n>.jsonl``."""

    def __init__(self, root: Path, bootstrap: str, log: EventLog) -> None:
        self.root, self.bootstrap, self.log = root, bootstrap, log
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.incarnation: dict[int, int] = {}

    def name(self, k: int) -> str:
        return f"consumer-{k}-{self.incarnation[k]}"

    def start(self, k: int) -> None:
        self.incarnation[k] = self.incarnation.get(k, -1) + 1
        name = self.name(k)
        out = (self.root / f"{name}.out").open("ab")
        log = str(self.root / f"{name}.jsonl")
        args = ["--bootstrap", self.bootstrap, "--group", GROUP, "--log", log]
        for topic in TOPICS:
            args += ["--topic", topic]
        args += ["--lease-ms", str(LEASE_MS)]
        self.procs[k] = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.consumer", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        self.log.write("consumer_start", log=f"{name}.jsonl")

    def kill(self, k: int) -> None:
        self.log.write("consumer_kill", log=f"{self.name(k)}.jsonl")
        self.procs[k].send_signal(signal.SIGKILL)
        self.procs[k].wait(10)

    def stop_all(self) -> None:
        stop_processes(self.procs.values(), 20)


@dataclass
class Options:
    seed: int
    duration_s: float = 120.0
    consumers: int = 3
    rate: float = 25.0  # records a second per producer (two producers)
    settle_timeout_s: float = 180.0
    verbose: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class Harness:
    def __init__(self, root: Path, options: Options) -> None:
        self.root = root
        self.options = options
        root.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(root / "workload.jsonl")
        self.cluster = ChaosCluster(root / "cluster", 3, env=BROKER_ENV, metrics=True)
        self.proxy = RaftProxy(self.cluster.routes())
        self.consumers = Consumers(root, self.cluster.bootstrap, self.log)
        self.schedule = make_schedule(options.seed, options.duration_s, 3, options.consumers)

    def say(self, what: str) -> None:
        if self.options.verbose:
            print(f"chaos[seed={self.options.seed}] {what}", flush=True)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> Report:
        o = self.options
        self.log.write(
            "config",
            seed=o.seed,
            duration_s=o.duration_s,
            group=GROUP,
            topics=list(TOPICS),
            fifo_topics=[FIFO],
            max_deliveries=MAX_DELIVERIES,
            lease_ms=LEASE_MS,
            schedule=[f.describe() for f in self.schedule],
        )
        self.say(f"{len(self.schedule)} faults scheduled over {o.duration_s:.0f} s in {self.root}")
        self.proxy.start()
        self.cluster.start()
        try:
            self.cluster.wait_ready(90)
            self._create_topics()
            for k in range(o.consumers):
                self.consumers.start(k)
            loads = [
                ProducerLoad(
                    "f",
                    self.cluster.bootstrap,
                    FIFO,
                    self.log,
                    seed=o.seed,
                    rate=o.rate,
                    priorities=False,
                ),
                ProducerLoad(
                    "p",
                    self.cluster.bootstrap,
                    PRIO,
                    self.log,
                    seed=o.seed,
                    rate=o.rate,
                    priorities=True,
                ),
            ]
            for load in loads:
                load.start()
            self._inject_all()
            self._heal_everything()
            for load in loads:
                load.stop()
            self.say(f"load stopped: {sum(x.sent for x in loads)} send attempts")
            settled = self._settle()
            self.consumers.stop_all()
            self._final_state(settled)
            self._compare_replicas()
        finally:
            self.consumers.stop_all()
            self.cluster.stop()
            self.proxy.close()
            self.log.close()
        report = check(self.root)
        (self.root / "report.json").write_text(json.dumps(report.summary(), indent=2))
        return report

    def _create_topics(self) -> None:
        admin = self.cluster.admin()
        for topic, ordering in ((FIFO, "fifo"), (PRIO, "priority")):
            admin.create_topic(
                topic, 3, 3, ordering=ordering, max_deliveries=MAX_DELIVERIES, lease_ms=LEASE_MS
            )
            self.cluster.wait_leaders(topic, 60)

    # -- faults ---------------------------------------------------------------------------------

    def _inject_all(self) -> None:
        start = time.monotonic()
        for fault in self.schedule:
            delay = start + fault.at_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the schedule's own clock, not a wait for a condition
            self.say(
                f"t={time.monotonic() - start:6.1f}s fault {fault.kind} {fault.targets} "
                f"{fault.mode} for {fault.duration_s}s"
            )
            self.log.write("fault", **fault.describe())
            self._inject(fault)
            time.sleep(fault.duration_s)
            self._heal(fault)
            self.log.write("heal", kind=fault.kind, targets=list(fault.targets))
        rest = start + self.options.duration_s - time.monotonic()
        if rest > 0:
            time.sleep(rest)

    def _inject(self, fault: Fault) -> None:
        c = self.cluster
        if fault.kind == "kill":
            c.kill(fault.targets[0])
        elif fault.kind == "pause":
            c.kill(fault.targets[0], signal.SIGSTOP)
        elif fault.kind == "power":
            for i in fault.targets:
                c.procs[i].send_signal(signal.SIGKILL)
            for i in fault.targets:
                c.procs[i].wait(30)
        elif fault.kind == "isolate":
            for other in c.client_ports:
                if other != fault.targets[0]:
                    self.proxy.cut(fault.targets[0], other, fault.mode)
        elif fault.kind == "link":
            self.proxy.cut(fault.targets[0], fault.targets[1], fault.mode)
        elif fault.kind == "consumer":
            self.consumers.kill(fault.targets[0])
        else:
            raise AssertionError(f"unknown fault {fault.kind}")

    def _heal(self, fault: Fault) -> None:
        c = self.cluster
        if fault.kind in ("kill", "power"):
            for i in fault.targets:
                c.start(i)
        elif fault.kind == "pause":
            c.kill(fault.targets[0], signal.SIGCONT)
        elif fault.kind in ("isolate", "link"):
            self.proxy.heal_all()
        elif fault.kind == "consumer":
            self.consumers.start(fault.targets[0])

    def _heal_everything(self) -> None:
        self.proxy.heal_all()
        for i, proc in self.cluster.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            else:
                self.cluster.start(i)

    # -- the end --------------------------------------------------------------------------------

    def _expected_dlq(self) -> set[tuple[str, int, int]]:
        """Acknowledged poison records: each must reach the dead-letter topic."""
        ok: set[tuple[str, int, int]] = set()
        sends: dict[str, str] = {}
        for line in (self.root / "workload.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e["ev"] == "send":
                sends[e["id"]] = e["topic"]
            elif e["ev"] == "sent" and e["ok"] and e["id"].startswith("P"):
                ok.add((sends[e["id"]], e["partition"], e["offset"]))
        return ok

    def _settle(self) -> bool:
        """Wait until the group has settled every record (lag 0 everywhere) and every
        acknowledged poison record is in its dead-letter topic."""
        admin = self.cluster.admin()
        expected = self._expected_dlq()

        def settled() -> bool:
            try:
                lags = admin.describe_group(GROUP).partitions
                if len(lags) < 3 * len(TOPICS) or any(p.lag for p in lags):
                    return False
                found = {origin for _, _, origin in dlq_records(admin)}
            except errors.RaftqError:
                return False
            return expected <= found

        start = time.monotonic()
        try:
            wait_until(
                settled, self.options.settle_timeout_s, "the group to settle", interval_max_s=1.0
            )
        except AssertionError:
            self.say("NOT settled: the checker will report what is missing")
            return False
        self.say(f"settled in {time.monotonic() - start:.1f} s")
        return True

    def _final_state(self, settled: bool) -> None:
        admin = self.cluster.admin()
        logs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for topic in (*TOPICS, *(f"{t}.dlq" for t in TOPICS)):
            try:
                logs[topic] = read_log(admin, topic)
            except errors.UnknownTopic:
                logs[topic] = {}
        lags = [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "end": p.end,
                "lag": p.lag,
                "pending": p.pending,
            }
            for p in admin.describe_group(GROUP).partitions
        ]
        state = {"settled": settled, "logs": logs, "group": lags}
        (self.root / "final.json").write_text(json.dumps(state))

    def _compare_replicas(self) -> None:
        """Stop the cluster cleanly once every replica is in sync, then hash each replica's
        canonical dump; the checker compares replicas at the same applied index."""
        admin = self.cluster.admin()
        topics = [*TOPICS, *(f"{t}.dlq" for t in TOPICS)]

        def in_sync() -> bool:
            try:
                for topic in topics:
                    for p in admin.describe_topic(topic).partitions:
                        if sorted(p.isr) != sorted(p.replicas):
                            return False
            except errors.RaftqError:
                return False
            return True

        def applied_equal() -> bool:
            indexes: dict[str, set[int]] = {}
            for i in self.cluster.client_ports:
                for group, index in applied_indexes(self.cluster.metrics_url(i)).items():
                    indexes.setdefault(group, set()).add(index)
            return bool(indexes) and all(len(v) == 1 for k, v in indexes.items() if k != "meta")

        try:
            wait_until(in_sync, 60, "replicas in sync", interval_max_s=0.5)
            wait_until(applied_equal, 30, "equal applied indexes", interval_max_s=0.2)
        except (AssertionError, OSError):
            self.say("replicas not all at one applied index before the stop")
        self.consumers.stop_all()
        self.cluster.stop()
        replicas = replica_digests(self.cluster.root, sorted(self.cluster.client_ports))
        (self.root / "replicas.json").write_text(json.dumps(replicas, indent=1))


def applied_indexes(metrics_url: str) -> dict[str, int]:
    """Raft group -> applied index, from a broker's Prometheus text."""
    out: dict[str, int] = {}
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("raftq_raft_applied_index{"):
            match = re.search(r'raft_group="([^"]*)"', line)
            if match:
                out[match.group(1)] = int(float(line.rsplit(" ", 1)[1]))
    return out


def replica_digests(root: Path, brokers: list[int]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per partition replica (Raft group name) and broker: the applied index and the SHA-256 of
    the store's canonical dump. Run on a stopped cluster."""
    replicas: dict[str, dict[str, dict[str, Any]]] = {}
    for i in brokers:
        for path in sorted((root / f"broker-{i}").rglob("p.*.sqlite")):
            store = SqliteStore(str(path))
            try:
                dump = store.dump()
            finally:
                store.close()
            replicas.setdefault(path.stem, {})[str(i)] = {
                "applied": dump["meta"].applied_index,
                "sha256": hashlib.sha256(repr(dump).encode()).hexdigest(),
            }
    return replicas


def read_log(admin: Admin, topic: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for p in admin.list_offsets(topic):
        records: list[dict[str, Any]] = []
        offset = p.log_start
        while offset < p.end:
            batch = admin.fetch(topic, p.partition, offset, max_records=500)
            if not batch.records:
                break
            for r in batch.records:
                rec = r
                records.append(
                    {
                        "offset": r.offset,
                        "value": rec.value.decode("utf-8", "replace"),
                        "key": rec.key.decode("utf-8", "replace") if rec.key is not None else None,
                        "priority": rec.priority,
                        "deliver_at_ms": rec.deliver_at_ms,
                        "headers": {
                            k: v.decode("utf-8", "replace") for k, v in rec.headers.items()
                        },
                    }
                )
            offset = batch.records[-1].offset + 1
        out[str(p.partition)] = records
    return out


def dlq_records(admin: Admin) -> list[tuple[str, dict[str, Any], tuple[str, int, int]]]:
    """Every dead-lettered record: (dlq topic, record, origin (topic, partition, offset))."""
    out = []
    for topic in TOPICS:
        try:
            log = read_log(admin, f"{topic}.dlq")
        except errors.UnknownTopic:
            continue
        for records in log.values():
            for r in records:
                h = r["headers"]
                origin = (
                    h["raftq.dlq.topic"],
                    int(h["raftq.dlq.partition"]),
                    int(h["raftq.dlq.offset"]),
                )
                out.append((f"{topic}.dlq", r, origin))
    return out
