"""A settle whose answer was lost is never answered with a wrong definite error when retried.

A TCP proxy (real sockets, between a real Consumer and a real broker process) relays the
Consumer's Nack to the broker, which applies it, and then holds the broker's answer: the
Consumer's keepalive gives up on that connection (UNAVAILABLE: outcome unknown) and it sends
the Nack again straight to the broker, where the record is no longer leased. That retry must be
answered as applied or OUTCOME_UNKNOWN — not NOT_LEASED, LEASE_EXPIRED or RECORD_NOT_FOUND, as
if the first Nack had never happened. The same holds when the retry happens inside a broker: a
forwarding broker whose call to the leader lost its answer sends it again (the second test).
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from bench.failover import wait_preferred_leader
from raftq.client import Consumer, Producer
from raftq.proto import errors
from tests.client_bind_shim import BIND_ENV
from tests.cluster import ProcessCluster
from tests.helpers import free_port, wait_until

pytestmark = pytest.mark.timeout(120)


class AnswerHoldingProxy:
    """Relays TCP connections from ``port`` (0: any) to ``target``. ``hold()`` stops relaying
    the target's bytes on the connections open at that moment (a reply lost on the way back;
    the client's bytes still go through); connections opened later relay normally."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self._server = socket.create_server(("127.0.0.1", port))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = [self._server]
        self._open: list[threading.Event] = []  # per connection: its answers are held
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        with self._lock:
            for held in self._open:
                held.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the broker is not listening yet: as a refused connection
                client.close()
                continue
            held = threading.Event()
            with self._lock:
                self._sockets += [client, upstream]
                self._open.append(held)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, held), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, held: threading.Event | None) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if held is not None and held.is_set():
                continue  # lost on the way back
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets:
                sock.close()


class ProxiedCluster(ProcessCluster):
    """Every broker advertises a proxy (``proxies[i]``) as its client address and listens
    behind it on ``bind_addr(i)`` (tests/client_bind_shim.py)."""

    serve_module = "tests.client_bind_shim"

    def __init__(self, root: Path, brokers: int) -> None:
        super().__init__(root, brokers)
        self.bind_ports = {i: free_port() for i in self.client_ports}
        self.proxies = {
            i: AnswerHoldingProxy(("127.0.0.1", self.bind_ports[i]), self.client_ports[i])
            for i in self.client_ports
        }

    def bind_addr(self, broker: int) -> str:
        return f"127.0.0.1:{self.bind_ports[broker]}"

    def env(self, broker: int) -> dict[str, str]:
        return {**super().env(broker), BIND_ENV: self.bind_addr(broker)}

    def __enter__(self) -> ProxiedCluster:
        self.start()
        return self

    def stop(self) -> None:
        super().stop()
        for proxy in self.proxies.values():
            proxy.close()


def assert_applied(outcomes: list[errors.RaftqError | None]) -> None:
    wrong = [o for o in outcomes if o and not isinstance(o, errors.OutcomeUnknown)]
    assert not wrong, f"a nack that was applied answered {wrong}"


def test_a_nack_retried_after_its_answer_was_lost_is_not_refused(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=1) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("work", partitions=1, replication_factor=1)
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            for future in [producer.send("work", b"job-%d" % i) for i in range(3)]:
                future.result(timeout=30)
        host, port = cluster.client_addr(1).rsplit(":", 1)
        proxy = AnswerHoldingProxy((host, int(port)))
        # The proxy first: the Consumer calls it until it stops answering, then the broker.
        bootstrap = f"{proxy.address},{cluster.client_addr(1)}"
        try:
            with Consumer(bootstrap, "workers", ["work"]) as consumer:
                messages = wait_until(lambda: consumer.poll(timeout_ms=200), 30, "leased")
                proxy.hold()
                outcomes = consumer.nack(messages, delay_ms=60_000)
                wrong = [
                    o
                    for o in outcomes
                    if o is not None and not isinstance(o, errors.OutcomeUnknown)
                ]
                assert not wrong, f"a nack that was applied answered {wrong}"
                # It was applied: nothing is redelivered before its 60 s delay.
                assert consumer.poll(timeout_ms=500) == []
        finally:
            proxy.close()


def test_a_nack_a_broker_forwarded_again_after_the_leaders_answer_was_lost_is_not_refused(
    tmp_path: Path,
) -> None:
    """The retry inside a broker: the Consumer talks to broker B, which forwards its Nack to
    the partition leader L through L's proxy; L applies it and its answer is held; B's call
    fails UNAVAILABLE (keepalive) and B's router sends the Nack to L again."""
    with ProxiedCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("work", partitions=1, replication_factor=3)
        leader = wait_preferred_leader(cluster, "work", 0)
        other = next(i for i in (1, 2, 3) if i != leader)
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            for future in [producer.send("work", b"job-%d" % i) for i in range(3)]:
                future.result(timeout=30)
        with Consumer(cluster.bind_addr(other), "workers", ["work"]) as consumer:
            messages = wait_until(lambda: consumer.poll(timeout_ms=200), 30, "leased")
            cluster.proxies[leader].hold()
            assert_applied(consumer.nack(messages, delay_ms=60_000))
            assert consumer.poll(timeout_ms=500) == []
