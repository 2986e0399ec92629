"""``python -m bench http_api`` — the HTTP/JSON API (``raftq console``) beside the gRPC client.

Three real broker processes (RF 3, fsync on) and a ``raftq console`` process in front of them;
one HTTP client (httpx, keep-alive) at a time, as a curl user or a small service would call it.
Each round: enqueue N records (100 B) in requests of ``--http-batch`` records, then one record
per request (latency), then dequeue + ack by id in requests of ``--http-batch``, and the thread
Producer and Consumer doing the same over gRPC for scale. Figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import Result, median
from raftq.client import Consumer, Producer
from tests.cluster import ProcessCluster
from tests.web_harness import ConsoleProcess

NAME = "http_api"
PARTITIONS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--http-records", type=int, default=20_000, help="records per run")
    parser.add_argument("--http-batch", type=int, default=100, help="records per request")


def _enqueue(client: httpx.Client, topic: str, records: int, batch: int) -> float:
    body = {"records": [{"value": "x" * 100}] * batch}
    started = time.perf_counter()
    for _ in range(records // batch):
        answer = client.post(f"/topics/{topic}/records", json=body)
        assert answer.status_code == 200 and all(r["ok"] for r in answer.json()["results"])
    return (records // batch) * batch / (time.perf_counter() - started)


def _enqueue_one_ms(client: httpx.Client, topic: str, requests: int) -> float:
    took: list[float] = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.post(f"/topics/{topic}/records", json={"records": [{"value": "x"}]})
        took.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, answer.text
    return median(took)


def _dequeue_ack(client: httpx.Client, topic: str, records: int, batch: int) -> float:
    body: dict[str, Any] = {"topic": topic, "max_records": batch, "wait_ms": 1_000}
    started = time.perf_counter()
    done = 0
    while done < records:
        got = client.post("/groups/http/dequeue", json=body).json()["records"]
        if got:
            acked = client.post("/groups/http/ack", json={"ids": [m["id"] for m in got]})
            assert all(r["ok"] for r in acked.json()["results"]), acked.text
        done += len(got)
    return records / (time.perf_counter() - started)


def _grpc(bootstrap: str, topic: str, records: int, batch: int) -> tuple[float, float]:
    value = b"x" * 100
    started = time.perf_counter()
    with Producer(bootstrap) as producer:
        for _ in range(records):
            producer.send(topic, value)
        producer.flush()
    produced = records / (time.perf_counter() - started)
    started = time.perf_counter()
    done = 0
    with Consumer(bootstrap, "grpc", [topic]) as consumer:
        while done < records:
            messages = consumer.poll(batch, 1000)
            consumer.ack(messages)
            done += len(messages)
    return produced, records / (time.perf_counter() - started)


def run(options: argparse.Namespace) -> list[Result]:
    records = 2_000 if options.quick else options.http_records
    batch = options.http_batch
    figures: dict[str, list[float]] = {k: [] for k in ("enq", "one", "deq", "gp", "gc")}
    logging.getLogger("raftq").setLevel(logging.WARNING)
    with (
        tempfile.TemporaryDirectory(prefix="raftq-bench-http-") as tmp,
        ProcessCluster(Path(tmp), fast=False) as cluster,
    ):
        console = ConsoleProcess(Path(tmp), cluster.bootstrap)
        try:
            cluster.wait_ready()
            console.wait_ready()
            admin = cluster.admin()
            with httpx.Client(base_url=console.url + "/api/v1", timeout=60) as client:
                for r in range(options.repeat):
                    for kind in ("http", "grpc"):
                        admin.create_topic(f"{kind}-{r}", partitions=PARTITIONS)
                        cluster.wait_leaders(f"{kind}-{r}")
                    figures["enq"].append(_enqueue(client, f"http-{r}", records, batch))
                    figures["deq"].append(_dequeue_ack(client, f"http-{r}", records, batch))
                    figures["one"].append(_enqueue_one_ms(client, f"http-{r}", 200))
                    produced, consumed = _grpc(cluster.bootstrap, f"grpc-{r}", records, batch)
                    figures["gp"].append(produced)
                    figures["gc"].append(consumed)
                    print(
                        f"  run {r}: HTTP enqueue {figures['enq'][-1]:,.0f}, dequeue+ack "
                        f"{figures['deq'][-1]:,.0f} rec/s, one record {figures['one'][-1]:.1f} ms;"
                        f" gRPC {produced:,.0f} / {consumed:,.0f} rec/s",
                        flush=True,
                    )
        finally:
            console.stop()
    enq, one, deq, gp, gc = (median(figures[k]) for k in ("enq", "one", "deq", "gp", "gc"))
    note = f"{records:,} x 100 B, {PARTITIONS} partitions RF 3, {batch} per request"
    return [
        Result("HTTP enqueue", round(enq), "rec/s", note=f"{note}; {enq / gp:.2f}x gRPC Producer"),
        Result("HTTP enqueue, one record per request", round(one, 1), "ms", note="median"),
        Result("HTTP dequeue + ack by id", round(deq), "rec/s", note=f"{deq / gc:.2f}x gRPC"),
        Result("gRPC thread Producer", round(gp), "rec/s", note="same cluster, for scale"),
        Result("gRPC thread Consumer consume+ack", round(gc), "rec/s", note="poll + ack"),
    ]
