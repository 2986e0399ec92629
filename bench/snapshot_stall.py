"""A big partition's snapshot on a broker with many other groups: do they keep their leaders?

Three brokers in this process on 127.0.0.1-3 (a MuxEndpoint and a RaftDriver each, as a broker
runs them), ``--snap-groups`` small partitions (RF 3) and one big partition whose SQLite file is
padded to ``--snap-mb`` MiB before its replicas start (a table of random blobs, the same file
on all three brokers: the snapshot copies whole files, so its size is what costs). Timings are
the broker's defaults (RaftTimings(), quiescence on), fsync on. Once every group has a leader,
the big partition is driven past its compaction threshold and every replica snapshots it;
meanwhile a probe runs a no-op on each broker's driver thread every 20 ms (and for 5 s
before, for the stall the loaded machine shows without a snapshot).

Reported: how long the snapshots took (first pin to last journal compaction), the longest
the probe waited for a driver during that time (the driver stall), and how many groups
changed term or leader during it; the same stall and count over the 5 s before it (no
snapshot) give the loaded machine's own noise. ``--snap-sync`` takes the snapshot on the
driver thread as before (the group's ``capture`` is removed), for the comparison.

``--snap-install`` measures the follower's side instead: once every replica has snapshotted,
one follower of the big partition is stopped, its files deleted and started again empty, so it
catches up from the leader's snapshot (received in chunks, then restored); reported are the
install time (restart to caught up) and the same stall and group figures during it. With
``--snap-sync`` the restarted replica installs on its driver as before.

    python -m bench snapshot_stall [--snap-mb 2048] [--snap-groups 999] [--snap-sync]
                                   [--snap-install]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Result, format_number
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import common_pb2, errors
from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.mux import MuxEndpoint

NAME = "snapshot_stall"
SECRET = b"raftq-bench-snapshot-stall-secret-0123"
BIG_TOPIC_ID = 1
COMPACT_AFTER = 50  # entries of the big partition before it snapshots
BASELINE_S = 5.0  # the probe runs this long before the snapshot starts


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--snap-mb", type=int, default=2048, help="big partition size, MiB")
    group.add_argument("--snap-groups", type=int, default=999, help="other groups per broker")
    group.add_argument("--snap-sync", action="store_true", help="snapshot on the driver (before)")
    group.add_argument(
        "--snap-install", action="store_true", help="a follower installs it (restarted empty)"
    )
    group.add_argument("--snap-dir", default=None, help="where the files go (default: a tmp dir)")


def _pad(path: Path, megabytes: int) -> None:
    """A partition's SQLite file with ``megabytes`` MiB of random blobs in a padding table."""
    store = SqliteStore(str(path), synchronous="OFF")
    conn = store._conn  # the partition's schema, plus a table no replica reads
    try:
        conn.execute("CREATE TABLE padding(id INTEGER PRIMARY KEY, blob BLOB)")
        with conn:
            for i in range(megabytes):
                conn.execute("INSERT INTO padding VALUES(?, randomblob(?))", (i, 1 << 20))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()


class _Probe(threading.Thread):
    """Runs a no-op on each driver every 20 ms; the longest wait per window."""

    def __init__(self, drivers: list[RaftDriver]) -> None:
        super().__init__(name="snapshot-stall-probe", daemon=True)
        self.drivers = drivers
        self.stop = threading.Event()
        self.longest_s = 0.0

    def run(self) -> None:
        while not self.stop.wait(0.02):
            futures = [(time.monotonic(), d.submit(lambda: None)) for d in self.drivers]
            for started, fut in futures:
                fut.result(timeout=600)
                self.longest_s = max(self.longest_s, time.monotonic() - started)


def _leaders_and_terms(replicas: list[PartitionReplica]) -> dict[str, Any]:
    return {f"{r.name}@{r.node.self_addr}": (r.node.term, r.node.leader()) for r in replicas}


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def _send(group: list[PartitionReplica], sequence: int) -> None:
    """One record to whoever leads ``group`` (idempotent retries: an election may intervene)."""
    deadline = time.monotonic() + 600
    while True:
        leader = next((r for r in group if r.is_leader()), None)
        try:
            if leader is not None:
                leader.send([common_pb2.Record(value=b"x" * 100)], "bench", sequence, timeout_s=30)
                return
        except (errors.NotLeader, errors.Timeout, errors.Unavailable):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the big partition accepts no send")
        time.sleep(0.05)


def _start_big(
    addr: str, peers: list[str], driver: RaftDriver, data_dir: Path, sync: bool
) -> PartitionReplica:
    replica = PartitionReplica(
        "big",
        0,
        BIG_TOPIC_ID,
        data_dir=data_dir,
        self_addr=addr,
        peers=peers,
        driver=driver,
        timings=RaftTimings(compaction_min_entries=COMPACT_AFTER),
        synchronous="NORMAL",
    )
    if sync:  # snapshots written and installed on the driver, as before
        replica.node._capture = None
        replica.node.syncobj._snapshot_rx.install_syncs = False
    return replica


def measure(
    root: Path, megabytes: int, groups: int, sync: bool, install: bool = False
) -> dict[str, float]:
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    endpoints = [MuxEndpoint(f"{h}:0", SECRET) for h in hosts]
    drivers = [RaftDriver(e, tick_interval_s=0.05, name=f"driver-{e.address}") for e in endpoints]
    addrs = [e.address for e in endpoints]
    for d in drivers:
        d.start()
    timings = RaftTimings()
    replicas: list[PartitionReplica] = []
    big: list[PartitionReplica] = []
    try:
        padded = root / "padded.sqlite"
        started = time.monotonic()
        _pad(padded, megabytes)
        print(f"  padded {megabytes} MiB in {time.monotonic() - started:.1f} s", flush=True)
        for addr, driver in zip(addrs, drivers, strict=True):
            data_dir = root / addr.replace(":", "_")
            data_dir.mkdir(parents=True)
            shutil.copyfile(padded, data_dir / f"p.{BIG_TOPIC_ID}.0.sqlite")
            big.append(_start_big(addr, addrs, driver, data_dir, sync and not install))
        os.unlink(padded)
        for g in range(groups):
            for addr, driver in zip(addrs, drivers, strict=True):
                replicas.append(
                    PartitionReplica(
                        f"small{g}",
                        0,
                        BIG_TOPIC_ID + 1 + g,
                        data_dir=root / addr.replace(":", "_"),
                        self_addr=addr,
                        peers=addrs,
                        driver=driver,
                        timings=timings,
                        synchronous="NORMAL",
                    )
                )
        everyone = big + replicas
        _wait(
            lambda: (
                sum(r.is_leader() for r in everyone) == groups + 1
                and all(r.node.leader() is not None for r in everyone)
            ),
            600,
            "every group has a leader",
        )
        print(f"  {groups + 1} groups led after {time.monotonic() - started:.1f} s", flush=True)
        if install:  # the snapshots first, then a follower restarted empty
            for i in range(COMPACT_AFTER + 5):
                _send(big, i)
            _wait(lambda: all(r.node.journal[0][1] > 1 for r in big), 3600, "snapshots written")
            victim = next(r for r in big if not r.is_leader())
            victim.close()
            big.remove(victim)
            everyone.remove(victim)
            addr = victim.node.self_addr
            data_dir = root / addr.replace(":", "_")
            for f in data_dir.glob(f"p.{BIG_TOPIC_ID}.0.*"):
                f.unlink()
            print(f"  {victim.name} on {addr} stopped and deleted", flush=True)
        before = _leaders_and_terms(everyone)
        probe = _Probe(drivers)
        probe.start()
        quiet_end = time.monotonic() + BASELINE_S  # the stall without a snapshot, for scale
        _wait(lambda: time.monotonic() > quiet_end, BASELINE_S + 1, "baseline window")
        baseline_s, probe.longest_s = probe.longest_s, 0.0
        quiet = _leaders_and_terms(everyone)  # the load's own churn, without a snapshot
        baseline_changed = {k.split("@")[0] for k in before if before[k] != quiet[k]}
        before = quiet
        snap_started = time.monotonic()
        if install:
            restarted = _start_big(addr, addrs, drivers[addrs.index(addr)], data_dir, sync)
            big.append(restarted)
            _wait(
                lambda: (
                    restarted.node.journal[0][1] > 1
                    and restarted.node.applied_index >= big[0].node.journal[0][1]
                ),
                3600,
                "the snapshot installed",
            )
        else:
            for i in range(COMPACT_AFTER + 5):
                _send(big, i)
            _wait(lambda: all(r.node.journal[0][1] > 1 for r in big), 3600, "snapshots installed")
        snap_s = time.monotonic() - snap_started
        probe.stop.set()
        probe.join()
        after = _leaders_and_terms(everyone)
        changed = {k.split("@")[0] for k in before if before[k] != after[k]}
        return {
            "snapshot_s": snap_s,
            "stall_s": probe.longest_s,
            "baseline_stall_s": baseline_s,
            "changed": float(len(changed)),
            "baseline_changed": float(len(baseline_changed)),
        }
    finally:
        for r in big + replicas:
            r.close()
        for d in drivers:
            d.stop()
        for e in endpoints:
            e.close()


def run(options: argparse.Namespace) -> list[Result]:
    megabytes = 64 if options.quick else options.snap_mb
    groups = 20 if options.quick else options.snap_groups
    how = "on the driver (before)" if options.snap_sync else "off the driver"
    what = "installed by a follower" if options.snap_install else "snapshot"
    with tempfile.TemporaryDirectory(dir=options.snap_dir, prefix="raftq-snap-") as tmp:
        figures = measure(Path(tmp), megabytes, groups, options.snap_sync, options.snap_install)
    note = f"{megabytes} MiB partition + {groups} groups per broker, {what} {how}"
    print(f"  {figures}", flush=True)
    kind = "install" if options.snap_install else "snapshot"
    took = "restarted follower caught up" if options.snap_install else "all 3 replicas written"
    return [
        Result(f"{kind}: {took}", figures["snapshot_s"], "s", note=note),
        Result(
            f"{kind}: longest driver stall",
            figures["stall_s"],
            "s",
            "< 0.4 (election min)",
            figures["stall_s"] < 0.4,
            note,
        ),
        Result(
            "no snapshot: longest driver stall (5 s before it)",
            figures["baseline_stall_s"],
            "s",
            note="the same probe before the snapshot: the loaded machine's own noise",
        ),
        Result(
            "no snapshot: groups that changed term or leader (5 s before it)",
            figures["baseline_changed"],
            "groups",
            note="the same count before the snapshot: the loaded machine's own churn",
        ),
        Result(
            f"{kind}: groups that changed term or leader",
            figures["changed"],
            "groups",
            "0",
            figures["changed"] == 0,
            f"of {groups + 1}; {format_number(figures['snapshot_s'])} s of snapshot",
        ),
    ]
