"""Prometheus /metrics of real broker processes, scraped over HTTP and parsed as exposition text.

The cluster produces, consumes (lease, then ack), fetches and dead-letters known records; the
metrics must tell the same story: records and bytes in and out per partition, lag and leases
in flight per group on the partition's leader, dead letters, one Raft leader per group, and
latency histograms for applies and RPCs.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from raftq.client import Admin, Consumer, Message, Producer
from raftq.proto import errors
from tests.cluster import InProcessCluster, ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

BROKERS = (1, 2, 3)

PARTITION_FAMILIES = (
    "raftq_partition_records_in",
    "raftq_partition_bytes_in",
    "raftq_partition_records_out",
    "raftq_partition_bytes_out",
    "raftq_partition_dead_lettered",
    "raftq_partition_expired",
    "raftq_partition_dead_letter_outbox",
    "raftq_partition_end_offset",
    "raftq_partition_apply_duration_seconds",
    "raftq_raft_term",
    "raftq_raft_commit_index",
    "raftq_raft_leader",
    "raftq_metadata_leader",
    "raftq_rpc_duration_seconds",
    "raftq_raft_transport_bytes_sent",
    "raftq_raft_driver_rounds",
    "raftq_raft_driver_quiesced",
    "raftq_raft_driver_lag_seconds",
    "raftq_broker_info",
    "process_resident_memory_bytes",
)


def scrape(url: str) -> list[Sample]:
    """GET /metrics and parse it; every sample of every family."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def families(url: str) -> set[str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {family.name for family in text_string_to_metric_families(text)}


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    return [
        s
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def total(scrapes: dict[int, list[Sample]], name: str, **labels: str) -> float:
    """The sum of ``name`` over every broker's samples that carry ``labels``."""
    return sum(s.value for samples in scrapes.values() for s in select(samples, name, **labels))


def scrape_all(cluster: ProcessCluster) -> dict[int, list[Sample]]:
    return {i: scrape(cluster.metrics_url(i)) for i in BROKERS}


def poll_all(consumer: Consumer, count: int) -> list[Message]:
    got: dict[tuple[int, int], Message] = {}

    def polled() -> bool:
        for message in consumer.poll(count, 500):
            got[(message.partition, message.offset)] = message
        return len(got) >= count

    wait_until(polled, 60, f"{count} records leased")
    return list(got.values())


def test_brokers_export_partition_group_raft_and_rpc_metrics(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, metrics=True) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("m", partitions=2)
        admin.create_topic("dl", partitions=1, max_deliveries=1)
        with pytest.raises(errors.TopicExists):  # a failing RPC, for the code label
            admin.create_topic("m", partitions=2)
        cluster.wait_leaders("m")
        cluster.wait_leaders("dl")
        values = [b"value-%03d" % i for i in range(60)]
        # unary Sends: their per-RPC latency is checked below (a stream is timed as one call)
        with Producer(cluster.bootstrap, linger_ms=1, send_streams=False) as producer:
            futures = [producer.send("m", v, key=b"k%d" % i) for i, v in enumerate(values)]
            sent = [f.result(timeout=30) for f in futures]
            dead = [producer.send("dl", b"poison-%d" % i) for i in range(3)]
            for future in dead:
                future.result(timeout=30)
        produced = {p: sum(1 for m in sent if m.partition == p) for p in (0, 1)}
        produced_bytes = sum(len(b"k%d" % i) + len(v) for i, v in enumerate(values))

        with Consumer(cluster.client_addr(1), "g", ["m"], lease_ms=60_000) as consumer:
            leased = poll_all(consumer, len(values))
            assert len(leased) == len(values)

            # leased, not acked: every record is in flight and still counts as lag
            def all_in_flight() -> dict[int, list[Sample]] | None:
                scrapes = scrape_all(cluster)
                in_flight = total(scrapes, "raftq_group_leases_in_flight", group="g", topic="m")
                lag = total(scrapes, "raftq_group_lag_records", group="g", topic="m")
                return scrapes if in_flight == len(values) and lag == len(values) else None

            wait_until(all_in_flight, 30, "60 leases in flight and lag 60 on the leaders")
            consumer.ack(leased)

            def drained() -> dict[int, list[Sample]] | None:
                scrapes = scrape_all(cluster)
                lags = select(
                    [s for ss in scrapes.values() for s in ss],
                    "raftq_group_lag_records",
                    group="g",
                    topic="m",
                )
                in_flight = total(scrapes, "raftq_group_leases_in_flight", group="g", topic="m")
                ok = {s.labels["partition"] for s in lags} == {"0", "1"}
                return (
                    scrapes if ok and in_flight == 0 and all(s.value == 0 for s in lags) else None
                )

            wait_until(drained, 30, "lag 0 and no leases in flight after the acks")

        with Consumer(cluster.client_addr(2), "dlg", ["dl"]) as consumer:
            for message in poll_all(consumer, 3):
                message.nack(delay_ms=0)  # max_deliveries=1: straight to the dead-letter topic

        fetched = admin.fetch("m", 0, 0, 1000)
        fetched_records = len(fetched.records)
        assert fetched_records == produced[0]

        # -- the families every broker exports ---------------------------------------------
        for i in BROKERS:
            missing = set(PARTITION_FAMILIES) - families(cluster.metrics_url(i))
            assert not missing, f"broker {i} lacks {sorted(missing)}"

        # -- dead letters: counted on every replica (replicated state), then forwarded --------
        def dead_lettered() -> dict[int, list[Sample]] | None:
            scrapes = scrape_all(cluster)
            per_broker = [
                sum(s.value for s in select(ss, "raftq_partition_dead_lettered_total", topic="dl"))
                for ss in scrapes.values()
            ]
            outbox = total(scrapes, "raftq_partition_dead_letter_outbox", topic="dl")
            return scrapes if per_broker == [3, 3, 3] and outbox == 0 else None

        wait_until(dead_lettered, 30, "3 dead letters on every replica, outbox empty")

        # -- records and bytes in/out per partition (summed over brokers: leaders move) ------
        def settled() -> dict[int, list[Sample]] | None:
            s = scrape_all(cluster)
            leaders = [
                total(s, "raftq_raft_leader", raft_group=g)
                for g in (
                    "meta",
                    *{x.labels["raft_group"] for x in select(s[1], "raftq_raft_term")},
                )
            ]
            return (
                s
                if all(n == 1 for n in leaders) and total(s, "raftq_metadata_leader") == 1
                else None
            )

        settled_scrapes = wait_until(settled, 30, "exactly one leader per raft group")
        assert settled_scrapes is not None
        scrapes = settled_scrapes
        for p in (0, 1):
            labels = {"topic": "m", "partition": str(p)}
            assert total(scrapes, "raftq_partition_records_in_total", **labels) == produced[p]
            assert (
                total(scrapes, "raftq_partition_records_out_total", via="lease", **labels)
                == produced[p]
            )
            ends = {s.value for s in select(scrapes[1], "raftq_partition_end_offset", **labels)}
            assert ends == {produced[p]}  # every replica has every record
        assert total(scrapes, "raftq_partition_bytes_in_total", topic="m") == produced_bytes
        assert total(scrapes, "raftq_partition_bytes_out_total", topic="m", via="lease") == (
            produced_bytes
        )
        assert (
            total(
                scrapes, "raftq_partition_records_out_total", topic="m", partition="0", via="fetch"
            )
            == fetched_records
        )
        assert total(scrapes, "raftq_partition_records_in_total", topic="dl.dlq") == 3

        # -- raft: terms and commit indexes are real, leaders lead with the highest commit ----
        for i in BROKERS:
            terms = select(scrapes[i], "raftq_raft_term", topic="m")
            assert {s.labels["partition"] for s in terms} == {"0", "1"}
            assert all(s.value >= 1 for s in terms)
            commits = select(scrapes[i], "raftq_raft_commit_index", raft_group="meta")
            assert len(commits) == 1 and commits[0].value > 0

        # -- apply latency: every replica applied entries, buckets are cumulative -------------
        for i in BROKERS:
            count = select(
                scrapes[i], "raftq_partition_apply_duration_seconds_count", topic="m", partition="0"
            )
            assert count and count[0].value > 0
            buckets = select(
                scrapes[i],
                "raftq_partition_apply_duration_seconds_bucket",
                topic="m",
                partition="0",
            )
            ordered = [b.value for b in sorted(buckets, key=lambda b: float(b.labels["le"]))]
            assert ordered == sorted(ordered) and ordered[-1] == count[0].value

        # -- per-RPC latency by method and status code ---------------------------------------
        for method in ("Send", "Poll", "Ack", "Nack", "JoinGroup", "Fetch"):
            assert total(scrapes, "raftq_rpc_duration_seconds_count", method=method, code="OK") > 0
        failed_creates = total(
            scrapes, "raftq_rpc_duration_seconds_count", method="CreateTopic", code="ALREADY_EXISTS"
        )
        assert failed_creates >= 1
        infos = [select(scrapes[i], "raftq_broker_info") for i in BROKERS]
        assert [info[0].labels["broker_id"] for info in infos] == ["1", "2", "3"]


# -- one broker in this process: the collector, the HTTP endpoint's lifecycle, pruning -------


@pytest.mark.cluster(metrics=True)
def test_in_process_broker_metrics_follow_topics_and_stop_with_the_broker(
    cluster: InProcessCluster,
) -> None:
    broker = cluster.broker(1)
    url = f"http://{broker.metrics_addr}/metrics"
    try:
        admin = Admin(broker.config.broker.client_addr)
        admin.create_topic("solo", partitions=1)
        with Producer(broker.config.broker.client_addr, linger_ms=1) as producer:
            for future in [producer.send("solo", b"abc") for _ in range(4)]:
                future.result(timeout=30)
        assert broker.metrics is not None
        samples = [
            s
            for family in text_string_to_metric_families(broker.metrics.render().decode())
            for s in family.samples
        ]
        labels = {"topic": "solo", "partition": "0"}
        assert select(samples, "raftq_partition_records_in_total", **labels)[0].value == 4
        assert select(samples, "raftq_partition_bytes_in_total", **labels)[0].value == 12
        assert select(samples, "raftq_raft_leader", raft_group="meta")[0].value == 1
        applied = select(samples, "raftq_partition_apply_duration_seconds_count", **labels)
        assert applied[0].value >= 1  # the hook was attached when the replica opened
        assert scrape(url)  # the same registry over HTTP

        admin.delete_topic("solo")  # the replica closes: its series go with it
        wait_until(
            lambda: (
                not select(scrape(url), "raftq_partition_apply_duration_seconds_count", **labels)
                and not select(scrape(url), "raftq_partition_records_in_total", **labels)
            ),
            30,
            "the deleted topic's series gone",
        )
        admin.close()
    finally:
        cluster.kill(1)
    with pytest.raises(OSError):  # the endpoint stopped with the broker
        urllib.request.urlopen(url, timeout=2)
