"""Issue 4's acceptance: 3 broker processes, produce through the client, consume with a group.

A topic of 6 partitions at RF 3 on 3 real broker processes. One thread produces ``records``
records through the batching, idempotent :class:`Producer`; three :class:`Consumer` members
of one group poll and ack every delivery meanwhile. While both run, the leader of a random
partition is killed with SIGKILL; it is restarted later in the run, or stays down (both must
hold). Afterwards:

- every acknowledged send is in the log (read back with Fetch) and every stored record is one
  that was sent, stored once, at dense offsets;
- every stored record was delivered to the group and acknowledged by a consumer, nothing else
  was delivered, and the group's lag is 0 on every partition.

Only one broker dies and a majority of every partition survives, so every send must be
acknowledged: the producer's retries (same producer id and sequence) outlast the elections.
The kill point, the partition and the restart point come from a seed (``RAFTQ_SEED`` replays).
"""

from __future__ import annotations

import os
import random
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from raftq.client import Consumer, Producer
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

TOPIC = "e2e"
PARTITIONS = 6
GROUP = "e2e-group"


@dataclass
class Deliveries:
    """What the consumers saw, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    delivered: list[tuple[bytes, int, int, int]] = field(default_factory=list)  # value, p, o, n
    acked: set[bytes] = field(default_factory=set)
    ack_failures: int = 0
    failed_acks: list[tuple[bytes, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def consume(consumer: Consumer, seen: Deliveries, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            messages = consumer.poll(500, 200)
            outcomes = consumer.ack(messages)
        except errors.RaftqError as exc:  # a broker died under the call: poll again
            with seen.lock:
                seen.errors.append(repr(exc))
            continue
        with seen.lock:
            for message, error in zip(messages, outcomes, strict=True):
                seen.delivered.append(
                    (message.value, message.partition, message.offset, message.delivery_count)
                )
                if error is None:
                    seen.acked.add(message.value)
                else:  # the lease moved on (rebalance, expiry): it is redelivered
                    seen.ack_failures += 1
                    seen.failed_acks.append((message.value, repr(error)))


def read_log(cluster: ProcessCluster) -> dict[bytes, tuple[int, int]]:
    """Every stored record: value -> (partition, offset); asserts dense offsets, no repeats."""
    admin = cluster.admin(cluster.live_bootstrap())
    stored: dict[bytes, tuple[int, int]] = {}
    for partition in range(PARTITIONS):
        offset = 0
        while True:
            fetched = admin.fetch(TOPIC, partition, offset, 2000)
            if not fetched.records:
                assert offset == fetched.end, (partition, offset, fetched.end)
                break
            offsets = [r.offset for r in fetched.records]
            assert offsets == list(range(offset, offset + len(offsets))), "offsets not dense"
            for r in fetched.records:
                value = r.value
                assert value not in stored, f"{value!r} stored twice: {stored[value]}, {partition}"
                stored[value] = (partition, r.offset)
            offset = offsets[-1] + 1
    return stored


def run_e2e(tmp_path: Path, records: int, *, restart: bool) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(1 << 32)))
    print(f"RAFTQ_SEED={seed} records={records} restart={restart}")
    rng = random.Random(seed)
    victim_partition = rng.randrange(PARTITIONS)
    kill_at = rng.randrange(records // 5, records // 2)
    restart_at = rng.randrange(kill_at + records // 10, records) if restart else None

    with ProcessCluster(tmp_path) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        cluster.wait_leaders(TOPIC)

        seen = Deliveries()
        stop = threading.Event()
        addresses = [cluster.client_addr(i) for i in (1, 2, 3)]
        consumers = [  # each starts at a different broker; all of them in its bootstrap
            Consumer(addresses[i:] + addresses[:i], GROUP, [TOPIC], session_timeout_ms=6000)
            for i in range(3)
        ]
        threads = [
            threading.Thread(target=consume, args=(c, seen, stop), daemon=True) for c in consumers
        ]
        for t in threads:
            t.start()

        victim = 0
        sent: dict[bytes, object] = {}
        try:
            with Producer(cluster.bootstrap, linger_ms=5, request_timeout_ms=5000) as producer:
                for i in range(records):
                    if i == kill_at:
                        victim = cluster.leader_of(TOPIC, victim_partition)
                        print(f"kill -9 broker {victim} (leads {TOPIC}/{victim_partition}) at {i}")
                        cluster.kill(victim, signal.SIGKILL)
                    if i == restart_at:
                        print(f"restart broker {victim} at {i}")
                        cluster.start(victim)
                    value = b"r%d" % i
                    sent[value] = producer.send(TOPIC, value)
                producer.flush(120)
            acknowledged = set()
            for value, future in sent.items():
                try:
                    future.result(0)  # type: ignore[attr-defined]
                    acknowledged.add(value)
                except errors.RaftqError as exc:
                    print(f"send of {value!r} failed: {exc!r}")
            print(f"{len(acknowledged)} of {records} sends acknowledged")
            # A majority of every partition stayed up: the producer's retries (same sequence)
            # outlast the election, so no send may fail, and none may be stored twice.
            assert len(acknowledged) == records, f"{records - len(acknowledged)} sends failed"

            stored = read_log(cluster)
            assert acknowledged <= stored.keys(), (
                f"lost {len(acknowledged - stored.keys())} acknowledged records"
            )
            assert stored.keys() <= sent.keys(), "the log holds records nobody sent"

            def all_acked() -> bool:
                with seen.lock:
                    return stored.keys() <= seen.acked

            try:
                wait_until(all_acked, 180, "every stored record acked", interval_max_s=1)
            except AssertionError:
                with seen.lock:
                    missing = sorted(stored[v] for v in stored.keys() - seen.acked)
                    gone = {v for v in stored.keys() - seen.acked}
                    problems = seen.errors[-5:]
                    deliveries = [d for d in seen.delivered if d[0] in gone][:5]
                    failed = [f for f in seen.failed_acks if f[0] in gone][:5]
                group = cluster.admin(cluster.live_bootstrap()).describe_group(GROUP)
                raise AssertionError(
                    f"{len(missing)} stored records never acked, e.g. {missing[:10]}; "
                    f"their deliveries {deliveries}, failed acks {failed}; "
                    f"consumer errors {problems}; members "
                    f"{[(m.member_id, list(m.assignment)) for m in group.members]}; "
                    f"lags {group.partitions}"
                ) from None
            admin = cluster.admin(cluster.live_bootstrap())
            lags = admin.describe_group(GROUP).partitions  # while the members are still in
            assert len(lags) == PARTITIONS
            assert all(lag.lag == 0 and lag.pending == 0 for lag in lags), lags
        finally:
            stop.set()
            for t in threads:
                t.join(30)
            for c in consumers:
                c.close()

        delivered = {value for value, _, _, _ in seen.delivered}
        assert delivered == stored.keys(), (
            f"delivered but not stored: {len(delivered - stored.keys())}, "
            f"stored but not delivered: {len(stored.keys() - delivered)}"
        )
        assert seen.acked == stored.keys()
        for value, partition, offset, _ in seen.delivered:
            assert stored[value] == (partition, offset), f"{value!r} delivered from elsewhere"
        redelivered = len(seen.delivered) - len(delivered)
        print(
            f"{len(stored)} stored, {len(seen.delivered)} deliveries ({redelivered} repeats), "
            f"{seen.ack_failures} failed acks, {len(seen.errors)} consumer errors"
        )
        if restart:  # the restarted broker caught up: every replica in sync again
            wait_until(
                lambda: all(victim in p.isr for p in admin.describe_topic(TOPIC).partitions),
                60,
                f"broker {victim} back in sync",
            )


@pytest.mark.timeout(420)
@pytest.mark.parametrize("restart", [True, False], ids=["restarted", "stays-down"])
def test_e2e_10k_records_survive_a_leader_kill(tmp_path: Path, restart: bool) -> None:
    run_e2e(tmp_path, 10_000, restart=restart)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("restart", [True, False], ids=["restarted", "stays-down"])
def test_e2e_100k_records_survive_a_leader_kill(tmp_path: Path, restart: bool) -> None:
    run_e2e(tmp_path, 100_000, restart=restart)
