"""``python -m bench aio_client`` — the asyncio client beside the thread client, one cluster.

Three real broker processes (RF 3, fsync on). Each round, interleaved so the VM's drift hits
both alike: the thread Producer and the AsyncProducer each send N records (100 B, 8
partitions; sync: send + flush; async: gather of sends), then a thread Consumer and an
AsyncConsumer each consume and ack them (their own group). Figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from pathlib import Path

from bench.common import Result, median
from raftq.client import Consumer, Producer
from raftq.client.aio import AsyncConsumer, AsyncProducer
from tests.cluster import ProcessCluster

NAME = "aio_client"
PARTITIONS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--aio-records", type=int, default=50_000, help="records per run")


def _sync_produce(bootstrap: str, topic: str, records: int) -> float:
    value = b"x" * 100
    started = time.perf_counter()
    with Producer(bootstrap) as producer:
        for _ in range(records):
            producer.send(topic, value)
        producer.flush()
    return records / (time.perf_counter() - started)


async def _async_produce(bootstrap: str, topic: str, records: int) -> float:
    value = b"x" * 100
    started = time.perf_counter()
    async with AsyncProducer(bootstrap) as producer:
        await asyncio.gather(*(producer.send(topic, value) for _ in range(records)))
    return records / (time.perf_counter() - started)


def _sync_consume(bootstrap: str, topic: str, group: str, records: int) -> float:
    started = time.perf_counter()
    done = 0
    with Consumer(bootstrap, group, [topic]) as consumer:
        while done < records:
            messages = consumer.poll(500, 1000)
            consumer.ack(messages)
            done += len(messages)
    return records / (time.perf_counter() - started)


async def _async_consume(bootstrap: str, topic: str, group: str, records: int) -> float:
    started = time.perf_counter()
    done = 0
    async with AsyncConsumer(bootstrap, group, [topic]) as consumer:
        while done < records:
            messages = await consumer.poll(500, 1000)
            await consumer.ack(messages)
            done += len(messages)
    return records / (time.perf_counter() - started)


def run(options: argparse.Namespace) -> list[Result]:
    records = 5_000 if options.quick else options.aio_records
    figures: dict[str, list[float]] = {k: [] for k in ("sp", "ap", "sc", "ac")}
    logging.getLogger("raftq").setLevel(logging.WARNING)
    with (
        tempfile.TemporaryDirectory(prefix="raftq-bench-aio-") as tmp,
        ProcessCluster(Path(tmp), fast=False) as cluster,
    ):
        cluster.wait_ready()
        admin = cluster.admin()
        for r in range(options.repeat):
            for kind in ("sync", "async"):
                admin.create_topic(f"{kind}-{r}", partitions=PARTITIONS, replication_factor=3)
                cluster.wait_leaders(f"{kind}-{r}")
            figures["sp"].append(_sync_produce(cluster.bootstrap, f"sync-{r}", records))
            figures["ap"].append(
                asyncio.run(_async_produce(cluster.bootstrap, f"async-{r}", records))
            )
            figures["sc"].append(_sync_consume(cluster.bootstrap, f"sync-{r}", "g", records))
            figures["ac"].append(
                asyncio.run(_async_consume(cluster.bootstrap, f"async-{r}", "g", records))
            )
            print(
                f"  run {r}: produce {figures['sp'][-1]:,.0f} / {figures['ap'][-1]:,.0f}, "
                f"consume+ack {figures['sc'][-1]:,.0f} / {figures['ac'][-1]:,.0f} rec/s "
                "(thread / asyncio)",
                flush=True,
            )
    note = f"{records:,} x 100 B, {PARTITIONS} partitions RF 3"
    sp, ap, sc, ac = (median(figures[k]) for k in ("sp", "ap", "sc", "ac"))
    return [
        Result("thread Producer", round(sp), "rec/s", note=note),
        Result("AsyncProducer", round(ap), "rec/s", note=f"{ap / sp:.2f}x the thread client"),
        Result("thread Consumer consume+ack", round(sc), "rec/s", note="poll 500, ack per poll"),
        Result(
            "AsyncConsumer consume+ack",
            round(ac),
            "rec/s",
            note=f"{ac / sc:.2f}x the thread client",
        ),
    ]
