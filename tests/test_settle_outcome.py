"""A settle whose answer was lost is never answered with a wrong definite error when retried.

A TCP proxy (real sockets, between a real Consumer and a real broker process) relays the
Consumer's Nack to the broker, which applies it, and then holds the broker's answer: the
Consumer's keepalive gives up on that connection (UNAVAILABLE: outcome unknown) and it sends
the Nack again straight to the broker, where the record is no longer leased. That retry must be
answered as applied or OUTCOME_UNKNOWN — not NOT_LEASED, LEASE_EXPIRED or RECORD_NOT_FOUND, as
if the first Nack had never happened. The same holds when the retry happens inside a broker
(a forwarded call whose leader stopped answering): tests/test_hung_leader.py covers that hop.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from broker.client import Consumer, Producer
from proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)


class AnswerHoldingProxy:
    """Relays TCP connections to ``target``; after ``hold()`` the target's bytes are no longer
    relayed (a reply lost on the way back), while the client's still are."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.holding = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        self.holding.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if answers and self.holding.is_set():
                continue  # lost on the way back
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


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
