"""``python -m bench vs_nats`` — raftq and a NATS JetStream cluster side by side, one run.

Both run here as 3 server processes on 127.0.0.1 with 3 replicas and file storage (fsync as
each ships: raftq fsyncs its journal before acknowledging; JetStream's default syncs every
2 minutes, so this compares raftq's durability with NATS's defaults, as the issue's table
does). NATS is Debian's ``nats-server`` package (2.9.x, ``apt-get install nats-server``)
driven by nats-py from PyPI: a benchmark dependency only (the ``bench`` extra), never a
runtime one. Each figure is measured on both systems in alternation, round by round, so the
VM's drift hits both alike; the table gives medians and the raftq/NATS ratio.

Figures (issue 16's table):
- single send p50/p99: 300 sends of 100 B one at a time (raftq Producer, linger 0; NATS
  ``js.publish`` awaited);
- end-to-end p50/p99 at 2,000 rec/s: a paced producer and a consumer that acks (raftq long
  poll; NATS pull consumer), latency from send to receipt;
- 64 KiB records, one client: records/s and MB/s of 300 records (pipelined on both);
- disk per 100 B record on one replica after 20,000 records;
- idle CPU per server over 5 s with 48 partitions (raftq) / 48 streams (NATS).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.big_records import one_client
from bench.common import Result
from bench.e2e import cpu_seconds, percentile
from raftq.client import Consumer, Producer
from tests.cluster import ProcessCluster
from tests.helpers import free_port, stop_processes

NAME = "vs_nats"
IDLE_GROUPS = 48


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nats-samples", type=int, default=300, help="single sends per round")


# --- NATS ------------------------------------------------------------------------------------


class NatsCluster:
    """Three nats-server processes with JetStream, clustered on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not os.path.exists(binary):
            raise RuntimeError("nats-server is missing: apt-get install nats-server")
        self.root = root
        self.client_ports = [free_port() for _ in range(3)]
        routes = [free_port() for _ in range(3)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for i in range(3):
            store = root / f"n{i + 1}"
            store.mkdir(parents=True)
            others = ", ".join(f"nats-route://127.0.0.1:{routes[j]}" for j in range(3) if j != i)
            config = root / f"n{i + 1}.conf"
            config.write_text(
                f'server_name: n{i + 1}\nlisten: "127.0.0.1:{self.client_ports[i]}"\n'
                f'jetstream {{ store_dir: "{store}" }}\n'
                f'cluster {{ name: bench, listen: "127.0.0.1:{routes[i]}", routes: [{others}] }}\n'
            )
            log = (root / f"n{i + 1}.log").open("wb")
            self.procs.append(
                subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
            )

    @property
    def servers(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        stop_processes(self.procs, 10)


async def _nats_ready(servers: list[str]) -> None:
    import nats

    deadline = time.monotonic() + 60
    while True:
        try:
            nc = await nats.connect(servers=servers, connect_timeout=2)
            try:
                await nc.jetstream().account_info()
                return
            finally:
                await nc.close()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _nats_stream(js: Any, name: str) -> None:
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(
        name=name, subjects=[f"{name}.>"], num_replicas=3, storage=StorageType.FILE
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            await js.add_stream(config)
            return
        except Exception:  # no meta leader yet right after start
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _nats_send_latency(servers: list[str], stream: str, samples: int) -> list[float]:
    import nats

    nc = await nats.connect(servers=servers)
    js = nc.jetstream()
    await _nats_stream(js, stream)
    for _ in range(20):
        await js.publish(f"{stream}.w", b"w")
    out = []
    for i in range(samples):
        started = time.perf_counter()
        await js.publish(f"{stream}.s", b"l%d" % i)
        out.append((time.perf_counter() - started) * 1000)
    await nc.close()
    return out


async def _nats_e2e(servers: list[str], stream: str, rate: int, seconds: float) -> list[float]:
    import nats

    nc = await nats.connect(servers=servers)
    js = nc.jetstream()
    await _nats_stream(js, stream)
    sub = await js.pull_subscribe(f"{stream}.>", durable=f"{stream}-d")
    latencies: list[float] = []
    stop = asyncio.Event()

    async def consume() -> None:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(100, timeout=0.5)
            except Exception:  # nats.errors.TimeoutError when nothing is there
                continue
            now = time.perf_counter()
            for m in msgs:
                latencies.append((now - float(m.data.decode())) * 1000)
                await m.ack()

    task = asyncio.create_task(consume())
    count = int(rate * seconds)
    started = time.perf_counter()
    for i in range(count):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await js.publish(f"{stream}.e", repr(time.perf_counter()).encode())
    await asyncio.sleep(1.0)
    stop.set()
    await task
    await nc.close()
    return latencies


async def _nats_big(servers: list[str], stream: str, records: int, size: int) -> float:
    import nats

    nc = await nats.connect(servers=servers)
    js = nc.jetstream()
    await _nats_stream(js, stream)
    value = b"x" * size
    window = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with window:
            await js.publish(f"{stream}.b", value)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(records)))
    elapsed = time.perf_counter() - started
    await nc.close()
    return records / elapsed


async def _nats_fill(servers: list[str], stream: str, records: int) -> None:
    import nats

    nc = await nats.connect(servers=servers)
    js = nc.jetstream()
    await _nats_stream(js, stream)
    window = asyncio.Semaphore(256)

    async def one(i: int) -> None:
        async with window:
            await js.publish(f"{stream}.f", b"x" * 100)

    await asyncio.gather(*(one(i) for i in range(records)))
    await nc.close()


async def _nats_streams(servers: list[str], count: int) -> None:
    import nats

    nc = await nats.connect(servers=servers)
    js = nc.jetstream()
    for i in range(count):
        await _nats_stream(js, f"idle{i}")
    await nc.close()


# --- raftq -----------------------------------------------------------------------------------


def _raftq_send_latency(cluster: ProcessCluster, topic: str, samples: int) -> list[float]:
    out = []
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        for _ in range(20):
            producer.send(topic, b"w", partition=0).result(30)
        for i in range(samples):
            started = time.perf_counter()
            producer.send(topic, b"l%d" % i, partition=0).result(30)
            out.append((time.perf_counter() - started) * 1000)
    return out


def _raftq_e2e(cluster: ProcessCluster, topic: str, rate: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    stop = threading.Event()
    consumer = Consumer(cluster.bootstrap, f"{topic}-g", [topic])

    def consume() -> None:
        while not stop.is_set():
            messages = consumer.poll(100, 200)
            now = time.perf_counter()
            latencies.extend((now - float(m.value.decode())) * 1000 for m in messages)
            consumer.ack_async(messages)  # as the NATS consumer's msg.ack(): no wait

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    count = int(rate * seconds)
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        started = time.perf_counter()
        for i in range(count):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send(topic, repr(time.perf_counter()).encode(), partition=0)
        producer.flush(60)
    time.sleep(1.0)
    stop.set()
    thread.join(10)
    consumer.close()
    return latencies


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --- the run ---------------------------------------------------------------------------------


def run(options: argparse.Namespace) -> list[Result]:
    quick = options.quick
    samples = 50 if quick else options.nats_samples
    e2e_s = 1.0 if quick else 5.0
    big = 50 if quick else 300
    fill = 2_000 if quick else 20_000
    rounds = 1 if quick else options.repeat
    figures: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        figures.setdefault(key, []).append(value)

    with tempfile.TemporaryDirectory(prefix="raftq-bench-nats-") as tmp:
        root = Path(tmp)
        nats_cluster = NatsCluster(root / "nats")
        try:
            with ProcessCluster(root / "raftq", fast=False) as cluster:
                cluster.wait_ready()
                asyncio.run(_nats_ready(nats_cluster.servers))
                admin = cluster.admin()
                for r in range(rounds):
                    for name in ("lat", "e2e", "big"):
                        admin.create_topic(f"{name}{r}", partitions=1, replication_factor=3)
                    cluster.wait_leaders(f"lat{r}")
                    sends = _raftq_send_latency(cluster, f"lat{r}", samples)
                    note("raftq send p50", statistics.median(sends))
                    note("raftq send p99", percentile(sends, 0.99))
                    sends = asyncio.run(
                        _nats_send_latency(nats_cluster.servers, f"lat{r}", samples)
                    )
                    note("nats send p50", statistics.median(sends))
                    note("nats send p99", percentile(sends, 0.99))
                    cluster.wait_leaders(f"e2e{r}")
                    e2e = _raftq_e2e(cluster, f"e2e{r}", 2000, e2e_s)
                    note("raftq e2e p50", statistics.median(e2e))
                    note("raftq e2e p99", percentile(e2e, 0.99))
                    e2e = asyncio.run(_nats_e2e(nats_cluster.servers, f"e2e{r}", 2000, e2e_s))
                    note("nats e2e p50", statistics.median(e2e))
                    note("nats e2e p99", percentile(e2e, 0.99))
                    cluster.wait_leaders(f"big{r}")
                    note("raftq 64k", one_client(cluster, f"big{r}", big, 65536))
                    note(
                        "nats 64k",
                        asyncio.run(_nats_big(nats_cluster.servers, f"big{r}", big, 65536)),
                    )
                    print(
                        f"  round {r}: "
                        + ", ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items()),
                        flush=True,
                    )

                admin.create_topic("fill", partitions=1, replication_factor=3)
                cluster.wait_leaders("fill")
                before = _dir_bytes(cluster.root / "broker-1" / "partitions")
                with Producer(cluster.bootstrap) as producer:
                    for _ in range(fill):
                        producer.send("fill", b"x" * 100, partition=0)
                    producer.flush(600)
                note(
                    "raftq disk",
                    (_dir_bytes(cluster.root / "broker-1" / "partitions") - before) / fill,
                )
                before = _dir_bytes(nats_cluster.root / "n1")
                asyncio.run(_nats_fill(nats_cluster.servers, "fill", fill))
                time.sleep(2)
                note("nats disk", (_dir_bytes(nats_cluster.root / "n1") - before) / fill)

                admin.create_topic("idle", partitions=IDLE_GROUPS, replication_factor=3)
                cluster.wait_leaders("idle")
                asyncio.run(_nats_streams(nats_cluster.servers, IDLE_GROUPS))
                time.sleep(5)
                raftq_pids = [p.pid for p in cluster.procs.values()]
                a, b = cpu_seconds(raftq_pids), cpu_seconds(nats_cluster.pids())
                time.sleep(5)
                note("raftq idle", (cpu_seconds(raftq_pids) - a) / 5 / 3)
                note("nats idle", (cpu_seconds(nats_cluster.pids()) - b) / 5 / 3)
        finally:
            nats_cluster.stop()

    med = {k: statistics.median(v) for k, v in figures.items()}

    def pair(metric: str, key: str, unit: str, digits: int = 2) -> Result:
        ours, theirs = med[f"raftq {key}"], med[f"nats {key}"]
        ratio = ours / theirs if theirs else float("inf")
        return Result(
            metric,
            round(ours, digits),
            unit,
            note=f"NATS {theirs:.{digits}f} {unit}; raftq/NATS {ratio:.2f}x",
        )

    return [
        pair("single send p50", "send p50", "ms"),
        pair("single send p99", "send p99", "ms"),
        pair("end-to-end p50 at 2,000 rec/s", "e2e p50", "ms"),
        pair("end-to-end p99 at 2,000 rec/s", "e2e p99", "ms"),
        pair("64 KiB records, one client", "64k", "rec/s", 0),
        pair("disk per 100 B record, one replica", "disk", "B", 0),
        pair(f"idle CPU per server ({IDLE_GROUPS} partitions/streams)", "idle", "core", 4),
    ]
