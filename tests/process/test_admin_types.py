"""Admin and AsyncAdmin answer frozen, printable dataclasses (broker/client/types.py), never
protobufs: every public method is called against real brokers (three in this process) and its
answer walked; ``print(admin.list_offsets(t))`` reads as partitions and offsets (issue 18)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.message import Message as ProtoMessage

from raftq.client import Admin, Consumer, Producer, types
from raftq.client.aio import AsyncAdmin
from tests.cluster import Cluster, make_cluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

PLAIN = (int, str, bytes, bool, float, type(None))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # four: the AsyncAdmin test removes broker 4, the Admin test (last) broker 3
    with make_cluster(tmp_path_factory.mktemp("admin-types"), brokers=4) as built:
        built.wait_ready()
        yield built


def walk(answer: Any, where: str = "answer") -> None:
    """Fail on any protobuf message anywhere in ``answer``; every dataclass is frozen."""
    assert not isinstance(answer, ProtoMessage), f"{where} is a protobuf {type(answer)}"
    if dataclasses.is_dataclass(answer):
        params = getattr(type(answer), "__dataclass_params__")  # noqa: B009
        assert params.frozen, f"{where}: {type(answer)} is not frozen"
        assert type(answer).__module__ == types.__name__, f"{where}: {type(answer)}"
        for field in dataclasses.fields(answer):
            walk(getattr(answer, field.name), f"{where}.{field.name}")
    elif isinstance(answer, list | tuple):
        for i, item in enumerate(answer):
            walk(item, f"{where}[{i}]")
    elif isinstance(answer, dict):
        for key, item in answer.items():
            walk(key, f"{where} key")
            walk(item, f"{where}[{key!r}]")
    else:
        assert isinstance(answer, PLAIN), f"{where} is a {type(answer)}"


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name != "close"
    }


def no_protobuf_in_hints(cls: type) -> None:
    """Every public method's declared answer names no protobuf type (what mypy and IDEs see)."""
    for name in public_methods(cls):
        hint = typing.get_type_hints(getattr(cls, name))["return"]
        stack = [hint]
        while stack:
            t = stack.pop()
            stack.extend(typing.get_args(t))
            origin = typing.get_origin(t) or t
            assert not (isinstance(origin, type) and issubclass(origin, ProtoMessage)), (name, t)


def seeded(cluster: Cluster, topic: str, group: str) -> None:
    """``topic`` (2 partitions, 2 replicas), 3 records on partition 0, ``group`` joined and
    left (so it can be sought)."""
    admin = cluster.admin()
    admin.create_topic(topic, partitions=2, replication_factor=2)
    cluster.wait_leaders(topic)
    with Producer(cluster.bootstrap, linger_ms=1) as producer:
        for i in range(3):
            producer.send(topic, b"v%d" % i, key=b"k", partition=0).result(60)
    with Consumer(cluster.bootstrap, group, [topic]) as consumer:
        wait_until(lambda: consumer.poll(1, timeout_ms=500), 60, "a record for the group")


def test_a_printed_list_offsets_names_partition_0_and_its_end(cluster: Cluster) -> None:
    seeded(cluster, "printed", "printed-g")
    admin = cluster.admin()
    printed = str(admin.list_offsets("printed"))
    assert printed == (
        "[PartitionOffsets(partition=0, log_start=0, end=3), "
        "PartitionOffsets(partition=1, log_start=0, end=0)]"
    )
    # zero values shown, no protobuf text format, bytes as bytes
    described = repr(admin.describe_topic("printed"))
    assert described.startswith("TopicInfo(name='printed', replication_factor=2, config=")
    assert "leader_addr='127.0.0.1:" in described and "log_start=0" in described
    fetched = repr(admin.fetch("printed", 0, 0, max_records=1))
    assert fetched.startswith("FetchResult(records=(StoredRecord(offset=0, timestamp_ms=")
    assert "key=b'k', value=b'v0', headers={}, priority=0" in fetched


def test_every_async_admin_method_answers_frozen_dataclasses(cluster: Cluster) -> None:
    no_protobuf_in_hints(AsyncAdmin)
    seeded(cluster, "typed-aio", "typed-aio-g")

    async def scenario() -> dict[str, Any]:
        answers: dict[str, Any] = {}
        async with AsyncAdmin(cluster.bootstrap) as a:
            answers["create_topic"] = await a.create_topic("typed-aio-2", partitions=1)
            answers["list_topics"] = await a.list_topics()
            answers["describe_topic"] = await a.describe_topic("typed-aio")
            answers["alter_topic_config"] = await a.alter_topic_config("typed-aio-2", lease_ms=9)
            answers["add_partitions"] = await a.add_partitions("typed-aio-2", 2)
            answers["rebalance_leaders"] = await a.rebalance_leaders()
            answers["list_groups"] = await a.list_groups()
            answers["describe_group"] = await a.describe_group("typed-aio-g")
            answers["seek_group"] = await a.seek_group("typed-aio-g", "typed-aio", latest=True)
            answers["list_offsets"] = await a.list_offsets("typed-aio")
            answers["fetch"] = await a.fetch("typed-aio", 0, 0)
            await a.update_record("typed-aio", 0, 2, priority=1)
            answers["update_record"] = None  # answers nothing
            await a.cancel_record("typed-aio", 0, 2)
            answers["cancel_record"] = None  # answers nothing
            answers["create_schedule"] = await a.create_schedule(
                "typed-aio", "tick", b"go", cron="@daily"
            )
            answers["list_schedules"] = await a.list_schedules("typed-aio")
            answers["pause_schedule"] = await a.pause_schedule("typed-aio", "tick")
            answers["resume_schedule"] = await a.resume_schedule("typed-aio", "tick")
            await a.delete_schedule("typed-aio", "tick")
            answers["delete_schedule"] = None  # answers nothing
            answers["purge_topic"] = await a.purge_topic("typed-aio", 0)
            answers["delete_group"] = await a.delete_group("typed-aio-g")
            answers["producer_state"] = await a.producer_state("typed-aio", "nobody", [0])
            answers["commit_txn"] = await a.commit_txn("typed-aio-app", 4, scope="typed-aio")
            answers["get_txn"] = await a.get_txn("typed-aio-app", scope="typed-aio")
            answers["backup_metadata"] = await a.backup_metadata()
            partition = (await a.describe_topic("typed-aio")).partitions[1]
            answers["backup_partition"] = [
                chunk
                async for chunk in a.backup_partition(
                    partition.leader_addr, "typed-aio", 1, timeout_s=60
                )
            ]
            elsewhere = next(b for b in (1, 2, 3) if b not in partition.replicas)
            target = [partition.replicas[0], elsewhere]
            answers["move_partition"] = await a.move_partition("typed-aio", 1, target, 120)
            answers["remove_broker"] = await a.remove_broker(4, 120)
            answers["describe_cluster"] = await a.describe_cluster()
            await a.delete_topic("typed-aio-2")
            answers["delete_topic"] = None  # answers nothing
        return answers

    answers = asyncio.run(scenario())
    assert set(answers) == public_methods(AsyncAdmin), "a public method is not called here"
    for name, answer in answers.items():
        walk(answer, name)
    assert answers["list_offsets"] == [
        types.PartitionOffsets(0, 0, 3),
        types.PartitionOffsets(1, 0, 0),
    ]
    assert [(p.partition, p.log_start) for p in answers["purge_topic"]] == [(0, 3)]
    assert answers["describe_group"].group_id == "typed-aio-g"
    assert answers["alter_topic_config"].config.lease_ms == 9
    assert answers["commit_txn"] == 4 and answers["get_txn"] == 4
    assert not answers["producer_state"][0].known
    assert answers["backup_metadata"].cluster_id and answers["backup_partition"][0].chunks >= 1
    assert len(answers["move_partition"].replicas) == 2
    assert 4 not in {b.id for b in answers["describe_cluster"].brokers}


def test_every_admin_method_answers_frozen_dataclasses(cluster: Cluster) -> None:
    """Last in this module: it removes broker 3."""
    no_protobuf_in_hints(Admin)
    admin = cluster.admin()
    seeded(cluster, "typed", "typed-g")
    answers: dict[str, Any] = {}
    answers["create_topic"] = admin.create_topic(
        "typed-2", partitions=1, replication_factor=2, ttl_ms=60_000
    )
    answers["list_topics"] = admin.list_topics()
    answers["describe_topic"] = admin.describe_topic("typed")
    answers["alter_topic_config"] = admin.alter_topic_config("typed-2", ordering="priority")
    answers["add_partitions"] = admin.add_partitions("typed-2", 2)
    answers["rebalance_leaders"] = admin.rebalance_leaders()
    answers["list_groups"] = admin.list_groups()
    answers["describe_group"] = admin.describe_group("typed-g")
    answers["seek_group"] = admin.seek_group("typed-g", "typed", earliest=True)
    answers["list_offsets"] = admin.list_offsets("typed")
    answers["fetch"] = admin.fetch("typed", 0, 0)
    answers["producer_state"] = admin.producer_state("typed", "nobody")
    admin.update_record("typed", 0, 2, priority=1)
    answers["update_record"] = None  # answers nothing
    admin.cancel_record("typed", 0, 2)
    answers["cancel_record"] = None  # answers nothing
    answers["create_schedule"] = admin.create_schedule(
        "typed", "tick", b"go", interval_ms=3_600_000, key=b"k", headers={"h": b"1"}
    )
    answers["list_schedules"] = admin.list_schedules("typed")
    answers["pause_schedule"] = admin.pause_schedule("typed", "tick")
    answers["resume_schedule"] = admin.resume_schedule("typed", "tick")
    admin.delete_schedule("typed", "tick")
    answers["delete_schedule"] = None  # answers nothing
    answers["commit_txn"] = admin.commit_txn("typed-app", 3)
    answers["get_txn"] = admin.get_txn("typed-app")
    answers["purge_topic"] = admin.purge_topic("typed-2")
    answers["delete_group"] = admin.delete_group("typed-g")
    answers["backup_metadata"] = admin.backup_metadata()
    partition = admin.describe_topic("typed").partitions[1]
    answers["backup_partition"] = list(
        admin.backup_partition(partition.leader_addr, "typed", 1, timeout_s=60)
    )
    elsewhere = next(b for b in (1, 2, 3) if b not in partition.replicas)
    answers["move_partition"] = admin.move_partition(
        "typed", 1, [partition.replicas[0], elsewhere], 120
    )
    answers["describe_cluster"] = admin.describe_cluster()
    answers["remove_broker"] = admin.remove_broker(3, 120)
    admin.delete_topic("typed-2")
    answers["delete_topic"] = None  # answers nothing
    assert set(answers) == public_methods(Admin), "a public Admin method is not called here"
    for name, answer in answers.items():
        walk(answer, name)

    # the answers carry what the broker said, under Kafka's names where Kafka has one
    described = answers["describe_topic"]
    assert [p.partition for p in described.partitions] == [0, 1]
    assert described.partitions[0].end == 3 and set(described.partitions[0].isr) <= {1, 2, 3}
    assert answers["alter_topic_config"].config.ordering == "PRIORITY"
    assert answers["create_topic"].config.ttl_action == "TTL_DROP"
    assert "typed-g" in {g.group_id for g in answers["list_groups"]}
    assert answers["describe_group"].group_id == "typed-g"
    assert [r.value for r in answers["fetch"].records] == [b"v0", b"v1", b"v2"]
    assert answers["fetch"].records[0].key == b"k" and answers["fetch"].records[0].headers == {}
    assert answers["create_schedule"].template.headers == {"h": b"1"}
    assert answers["create_schedule"].catch_up == "CATCH_UP_ONCE"
    assert answers["pause_schedule"].paused and not answers["resume_schedule"].paused
    assert answers["get_txn"] == 3 and answers["commit_txn"] == 3
    assert answers["describe_cluster"].health in ("HEALTHY", "DEGRADED")
    assert answers["backup_metadata"].cluster_id and answers["backup_partition"][0].chunks >= 1
    assert sorted(answers["move_partition"].replicas) == sorted([partition.replicas[0], elsewhere])
    assert all(not s.known for s in answers["producer_state"].values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        described.name = "other"
