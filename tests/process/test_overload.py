"""Client traffic cannot starve broker-to-broker traffic or cheap admin calls (issue 12 item 3).

Real broker processes (tests/cluster.py) and raw gRPC calls, so that many calls are held at
once without a thread each. These tests assert behaviour, not timings: the admin calls below
carry a deadline that a broker starving them misses (before the fix, 70 held long polls made
ListTopics wait 19 s and the leader count the other brokers dead).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.samples import Sample

from raftq.client import Admin, Consumer, Producer
from raftq.proto import api_pb2, api_pb2_grpc, errors, internal_pb2
from raftq.transport.admission import (
    ADMIN,
    CLIENT,
    CONTROL,
    INTERNAL,
    LONG_POLL,
    AdmissionInterceptor,
    Capacity,
    kind_of,
)
from raftq.transport.grpc_errors import CODE_KEY, RETRY_AFTER_KEY, from_rpc_error
from raftq.transport.grpc_server import serve
from tests.cluster import ProcessCluster
from tests.helpers import free_port, wait_until
from tests.process.test_metrics import scrape

LONG_POLLS_MAX = Capacity().long_polls_max
HELD = 100  # well past the long-poll cap, and past the old 64-thread pool


def test_every_call_has_a_kind() -> None:
    assert kind_of("/raftq.v1.Internal/Report", None) == CONTROL
    assert kind_of("/grpc.health.v1.Health/Check", None) == ADMIN
    assert kind_of("/grpc.health.v1.Health/Watch", None) == CLIENT
    assert kind_of("/raftq.v1.Internal/Propose", None) == INTERNAL
    assert kind_of("/raftq.v1.Admin/ListTopics", None) == ADMIN
    assert kind_of("/raftq.v1.Consumer/Poll", api_pb2.PollRequest(max_wait_ms=1)) == LONG_POLL
    assert kind_of("/raftq.v1.Consumer/Poll", api_pb2.PollRequest(max_wait_ms=0)) == CLIENT
    assert kind_of("/raftq.v1.Consumer/PollStream", None) == LONG_POLL
    admin_forward = internal_pb2.ForwardRequest(method="describe_cluster")
    join_forward = internal_pb2.ForwardRequest(method="join_group")
    assert kind_of("/raftq.v1.Internal/Forward", admin_forward) == ADMIN
    assert kind_of("/raftq.v1.Internal/Forward", join_forward) == INTERNAL
    assert kind_of("/raftq.v1.Producer/Send", None) == CLIENT
    capacity = Capacity()
    assert capacity.workers > sum(capacity.cap(k) for k in (CONTROL, INTERNAL, ADMIN, LONG_POLL))


def _value(samples: list[Sample], name: str, kind: str) -> float:
    values = [s.value for s in samples if s.name == name and s.labels.get("kind") == kind]
    assert len(values) == 1, (name, kind, values)
    return values[0]


def _stubs(address: str) -> tuple[grpc.Channel, Any, Any]:
    channel = grpc.insecure_channel(address)
    return channel, api_pb2_grpc.ConsumerStub(channel), api_pb2_grpc.AdminStub(channel)


def _watch_alive(cluster: ProcessCluster, address: str) -> tuple[list[str], list[int], Any]:
    """A thread that samples DescribeCluster every 0.2 s; returns (problems, samples, stop)."""
    problems: list[str] = []
    samples = [0]
    stop = threading.Event()
    channel, _, admin = _stubs(address)

    def watch() -> None:
        while not stop.wait(0.2):
            try:
                described = admin.DescribeCluster(api_pb2.DescribeClusterRequest(), timeout=2.0)
            except grpc.RpcError as exc:
                problems.append(f"DescribeCluster failed: {from_rpc_error(exc)}")
                continue
            finally:
                samples[0] += 1
            problems.extend(f"broker {b.id} not alive" for b in described.brokers if not b.alive)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def stopper() -> None:
        stop.set()
        thread.join()
        channel.close()

    return problems, samples, stopper


def test_held_long_polls_leave_admin_calls_and_broker_reports_working(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("quiet", partitions=1, replication_factor=3)
        cluster.wait_leaders("quiet")
        leader = admin.describe_cluster().metadata_leader
        address = cluster.client_addr(leader)
        channel, consumer, admin_stub = _stubs(address)
        joined = consumer.JoinGroup(
            api_pb2.JoinGroupRequest(group="g", topics=["quiet"]), timeout=10
        )
        poll = api_pb2.PollRequest(
            group="g",
            member_id=joined.member_id,
            generation=joined.generation,
            max_records=1,
            max_wait_ms=60_000,
        )
        problems, samples, stop_watching = _watch_alive(cluster, address)
        held = [consumer.Poll.future(poll, timeout=90) for _ in range(HELD)]
        try:
            # every poll past the cap is refused at once, typed and retriable, with a hint

            def all_refused() -> list[Any] | None:
                done = [f for f in held if f.done()]
                return done if len(done) >= HELD - LONG_POLLS_MAX else None

            refused = wait_until(all_refused, 30, f"{HELD - LONG_POLLS_MAX} polls refused")
            assert refused is not None
            assert len(refused) == HELD - LONG_POLLS_MAX
            for future in refused:
                assert future.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                trailers = dict(future.trailing_metadata())
                assert trailers[CODE_KEY] == str(errors.ResourceExhausted.kind.code)
                assert int(trailers[RETRY_AFTER_KEY]) > 0
                error = from_rpc_error(future.exception())
                assert isinstance(error, errors.ResourceExhausted) and error.retriable
            # the cap is held: cheap admin calls still answer, well within their deadline
            for _ in range(20):
                topics = admin_stub.ListTopics(api_pb2.ListTopicsRequest(), timeout=2.0)
                assert [t.name for t in topics.topics] == ["quiet"]
            # and every broker keeps reporting for more than a liveness window (3 s)
            seen = samples[0]
            wait_until(lambda: samples[0] >= seen + 20, 30, "20 DescribeCluster samples")
            assert not problems, problems[:10]
            assert sum(not f.done() for f in held) == LONG_POLLS_MAX
            # a held poll still does its job: a record wakes exactly one of them
            with Producer(cluster.bootstrap) as producer:
                producer.send("quiet", b"wake").result(30)
            answered = wait_until(
                lambda: [f for f in held if f.done() and f not in refused] or None,
                30,
                "a held poll answered",
            )
            assert answered is not None and len(answered) == 1
            result = answered[0].result()
            values = [r.record.value for r in result.records]
            assert values == [b"wake"]
        finally:
            stop_watching()
            for future in held:
                future.cancel()
            channel.close()


def test_polls_of_an_unknown_member_are_answered_without_holding_workers(tmp_path: Path) -> None:
    """A Poll naming an unknown member on a broker that is not the metadata leader used to
    sleep up to 2 s in a worker: 200 of them starved ListTopics for seconds."""
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("t", partitions=1, replication_factor=3)
        cluster.wait_leaders("t")
        leader = admin.describe_cluster().metadata_leader
        follower = next(i for i in (1, 2, 3) if i != leader)
        channel, consumer, admin_stub = _stubs(cluster.client_addr(follower))
        try:
            consumer.JoinGroup(api_pb2.JoinGroupRequest(group="g", topics=["t"]), timeout=10)
            bogus = api_pb2.PollRequest(
                group="g", member_id="nobody", generation=1, max_records=1, max_wait_ms=0
            )
            # 200 x 2 s of sleep on the old 64 workers: about 6 s until the last answer
            futures = [consumer.Poll.future(bogus, timeout=3.0) for _ in range(200)]
            for _ in range(5):
                listed = admin_stub.ListTopics(api_pb2.ListTopicsRequest(), timeout=2.0)
                assert [t.name for t in listed.topics] == ["t"]
            codes = [from_rpc_error(f.exception()) for f in futures]
            kinds = {type(e).__name__ for e in codes}
            # answered (or refused for capacity), none left to its deadline
            assert kinds <= {"UnknownMember", "ResourceExhausted"}, kinds
            assert any(isinstance(e, errors.UnknownMember) for e in codes)
        finally:
            channel.close()


def test_the_client_backs_off_a_refused_poll_and_polls_again(tmp_path: Path) -> None:
    """Consumers past every broker's long-poll cap get nothing instead of an error, and all of
    them receive their records once polls are free again."""
    env = {"RAFTQ_CAPACITY__LONG_POLLS_MAX": "2"}
    with ProcessCluster(tmp_path, brokers=3, env=env, metrics=True) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        for topic in ("q", "idle"):
            admin.create_topic(topic, partitions=1, replication_factor=3)
            cluster.wait_leaders(topic)
        leader = admin.describe_cluster().metadata_leader
        channel, consumer, _ = _stubs(cluster.client_addr(leader))
        try:
            joined = consumer.JoinGroup(
                api_pb2.JoinGroupRequest(group="hog", topics=["idle"]), timeout=10
            )
            hog = api_pb2.PollRequest(
                group="hog",
                member_id=joined.member_id,
                generation=joined.generation,
                max_records=1,
                max_wait_ms=60_000,
            )
            # take every broker's long polls (2 each) with a group that never gets records
            held = []
            for i in (1, 2, 3):
                _, other, _ = _stubs(cluster.client_addr(i))
                held += [other.Poll.future(hog, timeout=90) for _ in range(2)]
            with Producer(cluster.bootstrap) as producer:
                producer.send("q", b"one").result(30)
            with Consumer(cluster.bootstrap, "work", ["q"]) as worker:
                # refused by every broker: the poll backs off and returns, never raises
                got = worker.poll(timeout_ms=1500)
                assert got in ([],), got  # no poll could wait: the hint, then nothing
                # /metrics shows the cap held and the refusals
                samples = scrape(cluster.metrics_url(leader))
                assert _value(samples, "raftq_grpc_calls_cap", "long_poll") == 2
                assert _value(samples, "raftq_grpc_calls_running", "long_poll") == 2
                assert _value(samples, "raftq_grpc_calls_refused_total", "long_poll") >= 1
                for future in held:
                    future.cancel()
                got = wait_until(lambda: worker.poll(timeout_ms=1000), 30, "the record polled")
                assert [m.value for m in got] == [b"one"]
                got[0].ack()
        finally:
            channel.close()


class _SlowLister:
    """A facade whose first ListTopics waits for ``release``: it holds the one admin slot."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def list_topics(
        self, request: api_pb2.ListTopicsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListTopicsResponse:
        self.calls += 1
        if self.calls == 1:
            self.release.wait(30)
        return api_pb2.ListTopicsResponse(topics=[api_pb2.TopicSummary(name="t")])


def test_an_admin_call_refused_for_capacity_is_retried_after_the_hint() -> None:
    """Real gRPC on 127.0.0.1 with one admin slot: while it is held, another Admin call is
    refused RESOURCE_EXHAUSTED, and the client backs off and retries until it is served."""
    capacity = Capacity(admin_calls_max=1)
    admission = AdmissionInterceptor(capacity)
    facade = _SlowLister()
    address = f"127.0.0.1:{free_port()}"
    server = serve(facade, address, max_workers=capacity.workers, interceptors=[admission])  # type: ignore[arg-type]
    first, second = Admin(address), Admin(address)
    try:
        holder = threading.Thread(target=first.list_topics, daemon=True)
        holder.start()
        wait_until(lambda: facade.calls == 1, 10, "the first ListTopics holds the slot")
        answered: list[Any] = []
        waiter = threading.Thread(target=lambda: answered.append(second.list_topics()))
        waiter.start()
        wait_until(
            lambda: admission.statistics()["refused"][ADMIN] >= 2, 10, "two refusals, retried"
        )
        assert not answered  # still backing off: the slot is held
        facade.release.set()
        waiter.join(30)
        holder.join(30)
        assert [t.name for t in answered[0]] == ["t"]
        assert admission.statistics()["running"][ADMIN] == 0
    finally:
        facade.release.set()
        first.close()
        second.close()
        server.stop(0)
