"""The asyncio client (broker/client/aio.py) against real broker processes: the same answers
and typed errors as the thread client, ``async for`` over a group, acks, nacks, rebalances."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from raftq.client.aio import AsyncAdmin, AsyncConsumer, AsyncMessage, AsyncProducer
from raftq.proto import errors
from tests.cluster import ProcessCluster


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ProcessCluster(tmp_path_factory.mktemp("aio"), brokers=3) as cluster:
        cluster.wait_ready()
        yield cluster.bootstrap


def test_async_admin_answers_and_errors_like_the_thread_client(bootstrap: str) -> None:
    async def scenario() -> None:
        async with AsyncAdmin(bootstrap) as admin:
            created = await admin.create_topic("aio-admin", partitions=3, lease_ms=5000)
            assert len(created.partitions) == 3 and created.config.lease_ms == 5000
            assert "aio-admin" in [t.name for t in await admin.list_topics()]
            with pytest.raises(errors.TopicExists):
                await admin.create_topic("aio-admin", partitions=3)
            with pytest.raises(errors.UnknownTopic):
                await admin.describe_topic("aio-missing")
            with pytest.raises(errors.InvalidArgument, match="no topic setting 'lease'"):
                await admin.create_topic("x", lease=1)
            offsets = await admin.list_offsets("aio-admin")
            assert sorted(p.partition for p in offsets) == [0, 1, 2]
            await admin.delete_topic("aio-admin")

    asyncio.run(scenario())


def test_produce_and_consume_every_record_once_with_async_for(bootstrap: str) -> None:
    async def scenario() -> None:
        async with AsyncAdmin(bootstrap) as admin:
            await admin.create_topic("aio-work", partitions=4)
        async with AsyncProducer(bootstrap) as producer:
            keyed = await asyncio.gather(
                *(
                    producer.send("aio-work", f"k{i}".encode(), key=b"user-%d" % i)
                    for i in range(60)
                )
            )
            bare = await producer.send_many("aio-work", [b"b%d" % i for i in range(40)])
            with pytest.raises(errors.UnknownPartition):
                await producer.send("aio-work", b"nowhere", partition=99)
        assert len({(m.partition, m.offset) for m in keyed + bare}) == 100

        seen: dict[bytes, int] = {}
        async with AsyncConsumer(bootstrap, "aio-group", ["aio-work"]) as consumer:
            async for message in consumer:
                seen[message.value] = seen.get(message.value, 0) + 1
                await message.ack()
                if len(seen) == 100:
                    break
        assert set(seen) == {f"k{i}".encode() for i in range(60)} | {b"b%d" % i for i in range(40)}
        assert set(seen.values()) == {1}

    asyncio.run(scenario())


def test_nack_redelivers_and_a_second_member_shares_the_partitions(bootstrap: str) -> None:
    async def scenario() -> None:
        async with AsyncAdmin(bootstrap) as admin:
            await admin.create_topic("aio-shared", partitions=4)
        async with AsyncProducer(bootstrap) as producer:
            await producer.send_many("aio-shared", [b"v%d" % i for i in range(20)], partition=0)

        first = await AsyncConsumer.create(bootstrap, "aio-pair", ["aio-shared"])
        taken: list[AsyncMessage] = []
        while not taken:
            taken = await first.poll(5, timeout_ms=1000)
        await taken[0].nack(delay_ms=0)
        again: list[AsyncMessage] = []
        while not any(m.offset == taken[0].offset for m in again):
            again += await first.poll(20, timeout_ms=1000)
        (redelivered,) = [m for m in again if m.offset == taken[0].offset]
        assert redelivered.delivery_count == taken[0].delivery_count + 1
        assert all(e is None for e in await first.ack([*taken[1:], *again]))

        second = await AsyncConsumer.create(bootstrap, "aio-pair", ["aio-shared"])
        for _ in range(100):  # the rebalance reaches both through heartbeats
            if first.generation == second.generation and len(first.assignment) == 2:
                break
            await first.poll(1, timeout_ms=200)
            await second.poll(1, timeout_ms=200)
        assert len(first.assignment) == len(second.assignment) == 2
        assert not set(first.assignment) & set(second.assignment)
        await second.close()
        await first.close()

    asyncio.run(scenario())


def test_async_admin_seeks_a_group_and_purges_a_topic(bootstrap: str) -> None:
    async def scenario() -> None:
        async with AsyncAdmin(bootstrap) as admin:
            await admin.create_topic("aio-seek", partitions=1)
            async with AsyncProducer(bootstrap) as producer:
                await producer.send_many("aio-seek", [b"s%d" % i for i in range(5)])
            async with AsyncConsumer(bootstrap, "aio-seeker", ["aio-seek"]) as consumer:
                got = 0
                async for message in consumer:
                    await message.ack()
                    got += 1
                    if got == 5:
                        break
                with pytest.raises(errors.GroupNotEmpty):
                    await admin.seek_group("aio-seeker", "aio-seek", earliest=True)
            moved = await admin.seek_group("aio-seeker", "aio-seek", offset=2)
            assert [(p.partition, p.offset) for p in moved] == [(0, 2)]
            (lag,) = (await admin.describe_group("aio-seeker")).partitions
            assert (lag.committed, lag.lag) == (2, 3)
            with pytest.raises(errors.InvalidArgument):
                await admin.seek_group("aio-seeker", "aio-seek")
            with pytest.raises(errors.UnknownGroup):
                await admin.seek_group("aio-nobody", "aio-seek", latest=True)
            (purged,) = await admin.purge_topic("aio-seek")
            assert (purged.partition, purged.log_start, purged.deleted) == (0, 5, 5)
            (lag,) = (await admin.describe_group("aio-seeker")).partitions
            assert (lag.committed, lag.lag, lag.pending) == (5, 0, 0)
            with pytest.raises(errors.UnknownPartition):
                await admin.purge_topic("aio-seek", partition=1)

    asyncio.run(scenario())
