"""The cluster the RPC fuzzer (tests/rpc_fuzz.py) is judged on: 3 broker processes, a fifo and
a priority topic, and the checks run after the fuzz: every broker alive and SERVING, and a
produce/consume round trip through every partition (no Raft group wedged)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from types import TracebackType

from raftq.client import Consumer, Producer
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until
from tests.rpc_fuzz import GROUP, LIVE, NAMES, PRIO_TOPIC, TOPIC, RpcClient, health_ok

PARTITIONS = 3


class FuzzCluster:
    def __init__(self, root: Path) -> None:
        self.cluster = ProcessCluster(root, 3)
        self.client: RpcClient
        self.member: Consumer | None = None

    def __enter__(self) -> FuzzCluster:
        self.cluster.start()
        try:
            self.cluster.wait_ready(90)
            admin = self.cluster.admin()
            admin.create_topic(TOPIC, PARTITIONS, 3, max_deliveries=3)
            admin.create_topic(PRIO_TOPIC, PARTITIONS, 3, ordering="priority")
            for topic in (TOPIC, PRIO_TOPIC):
                self.cluster.wait_leaders(topic, 60)
        except BaseException:
            self.cluster.stop()
            raise
        self.client = RpcClient(self.cluster.client_addr(1))
        # A live member of GROUP: its id joins the fuzzer's name pool, so Heartbeat, Poll, Ack,
        # Nack and ExtendLease also reach the group and partition code, not just validation.
        self.member = Consumer(
            self.cluster.bootstrap, GROUP, [TOPIC, PRIO_TOPIC], session_timeout_ms=60_000
        )
        self.refresh()
        return self

    def refresh(self) -> None:
        """Point the fuzzer's templates at the live member (the fuzz may have made it rejoin)."""
        assert self.member is not None
        LIVE.update(member_id=self.member.member_id, generation=self.member.generation)
        if self.member.member_id not in NAMES:
            NAMES.append(self.member.member_id)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.client.close()
        if self.member is not None:
            with contextlib.suppress(errors.RaftqError):  # the fuzz may have removed it
                self.member.close()
        self.cluster.__exit__(exc_type, exc, tb)

    def problems(self) -> list[str]:
        """Brokers that died or do not answer health checks SERVING."""
        out = []
        for i in sorted(self.cluster.client_ports):
            if not self.cluster.alive(i):
                out.append(f"broker {i} exited\n{self.cluster.logs()}")
            elif not self._serving(self.cluster.client_addr(i)):
                out.append(f"broker {i} is not SERVING")
        return out

    @staticmethod
    def _serving(address: str, timeout_s: float = 15.0) -> bool:
        """SERVING within ``timeout_s``: health is NOT_SERVING for the moment a broker hears no
        metadata leader (an election under load), which is not a problem the fuzz caused."""
        try:
            wait_until(lambda: health_ok(address), timeout_s, f"{address} SERVING")
        except AssertionError:
            return False
        return True

    def round_trip_problems(self, timeout_s: float = 60.0) -> list[str]:
        """Send one record to every partition of both topics and lease and ack each of them in
        a fresh group; returns what failed."""
        problems = self.problems()
        bootstrap = self.cluster.bootstrap
        tag = uuid.uuid4().hex[:8]
        want: set[tuple[str, int, bytes]] = set()
        with Producer(bootstrap, request_timeout_ms=30_000) as producer:
            futures = []
            for topic in (TOPIC, PRIO_TOPIC):
                for p in range(PARTITIONS):
                    value = f"rt-{tag}-{topic}-{p}".encode()
                    want.add((topic, p, value))
                    futures.append(producer.send(topic, value, partition=p))
            for future in futures:
                try:
                    future.result(timeout=timeout_s)
                except errors.RaftqError as exc:
                    problems.append(f"round trip send failed: {exc!r}")
        if problems:
            return problems
        seen: set[tuple[str, int, bytes]] = set()
        consumer = Consumer(bootstrap, f"rt-{tag}", [TOPIC, PRIO_TOPIC], start_from="earliest")
        try:

            def all_seen() -> bool:
                messages = consumer.poll(max_records=100, timeout_ms=500)
                for m in messages:
                    if (m.topic, m.partition, m.value) in want:
                        seen.add((m.topic, m.partition, m.value))
                consumer.ack(messages)
                return want <= seen

            wait_until(all_seen, timeout_s, "the round trip records", interval_max_s=0.2)
        except AssertionError:
            problems.append(f"round trip: not consumed {sorted(want - seen)}")
        finally:
            consumer.close()
        return problems
