"""The chaos harness (tests/chaos/): its checker finds each kind of violation in a synthetic
run, its proxy partitions and heals links, its schedule replays from a seed; and (slow) a short
run on real broker processes under faults ends with no violation.

``RAFTQ_SEED`` replays the slow run's fault schedule; ``RAFTQ_CHAOS_DURATION`` sets its length.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftq.client import Producer
from raftq.handlers.leases import offset_ranges
from raftq.proto import api_pb2
from raftq.transport.raft import codec
from raftq.transport.request_checks import CheckedPoll, check_join_group, check_poll
from tests.chaos.checker import check, taken_back
from tests.chaos.harness import Harness, Options
from tests.chaos.proxy import RaftProxy, dialer_from_handshake
from tests.chaos.schedule import KINDS, make_schedule
from tests.cluster import InProcessCluster
from tests.helpers import free_port, wait_until

LEASE_MS = 1000
T0 = 1_000_000


# -- the checker on synthetic runs ------------------------------------------------------------


def _run(tmp: Path, mutate: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
    """A tiny, correct run: three fifo records (one poison, one delayed), then ``mutate``."""
    run: dict[str, Any] = {
        "workload": [
            {
                "ev": "config",
                "seed": 5,
                "topics": ["t"],
                "fifo_topics": ["t"],
                "max_deliveries": 2,
                "lease_ms": LEASE_MS,
                "group": "g",
            },
        ],
        "consumer": [
            {
                "ev": "join",
                "member": "m1",
                "generation": 1,
                "assignment": [["t", 0]],
                "wall_ms": T0,
            },
        ],
        "final": {
            "settled": True,
            "logs": {"t": {"0": []}, "t.dlq": {"0": []}},
            "group": [{"topic": "t", "partition": 0, "lag": 0}],
        },
        "replicas": {
            "p.1.0": {"1": {"applied": 9, "sha256": "a"}, "2": {"applied": 9, "sha256": "a"}}
        },
    }
    w, c, log = run["workload"], run["consumer"], run["final"]["logs"]
    for n, (rid, deliver_at) in enumerate([("R-f-0", 0), ("P-f-1", 0), ("R-f-2", T0 + 500)]):
        send = {
            "ev": "send",
            "id": rid,
            "topic": "t",
            "producer": "f",
            "seq": n,
            "key": "k",
            "priority": 0,
            "deliver_at_ms": deliver_at,
            "idem": "",
            "attempt": 1,
        }
        w.append(send)
        w.append({"ev": "sent", "id": rid, "attempt": 1, "ok": True, "partition": 0, "offset": n})
        log["t"]["0"].append(
            {
                "offset": n,
                "value": rid,
                "key": "k",
                "priority": 0,
                "deliver_at_ms": deliver_at,
                "headers": {},
            }
        )

    def lease(offset: int, value: str, count: int, at: int, member: str = "m1") -> None:
        c.append(
            {
                "ev": "lease",
                "member": member,
                "topic": "t",
                "partition": 0,
                "offset": offset,
                "delivery_count": count,
                "lease_deadline_ms": at + LEASE_MS,
                "value": value,
                "wall_ms": at,
            }
        )

    def settle(ev: str, offset: int, count: int, at: int, member: str = "m1") -> None:
        c.append(
            {
                "ev": ev,
                "member": member,
                "topic": "t",
                "partition": 0,
                "offset": offset,
                "delivery_count": count,
                "ok": True,
                "error": "",
                "wall_ms": at,
            }
        )

    lease(0, "R-f-0", 1, T0 + 10)
    lease(1, "P-f-1", 1, T0 + 10)
    settle("ack", 0, 1, T0 + 20)
    settle("nack", 1, 1, T0 + 20)
    lease(1, "P-f-1", 2, T0 + 100)
    settle("nack", 1, 2, T0 + 110)
    lease(2, "R-f-2", 1, T0 + 600)
    settle("ack", 2, 1, T0 + 610)
    log["t.dlq"]["0"].append(
        {
            "offset": 0,
            "value": "P-f-1",
            "key": "k",
            "priority": 0,
            "deliver_at_ms": 0,
            "headers": {
                "raftq.dlq.topic": "t",
                "raftq.dlq.partition": "0",
                "raftq.dlq.offset": "1",
                "raftq.dlq.delivery_count": "2",
            },
        }
    )
    if mutate is not None:
        mutate(run)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "workload.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run["workload"]))
    (tmp / "consumer-0-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run["consumer"]))
    (tmp / "final.json").write_text(json.dumps(run["final"]))
    (tmp / "replicas.json").write_text(json.dumps(run["replicas"]))
    for name, text in run.get("broker_logs", {}).items():
        (tmp / "cluster").mkdir(exist_ok=True)
        (tmp / "cluster" / name).write_text(text)
    return check(tmp).violations


def test_checker_passes_a_correct_run(tmp_path: Path) -> None:
    assert _run(tmp_path) == []


def _lease_of(run: dict[str, Any], offset: int, count: int) -> dict[str, Any]:
    return next(
        e
        for e in run["consumer"]
        if e["ev"] == "lease" and e["offset"] == offset and e["delivery_count"] == count
    )


def _lost(run: dict[str, Any]) -> None:
    del run["final"]["logs"]["t"]["0"][0]


def _invented(run: dict[str, Any]) -> None:
    run["final"]["logs"]["t"]["0"].append(
        {
            "offset": 3,
            "value": "R-x-9",
            "key": None,
            "priority": 0,
            "deliver_at_ms": 0,
            "headers": {},
        }
    )


def _duplicated(run: dict[str, Any]) -> None:
    run["final"]["logs"]["t"]["0"].append(dict(run["final"]["logs"]["t"]["0"][0], offset=3))


def _double_lease(run: dict[str, Any]) -> None:
    first = _lease_of(run, 0, 1)
    run["consumer"].append(
        dict(
            first,
            member="m2",
            delivery_count=2,
            wall_ms=first["wall_ms"] + 5,
            lease_deadline_ms=first["lease_deadline_ms"] + 5,
        )
    )
    ack = next(e for e in run["consumer"] if e["ev"] == "ack" and e["offset"] == 0)
    ack.update(member="m2", delivery_count=2)


def _count_goes_back(run: dict[str, Any]) -> None:
    _lease_of(run, 1, 2)["lease_deadline_ms"] = T0 + 1 + LEASE_MS


def _early(run: dict[str, Any]) -> None:
    x = _lease_of(run, 2, 1)
    x["wall_ms"], x["lease_deadline_ms"] = T0 + 400, T0 + 400 + LEASE_MS


def _fifo(run: dict[str, Any]) -> None:
    _lease_of(run, 0, 1)["lease_deadline_ms"] = T0 + 50 + LEASE_MS


def _poison_kept(run: dict[str, Any]) -> None:
    run["final"]["logs"]["t.dlq"]["0"].clear()


def _acked_redelivered(run: dict[str, Any]) -> None:
    first = _lease_of(run, 0, 1)
    run["consumer"].append(
        dict(first, delivery_count=2, wall_ms=T0 + 2000, lease_deadline_ms=T0 + 2000 + LEASE_MS)
    )


def _unsettled(run: dict[str, Any]) -> None:
    run["final"]["group"][0]["lag"] = 1


def _replicas_differ(run: dict[str, Any]) -> None:
    run["replicas"]["p.1.0"]["2"]["sha256"] = "b"


def _idem_two_offsets(run: dict[str, Any]) -> None:
    run["workload"].append(
        {"ev": "sent", "id": "R-f-0", "attempt": 2, "ok": True, "partition": 0, "offset": 2}
    )


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_lost, "(lost)"),
        (_invented, "never sent"),
        (_duplicated, "in the log 2 times"),
        (_double_lease, "which nothing ended"),
        (_count_goes_back, "do not grow with time"),
        (_early, "before deliver_at_ms"),
        (_fifo, "(fifo)"),
        (_poison_kept, "poison record not dead-lettered"),
        (_acked_redelivered, "delivered again"),
        (_unsettled, "group lag 1"),
        (_replicas_differ, "replicas at applied index 9 differ"),
        (_idem_two_offsets, "acknowledged at different offsets"),
    ],
)
def test_checker_finds_each_violation(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    violations = _run(tmp_path, mutate)
    assert any(expected in v for v in violations), violations


def _late_ack_after_takeover(m1_ack_at: int, m2_acks: bool) -> Callable[[dict[str, Any]], None]:
    """R-f-0's delivery 1 (m1) lapses; m2 leases delivery 2 at T0 + 2000 and (``m2_acks``)
    acks it at T0 + 2010; m1's ack of delivery 1 is answered OK at ``m1_ack_at``."""

    def mutate(run: dict[str, Any]) -> None:
        ack = next(e for e in run["consumer"] if e["ev"] == "ack" and e["offset"] == 0)
        ack["wall_ms"] = m1_ack_at
        first = _lease_of(run, 0, 1)
        at = T0 + 2000
        run["consumer"].append(
            dict(first, member="m2", delivery_count=2, wall_ms=at, lease_deadline_ms=at + LEASE_MS)
        )
        if m2_acks:
            run["consumer"].append(dict(ack, member="m2", delivery_count=2, wall_ms=at + 10))

    return mutate


@pytest.mark.parametrize(
    ("m1_ack_at", "m2_acks", "violation"),
    [
        (T0 + 3000, True, False),  # m2's delivery and ack came first: m1's ack found it acked
        (T0 + 2001, True, False),  # just after m2's lease
        (T0 + 2000, True, True),  # answered when m2's lease was stamped: leased after the ack
        (T0 + 1500, True, True),  # answered before m2's lease: leased again after an ack
        (T0 + 3000, False, True),  # nobody acked delivery 2: m1's ack must have ended it
    ],
)
def test_a_late_ack_of_a_delivery_taken_over_is_told_apart(
    tmp_path: Path, m1_ack_at: int, m2_acks: bool, violation: bool
) -> None:
    """An ack of an acked record answers OK, so m1's ack of delivery 1, answered after m2
    leased and acked delivery 2, is no redelivery after an ack."""
    violations = _run(tmp_path, _late_ack_after_takeover(m1_ack_at, m2_acks))
    flagged = any(
        "ack of delivery 1 succeeded, yet delivered again as [2]" in v for v in violations
    )
    assert flagged == violation, violations
    assert [v for v in violations if "delivered again" not in v] == []


def _taking_back(topic_partition: str, offsets: str) -> str:
    """A broker's log line (broker/handlers/leases.py), written before it takes back the
    deliveries of an answer that never reached its member."""
    return (
        "2026-11-25 23:08:36,446 INFO raftq.broker.leases [group=g topic/partition="
        f"{topic_partition}] taking back 3 undelivered leases of m1 (offsets {offsets})\n"
    )


@pytest.mark.parametrize(
    ("log", "excused"),
    [
        (_taking_back("t/0", "0"), True),
        (_taking_back("t/0", "7,0-1"), True),
        ("", False),
        (_taking_back("t/1", "0"), False),  # another partition
        (_taking_back("t/0", "2-4,9"), False),  # other offsets
        (_taking_back("t.x/0", "0"), False),  # another topic
    ],
)
def test_a_first_delivery_after_a_take_back_is_no_fifo_violation(
    tmp_path: Path, log: str, excused: bool
) -> None:
    """Offset 0 leased as delivery 1 after offset 1: a violation, unless a broker took back a
    delivery of offset 0 (Release.undelivered restores its delivery_count, so its next lease
    is delivery 1 again, a redelivery all the same)."""

    def late_after_take_back(run: dict[str, Any]) -> None:
        _fifo(run)
        run["broker_logs"] = {"broker-1.log": "starting\n" + log, "broker-2.log": ""}

    violations = _run(tmp_path, late_after_take_back)
    assert violations == [] if excused else any("(fifo)" in v for v in violations), violations


@pytest.mark.cluster(brokers=1)
def test_the_checker_reads_the_offsets_a_broker_took_back(
    cluster: InProcessCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real broker takes back a Poll answer whose client left (what ConsumerServicer.Poll
    does then: undeliver_poll): the records are leased again as delivery 1, and the line it
    logs before proposing the Release names their offsets, which the checker reads."""
    caplog.set_level(logging.INFO, logger="raftq.broker.leases")
    topic = "taken.back"
    cluster.admin().create_topic(topic, 1, 1, ordering="fifo")
    cluster.wait_leaders(topic)
    with Producer(cluster.bootstrap) as producer:
        for n in range(6):
            producer.send(topic, b"v%d" % n, partition=0).result(10)
    handlers = cluster.broker(1).handlers
    joined = handlers.groups.join_group(
        check_join_group(api_pb2.JoinGroupRequest(group="g", topics=[topic])), timeout_s=10
    )

    def poll(n: int) -> tuple[CheckedPoll, api_pb2.PollResponse]:
        request = api_pb2.PollRequest(
            group="g", member_id=joined.member_id, generation=joined.generation, max_records=n
        )
        checked = check_poll(request)
        return checked, handlers.consume.poll(checked, timeout_s=10)

    def leased(response: api_pb2.PollResponse) -> list[tuple[int, int]]:
        return [(r.offset, r.delivery_count) for r in response.records]

    checked, abandoned = poll(2)
    assert leased(abandoned) == [(0, 1), (1, 1)]
    assert leased(poll(1)[1]) == [(2, 1)]  # a later poll goes on past the abandoned answer
    handlers.consume.undeliver_poll(checked, abandoned)
    assert leased(poll(6)[1]) == [(0, 1), (1, 1), (3, 1), (4, 1), (5, 1)]  # 0, 1: delivery 1
    (tmp_path / "broker-1.log").write_text(caplog.text)
    assert taken_back(tmp_path) == {(topic, 0, 0), (topic, 0, 1)}


def test_offset_ranges_are_sorted_runs_cut_after_the_most_shown(tmp_path: Path) -> None:
    assert offset_ranges([9, 3, 4, 5, 7, 3]) == "3-5,7,9"
    assert offset_ranges([]) == ""
    cut = offset_ranges(range(0, 10, 2), most=2)
    assert cut == "0,2,... (3 more)"
    (tmp_path / "broker-1.log").write_text(_taking_back("t/0", cut))
    assert taken_back(tmp_path) == {("t", 0, 0), ("t", 0, 2)}  # only the runs shown


# -- the proxy ----------------------------------------------------------------------------------


def _echo_server() -> tuple[str, socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", srv


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)


def test_dialer_is_read_from_the_auth_frame() -> None:
    hello = codec.encode_frame(codec.KIND_HELLO, b"h" * 70)
    auth = codec.encode_frame(codec.KIND_AUTH, b"m" * 32 + b"127.0.0.1:4242")
    assert dialer_from_handshake(hello) is None
    assert dialer_from_handshake(hello + auth[:10]) is None
    assert dialer_from_handshake(hello + auth) == "127.0.0.1:4242"


def test_proxy_relays_cuts_and_heals_a_pair() -> None:
    real, srv = _echo_server()
    advertised = {1: f"127.0.0.1:{free_port()}", 2: f"127.0.0.1:{free_port()}"}
    proxy = RaftProxy({1: (advertised[1], real), 2: (advertised[2], "127.0.0.1:1")}).start()
    try:
        host, port = advertised[1].rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
        hello = codec.encode_frame(codec.KIND_HELLO, b"h" * 70)
        auth = codec.encode_frame(codec.KIND_AUTH, b"m" * 32 + advertised[2].encode())
        s.sendall(hello + auth)
        got = b""
        while len(got) < len(hello + auth):
            got += s.recv(4096)
        assert got == hello + auth
        wait_until(lambda: proxy.stats["identified"] == 1, 5, "the dialer identified")
        proxy.cut(1, 2, "blackhole")
        s.sendall(b"lost?")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(10)
        proxy.heal(1, 2)
        s.settimeout(5)
        assert s.recv(10) == b"lost?"  # held, not dropped: TCP would have retransmitted
        proxy.cut(1, 2, "reset")
        assert s.recv(10) == b""  # closed by the proxy
        s.close()
    finally:
        proxy.close()
        srv.close()


# -- the schedule -------------------------------------------------------------------------------


def test_schedule_is_a_function_of_the_seed_and_covers_every_kind() -> None:
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    a, b = make_schedule(seed, 90), make_schedule(seed, 90)
    assert a == b
    assert {f.kind for f in a} == set(KINDS)
    for f, g in itertools.pairwise(a):
        assert f.at_s + f.duration_s < g.at_s  # one fault at a time, healed before the next
    assert a[-1].at_s + a[-1].duration_s <= 90


# -- a short run on real processes --------------------------------------------------------------


@pytest.mark.slow
def test_short_chaos_run_has_no_violations(tmp_path: Path) -> None:
    raw = os.environ.get("RAFTQ_SEED")
    seed = int(raw) if raw else random.SystemRandom().randrange(1 << 31)
    duration = float(os.environ.get("RAFTQ_CHAOS_DURATION", "90"))
    print(f"chaos seed={seed} (replay: RAFTQ_SEED={seed}) dir={tmp_path}")
    report = Harness(tmp_path, Options(seed=seed, duration_s=duration, rate=20)).run()
    print(report.render())
    assert report.ok, f"seed={seed}\n{report.render()}"
    f = report.figures
    assert f["faults_total"] >= len(KINDS)
    assert f["records_checked"] > 0 and f["replica_groups_identical"] > 0
