"""End to end through gRPC: 3 broker processes, a topic at RF 3, fsync on, the Python client.

Three real broker processes (tests/cluster.py ``ProcessCluster``, the broker's default raft
timings and settings: journal fsync and SQLite ``synchronous=NORMAL``) on 127.0.0.1, and this
process as the client, all on the same machine. Per repetition (median reported):

- **produce**: one thread calls ``Producer.send`` for ``--e2e-records`` records of
  ``--e2e-value-bytes`` bytes (no key: spread over the partitions) and then ``flush``;
  records/s from the first send to the last acknowledgement (batched, idempotent producer).
- **consume+ack**: a fresh group of ``--e2e-consumers`` members (one thread each) leases and
  acks those records (``poll`` of up to ``--e2e-poll-records``, one ``ack`` per poll); records/s
  from the first poll to the last acknowledged ack.
- **single-send latency**: ``Producer(linger_ms=0)``, one record at a time, each waited for.
- **end-to-end latency**: a consumer long-polls a topic while single records are sent one at
  a time; from ``send`` to the consumer's ``poll`` returning the record (p50 / p99).

    python -m bench e2e [--e2e-records 200000] [--quick] [--record]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Result, at_least, median
from raftq.client import Consumer, Producer
from raftq.config import ClientSettings
from tests.cluster import ProcessCluster

NAME = "e2e"
PRODUCE_GOAL = 150_000
CONSUME_GOAL = 75_000
SEND_P99_GOAL_MS = 5.0
log = logging.getLogger("raftq.bench.e2e")


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--e2e-records", type=int, default=200_000, help="records per run")
    parser.add_argument("--e2e-value-bytes", type=int, default=100, help="bytes per value")
    parser.add_argument("--e2e-partitions", type=int, default=6, help="partitions of the topic")
    parser.add_argument("--e2e-consumers", type=int, default=3, help="members of the group")
    parser.add_argument("--e2e-poll-records", type=int, default=2000, help="max records a poll")
    parser.add_argument(
        "--e2e-batch-records",
        type=int,
        default=ClientSettings().batch_records_max,
        help="producer batch (default: the Producer's)",
    )
    parser.add_argument("--e2e-latency-samples", type=int, default=1000, help="sends timed")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes used so far (Linux /proc; 0 elsewhere)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def produce(
    cluster: ProcessCluster, topic: str, records: int, value_bytes: int, batch: int
) -> float:
    """Records/s of one producer sending ``records`` records and flushing."""
    value = b"x" * value_bytes
    with Producer(cluster.bootstrap, batch_records_max=batch) as producer:
        producer.send(topic, value).result(30)  # metadata and channels warm
        started = time.perf_counter()
        futures = [producer.send(topic, value) for _ in range(records)]
        producer.flush(600)
        elapsed = time.perf_counter() - started
    failed = sum(1 for f in futures if f.exception() is not None)
    if failed:
        raise RuntimeError(f"{failed} of {records} sends failed")
    return records / elapsed


def consume(
    cluster: ProcessCluster, topic: str, group: str, records: int, members: int, poll: int
) -> float:
    """Records/s of a fresh group leasing and acking ``records`` records."""
    addresses = [cluster.client_addr(i) for i in sorted(cluster.client_ports)]
    consumers = [
        Consumer(addresses[i % 3 :] + addresses[: i % 3], group, [topic], max_poll_records=poll)
        for i in range(members)
    ]
    acked = [0] * members
    lock = threading.Lock()
    done = threading.Event()
    total = [0]

    def run(i: int) -> None:
        consumer = consumers[i]
        while not done.is_set():
            messages = consumer.poll(poll, 200)
            if not messages:
                continue
            outcomes = consumer.ack(messages)
            ok = sum(1 for o in outcomes if o is None)
            acked[i] += ok
            with lock:
                total[0] += ok
                if total[0] >= records:
                    done.set()

    try:
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(members)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        if not done.wait(600):
            raise RuntimeError(f"only {total[0]} of {records} records acked in 600 s")
        elapsed = time.perf_counter() - started
        for t in threads:
            t.join(30)
    finally:
        for c in consumers:
            c.close()
    return records / elapsed


def send_latency(cluster: ProcessCluster, topic: str, samples: int) -> list[float]:
    """Milliseconds of single sends, one at a time (linger 0)."""
    out = []
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        for _ in range(20):  # warm-up
            producer.send(topic, b"w", partition=0).result(30)
        for i in range(samples):
            started = time.perf_counter()
            producer.send(topic, b"l%d" % i, partition=i % 6).result(30)
            out.append((time.perf_counter() - started) * 1000)
    return out


def end_to_end_latency(cluster: ProcessCluster, topic: str, samples: int) -> list[float]:
    """Milliseconds from send to a long-polling consumer's poll returning the record."""
    sent_at: dict[bytes, float] = {}
    latencies: list[float] = []
    arrived = threading.Semaphore(0)
    stop = threading.Event()
    consumer = Consumer(cluster.bootstrap, f"{topic}-latency", [topic])  # an empty topic

    def run() -> None:
        while not stop.is_set():
            messages = consumer.poll(100, 500)
            now = time.perf_counter()
            for m in messages:
                at = sent_at.get(m.value)
                if at is not None:
                    latencies.append((now - at) * 1000)
                    arrived.release()
            consumer.ack(messages)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            for i in range(samples + 20):
                value = b"e%d" % i
                sent_at[value] = time.perf_counter()
                producer.send(topic, value).result(30)
                if not arrived.acquire(timeout=30):
                    raise RuntimeError(f"record {i} not delivered in 30 s")
    finally:
        stop.set()
        thread.join(5)
        consumer.close()
    return latencies[20:]


def run(options: argparse.Namespace) -> list[Any]:
    quick = getattr(options, "quick", False)
    records = 20_000 if quick else options.e2e_records
    samples = 100 if quick else options.e2e_latency_samples
    partitions = options.e2e_partitions
    produced: list[float] = []
    consumed: list[float] = []
    cpu_us: dict[str, list[float]] = {"produce": [], "consume": []}
    sends: list[float] = []
    e2e: list[float] = []
    logging.getLogger("raftq").setLevel(logging.WARNING)
    with (
        tempfile.TemporaryDirectory(prefix="raftq-bench-e2e-") as tmp,
        ProcessCluster(Path(tmp), fast=False) as cluster,
    ):
        cluster.wait_ready()
        admin = cluster.admin()
        pids = [os.getpid(), *(p.pid for p in cluster.procs.values())]
        for r in range(options.repeat):
            topic = f"bench-{r}"
            admin.create_topic(topic, partitions=partitions, replication_factor=3)
            cluster.wait_leaders(topic)
            before = cpu_seconds(pids)
            produced.append(
                produce(cluster, topic, records, options.e2e_value_bytes, options.e2e_batch_records)
            )
            cpu_us["produce"].append((cpu_seconds(pids) - before) / records * 1e6)
            print(f"  produce run {r}: {produced[-1]:,.0f} records/s", flush=True)
            before = cpu_seconds(pids)
            consumed.append(
                consume(
                    cluster,
                    topic,
                    f"bench-group-{r}",
                    records + 1,  # the warm-up record too
                    options.e2e_consumers,
                    options.e2e_poll_records,
                )
            )
            cpu_us["consume"].append((cpu_seconds(pids) - before) / records * 1e6)
            print(f"  consume+ack run {r}: {consumed[-1]:,.0f} records/s", flush=True)
        for topic in ("latency", "latency-e2e"):
            admin.create_topic(topic, partitions=partitions, replication_factor=3)
            cluster.wait_leaders(topic)
        sends = send_latency(cluster, "latency", samples)
        e2e = end_to_end_latency(cluster, "latency-e2e", samples)
    note = f"{records:,} x {options.e2e_value_bytes} B, {partitions} partitions RF 3, fsync on"
    p99 = percentile(sends, 0.99)
    return [
        at_least("e2e produce", round(median(produced)), "rec/s", PRODUCE_GOAL, note),
        at_least(
            "e2e consume+ack",
            round(median(consumed)),
            "rec/s",
            CONSUME_GOAL,
            f"{options.e2e_consumers} members, poll {options.e2e_poll_records}, ack per poll",
        ),
        Result(
            "produce CPU per record",
            round(median(cpu_us["produce"]), 1),
            "us",
            note="client + 3 brokers; 2 cores allow at most 2e6 / this records/s",
        ),
        Result(
            "consume+ack CPU per record",
            round(median(cpu_us["consume"]), 1),
            "us",
            note="client + 3 brokers",
        ),
        Result("single send p50", round(statistics.median(sends), 2), "ms"),
        Result(
            "single send p99",
            round(p99, 2),
            "ms",
            f"<= {SEND_P99_GOAL_MS}",
            p99 <= SEND_P99_GOAL_MS,
            f"{len(sends)} sends, linger 0, one at a time",
        ),
        Result("end-to-end p50", round(statistics.median(e2e), 2), "ms"),
        Result(
            "end-to-end p99",
            round(percentile(e2e, 0.99), 2),
            "ms",
            note=f"{len(e2e)} records, send -> long-polling consumer",
        ),
    ]
