"""One contract for the broker's Raft endpoint, run against the hub and the TCP mux.

Every test runs twice: on `HubEndpoint`s of one in-memory `Hub` (the simulation tier) and on
real `MuxEndpoint`s on 127.0.0.1 (sockets, handshake, sealed frames). What is asserted is what
`RaftDriver` and `GroupTransport` rely on: per-link FIFO delivery exactly once, the connected
set and ``peer_generation``, ``link_silence_s`` of a live, a hung and a closed peer,
``link_lag_s`` of a peer on time and one that was late, refused sends to a dead or unknown
peer, ``flush_early`` / ``discard_pending``, delivery only to registered groups, the frame size
limit, handler failures, ``close()`` and the statistics' names.

Both run on a manual clock (the mux takes ``clock=``), advanced one step per `Net.pump`
round: the hub is stepped exactly; the mux's sockets are real, so waits poll a condition with a
real-time deadline (never a sleep).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from raftq.transport.raft.codec import dumps_data
from raftq.transport.raft.group_transport import BULK_BYTES_PER_ROUND_DEFAULT
from raftq.transport.raft.handshake import SEAL_OVERHEAD_BYTES
from raftq.transport.raft.hub import Hub, HubEndpoint, ManualClock
from raftq.transport.raft.mux import MuxConfig, MuxEndpoint
from tests.helpers import free_port

SECRET = b"raftq-test-cluster-secret-0123456789"
PING_S, SILENT_S, DEAD_S = 0.1, 0.4, 2.0
FRAME_BYTES_MAX = 4096
STEP_S = 0.01
PUMP_ROUNDS_MAX = 3000  # simulated: 30 s of manual time
PUMP_REAL_S_MAX = 20.0  # the mux: real seconds before a wait fails
STATISTICS = {
    "messages_sent",
    "messages_received",
    "messages_dropped_not_connected",
    "messages_dropped_unknown_group",
    "messages_dropped_too_large",
    "callback_errors",
    "peers_connected",
    "groups_registered",
}

Endpoint = HubEndpoint | MuxEndpoint


class Sink:
    """A group's receiving side (what a GroupTransport hands its SyncObj)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []

    def deliver(self, peer: str, message: dict[str, Any]) -> None:
        if message.get("boom"):
            raise RuntimeError("handler failed")
        self.got.append((peer, message))


class Net:
    """Three endpoints a, b, c of one kind, connected, stepped together on a manual clock."""

    kind: str

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.eps: dict[str, Endpoint] = {}
        self.hung: set[str] = set()
        self.sinks: dict[tuple[str, str], Sink] = {}

    # -- per kind --------------------------------------------------------------------------------

    def _new(self, name: str, address: str | None) -> Endpoint:
        raise NotImplementedError

    def _round(self) -> None:
        raise NotImplementedError

    def _out_of_time(self, rounds: int, started: float) -> bool:
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------

    def start(self, names: tuple[str, ...] = ("a", "b", "c")) -> None:
        for name in names:
            self.eps[name] = self._new(name, None)
        for ep in self.eps.values():
            for other in self.eps.values():
                if other is not ep:
                    ep.add_peer(other.address)
        self.pump(lambda: all(self.peers(n) == set(self.eps) - {n} for n in self.eps), "links up")

    def running(self) -> list[Endpoint]:
        return [ep for n, ep in sorted(self.eps.items()) if n not in self.hung]

    def addr(self, name: str) -> str:
        return self.eps[name].address

    def peers(self, name: str) -> set[str]:
        by_addr = {ep.address: n for n, ep in self.eps.items()}
        return {by_addr.get(a, a) for a in self.eps[name].connected_peers()}

    def register(self, name: str, group: str) -> Sink:
        sink = Sink()
        ep = self.eps[name]
        ep.view_created(group, cast(Any, sink))
        ep.activate(group)
        self.sinks[name, group] = sink
        return sink

    def send(self, src: str, dst: str, group: str, message: dict[str, Any]) -> bool:
        return self.eps[src].enqueue(self.addr(dst), group, message)

    def pump(self, until: Callable[[], bool], what: str) -> int:
        """Run rounds (clock step, then poll and flush every running endpoint) until `until`.
        Returns the rounds it took."""
        rounds, started = 0, time.monotonic()
        while not until():
            if self._out_of_time(rounds, started):
                pytest.fail(f"[{self.kind}] timed out waiting for {what}")
            self.clock.advance(STEP_S)
            self._round()
            rounds += 1
        return rounds

    def rounds(self, n: int, check: Callable[[], None] = lambda: None) -> None:
        for _ in range(n):
            self.clock.advance(STEP_S)
            self._round()
            check()

    def restart(self, name: str) -> Endpoint:
        address = self.eps[name].address
        self.eps[name].close()
        self.eps[name] = ep = self._new(name, address)
        for other in self.eps.values():
            if other is not ep:
                ep.add_peer(other.address)
        return ep

    def close(self) -> None:
        for ep in self.eps.values():
            ep.close()


class HubNet(Net):
    kind = "hub"

    def __init__(self) -> None:
        super().__init__()
        self.hub = Hub(
            seed=7,
            clock=self.clock,
            ping_interval_s=PING_S,
            silent_after_s=SILENT_S,
            dead_after_s=DEAD_S,
            frame_bytes_max=FRAME_BYTES_MAX,
        )

    def _new(self, name: str, address: str | None) -> Endpoint:
        return self.hub.endpoint(address or f"10.0.0.{ord(name) - 96}:7000")

    def _round(self) -> None:
        for ep in self.running():
            ep.poll(0.0)
        for ep in self.running():
            ep.flush()

    def _out_of_time(self, rounds: int, started: float) -> bool:
        return rounds >= PUMP_ROUNDS_MAX


class MuxNet(Net):
    kind = "mux"
    config = MuxConfig(
        frame_bytes_max=FRAME_BYTES_MAX,
        ping_interval_s=PING_S,
        silent_after_s=SILENT_S,
        dead_after_s=DEAD_S,
        reconnect_min_s=0.02,
        reconnect_max_s=0.1,
        housekeeping_interval_s=0.02,
    )

    def _new(self, name: str, address: str | None) -> Endpoint:
        address = address or f"127.0.0.1:{free_port()}"
        return MuxEndpoint(address, SECRET, config=self.config, clock=self.clock)

    def _round(self) -> None:
        for ep in self.running():
            ep.poll(0.002)
        for ep in self.running():
            ep.flush()

    def _out_of_time(self, rounds: int, started: float) -> bool:
        return time.monotonic() - started > PUMP_REAL_S_MAX


@pytest.fixture(params=["hub", "mux"])
def net(request: pytest.FixtureRequest) -> Iterator[Net]:
    n: Net = HubNet() if request.param == "hub" else MuxNet()
    try:
        n.start()
        yield n
    finally:
        n.close()


def _received(sink: Sink) -> list[Any]:
    return [m["n"] for _peer, m in sink.got]


# ------------------------------------------------------------------------------------------------


def test_links_come_up_and_report_peers_and_silence(net: Net) -> None:
    for name in net.eps:
        stats = net.eps[name].statistics()
        assert stats.keys() >= STATISTICS, STATISTICS - stats.keys()
        assert stats["peers_connected"] == 2
        for other in set(net.eps) - {name}:
            silence = net.eps[name].link_silence_s(net.addr(other))
            assert silence is not None and 0.0 <= silence < SILENT_S
    assert net.eps["a"].link_silence_s("10.9.9.9:1") is None  # no link: None, not 0

    def all_heard() -> None:  # idle links stay heard: pings, no messages
        for name, ep in net.eps.items():
            for other in set(net.eps) - {name}:
                silence = ep.link_silence_s(net.addr(other))
                assert silence is not None and silence < SILENT_S

    net.rounds(int(3 * SILENT_S / STEP_S), all_heard)


def test_each_link_delivers_in_send_order_exactly_once_across_flushes_and_groups(
    net: Net,
) -> None:
    g1, g2 = net.register("b", "g1"), net.register("b", "g2")
    c1 = net.register("c", "g1")
    sent = 0
    for burst in range(10):
        for i in range(30):
            n = burst * 30 + i
            assert net.send("a", "b", "g1" if n % 3 else "g2", {"type": "x", "n": n})
            assert net.send("a", "c", "g1", {"type": "x", "n": -n})
            sent += 2
        net.rounds(1)
    net.pump(lambda: len(g1.got) + len(g2.got) == 300 and len(c1.got) == 300, "deliveries")
    net.rounds(20)  # nothing more arrives: exactly once
    assert _received(g1) == [n for n in range(300) if n % 3]
    assert _received(g2) == [n for n in range(300) if n % 3 == 0]
    assert _received(c1) == [-n for n in range(300)]
    assert {peer for peer, _m in g1.got + g2.got + c1.got} == {net.addr("a")}
    assert net.eps["a"].statistics()["messages_sent"] == sent
    assert net.eps["b"].statistics()["messages_received"] == 300
    assert net.eps["b"].statistics()["groups_registered"] == 2


def test_flush_early_sends_only_append_entries_and_discard_pending_keeps_them(
    net: Net,
) -> None:
    """The driver's step 4 (append_entries before the fsync) and a failed sync (discard the
    group's acks and votes, never what already may leave)."""
    g1, g2 = net.register("b", "g1"), net.register("b", "g2")
    a = net.eps["a"]
    for group, kind, n in (
        ("g1", "next_node_idx", 0),
        ("g1", "append_entries", 1),
        ("g2", "response_vote", 2),
        ("g1", "request_vote", 3),
        ("g1", "append_entries", 4),
    ):
        assert net.send("a", "b", group, {"type": kind, "n": n})
    a.flush_early()
    net.hung.add("a")  # only b runs: what flush_early sent arrives, nothing else
    net.pump(lambda: len(g1.got) == 2, "early messages")
    net.rounds(20)
    assert _received(g1) == [1, 4] and g2.got == []
    assert a.discard_pending("g1") == 2  # g1's ack and vote; g2's vote stays
    assert net.send("a", "b", "g1", {"type": "append_entries", "n": 5})
    assert a.discard_pending("g1") == 0  # an append_entries is never discarded
    net.hung.clear()
    net.pump(lambda: len(g1.got) == 3 and len(g2.got) == 1, "the rest")
    net.rounds(20)
    assert _received(g1) == [1, 4, 5] and _received(g2) == [2]


def test_bulk_room_is_the_round_budget_less_the_bulk_still_waiting(net: Net) -> None:
    """What a leader's snapshot chunks are paced by (snapshots.py, "Paced transfer")."""
    g1 = net.register("b", "g1")
    a, b = net.eps["a"], net.addr("b")
    budget = BULK_BYTES_PER_ROUND_DEFAULT
    assert a.bulk_room(b) == budget
    assert a.enqueue(b, "g1", {"type": "append_entries", "n": 0}, bulk_bytes=1000)
    assert a.enqueue(b, "g1", {"type": "append_entries", "n": 1}, bulk_bytes=budget)
    assert a.enqueue(b, "g1", {"type": "x", "n": 2})  # not bulk: not counted
    assert a.bulk_room(b) == -1000  # over budget: the sender waits
    assert net.eps["c"].bulk_room(b) == budget  # per link
    net.pump(lambda: len(g1.got) == 3, "the messages")
    assert a.bulk_room(b) == budget  # flushed and written
    assert a.bulk_room("10.9.9.9:1") == 0 and a.bulk_room(a.address) == 0  # no link


def test_sends_to_an_unknown_peer_are_refused_and_counted(net: Net) -> None:
    a = net.eps["a"]
    before = a.statistics()["messages_dropped_not_connected"]
    assert not a.enqueue("10.9.9.9:1", "g1", {"type": "x", "n": 0})
    assert not a.enqueue(a.address, "g1", {"type": "x", "n": 0})  # itself: no link
    assert a.statistics()["messages_dropped_not_connected"] == before + 2


def test_a_closed_peer_is_reported_gone_and_a_restarted_one_comes_back(net: Net) -> None:
    a, c_addr = net.eps["a"], net.addr("c")
    generation = a.peer_generation
    before = a.statistics()["messages_dropped_not_connected"]
    net.eps["c"].close()
    net.eps["c"].close()  # idempotent
    assert not net.eps["c"].enqueue(net.addr("a"), "g1", {"type": "x", "n": 0})
    net.hung.add("c")  # a closed endpoint is not polled again
    net.pump(lambda: "c" not in net.peers("a") and "c" not in net.peers("b"), "c gone")
    assert a.peer_generation != generation
    assert a.link_silence_s(c_addr) is None
    assert a.statistics()["peers_connected"] == 1
    assert not net.send("a", "c", "g1", {"type": "x", "n": 1})
    assert a.statistics()["messages_dropped_not_connected"] == before + 1
    # The same address again (a restarted broker): links come back, delivery resumes.
    net.restart("c")
    net.hung.discard("c")
    c1 = net.register("c", "g1")
    net.pump(lambda: "c" in net.peers("a") and "a" in net.peers("c"), "c back")
    assert net.send("a", "c", "g1", {"type": "x", "n": 2})
    net.pump(lambda: len(c1.got) == 1, "delivery to the restarted c")
    assert _received(c1) == [2]


def test_a_hung_peer_stays_connected_falls_silent_then_its_link_closes_until_it_runs(
    net: Net,
) -> None:
    """SIGSTOP: the peer's links stay open but nothing comes out; the driver wakes quiesced
    groups on `silent_after_s`, and a link silent for `dead_after_s` closes."""
    a, b_addr = net.eps["a"], net.addr("b")
    hung_at = net.clock.now()
    net.hung.add("b")
    rounds = net.pump(lambda: (a.link_silence_s(b_addr) or 0.0) >= SILENT_S, "b silent on a's link")
    assert rounds * STEP_S < SILENT_S + 4 * PING_S
    assert "b" in net.peers("a")  # silent, not yet dead: still connected
    assert (net.eps["c"].link_silence_s(net.addr("a")) or 1.0) < SILENT_S  # others unaffected
    generation = a.peer_generation
    net.pump(lambda: "b" not in net.peers("a"), "b's link closed by silence")
    assert DEAD_S - PING_S <= net.clock.now() - hung_at < DEAD_S + 4 * PING_S
    assert a.link_silence_s(b_addr) is None and a.peer_generation != generation
    net.hung.clear()
    net.pump(lambda: "b" in net.peers("a") and "a" in net.peers("b"), "b's link back")
    net.pump(lambda: (a.link_silence_s(b_addr) or 1.0) < SILENT_S, "b heard again")
    g1 = net.register("b", "g1")
    assert net.send("a", "b", "g1", {"type": "x", "n": 7})
    net.pump(lambda: len(g1.got) == 1, "delivery after the link came back")


def test_link_lag_shows_a_peer_that_was_late_and_not_one_on_time(net: Net) -> None:
    """``link_lag_s``: how much later than a live peer's pings allow its frames have lately
    arrived (a decaying max, lag.py). On time, near 0; a peer that stopped for a second and
    runs again shows that second (less the pings' allowance) once it is heard again; a hang
    adds nothing while it lasts; no link: 0."""
    a, b_addr, c_addr = net.eps["a"], net.addr("b"), net.addr("c")
    net.rounds(int(3 * SILENT_S / STEP_S))
    assert a.link_lag_s(b_addr) < PING_S and a.link_lag_s(c_addr) < PING_S
    assert a.link_lag_s("10.9.9.9:1") == 0.0
    net.hung.add("b")
    net.rounds(int(1.0 / STEP_S))
    assert a.link_lag_s(b_addr) < PING_S  # silent, but nothing arrived late yet
    net.hung.clear()
    net.pump(lambda: (a.link_silence_s(b_addr) or 1.0) < SILENT_S, "b heard again")
    assert 1.0 - 2 * PING_S - 0.05 <= a.link_lag_s(b_addr) <= 1.0 + 4 * STEP_S
    assert a.link_lag_s(c_addr) < PING_S  # others unaffected


def test_only_registered_groups_receive_and_others_are_counted(net: Net) -> None:
    b = net.eps["b"]
    g1 = net.register("b", "g1")
    pending = Sink()
    b.view_created("g3", cast(Any, pending))  # created, not registered by a driver yet
    with pytest.raises(ValueError):
        b.view_created("g1", cast(Any, Sink()))  # one transport per group and endpoint
    with pytest.raises(KeyError):
        b.activate("never-created")
    for n, group in enumerate(("nope", "g1", "g3", "g1")):
        assert net.send("a", "b", group, {"type": "x", "n": n})
    net.pump(lambda: len(g1.got) == 2, "g1's messages")
    net.rounds(20)
    assert _received(g1) == [1, 3] and pending.got == []
    stats = b.statistics()
    assert stats["messages_received"] == 4
    assert stats["messages_dropped_unknown_group"] == 2
    assert stats["groups_registered"] == 1
    b.deactivate("g1")  # unregistered: later messages are dropped, not delivered
    assert net.send("a", "b", "g1", {"type": "x", "n": 4})
    net.pump(lambda: b.statistics()["messages_dropped_unknown_group"] == 3, "drop after")
    assert _received(g1) == [1, 3]


def _message_of_frame_size(group: str, size: int) -> dict[str, Any]:
    """A message whose one-message BATCH frame is exactly `size` bytes once sealed."""

    def frame(k: int) -> int:
        return (
            len(dumps_data([(group, {"type": "x", "n": 0, "pad": b"p" * k})]))
            + 1
            + (SEAL_OVERHEAD_BYTES)
        )

    k = max(0, size - frame(0) - 64)
    while frame(k) < size:
        k += 1
    assert frame(k) == size, "pickle sizes skipped the exact size"
    return {"type": "x", "n": 0, "pad": b"p" * k}


def test_the_frame_size_limit_at_just_past_and_far_past(net: Net) -> None:
    g1 = net.register("b", "g1")
    at = _message_of_frame_size("g1", FRAME_BYTES_MAX)
    past = _message_of_frame_size("g1", FRAME_BYTES_MAX + 1)
    far = {"type": "x", "n": 0, "pad": b"p" * (100 * FRAME_BYTES_MAX)}
    for n, message in enumerate((at, past, far)):
        assert net.send("a", "b", "g1", {**message, "n": n})  # accepted; dropped at flush
    # Many messages that fit alone but not together: the mux splits the batch, none is lost.
    third = _message_of_frame_size("g1", FRAME_BYTES_MAX // 3)
    for n in range(3, 9):
        assert net.send("a", "b", "g1", {**third, "n": n})
    net.pump(lambda: len(g1.got) == 7, "the messages that fit")
    net.rounds(20)
    assert _received(g1) == [0, 3, 4, 5, 6, 7, 8]
    assert net.eps["a"].statistics()["messages_dropped_too_large"] == 2
    assert "b" in net.peers("a")  # an oversized message does not cost the link


def test_a_failing_handler_is_counted_and_later_messages_still_arrive(net: Net) -> None:
    g1 = net.register("b", "g1")
    for n in range(4):
        assert net.send("a", "b", "g1", {"type": "x", "n": n, "boom": n == 1})
    net.pump(lambda: len(g1.got) == 3, "the messages after the failure")
    assert _received(g1) == [0, 2, 3]
    assert net.eps["b"].statistics()["callback_errors"] == 1
    assert "a" in net.peers("b")
