"""Consumer groups on real broker processes (issue 5; DESIGN § Consuming with consumer groups).

Sessions are short here (2000 ms, heartbeats every 300 ms) and leases long (60 s), so what
moves records in these tests is membership — kill, expiry, join, revocation — never lease
expiry. The acceptance scenario runs consumer *processes* (tests/consumer_proc.py) that log
every lease and ack; tests/group_harness.py checks those logs.

Figures print with ``-s``: e.g. ``pytest tests/process/test_consumer_groups.py -m slow -s``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.client import Admin, Consumer, Producer
from raftq.proto import errors, partition_pb2
from raftq.proto.common_pb2 import ErrorCode
from tests.cluster import ProcessCluster
from tests.group_harness import (
    GROUP_ENV,
    ConsumerProcs,
    RawMember,
    SteadyProducer,
    acked,
    check_lease_log,
)
from tests.helpers import wait_until

SESSION_MS = 2000
HEARTBEAT_MS = 300
LEASE_MS = 60_000

pytestmark = pytest.mark.timeout(240)


def owners(admin: Admin, group: str) -> dict[tuple[str, int], str]:
    """(topic, partition) -> member id, from DescribeGroup's member assignments."""
    out: dict[tuple[str, int], str] = {}
    for member in admin.describe_group(group).members:
        for tp in member.assignment:
            for p in tp.partitions:
                out[(tp.topic, p)] = member.member_id
    return out


def members(admin: Admin, group: str) -> set[str]:
    try:
        return {m.member_id for m in admin.describe_group(group).members}
    except errors.UnknownGroup:
        return set()


def generation(admin: Admin, group: str) -> int:
    """Cheap: ListGroups answers from the broker's copy of the table."""
    for g in admin.list_groups():
        if g.group_id == group:
            return int(g.generation)
    return -1


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    with Producer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(topic, v, key=v) for v in values]
        return [f.result(timeout=30) for f in futures]


# ============================================================================ acceptance


@pytest.mark.slow
def test_kill_a_consumer_process_then_add_members_no_loss_no_double_lease(
    tmp_path: Path,
) -> None:
    """3 consumer processes on 12 partitions under a steady producer; SIGKILL one: its
    partitions move within session + heartbeat and its leased records are redelivered to the
    others (delivery_count > 1) well before lease_ms; a replacement and then a 4th member join
    (the 4th moves at most ceil(12/4) partitions); every record is acked exactly once and the
    lease log shows no record leased to two members at once; lag ends at 0."""
    with ProcessCluster(tmp_path / "cluster", env=GROUP_ENV) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("jobs", partitions=12, lease_ms=LEASE_MS)
        cluster.wait_leaders("jobs")
        procs = ConsumerProcs(tmp_path, cluster.bootstrap)
        opts = ["--session-timeout-ms", str(SESSION_MS), "--heartbeat-ms", str(HEARTBEAT_MS)]
        try:
            procs.start("c1", "workers", "jobs", *opts)
            procs.start("c2", "workers", "jobs", *opts)
            procs.start("c3", "workers", "jobs", *opts, "--hold-ms", "700")  # the victim
            for name in ("c1", "c2", "c3"):
                procs.wait_joined(name)
            wait_until(
                lambda: (
                    len(members(admin, "workers")) == 3
                    and sorted(Counter(owners(admin, "workers").values()).values()) == [4, 4, 4]
                ),
                30,
                "3 members with 4 partitions each",
            )
            producer = SteadyProducer(cluster.bootstrap, "jobs", rate=150).start()
            victim = procs.member_of("c3")

            def victim_holds_leases() -> bool:
                ev = procs.events("c3")
                leased = {
                    (e["topic"], e["partition"], e["offset"]) for e in ev if e["ev"] == "lease"
                }
                return len(leased - acked(ev)) >= 5

            wait_until(victim_holds_leases, 30, "the victim holding leases")
            before = owners(admin, "workers")
            moved = {tp for tp, m in before.items() if m == victim}
            gen = generation(admin, "workers")
            killed_at_ms = procs.kill("c3")
            t0 = time.monotonic()
            wait_until(
                lambda: generation(admin, "workers") > gen,
                15,
                "the group to rebalance",
                interval_max_s=0.02,
            )
            rebalance_s = time.monotonic() - t0
            after = owners(admin, "workers")
            assert victim not in after.values() and set(after) == set(before)
            assert all(after[tp] == before[tp] for tp in before if tp not in moved), "sticky"
            # the victim's unacked leases, redelivered to the survivors
            victim_events = procs.events("c3")
            held = {
                (e["topic"], e["partition"], e["offset"])
                for e in victim_events
                if e["ev"] == "lease"
            } - acked(victim_events)

            def redelivered() -> dict[tuple[str, int, int], int] | None:
                firsts: dict[tuple[str, int, int], int] = {}
                for e in procs.events("c1") + procs.events("c2"):
                    if e["ev"] != "lease":
                        continue
                    rid = (e["topic"], e["partition"], e["offset"])
                    if rid in held:
                        assert e["delivery_count"] > 1, e
                        firsts[rid] = min(firsts.get(rid, e["wall_ms"]), e["wall_ms"])
                return firsts if set(firsts) == held else None

            firsts = wait_until(redelivered, 30, "the victim's leases redelivered")
            assert firsts is not None
            redelivery_s = (max(firsts.values()) - killed_at_ms) / 1000
            print(
                f"\nkill -9 -> rebalanced: {rebalance_s:.3f} s (limit "
                f"{(SESSION_MS + HEARTBEAT_MS) / 1000} s); {len(held)} held leases "
                f"redelivered after at most {redelivery_s:.3f} s (lease_ms {LEASE_MS / 1000} s); "
                f"{len(moved)} partitions moved"
            )
            assert rebalance_s <= (SESSION_MS + HEARTBEAT_MS) / 1000
            assert redelivery_s < LEASE_MS / 1000 / 4

            # a replacement member (back to 3), then a 4th: sticky and minimal
            procs.start("c4", "workers", "jobs", *opts)
            wait_until(lambda: len(members(admin, "workers")) == 3, 30, "c4 joined")
            three = owners(admin, "workers")
            procs.start("c5", "workers", "jobs", *opts)
            wait_until(lambda: len(members(admin, "workers")) == 4, 30, "c5 joined")
            four = owners(admin, "workers")
            changed = [tp for tp in three if three[tp] != four[tp]]
            print(f"4th member joined: {len(changed)} partitions changed owner")
            assert len(changed) <= math.ceil(12 / 4)

            produced = producer.stop()
            assert len(produced) > 500
            wait_until(lambda: set(produced) <= acked(procs.events()), 90, "every record acked")
            wait_until(  # acks reach DescribeGroup through each partition's leader
                lambda: [p for p in admin.describe_group("workers").partitions if p.lag == 0],
                30,
                "lag 0",
            )
            lags = list(admin.describe_group("workers").partitions)
            assert len(lags) == 12 and all(p.lag == 0 and p.leased == 0 for p in lags), lags
        finally:
            procs.stop_all()
        report = check_lease_log(procs.events(), produced, procs.killed)
        print(
            f"{len(produced)} records: {report.redelivered} redelivered, {report.handovers} "
            f"handed over before their deadline, {report.gaps} with an unlogged delivery"
        )
        assert report.problems == [], "\n".join(report.problems[:20])
        assert report.redelivered >= len(held)


# ============================================================================ one shared cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path_factory.mktemp("groups"), env=GROUP_ENV) as running:
        running.wait_ready()
        yield running


@pytest.fixture
def admin(cluster: ProcessCluster) -> Admin:
    return cluster.admin()


def new_topic(cluster: ProcessCluster, admin: Admin, name: str, partitions: int) -> None:
    admin.create_topic(name, partitions=partitions, lease_ms=LEASE_MS)
    cluster.wait_leaders(name)


def test_stale_generation_and_revoked_partitions_are_fenced_and_released(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """Revocation releases: when B's join takes partitions from A, A's leases on them are
    released at once and B gets those records (delivery_count 2) long before lease_ms; A's
    Poll/Ack/Nack/ExtendLease with its old generation are FENCED; after rejoining, A's ack of
    a record on a partition it lost is FENCED per ref, and an ack on a partition it kept works."""
    new_topic(cluster, admin, "fence", 4)
    produce(cluster.bootstrap, "fence", [b"f%d" % i for i in range(40)])
    a = RawMember(cluster.client_addr(1), "fencing", ["fence"]).join()
    assert len(a.assignment) == 4
    held = a.poll(max_records=40)
    assert len(held) == 40 and {r.delivery_count for r in held} == {1}
    old_generation = a.generation
    b = RawMember(cluster.client_addr(2), "fencing", ["fence"]).join()
    assert b.generation > old_generation and len(b.assignment) == 2
    lost = [r for r in held if (r.topic, r.partition) in b.assignment]
    kept = [r for r in held if (r.topic, r.partition) not in b.assignment]
    start = time.monotonic()
    got: list[Any] = []

    def b_has_the_released_records() -> bool:
        got.extend(b.poll(max_records=40))
        return len(got) >= len(lost)

    wait_until(b_has_the_released_records, 10, "the revoked leases released to B")
    print(f"\nrevoked leases reached the new owner after {time.monotonic() - start:.3f} s")
    assert {(r.partition, r.offset) for r in got} == {(r.partition, r.offset) for r in lost}
    assert {r.delivery_count for r in got} == {2}
    # the old generation is fenced on every call
    for call in (
        lambda: a.poll(),
        lambda: a.settle("Ack", kept),
        lambda: a.settle("Nack", kept),
        lambda: a.settle("ExtendLease", kept, lease_ms=1000),
    ):
        with pytest.raises(errors.Fenced, match="generation"):
            call()
    # rejoined: the lost partition's records are FENCED per ref, the kept ones ack
    a.join()
    assert a.generation == b.generation
    results = a.settle("Ack", [lost[0], kept[0]])
    assert [r.error for r in results] == [ErrorCode.FENCED, ErrorCode.OK], results
    assert "not assigned to this member" in results[0].message
    assert all(r.error == ErrorCode.OK for r in b.settle("Ack", got))
    a.close()
    b.close()


def test_polls_racing_rebalances_leave_no_lease_stuck_on_a_lost_partition(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """A consumer polls from several threads while another member joins and leaves again and
    again. A lease proposed with the old generation can be applied after the partition's
    Release; it must not stay stuck until lease_ms: every record is acked well before it."""
    new_topic(cluster, admin, "race", 4)
    produce(cluster.bootstrap, "race", [b"x%d" % i for i in range(600)])
    stop = threading.Event()
    acked_by_a: list[int] = []
    a_errors: list[str] = []

    with Consumer(
        cluster.bootstrap,
        "racers",
        ["race"],
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_records=3,
        lease_ms=LEASE_MS,
    ) as a:

        def work() -> None:
            while not stop.is_set():
                try:
                    messages = a.poll(timeout_ms=50)
                    outcomes = a.ack(messages)
                except errors.RaftqError as exc:
                    a_errors.append(f"call {exc.kind.name}")
                    continue
                acked_by_a.extend(1 for o in outcomes if o is None)
                a_errors.extend(f"ack {o.kind.name}" for o in outcomes if o is not None)

        threads = [threading.Thread(target=work, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        b = RawMember(cluster.client_addr(2), "racers", ["race"])

        def a_acks_more() -> Any:
            seen = len(acked_by_a)
            return lambda: len(acked_by_a) > seen

        for _ in range(6):  # each membership change lands while A is acking
            b.join()
            wait_until(a_acks_more(), 10, "A acking")
            b.leave()
            b.member_id = ""
            wait_until(a_acks_more(), 10, "A acking")
        b.join()
        start = time.monotonic()

        def drained() -> bool:
            b.heartbeat()  # B has no heartbeat thread
            records = b.poll(max_records=500)
            if records:
                b.settle("Ack", records)
            lags = admin.describe_group("racers").partitions
            return sum(p.lag for p in lags) == 0

        try:
            wait_until(drained, 20, "every record acked (a stuck lease waits 60 s)")
        except AssertionError:
            raise AssertionError(
                f"stuck: {Counter(a_errors)} {admin.describe_group('racers')}"
            ) from None
        finally:
            stop.set()
            for t in threads:
                t.join(5)
        print(f"\ndrained {time.monotonic() - start:.3f} s after the last rebalance")
        b.close()


def test_an_expired_session_is_removed_and_its_leases_go_to_the_others(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """A member that stops heartbeating is removed once its session runs out (not before);
    its partitions go to the live member with its leased records (delivery_count 2) long
    before lease_ms; its later calls are UNKNOWN_MEMBER."""
    new_topic(cluster, admin, "expiry", 4)
    produce(cluster.bootstrap, "expiry", [b"e%d" % i for i in range(20)])
    # Its session runs from its join as the metadata leader applied it (or from a heartbeat a
    # lagging broker forwards for its poll): never before this instant.
    silent_since = time.monotonic()
    silent = RawMember(cluster.client_addr(3), "expiring", ["expiry"]).join()
    held = silent.poll(max_records=20)
    assert len(held) == 20
    with Consumer(
        cluster.bootstrap,
        "expiring",
        ["expiry"],
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        lease_ms=LEASE_MS,
    ) as live:
        assert len(live.assignment) == 2
        got: dict[int, Any] = {}

        def everything_redelivered() -> bool:
            for m in live.poll(timeout_ms=100):
                got[m.offset * 10 + m.partition] = m
                m.ack()  # raises if the delivery is no longer ours
            return len(got) == 20

        wait_until(everything_redelivered, 15, "the silent member's records at the live one")
        removed_s = time.monotonic() - silent_since
        print(f"\nsilent member's leases redelivered {removed_s:.3f} s after it joined")
        assert SESSION_MS / 1000 <= removed_s < LEASE_MS / 1000 / 4
        assert {m.delivery_count for m in got.values()} == {2}
        assert members(admin, "expiring") == {live.member_id}
        assert len(live.assignment) == 4
        with pytest.raises(errors.UnknownMember):
            silent.heartbeat()
        with pytest.raises(errors.UnknownMember):
            silent.settle("Ack", held[:1])
    silent.close()


def test_two_groups_each_ack_every_record_and_lag_reaches_zero(
    cluster: ProcessCluster, admin: Admin, tmp_path: Path
) -> None:
    """Pub/sub across groups, queue within a group: two groups of two consumer processes on
    one topic each ack every record exactly once; the lease logs show no double lease and no
    redelivery (nothing was killed); DescribeGroup's lag per partition ends at 0 for both."""
    new_topic(cluster, admin, "shared", 4)
    procs = ConsumerProcs(tmp_path, cluster.bootstrap)
    opts = ["--session-timeout-ms", str(SESSION_MS), "--heartbeat-ms", str(HEARTBEAT_MS)]
    try:
        for name, group in (("a1", "alpha"), ("a2", "alpha"), ("b1", "beta"), ("b2", "beta")):
            procs.start(name, group, "shared", *opts)
        for name in ("a1", "a2", "b1", "b2"):
            procs.wait_joined(name)
        sent = produce(cluster.bootstrap, "shared", [b"s%d" % i for i in range(400)])
        produced = {("shared", m.partition, m.offset) for m in sent}
        for names in (("a1", "a2"), ("b1", "b2")):
            wait_until(
                lambda names=names: (
                    produced  # type: ignore[misc]
                    <= acked(procs.events(names[0]) + procs.events(names[1]))
                ),
                60,
                f"{names} acking every record",
            )
        for group in ("alpha", "beta"):
            lags = wait_until(
                lambda group=group: [  # type: ignore[misc]
                    p for p in admin.describe_group(group).partitions if p.lag == 0 and p.end > 0
                ],
                20,
                f"{group} lag 0",
            )
            assert len(lags) == 4 and sum(p.end for p in lags) == 400, lags
    finally:
        procs.stop_all()
    for names in (("a1", "a2"), ("b1", "b2")):
        report = check_lease_log(procs.events(names[0]) + procs.events(names[1]), produced, {})
        assert report.problems == [], "\n".join(report.problems[:20])


@pytest.mark.slow
def test_a_new_metadata_leader_expires_no_live_member(tmp_path: Path) -> None:
    """Kill -9 the metadata leader broker: the new leader has no sessions in memory and gives
    every member a fresh one, so heartbeating members are never expired (the generation and
    membership stay put for several session timeouts), and consuming goes on."""
    with ProcessCluster(tmp_path, env=GROUP_ENV) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        new_topic(cluster, admin, "steady", 4)
        consumers = [
            Consumer(
                cluster.bootstrap,
                "survivors",
                ["steady"],
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                lease_ms=LEASE_MS,
            )
            for _ in range(2)
        ]
        try:
            wait_until(lambda: len(members(admin, "survivors")) == 2, 20, "2 members")
            gen = generation(admin, "survivors")
            old_leader = admin.describe_cluster().metadata_leader
            cluster.kill(old_leader)
            survivors = cluster.admin(cluster.live_bootstrap())
            new_leader = wait_until(
                lambda: _meta_leader(survivors, old_leader), 30, "a new metadata leader"
            )
            elected = time.monotonic()
            ids = {c.member_id for c in consumers}
            while time.monotonic() - elected < 3 * SESSION_MS / 1000:
                assert members(survivors, "survivors") == ids, "a live member was expired"
                assert generation(survivors, "survivors") == gen
                time.sleep(0.2)  # sampling the membership over the window, not awaiting it
            print(f"\nmetadata leader {old_leader} -> {new_leader}: no member expired")
            sent = produce(cluster.live_bootstrap(), "steady", [b"k%d" % i for i in range(100)])
            got: set[int] = set()

            def consumed() -> bool:
                for c in consumers:
                    for m in c.poll(timeout_ms=100):
                        m.ack()  # raises if the delivery is no longer ours
                        got.add(m.offset * 10 + m.partition)
                return len(got) == len(sent)

            wait_until(consumed, 60, "every record consumed after the failover")
        finally:
            for c in consumers:
                c.close()


def _meta_leader(admin: Admin, not_this: int) -> int | None:
    try:
        leader = int(admin.describe_cluster().metadata_leader)
    except errors.RaftqError:
        return None
    return leader if leader and leader != not_this else None


def test_a_group_joined_with_latest_skips_earlier_records(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """JoinGroup.start_from reaches the partitions' Lease: a group that joins with LATEST
    starts at the end offsets (its first poll finds nothing old), then gets exactly the records
    produced after; an EARLIEST group on the same topic gets everything."""
    new_topic(cluster, admin, "latest", 2)
    old = produce(cluster.bootstrap, "latest", [b"old%d" % i for i in range(10)])
    late = RawMember(
        cluster.client_addr(2), "late", ["latest"], start_from=partition_pb2.LATEST
    ).join()
    assert late.poll(max_wait_ms=300) == []
    new = produce(cluster.bootstrap, "latest", [b"new%d" % i for i in range(5)])
    got: list[Any] = []

    def polled(member: RawMember, into: list[Any], count: int) -> bool:
        into.extend(member.poll())
        return len(into) >= count

    wait_until(lambda: polled(late, got, 5), 10, "the new records")
    assert sorted(r.record.value for r in got) == sorted(b"new%d" % i for i in range(5))
    assert {(r.partition, r.offset) for r in got} == {(m.partition, m.offset) for m in new}
    early = RawMember(cluster.client_addr(3), "early", ["latest"]).join()
    everything: list[Any] = []
    wait_until(lambda: polled(early, everything, 15), 10, "all 15")
    assert len(everything) == len(old) + len(new) == 15
    late.close()
    early.close()
