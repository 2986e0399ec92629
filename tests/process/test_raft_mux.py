"""The multiplexed TCP Raft transport and its driver, over real sockets on 127.0.0.x.

No sleeps-and-hope: every wait polls a condition with a deadline (`wait_for`).
"""

from __future__ import annotations

import os
import pickle
import random
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raftq.transport.raft import codec, handshake, mux
from raftq.transport.raft.codec import FrameDecoder, FrameError, loads_data
from raftq.transport.raft.driver import ListGroup, RaftDriver
from raftq.transport.raft.mux import MuxConfig, MuxEndpoint
from tests.helpers import free_port

SECRET = b"raftq-test-cluster-secret-0123456789"
FAST: dict[str, Any] = {"appendEntriesPeriod": 0.05, "raftMinTimeout": 0.4, "raftMaxTimeout": 0.8}
FAST_MUX = MuxConfig(
    ping_interval_s=0.05, silent_after_s=0.25, dead_after_s=0.6, reconnect_max_s=0.2
)


def wait_for(cond: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)


# ------------------------------------------------------------------------------------------------
# Pure parts
# ------------------------------------------------------------------------------------------------


def test_frame_decoder_splits_and_reassembles() -> None:
    stream = codec.encode_frame(codec.KIND_PING) + codec.encode_frame(codec.KIND_BATCH, b"x" * 1000)
    dec = FrameDecoder(4096)
    got: list[tuple[int, bytes]] = []
    for i in range(0, len(stream), 7):  # byte-dribbled
        got += dec.feed(stream[i : i + 7])
    assert got == [(codec.KIND_PING, b""), (codec.KIND_BATCH, b"x" * 1000)]
    assert dec.buffered_bytes == 0


@pytest.mark.parametrize("length", [0, 4097, 2**32 - 1])
def test_frame_decoder_rejects_bad_lengths_before_buffering(length: int) -> None:
    with pytest.raises(FrameError):
        FrameDecoder(4096).feed(struct.pack("!I", length) + b"\x05")


class _Bomb:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def test_data_only_unpickler_refuses_globals(tmp_path: Path) -> None:
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Bomb(control)))  # the payload is live: plain pickle runs it
    assert control.exists()
    target = tmp_path / "target"
    with pytest.raises(pickle.UnpicklingError):
        loads_data(pickle.dumps([("g", {"x": _Bomb(target)})]))
    assert not target.exists()
    msg = [("g", {"type": "append_entries", "entries": [(b"\x00cmd", 2, 1)], "term": 1})]
    assert loads_data(codec.dumps_data(msg)) == msg


# ------------------------------------------------------------------------------------------------
# A 3-broker cluster in this process (one endpoint + one driver thread each)
# ------------------------------------------------------------------------------------------------


@dataclass
class Broker:
    endpoint: MuxEndpoint
    driver: RaftDriver
    groups: dict[str, ListGroup]


class Cluster:
    def __init__(
        self, n_groups: int, hosts: tuple[str, ...] = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    ):
        endpoints = [MuxEndpoint(f"{h}:0", SECRET, config=FAST_MUX) for h in hosts]
        self.addrs = [e.address for e in endpoints]
        self.names = [f"g{i:02d}" for i in range(n_groups)]
        self.brokers: dict[str, Broker] = {}
        for ep in endpoints:
            driver = RaftDriver(ep, tick_interval_s=0.02, name=f"raft-driver-{ep.address}")
            groups = {}
            for name in self.names:
                groups[name] = ListGroup(
                    name, ep.address, self.addrs, ep.transport_class(name), **FAST
                )
                driver.register(name, groups[name])
            self.brokers[ep.address] = Broker(ep, driver, groups)
            driver.start()

    def live(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.driver._thread is not None]

    def leader(self, name: str, among: list[Broker] | None = None) -> str | None:
        among = among or self.live()
        views = {b.groups[name].leader() for b in among}
        if len(views) == 1:
            (leader,) = views
            if leader is not None and any(
                b.endpoint.address == leader and b.groups[name].is_leader() for b in among
            ):
                return leader
        return None

    def all_led(self, among: list[Broker] | None = None) -> bool:
        return all(self.leader(n, among) for n in self.names)

    def close(self) -> None:
        for b in self.brokers.values():
            b.driver.stop()
        for b in self.brokers.values():
            b.endpoint.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(n_groups=20)
    try:
        yield c
    finally:
        c.close()


def _replicate(
    c: Cluster,
    names: list[str],
    data: bytes,
    via: Broker | None = None,
    among: list[Broker] | None = None,
) -> None:
    """Propose `data` in every group of `names` (through `via`, or a random broker: followers
    forward to the leader) and wait until every broker of `among` applied it."""
    among = among or c.live()
    results: list[tuple[Any, Any]] = []
    for name in names:
        proposer = via or random.choice(among)
        proposer.groups[name].apply(data, callback=lambda res, err: results.append((res, err)))
        proposer.driver.wake(name)
    wait_for(
        lambda: all(data in b.groups[n].applied for b in among for n in names),
        what=f"{data!r} applied in {names} everywhere",
    )
    wait_for(lambda: len(results) == len(names), what="the proposers' callbacks")
    assert {err for _res, err in results} == {0}, f"proposal outcomes (res, err): {results}"


def test_groups_elect_and_replicate_over_one_connection_per_peer(cluster: Cluster) -> None:
    wait_for(cluster.all_led, what="a leader in every group")
    _replicate(cluster, cluster.names, b"first")
    for b in cluster.brokers.values():
        stats = b.endpoint.statistics()
        assert stats["peers_connected"] == 2
        assert stats["connections_open"] == 2  # one per peer broker, for all 20 groups
        assert stats["messages_sent"] > stats["batches_sent"] > 0  # coalesced on average
        assert stats["protocol_errors"] == stats["auth_failures"] == 0
    # and exactly: whatever is buffered for a peer leaves as one frame per flush
    b = cluster.brokers[cluster.addrs[0]]

    def burst() -> tuple[int, int]:
        ep = b.endpoint
        before = ep.stats["batches_sent"], ep.stats["messages_sent"]
        for i in range(50):
            assert ep.enqueue(cluster.addrs[1], "no-such-group", {"type": "noop", "i": i})
        ep.flush()
        return ep.stats["batches_sent"] - before[0], ep.stats["messages_sent"] - before[1]

    batches, messages = b.driver.submit(burst).result(timeout=5)
    assert batches == 1 and messages >= 50
    assert {len(b.groups[n].applied) for b in cluster.brokers.values() for n in cluster.names} == {
        1
    }


def test_hung_broker_is_detected_and_its_groups_reelect(cluster: Cluster) -> None:
    """A broker that stops answering without closing its sockets (stopped driver thread):
    peers declare it dead after `dead_after_s` and the groups it led elect new leaders."""
    wait_for(cluster.all_led, what="a leader in every group")
    counts: dict[str, int] = {}
    for name in cluster.names:
        leader = cluster.leader(name)
        assert leader is not None
        counts[leader] = counts.get(leader, 0) + 1
    victim = cluster.brokers[max(counts, key=lambda a: counts[a])]
    led = [n for n in cluster.names if cluster.leader(n) == victim.endpoint.address]
    victim.driver.stop()  # frozen, sockets still open
    rest = cluster.live()
    t0 = time.monotonic()
    wait_for(lambda: cluster.all_led(rest), timeout_s=15, what="re-election on the survivors")
    elapsed = time.monotonic() - t0
    print(f"{len(led)} groups re-elected {elapsed:.2f}s after the broker hung")
    gone = victim.endpoint.address
    wait_for(lambda: all(gone not in b.endpoint.connected_peers() for b in rest), what="link down")
    _replicate(cluster, led, b"after-hang", among=rest)


def test_idle_links_are_heard_through_pings_and_a_hung_peer_falls_silent(
    cluster: Cluster,
) -> None:
    """Quiesced groups rely on link liveness (transport/raft/quiescence.py): an idle link carries a
    PING every ping_interval_s, so a live peer stays below silent_after_s; a hung one (its
    driver stopped, sockets open) passes it well before dead_after_s closes the link."""
    wait_for(cluster.all_led, what="a leader in every group")
    a, b, c = (cluster.brokers[addr] for addr in cluster.addrs)
    silent_after_s = a.endpoint.silent_after_s
    assert silent_after_s == FAST_MUX.silent_after_s
    assert a.driver.submit(lambda: a.endpoint.link_silence_s("10.9.9.9:1")).result(5) is None
    for _ in range(10):  # one second of samples: always heard recently
        silence = a.driver.submit(lambda: a.endpoint.link_silence_s(b.endpoint.address))
        value = silence.result(5)
        assert value is not None and value < silent_after_s
        time.sleep(0.1)
    b.driver.stop()  # hung: the link stays open, nothing comes out of it
    t0 = time.monotonic()

    def silent() -> bool:
        silence = a.driver.submit(lambda: a.endpoint.link_silence_s(b.endpoint.address))
        value = silence.result(5)
        return value is not None and value >= silent_after_s

    wait_for(silent, timeout_s=FAST_MUX.dead_after_s, what="the hung peer's link silent")
    assert time.monotonic() - t0 < FAST_MUX.dead_after_s  # silent before declared dead
    live = c.driver.submit(lambda: c.endpoint.link_silence_s(a.endpoint.address)).result(5)
    assert live is not None and live < silent_after_s


def test_unregister_is_thread_safe_and_stops_delivery(cluster: Cluster) -> None:
    wait_for(cluster.all_led, what="a leader in every group")
    b = next(iter(cluster.brokers.values()))
    assert b.driver.unregister("g00", timeout_s=5)
    assert "g00" not in b.driver.group_names
    b.groups["g00"].destroy()
    others = [x for x in cluster.live() if x is not b]
    wait_for(lambda: cluster.leader("g00", others), what="g00 led by the other two")
    _replicate(cluster, ["g00"], b"without-b", among=others)
    assert b"without-b" not in b.groups["g00"].applied
    assert b.endpoint.statistics()["messages_dropped_unknown_group"] > 0


# ------------------------------------------------------------------------------------------------
# Authentication and hostile input
# ------------------------------------------------------------------------------------------------


def _connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.settimeout(5)
    return s


def _read_frame(s: socket.socket) -> tuple[int, bytes]:
    head = _recv_exact(s, 4)
    (length,) = struct.unpack("!I", head)
    body = _recv_exact(s, length)
    return body[0], body[1:]


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the endpoint")
        buf += chunk
    return buf


def _closed_by_peer(s: socket.socket, timeout_s: float = 5.0) -> bool:
    s.settimeout(timeout_s)
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@dataclass
class _Dialed:
    sock: socket.socket
    tx: handshake.FrameCipher  # dialer -> listener, as the listener derives it if `secret` is right
    rx: handshake.FrameCipher


def _handshake(addr: str, secret: bytes, claimed: str) -> _Dialed:
    """Dial `addr` like a peer broker claiming to be `claimed`: HELLO, CHALLENGE, AUTH.
    Returns the socket after AUTH with the session ciphers derived under `secret`."""
    s = _connect(addr)
    nonce_c = os.urandom(handshake.NONCE_BYTES)
    private, epk_c = handshake.new_key_pair()
    s.sendall(codec.encode_frame(codec.KIND_HELLO, handshake.hello_body(nonce_c, epk_c)))
    kind, body = _read_frame(s)
    assert kind == codec.KIND_CHALLENGE
    head = len(handshake.MAGIC) + 1
    nonce_s = body[head : head + handshake.NONCE_BYTES]
    epk_s = body[
        head + handshake.NONCE_BYTES : head + handshake.NONCE_BYTES + handshake.PUBLIC_KEY_BYTES
    ]
    listener = body[
        head + handshake.NONCE_BYTES + handshake.PUBLIC_KEY_BYTES + handshake.MAC_BYTES :
    ].decode()
    proof = handshake.client_proof(secret, nonce_s, nonce_c, epk_s, epk_c, claimed)
    s.sendall(codec.encode_frame(codec.KIND_AUTH, proof + claimed.encode()))
    to_listener, to_dialer = handshake.session_keys(
        secret,
        private,
        epk_s,
        nonce_c=nonce_c,
        nonce_s=nonce_s,
        epk_c=epk_c,
        epk_s=epk_s,
        dialer_addr=claimed,
        listener_addr=listener,
    )
    return _Dialed(s, handshake.FrameCipher(to_listener), handshake.FrameCipher(to_dialer))


def _welcomed(d: _Dialed) -> bool:
    kind, body = _read_frame(d.sock)
    return kind == codec.KIND_SEALED and d.rx.open(body) == (codec.KIND_WELCOME, b"")


def test_wrong_secret_is_refused_both_ways() -> None:
    good = MuxEndpoint("127.0.0.1:0", SECRET, config=FAST_MUX)
    bad = MuxEndpoint("127.0.0.9:0", b"not-the-cluster-secret!!", config=FAST_MUX)
    drivers = [RaftDriver(e, tick_interval_s=0.02) for e in (good, bad)]
    try:
        for d in drivers:
            d.start()
        bad.add_peer(good.address)  # the higher address dials: bad -> good
        # good's CHALLENGE does not verify under bad's secret: bad hangs up before AUTH
        wait_for(lambda: bad.stats["auth_failures"] >= 2, what="two failed handshakes")
        assert not good.connected_peers() and not bad.connected_peers()
        # a raw dialer that sends AUTH anyway: good checks it, refuses, never welcomes
        dialed = _handshake(good.address, b"wrong-secret-wrong-secret", "127.0.0.200:1")
        assert _closed_by_peer(dialed.sock)
        dialed.sock.close()
        assert good.stats["auth_failures"] == 1
        # and the listener side must prove the secret too: a dialer checks the CHALLENGE
        impostor = MuxEndpoint("127.0.0.0:0", b"impostor-secret-impostor", config=FAST_MUX)
        d3 = RaftDriver(impostor, tick_interval_s=0.02)
        d3.start()
        drivers.append(d3)
        before = good.stats["auth_failures"]
        good.add_peer(impostor.address)  # good (127.0.0.1) > impostor (127.0.0.0): good dials
        wait_for(lambda: good.stats["auth_failures"] > before, what="impostor listener refused")
        assert impostor.address not in good.connected_peers()
    finally:
        for d in drivers:
            d.stop()
        good.close()
        bad.close()
        if len(drivers) == 3:
            impostor.close()


def _idle_connections(addr: str, hosts: list[str], per_host: int) -> list[socket.socket]:
    """Open `per_host` connections to `addr` from each source host and say nothing."""
    host, port = addr.rsplit(":", 1)
    socks = []
    for source in hosts:
        for _ in range(per_host):
            s = socket.socket()
            s.bind((source, 0))
            s.connect((host, int(port)))
            socks.append(s)
    return socks


@pytest.mark.parametrize(
    "hosts,per_host",
    [(["127.0.0.9"], 200), ([f"127.0.1.{i}" for i in range(1, 17)], 8)],
    ids=["one-host", "sixteen-hosts"],
)
def test_idle_unauthenticated_flood_does_not_delay_a_real_link(
    hosts: list[str], per_host: int
) -> None:
    """Idle handshakes are capped per remote host and in all by evicting the flooder's oldest:
    a real broker's dial is accepted at once, not after the flood's handshakes time out."""
    slow_timeout = MuxConfig(
        ping_interval_s=0.05,
        silent_after_s=0.25,
        dead_after_s=0.6,
        reconnect_max_s=0.2,
        handshake_timeout_s=60.0,
    )
    listener = MuxEndpoint("127.0.0.1:0", SECRET, config=slow_timeout)
    dialer = MuxEndpoint("127.0.0.2:0", SECRET, config=slow_timeout)
    drivers = [RaftDriver(e, tick_interval_s=0.02) for e in (listener, dialer)]
    flood: list[socket.socket] = []
    try:
        for d in drivers:
            d.start()
        flood = _idle_connections(listener.address, hosts, per_host)
        wait_for(
            lambda: listener.stats["connections_accepted"] >= len(flood),
            what="the flood accepted",
        )
        dialer.add_peer(listener.address)  # the higher address dials
        wait_for(
            lambda: dialer.address in listener.connected_peers(),
            timeout_s=10.0,
            what="the real link (the flood's handshakes time out only after 60 s)",
        )
        assert (
            listener.stats["handshakes_evicted"] >= len(flood) - mux.UNAUTHENTICATED_CONNECTIONS_MAX
        )
    finally:
        for s in flood:
            s.close()
        for d in drivers:
            d.stop()
        listener.close()
        dialer.close()


def test_garbage_and_pickle_bombs_change_nothing(cluster: Cluster, tmp_path: Path) -> None:
    wait_for(cluster.all_led, what="a leader in every group")
    target = cluster.brokers[cluster.addrs[0]]
    addr = target.endpoint.address
    marker = tmp_path / "pwned"
    bomb = pickle.dumps([("g00", {"type": "append_entries", "x": _Bomb(marker)})], protocol=2)
    rng = random.Random(99)
    print("seed=99")
    attacks: list[tuple[str, Callable[[socket.socket], None]]] = [
        ("raw pickle, no framing", lambda s: s.sendall(bomb)),
        (
            "framed batch before auth",
            lambda s: s.sendall(codec.encode_frame(codec.KIND_BATCH, bomb)),
        ),
        ("oversized length", lambda s: s.sendall(struct.pack("!I", 2**31) + b"\x01" * 100)),
        ("zero length", lambda s: s.sendall(struct.pack("!I", 0))),
        ("random garbage", lambda s: s.sendall(rng.randbytes(64 * 1024))),
        (
            "oversized handshake frame",
            lambda s: s.sendall(codec.encode_frame(codec.KIND_HELLO, b"\x00" * 4096)),
        ),
    ]
    for what, attack in attacks:
        s = _connect(addr)
        attack(s)
        assert _closed_by_peer(s), what
        s.close()
    # truncated frame, then the attacker hangs up: nothing to do but forget the connection
    s = _connect(addr)
    s.sendall(struct.pack("!I", 100) + b"\x05" + b"\x80" * 10)
    s.close()
    # an authenticated peer (it knows the secret) still cannot make us resolve a global
    before = target.endpoint.stats["protocol_errors"]
    d = _handshake(addr, SECRET, "127.0.0.250:1")
    assert _welcomed(d)
    d.sock.sendall(codec.encode_frame(codec.KIND_SEALED, d.tx.seal(codec.KIND_BATCH, bomb)))
    assert _closed_by_peer(d.sock)
    d.sock.close()
    assert target.endpoint.stats["protocol_errors"] > before
    # after the key exchange, plaintext, forged, replayed and tampered frames never reach the
    # unpickler: each closes the connection before decoding
    for what in ("plaintext batch", "forged", "replayed", "tampered"):
        d = _handshake(addr, SECRET, "127.0.0.250:1")
        assert _welcomed(d)
        if what == "plaintext batch":
            d.sock.sendall(codec.encode_frame(codec.KIND_BATCH, bomb))
        elif what == "forged":  # sealed under a key of its own choosing
            d.sock.sendall(
                codec.encode_frame(
                    codec.KIND_SEALED, handshake.FrameCipher(b"k" * 32).seal(5, bomb)
                )
            )
        elif what == "replayed":
            ping = codec.encode_frame(codec.KIND_SEALED, d.tx.seal(codec.KIND_PING, b""))
            d.sock.sendall(ping + ping)
        else:
            sealed = bytearray(d.tx.seal(codec.KIND_BATCH, bomb))
            sealed[3] ^= 1
            d.sock.sendall(codec.encode_frame(codec.KIND_SEALED, bytes(sealed)))
        assert _closed_by_peer(d.sock), what
        d.sock.close()
    assert target.endpoint.stats["decrypt_failures"] >= 3
    assert not marker.exists(), "the payload was unpickled"
    # and the cluster did not notice
    wait_for(lambda: target.endpoint.connected_peers() == frozenset(cluster.addrs[1:]))
    assert target.driver._thread is not None and target.driver._thread.is_alive()
    _replicate(cluster, cluster.names, b"still-fine")


# ------------------------------------------------------------------------------------------------
# Driver ordering, with a fake endpoint
# ------------------------------------------------------------------------------------------------


class _FakeEndpoint:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.deliver: set[str] = set()
        self.pending: dict[str, int] = {}

    def poll(self, timeout_s: float) -> set[str]:
        self.log.append("poll")
        out, self.deliver = self.deliver, set()
        for group in out:  # a delivered message leaves an answer to send (an ack)
            self.pending[group] = self.pending.get(group, 0) + 1
        return out

    def flush(self) -> None:
        self.log.append(f"flush {sorted(self.pending.items())}")
        self.pending = {}

    def flush_early(self) -> None:
        self.log.append("flush_early")

    def wake(self) -> None:
        pass

    def activate(self, group: str) -> None:
        pass

    def deactivate(self, group: str) -> None:
        pass

    def discard_pending(self, group: str) -> int:
        return self.pending.pop(group, 0)


class _FakeNode:
    def __init__(self, name: str, ep: _FakeEndpoint, fail_sync: bool = False) -> None:
        self.name, self.ep, self.fail_sync = name, ep, fail_sync

    def tick(self, timeout: float) -> None:
        self.ep.log.append(f"tick {self.name}")
        self.ep.pending[self.name] = self.ep.pending.get(self.name, 0) + 1

    def sync(self) -> None:
        self.ep.log.append(f"sync {self.name}")
        if self.fail_sync:
            raise OSError("fsync failed")


def test_driver_order_is_poll_answer_tick_flush_early_sync_flush_and_failed_sync_discards() -> None:
    log: list[str] = []
    ep = _FakeEndpoint(log)
    d = RaftDriver(ep, tick_interval_s=10.0, full_tick_interval_s=10.0)
    d.register("a", _FakeNode("a", ep))
    d.register("b", _FakeNode("b", ep, fail_sync=True))
    d.run_once(0.0)
    assert log == [
        "poll",
        "tick a",
        "tick b",
        "flush_early",
        "sync a",
        "sync b",
        "flush [('a', 1)]",
    ]
    log.clear()
    ep.deliver = {"a"}
    d.run_once(0.0)  # not a round: only the group that received messages is ticked and synced
    assert log == [
        "poll",
        "sync a",  # its answers leave after its fsync, before any tick (which applies)
        "flush [('a', 1)]",
        "tick a",
        "flush_early",
        "sync a",
        "flush [('a', 1)]",
    ]
    assert d.stats["sync_errors"] == 1


def test_deferred_driver_tasks_run_after_the_rounds_flush() -> None:
    log: list[str] = []
    ep = _FakeEndpoint(log)
    d = RaftDriver(ep, tick_interval_s=10.0, full_tick_interval_s=10.0)
    node = _FakeNode("a", ep)
    ticked = node.tick

    def tick_and_defer(timeout: float) -> None:
        ticked(timeout)
        d.defer(lambda: log.append("deferred"))

    node.tick = tick_and_defer  # type: ignore[method-assign]
    d.register("a", node)
    d.run_once(0.0)
    assert log == ["poll", "tick a", "flush_early", "sync a", "flush [('a', 1)]", "deferred"]
    log.clear()
    d.run_once(0.0)  # a round without ticks runs nothing deferred twice
    assert "deferred" not in log


def test_kill9_broker_process_groups_reelect() -> None:
    """Real processes: kill -9 the broker leading the most groups; survivors re-elect."""
    from bench.idle_cpu import Settings, measure_reelection, start_cluster, wait_settled

    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    settings = Settings(0.1, 0.4, 0.8, 0.02)
    brokers = start_cluster(20, settings, [f"127.0.0.1:{p}" for p in ports])
    try:
        wait_settled(brokers, 20, deadline_s=30)
        victim, elected = measure_reelection(brokers, deadline_s=30)
        print(
            f"kill -9 {victim.addr}: {len(elected)} groups re-elected, "
            f"max {max(elected.values()):.2f}s"
        )
        assert elected and max(elected.values()) < 10
    finally:
        for b in brokers:
            b.close()


# ------------------------------------------------------------------------------------------------
# Encryption on the wire
# ------------------------------------------------------------------------------------------------


class _Tap:
    """A TCP relay that records every byte in both directions (single-threaded: pumped from
    the test's own poll loop)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.seen = bytearray()

    def pump(self) -> None:
        try:
            a, _ = self.listener.accept()
            b = socket.create_connection(self.target)
            for x in (a, b):
                x.setblocking(False)
            self.pairs.append((a, b))
        except BlockingIOError:
            pass
        for a, b in self.pairs:
            for src, dst in ((a, b), (b, a)):
                try:
                    data = src.recv(65536)
                except (BlockingIOError, OSError):
                    continue
                if data:
                    self.seen += data
                    dst.sendall(data)

    def close(self) -> None:
        for a, b in self.pairs:
            a.close()
            b.close()
        self.listener.close()


def test_raft_frames_are_encrypted_on_the_wire() -> None:
    """Two endpoints through a recording relay: a message arrives, and neither it nor any
    pickle of it appears in the bytes on the wire."""
    port = free_port()
    tap = _Tap(("127.0.0.1", port))
    # the listener advertises the relay's address; the dialer (higher address) dials it
    listener = MuxEndpoint(tap.address, SECRET, bind_address=f"127.0.0.1:{port}", config=FAST_MUX)
    dialer = MuxEndpoint("127.0.0.2:0", SECRET, config=FAST_MUX)
    marker = "plaintext-marker-" + os.urandom(8).hex()
    try:
        dialer.add_peer(listener.address)

        def step() -> None:
            for ep in (listener, dialer):
                ep.poll(0.01)
            tap.pump()

        def linked() -> bool:
            step()
            return listener.address in dialer.connected_peers()

        wait_for(linked, what="the link through the relay")
        assert dialer.enqueue(listener.address, "g-secret", {"type": "x", "payload": marker})
        dialer.flush()

        def received() -> bool:
            step()
            return listener.stats["messages_received"] >= 1

        wait_for(received, what="the message through the relay")
        assert listener.stats["messages_dropped_unknown_group"] == 1  # decoded, then dropped
        assert listener.stats["decrypt_failures"] == listener.stats["protocol_errors"] == 0
        wire = bytes(tap.seen)
        assert len(wire) > 200
        assert marker.encode() not in wire and b"g-secret" not in wire
        assert b"append_entries" not in wire and codec.dumps_data("x")[2:] not in wire
    finally:
        dialer.close()
        listener.close()
        tap.close()
