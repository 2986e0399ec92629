"""Appends per second through one partition's replica group: 3 replicas, group commit, fsync.

Three "brokers" in this process, each a MuxEndpoint on its own loopback address (127.0.0.1/2/3)
with a RaftDriver thread, one PartitionReplica each (SQLite synchronous=FULL, journal fsync on),
in a temporary directory. ``--senders`` threads call ``send()`` on the leader in a loop
(``--records`` records of ``--value-bytes`` each, no producer id) for ``--seconds``; the
proposer coalesces concurrent sends into one Raft entry (broker/proposer.py).

    python -m bench.replicated_append [--senders 64] [--records 1] [--seconds 5]
    python -m bench replicated_append        (once registered in bench/__main__.py)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from raftq.proto import common_pb2, errors
from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.mux import MuxEndpoint

NAME = "replicated_append"
SECRET = b"raftq-bench-cluster-secret-0123456789"


def add_arguments(parser: Any) -> None:
    parser.add_argument("--senders", type=int, default=64, help="concurrent send() threads")
    parser.add_argument("--records", type=int, default=1, help="records per send")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured duration")
    parser.add_argument(
        "--inflight-entries", type=int, default=4, help="raft entries in flight per partition"
    )
    parser.add_argument("--no-fsync", action="store_true", help="journal fsync and SQLite off")


def measure(
    *,
    senders: int,
    records: int,
    value_bytes: int,
    seconds: float,
    inflight_entries: int = 4,
    fsync: bool = True,
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="raftq-bench-") as tmp:
        endpoints = [MuxEndpoint(f"127.0.0.{i}:0", SECRET) for i in (1, 2, 3)]
        drivers = [RaftDriver(ep, tick_interval_s=0.02) for ep in endpoints]
        addrs = [ep.address for ep in endpoints]
        for d in drivers:
            d.start()
        replicas = [
            PartitionReplica(
                "bench",
                0,
                1,
                data_dir=Path(tmp) / str(i),
                self_addr=ep.address,
                peers=addrs,
                driver=d,
                fsync=fsync,
                synchronous="FULL" if fsync else "OFF",
                timings=RaftTimings.fast(),
                max_inflight_entries=inflight_entries,
            )
            for i, (ep, d) in enumerate(zip(endpoints, drivers, strict=True))
        ]
        try:
            return _drive(replicas, senders, records, value_bytes, seconds)
        finally:
            for r in replicas:
                r.close()
            for d in drivers:
                d.stop()
            for ep in endpoints:
                ep.close()


def _drive(
    replicas: list[PartitionReplica], senders: int, records: int, value_bytes: int, seconds: float
) -> dict[str, float]:
    deadline = time.monotonic() + 15
    while not any(r.is_leader() for r in replicas):
        if time.monotonic() > deadline:
            raise RuntimeError("no leader elected")
        time.sleep(0.01)
    leader = next(r for r in replicas if r.is_leader())
    batch = [common_pb2.Record(value=b"v" * value_bytes) for _ in range(records)]
    leader.send(batch)  # warm up
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(senders)]
    failures = [0] * senders

    def sender(i: int) -> None:
        mine = latencies[i]
        while not stop.is_set():
            started = time.perf_counter()
            try:
                leader.send(batch, timeout_s=10)
            except errors.RaftqError:
                failures[i] += 1
                continue
            mine.append(time.perf_counter() - started)

    before = leader.proposer.statistics()
    fsyncs_before = leader.node.journal.fsync_count
    threads = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(senders)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)  # the measured interval (a benchmark, not a wait for a condition)
    stop.set()
    for t in threads:
        t.join(15)
    elapsed = time.perf_counter() - started
    after = leader.proposer.statistics()
    all_lat = sorted(x for lat in latencies for x in lat)
    sends = len(all_lat)
    entries = after["entries"] - before["entries"]
    return {
        "sends_per_s": sends / elapsed,
        "records_per_s": sends * records / elapsed,
        "send_p50_ms": statistics.median(all_lat) * 1000 if all_lat else 0.0,
        "send_p99_ms": all_lat[int(0.99 * (len(all_lat) - 1))] * 1000 if all_lat else 0.0,
        "sends_per_entry": sends / entries if entries else 0.0,
        "leader_fsyncs_per_s": (leader.node.journal.fsync_count - fsyncs_before) / elapsed,
        "failures": float(sum(failures)),
    }


def run(options: argparse.Namespace) -> list[Any]:
    from bench.common import Result  # bench/common.py: the shared result table

    seconds = 1.0 if getattr(options, "quick", False) else options.seconds
    figures = measure(
        senders=options.senders,
        records=options.records,
        value_bytes=options.value_bytes,
        seconds=seconds,
        inflight_entries=options.inflight_entries,
        fsync=not options.no_fsync,
    )
    note = (
        f"{options.senders} senders x {options.records} x {options.value_bytes} B, "
        f"RF3 in one process, fsync {'off' if options.no_fsync else 'on'}"
    )
    return [
        Result("replicated sends/s", round(figures["sends_per_s"]), "1/s", note=note),
        Result("replicated records/s", round(figures["records_per_s"]), "1/s", note=note),
        Result("send p50", round(figures["send_p50_ms"], 2), "ms"),
        Result("send p99", round(figures["send_p99_ms"], 2), "ms"),
        Result("sends per raft entry", round(figures["sends_per_entry"], 1), ""),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicated_append", description=__doc__)
    add_arguments(parser)
    options = parser.parse_args(argv)
    figures = measure(
        senders=options.senders,
        records=options.records,
        value_bytes=options.value_bytes,
        seconds=options.seconds,
        inflight_entries=options.inflight_entries,
        fsync=not options.no_fsync,
    )
    for key, value in figures.items():
        print(f"{key:>22}: {value:,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
