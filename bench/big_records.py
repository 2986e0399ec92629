"""``python -m bench big_records`` — 64 KiB records on 3 broker processes, one and several clients.

Issue 16's large-record figure without the rest of ``bench vs_nats``: three real broker
processes (tests/cluster.py ``ProcessCluster``, default raft timings, journal fsync on) on
127.0.0.1, topics at RF 3.

- **one client**: one ``Producer`` (its defaults) in this process sends ``--big-records``
  pipelined records of ``--big-bytes`` to partition 0 and flushes, exactly as vs_nats'
  ``_raftq_big`` does: records/s and MB/s from the first send to the flush.
- **broker CPU per MB** of the one-client run: the three brokers' user + system CPU seconds
  over the run per MB sent (/proc), the figure that holds when other work shares the cores.
- **several clients**: ``--big-clients`` client PROCESSES, each a ``Producer`` sending its
  share of ``--big-records`` to its own partition of a topic with one partition per client
  (partition leaders spread over the brokers), all starting together: MB/s from the first
  send to the last acknowledgement.

The clients share the machine's 2 cores with the brokers: the figure is the whole system's.

    python -m bench big_records [--big-records 300] [--big-clients 4] [--quick] [--record]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from bench.cluster_append import _client
from bench.common import Result
from bench.e2e import cpu_seconds
from raftq.client import Producer
from tests.cluster import ProcessCluster

NAME = "big_records"
MB = 1_000_000


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--big-records", type=int, default=300, help="records per run")
    parser.add_argument("--big-bytes", type=int, default=65536, help="bytes per record")
    parser.add_argument(
        "--big-clients", type=int, default=4, help="client processes of the several-clients run"
    )


def one_client(cluster: ProcessCluster, topic: str, records: int, size: int) -> float:
    """Records/s of one Producer sending ``records`` pipelined records to partition 0."""
    value = b"x" * size
    with Producer(cluster.bootstrap) as producer:
        producer.send(topic, value, partition=0).result(30)
        started = time.perf_counter()
        for _ in range(records):
            producer.send(topic, value, partition=0)
        producer.flush(600)
        return records / (time.perf_counter() - started)


def several_clients(
    cluster: ProcessCluster, topic: str, clients: int, records: int, size: int
) -> float:
    """Records/s of ``clients`` client processes, each on its own partition of ``topic``."""
    start_at = time.monotonic() + 10.0  # spawned clients import and connect first
    jobs = [
        (cluster.bootstrap, topic, [c], records // clients, size, start_at) for c in range(clients)
    ]
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        outcomes = pool.starmap(_client, jobs)
    acked = sum(a for a, _, _ in outcomes)
    first = min(s for _, s, _ in outcomes)
    last = max(d for _, _, d in outcomes)
    return acked / (last - first)


def run(options: argparse.Namespace) -> list[Result]:
    records = 40 if options.quick else options.big_records
    size = options.big_bytes
    clients = options.big_clients
    one: list[float] = []
    cpu: list[float] = []
    many: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="raftq-bench-big-") as tmp,
        ProcessCluster(Path(tmp), brokers=3, fast=False) as cluster,
    ):
        cluster.wait_ready()
        admin = cluster.admin()
        for r in range(options.repeat):
            admin.create_topic(f"big{r}", partitions=1, replication_factor=3)
            admin.create_topic(f"many{r}", partitions=clients, replication_factor=3)
            cluster.wait_leaders(f"big{r}")
            cluster.wait_leaders(f"many{r}")
            pids = [p.pid for p in cluster.procs.values()]
            before = cpu_seconds(pids)
            one.append(one_client(cluster, f"big{r}", records, size))
            cpu.append((cpu_seconds(pids) - before) / (records * size / MB))
            many.append(several_clients(cluster, f"many{r}", clients, records * 2, size))
            print(
                f"  round {r}: one client {one[-1]:,.0f} rec/s, {cpu[-1]:.3f} broker CPU s/MB, "
                f"{clients} clients {many[-1] * size / MB:,.1f} MB/s",
                flush=True,
            )
    what = f"{size:,} B records, RF 3, fsync on"
    return [
        Result(
            "big records, one client",
            statistics.median(one),
            "rec/s",
            note=f"{records} pipelined, {what}; MB/s {statistics.median(one) * size / MB:.1f}; "
            "runs " + ", ".join(f"{x:,.0f}" for x in one),
        ),
        Result(
            "big records, one client: broker CPU",
            statistics.median(cpu),
            "s/MB",
            note="3 brokers' CPU seconds per MB sent; runs " + ", ".join(f"{x:.3f}" for x in cpu),
        ),
        Result(
            f"big records, {clients} clients",
            statistics.median(many) * size / MB,
            "MB/s",
            note=f"{records * 2} in all, one partition each, {what}; runs "
            + ", ".join(f"{x * size / MB:.1f}" for x in many),
        ),
    ]
