"""ordering=fair through real broker processes (issue 19): the rotation is replicated state.

Three brokers, a fair topic made by the CLI (``--ordering fair``, fair key: the record key),
one partition at replication factor 3. Three keys of 20 records each: polls deliver a, b, c,
a... The partition leader is killed between two polls; the new leader (another replica)
continues the rotation where the old one left it (b, c, a, b, c), where a replica that kept no
rotation would start again at a. A second group reading over PollStream (raw gRPC, through a
broker that may not lead) gets its own rotation: a, b, c, a, b, c. Bad settings are refused
INVALID_ARGUMENT and create nothing.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from raftq.client import Consumer, Producer
from raftq.client.consumer import Message
from raftq.proto import api_pb2, api_pb2_grpc, errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_fair_order_survives_a_leader_change_and_bad_settings_are_refused(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        with pytest.raises(errors.InvalidArgument, match="fair_key applies to ordering=fair"):
            admin.create_topic("bad", partitions=1, fair_key="tenant")  # on a fifo topic
        with pytest.raises(errors.InvalidArgument, match="fifo, priority or fair"):
            admin.create_topic("bad", partitions=1, ordering=7)  # checked by the broker
        with pytest.raises(errors.InvalidArgument, match="fifo, priority or fair"):
            admin.create_topic("bad", partitions=1, ordering="random")  # by the client
        assert "bad" not in [t.name for t in admin.list_topics()]

        made = subprocess.run(
            [
                *(sys.executable, "-m", "raftq.cli", "topic", "create", "jobs"),
                *("--partitions", "1", "--ordering", "fair", "--json"),
            ],
            cwd=ROOT,
            env={**os.environ, "RAFTQ_BOOTSTRAP": cluster.bootstrap},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr
        assert '"ordering": "FAIR"' in made.stdout
        described = admin.describe_topic("jobs")
        assert described.config.ordering == "FAIR" and described.config.fair_key == ""
        cluster.wait_leaders("jobs")
        with Producer(cluster.bootstrap) as producer:
            futures = [
                producer.send("jobs", b"%s%d" % (key, i), key=key)
                for key in (b"a", b"b", b"c")
                for i in range(20)
            ]
            for future in futures:
                future.result(60)

        with Consumer(cluster.bootstrap, "workers", ["jobs"]) as consumer:

            def take(n: int) -> list[Message]:
                got: list[Message] = []

                def some() -> bool:
                    got.extend(consumer.poll(n, 1000))
                    return bool(got)

                wait_until(some, 60, "a poll that delivers")
                assert all(e is None for e in consumer.ack(got))
                return got

            first = take(4)
            assert [m.key for m in first] == [b"a", b"b", b"c", b"a"]
            assert [m.value for m in first] == [b"a0", b"b0", b"c0", b"a1"]
            old = cluster.leader_of("jobs", 0)
            cluster.kill(old)

            def new_leader() -> int | None:
                leader = cluster.wait_leaders("jobs").partitions[0].leader
                return leader if leader != old else None

            wait_until(new_leader, 60, "another replica leading jobs/0")
            second = take(5)
            assert [m.key for m in second] == [b"b", b"c", b"a", b"b", b"c"]
            assert [m.value for m in second] == [b"b1", b"c1", b"a2", b"b2", b"c2"]

        # PollStream, the streaming path, takes turns the same way (its own group's rotation).
        alive = next(b for b in range(1, 4) if b != old)
        with grpc.insecure_channel(cluster.client_addr(alive)) as channel:
            stub = api_pb2_grpc.ConsumerStub(channel)
            joined = stub.JoinGroup(
                api_pb2.JoinGroupRequest(group="streamers", topics=["jobs"]), timeout=30
            )
            outgoing: queue.Queue[api_pb2.PollStreamRequest | None] = queue.Queue()
            start = api_pb2.PollStart(
                group="streamers", member_id=joined.member_id, generation=joined.generation
            )
            outgoing.put(api_pb2.PollStreamRequest(start=start))
            outgoing.put(api_pb2.PollStreamRequest(credit=api_pb2.Credit(records=6)))

            def requests() -> Iterator[api_pb2.PollStreamRequest]:
                while (item := outgoing.get()) is not None:
                    yield item

            stream = stub.PollStream(requests(), timeout=60)
            streamed: list[api_pb2.LeasedRecord] = []
            while len(streamed) < 6:
                streamed += next(stream).records
            outgoing.put(None)
            assert [r.record.key for r in streamed] == [b"a", b"b", b"c"] * 2
            assert [r.record.value for r in streamed] == [b"a0", b"b0", b"c0", b"a1", b"b1", b"c1"]
