"""Replicated append through the client path on 3 broker processes: throughput and latency.

Three real broker processes (tests/cluster.py ``ProcessCluster``, default raft timings, journal
fsync on, SQLite ``synchronous=NORMAL``) on 127.0.0.1, one topic at RF 3. Issue 3's figures:

- **throughput on 1 and on 8 partitions**: ``--ca-clients`` client PROCESSES (the Python
  client's CPU is a bottleneck of its own), each with one ``raftq.client.Producer``
  (idempotent, ``linger_ms=5``, batches of up to 10,000 records / 1 MiB: the Producer's
  defaults), send
  ``--ca-records`` records of 100 B in all, round-robin over the topic's partitions, then
  flush. Records/s from the first send to the last acknowledgement of all clients.
- **single-record append latency**: ``Producer(linger_ms=0)``, one record at a time to one
  partition, each waited for; p50 and p99 over ``--ca-latency-sends`` sends.

The clients run on the same 2 cores as the brokers: the figure is the whole system's.

    python -m bench cluster_append [--ca-records 300000] [--ca-clients 4] [--quick] [--record]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import Result, at_least
from raftq.client import Producer
from raftq.config import ClientSettings
from tests.cluster import ProcessCluster

NAME = "cluster_append"
THROUGHPUT_GOAL = 150_000
P99_GOAL_MS = 5.0


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--ca-records", type=int, default=300_000, help="records per run")
    parser.add_argument("--ca-clients", type=int, default=4, help="client processes")
    parser.add_argument("--ca-latency-sends", type=int, default=2000, help="single sends")
    parser.add_argument(
        "--ca-partitions", default="1,8", help="comma-separated partition counts to measure"
    )


def _client(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    records: int,
    value_bytes: int,
    start_at: float,
) -> tuple[int, float, float]:
    """One client process: at ``start_at`` send ``records`` records round-robin over
    ``partitions``; returns (acknowledged, first send, last ack) on the monotonic clock
    (CLOCK_MONOTONIC: shared by the processes of one machine)."""
    value = b"x" * value_bytes
    with Producer(bootstrap) as producer:
        for p in partitions:  # metadata and channels before the clock starts
            producer.send(topic, value, partition=p).result(timeout=60)
        time.sleep(max(0.0, start_at - time.monotonic()))  # all clients start together
        started = time.monotonic()
        futures = [
            producer.send(topic, value, partition=partitions[i % len(partitions)])
            for i in range(records)
        ]
        producer.flush(timeout_s=300)
        acked = sum(1 for f in futures if f.exception() is None)
        done = time.monotonic()
    return acked, started, done


def measure_throughput(
    cluster: ProcessCluster, topic: str, partitions: int, records: int, clients: int
) -> tuple[float, int]:
    """Records/s and acknowledged records of one run over ``partitions`` partitions."""
    per_client = records // clients
    start_at = time.monotonic() + 10.0  # spawned clients import and connect first
    jobs = []
    for c in range(clients):
        mine = [p for p in range(partitions) if p % clients == c % partitions or partitions == 1]
        mine = mine or [c % partitions]
        jobs.append((cluster.bootstrap, topic, mine, per_client, 100, start_at))
    context = multiprocessing.get_context("spawn")
    with context.Pool(clients) as pool:
        outcomes = pool.starmap(_client, jobs)
    acked = sum(a for a, _, _ in outcomes)
    first = min(s for _, s, _ in outcomes)
    last = max(d for _, _, d in outcomes)
    return acked / (last - first), acked


def measure_latency(cluster: ProcessCluster, topic: str, sends: int) -> list[float]:
    """Milliseconds of each single-record send, waited for one at a time."""
    value = b"x" * 100
    samples = []
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        for _ in range(50):  # warm up: metadata, channels
            producer.send(topic, value, partition=0).result(timeout=30)
        for _ in range(sends):
            started = time.perf_counter()
            producer.send(topic, value, partition=0).result(timeout=30)
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(options: argparse.Namespace) -> list[Result]:
    records = 20_000 if options.quick else options.ca_records
    sends = 200 if options.quick else options.ca_latency_sends
    clients = options.ca_clients
    counts = [int(p) for p in options.ca_partitions.split(",")]
    results: list[Result] = []
    with (
        tempfile.TemporaryDirectory(prefix="raftq-cluster-append-") as tmp,
        ProcessCluster(Path(tmp), brokers=3, fast=False) as cluster,
    ):
        cluster.wait_ready()
        admin = cluster.admin()
        for partitions in counts:
            topic = f"append-{partitions}"
            admin.create_topic(topic, partitions=partitions, replication_factor=3)
            cluster.wait_leaders(topic)
        for partitions in counts:
            topic = f"append-{partitions}"
            runs = []
            for _ in range(options.repeat):
                rate, acked = measure_throughput(cluster, topic, partitions, records, clients)
                print(f"{partitions} partition(s): {rate:,.0f} records/s ({acked} acked)")
                runs.append(rate)
            results.append(
                at_least(
                    f"append {partitions} partition(s), RF 3",
                    statistics.median(runs),
                    "rec/s",
                    THROUGHPUT_GOAL,
                    f"{records:,} x 100 B, {clients} client processes (Producer, batches <= "
                    f"{ClientSettings().batch_records_max:,}, linger 5 ms), fsync on; runs "
                    + ", ".join(f"{r:,.0f}" for r in runs),
                )
            )
        samples = measure_latency(cluster, f"append-{counts[0]}", sends)
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    note = f"{sends} sends, Producer(linger_ms=0), one in flight, RF 3, fsync on"
    results.append(Result("single append latency p50", p50, "ms", note=note))
    results.append(
        Result("single append latency p99", p99, "ms", f"<= {P99_GOAL_MS}", p99 <= P99_GOAL_MS)
    )
    return results
