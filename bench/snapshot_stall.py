"""A big partition's snapshot on a broker with many other groups: do they keep their leaders?

Three brokers in three child processes on 127.0.0.1-3, each a MuxEndpoint and a RaftDriver as a
broker process runs them, driven over a pipe (one process would need ~7 descriptors per
replica: 3,000 replicas for ``--snap-groups 999`` exceed the 20,000 a process may open here).
``--snap-groups`` small partitions (RF 3) and one big partition whose SQLite file is padded to
``--snap-mb`` MiB before its replicas start (a table of random blobs, the same file on all
three brokers: the snapshot copies whole files, so its size is what costs). Timings are the
broker's defaults (RaftTimings(), quiescence on), fsync on. Once every group has a leader, the
big partition is driven past its compaction threshold and every replica snapshots it;
meanwhile a probe in each broker process runs a no-op on its driver thread every 20 ms (and
for 5 s before, for the stall the loaded machine shows without a snapshot).

Reported: how long the snapshots took (first pin to last journal compaction), the longest
the probe waited for a driver during that time (the driver stall), and how many groups
changed term or leader during it; the same stall and count over the 5 s before it (no
snapshot) give the loaded machine's own noise. ``--snap-sync`` takes the snapshot on the
driver thread as before (the group's ``capture`` is removed), for the comparison.

``--snap-install`` measures the follower's side instead: once every replica has snapshotted,
one follower of the big partition is stopped and its files deleted (then ``sync``, every
group led again and no term moved for 3 s: the bench's own deletion is not raftq's work and
stays out of the windows);
after the 5 s window it is started again empty, so it catches up from the leader's snapshot
(received in chunks, then installed); reported are the install time (restart to caught up)
and the same stall and group figures during it. With ``--snap-sync`` the restarted replica
installs on its driver as before.

    python -m bench snapshot_stall [--snap-mb 2048] [--snap-groups 999] [--snap-sync]
                                   [--snap-install]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
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
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
START_BATCH = 100  # small groups created at a time, each batch led before the next


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


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


# -- one broker process ------------------------------------------------------------------------


class _Probe(threading.Thread):
    """Runs a no-op on the driver every 20 ms; the longest wait since the last ``take``."""

    def __init__(self, driver: RaftDriver) -> None:
        super().__init__(name="snapshot-stall-probe", daemon=True)
        self.driver = driver
        self.stop = threading.Event()
        self.longest_s = 0.0

    def run(self) -> None:
        while not self.stop.wait(0.02):
            started = time.monotonic()
            self.driver.submit(lambda: None).result(timeout=600)
            self.longest_s = max(self.longest_s, time.monotonic() - started)

    def take(self) -> float:
        longest, self.longest_s = self.longest_s, 0.0
        return longest


class _Host:
    """One broker's raft side (endpoint, driver, replicas) in a child process; each public
    method is a command the bench sends over the pipe."""

    def __init__(self, host: str, root: str) -> None:
        self.endpoint = MuxEndpoint(f"{host}:0", SECRET)
        self.driver = RaftDriver(self.endpoint, tick_interval_s=0.05, name=f"driver-{host}")
        self.driver.start()
        self.addr = self.endpoint.address
        self.data_dir = Path(root) / self.addr.replace(":", "_")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.peers: list[str] = []
        self.big: PartitionReplica | None = None
        self.small: list[PartitionReplica] = []
        self.probe = _Probe(self.driver)

    def address(self) -> str:
        return self.addr

    def start(self, peers: list[str], sync: bool) -> None:
        self.peers = peers
        self.start_big(sync)

    def start_small(self, first: int, end: int) -> None:
        """Small groups ``first`` to ``end - 1``. Each one's first leader is chosen (round
        robin over the brokers); its other replicas start in standby (no campaign until a
        leader calls): a thousand groups splitting votes at once on every broker never
        settle on two shared cores."""
        timings = RaftTimings()
        me = self.peers.index(self.addr)
        for g in range(first, end):
            self.small.append(
                PartitionReplica(
                    f"small{g}",
                    0,
                    BIG_TOPIC_ID + 1 + g,
                    data_dir=self.data_dir,
                    self_addr=self.addr,
                    peers=self.peers,
                    driver=self.driver,
                    timings=timings,
                    synchronous="NORMAL",
                    standby=g % len(self.peers) != me,
                )
            )

    def start_big(self, sync: bool) -> None:
        replica = PartitionReplica(
            "big",
            0,
            BIG_TOPIC_ID,
            data_dir=self.data_dir,
            self_addr=self.addr,
            peers=self.peers,
            driver=self.driver,
            timings=RaftTimings(compaction_min_entries=COMPACT_AFTER),
            synchronous="NORMAL",
        )
        if sync:  # snapshots written and installed on the driver, as before
            replica.node._capture = None
            replica.node.syncobj._snapshot_rx.install_syncs = False
        self.big = replica

    def stop_big(self) -> None:
        """Close the big replica and delete its files (then sync them out)."""
        assert self.big is not None
        self.big.close()
        self.big = None
        for f in self.data_dir.glob(f"p.{BIG_TOPIC_ID}.0.*"):
            f.unlink()
        os.sync()

    def _everyone(self) -> list[PartitionReplica]:
        return ([self.big] if self.big is not None else []) + self.small

    def led(self) -> tuple[int, bool]:
        """(groups led here, whether every replica here knows a leader)."""
        everyone = self._everyone()
        return sum(r.is_leader() for r in everyone), all(r.leader() is not None for r in everyone)

    def terms(self) -> dict[str, tuple[int, str | None]]:
        return {f"{r.name}@{self.addr}": (r.node.term, r.node.leader()) for r in self._everyone()}

    def send_big(self, sequence: int) -> bool:
        """One record to the big partition if it is led here; False when it is not."""
        big = self.big
        if big is None or not big.is_leader():
            return False
        try:
            big.send([common_pb2.Record(value=b"x" * 100)], "bench", sequence, timeout_s=30)
        except (errors.NotLeader, errors.Timeout, errors.Unavailable):
            return False
        return True

    def big_state(self) -> tuple[bool, int, int] | None:
        """(leads, journal's first index, applied index) of the big replica, if running."""
        big = self.big
        if big is None:
            return None
        return big.is_leader(), int(big.node.journal[0][1]), int(big.node.applied_index)

    def probe_start(self) -> None:
        self.probe.start()

    def probe_take(self) -> float:
        return self.probe.take()

    def close(self) -> None:
        self.probe.stop.set()
        for r in self._everyone():
            r.close()
        self.driver.stop()
        self.endpoint.close()


def _host_main(conn: Connection, host: str, root: str) -> None:
    """A broker process: run the commands read from ``conn`` until ``close``."""
    target = _Host(host, root)
    while True:
        method, args = conn.recv()
        try:
            conn.send(("ok", getattr(target, method)(*args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
        if method == "close":
            return


class _Broker:
    """The bench's handle on one broker process."""

    def __init__(self, host: str, root: Path) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_host_main, args=(child, host, str(root)), name=f"broker-{host}", daemon=True
        )
        self.process.start()
        child.close()
        self.addr: str = self.call("address")

    def call(self, method: str, *args: Any) -> Any:
        self.conn.send((method, args))
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"broker {self.process.name}: {method} failed:\n{value}")
        return value

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError, EOFError, RuntimeError):
                self.call("close")
            self.process.join(60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


# -- the measurement ---------------------------------------------------------------------------


def _terms(brokers: list[_Broker]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for b in brokers:
        found.update(b.call("terms"))
    return found


def _all_led(brokers: list[_Broker], groups: int) -> bool:
    counts = [b.call("led") for b in brokers]
    return sum(n for n, _ in counts) == groups and all(known for _, known in counts)


def _send(brokers: list[_Broker], sequence: int) -> None:
    """One record to whoever leads the big partition (idempotent retries: elections)."""
    deadline = time.monotonic() + 600
    while not any(b.call("send_big", sequence) for b in brokers):
        if time.monotonic() > deadline:
            raise TimeoutError("the big partition accepts no send")
        time.sleep(0.05)


def _settle(brokers: list[_Broker], groups: int, quiet_s: float = 3.0) -> None:
    """Wait until every group is led and no term or leader moved for ``quiet_s`` (the
    elections the bench's own deletion caused are over before the windows)."""
    deadline = time.monotonic() + 600
    while True:
        _wait(lambda: _all_led(brokers, groups), 600, "every group led again")
        seen = _terms(brokers)
        time.sleep(quiet_s)
        if _terms(brokers) == seen and _all_led(brokers, groups):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("terms never settled after the deletion")


def _snapshotted(brokers: list[_Broker]) -> bool:
    return all(state is None or state[1] > 1 for state in (b.call("big_state") for b in brokers))


def _changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {k.split("@")[0] for k in before if k in after and before[k] != after[k]}


def _say(text: str, started: float) -> None:
    print(f"  [{time.monotonic() - started:7.1f} s] {text}", flush=True)


def measure(
    root: Path, megabytes: int, groups: int, sync: bool, install: bool = False
) -> dict[str, float]:
    started = time.monotonic()
    brokers: list[_Broker] = []
    try:
        brokers = [_Broker(h, root) for h in HOSTS]
        addrs = [b.addr for b in brokers]
        padded = root / "padded.sqlite"
        _pad(padded, megabytes)
        for addr in addrs:
            shutil.copyfile(padded, root / addr.replace(":", "_") / f"p.{BIG_TOPIC_ID}.0.sqlite")
        os.unlink(padded)
        os.sync()
        _say(f"padded {megabytes} MiB and copied it to 3 brokers", started)
        for b in brokers:
            b.call("start", addrs, sync and not install)
        _wait(lambda: _all_led(brokers, 1), 600, "the big group has a leader")
        for first in range(0, groups, START_BATCH):  # groups are created over time
            end = min(groups, first + START_BATCH)
            for b in brokers:
                b.conn.send(("start_small", (first, end)))
            for b in brokers:  # the three start their replicas side by side
                status, value = b.conn.recv()
                if status != "ok":
                    raise RuntimeError(f"broker {b.process.name}: start failed:\n{value}")
            led = end + 1  # the big group too
            _wait(lambda: _all_led(brokers, led), 1800, "every group has a leader")  # noqa: B023
            _say(f"{end + 1} groups led", started)
        victim: _Broker | None = None
        if install:  # the snapshots first, then a follower stopped and deleted
            for i in range(COMPACT_AFTER + 5):
                _send(brokers, i)
            _wait(lambda: _snapshotted(brokers), 3600, "snapshots written")
            victim = next(b for b in brokers if not b.call("big_state")[0])
            victim.call("stop_big")
            _say(f"big on {victim.addr} stopped and its files deleted", started)
            _settle(brokers, groups + 1)
            _say("every group led, no term moved for 3 s", started)
        before = _terms(brokers)
        for b in brokers:
            b.call("probe_start")
        time.sleep(BASELINE_S)  # the window itself: the stall and churn without a snapshot
        baseline_s = max(b.call("probe_take") for b in brokers)
        quiet = _terms(brokers)  # the load's own churn, without a snapshot
        baseline_changed = _changed(before, quiet)
        before = quiet
        snap_started = time.monotonic()
        if victim is not None:
            victim.call("start_big", sync)
            _say(f"big on {victim.addr} restarted empty", started)
            restarted, leader = victim, next(b for b in brokers if b is not victim)

            def caught_up() -> bool:
                state, lead = restarted.call("big_state"), leader.call("big_state")
                return bool(state[1] > 1 and state[2] >= lead[1])

            _wait(caught_up, 3600, "the snapshot installed")
        else:
            for i in range(COMPACT_AFTER + 5):
                _send(brokers, i)
            _wait(lambda: _snapshotted(brokers), 3600, "snapshots installed")
        snap_s = time.monotonic() - snap_started
        stall_s = max(b.call("probe_take") for b in brokers)
        after = _terms(brokers)
        changed = _changed(before, after)
        _say(f"done in {snap_s:.1f} s; {len(changed)} groups changed", started)
        return {
            "snapshot_s": snap_s,
            "stall_s": stall_s,
            "baseline_stall_s": baseline_s,
            "changed": float(len(changed)),
            "baseline_changed": float(len(baseline_changed)),
        }
    finally:
        for b in brokers:
            b.close()


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
