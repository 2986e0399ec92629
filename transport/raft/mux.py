"""One multiplexed, authenticated Raft transport per broker: the endpoint and its event loop.

Stock pysyncobj opens one port, one thread and one TCP connection per peer *per group* and
unpickles whatever arrives (PYSYNCOBJ.md defects 4 and 5). Here a broker has:

- one `MuxEndpoint`: one listening port, ONE connection per peer broker, every Raft group
  multiplexed over it. A data frame carries a list of ``(group, message)`` pairs: everything the
  groups sent to that peer since the last flush, coalesced into one frame.
- one `GroupTransport` per group (group_transport.py): a thin `pysyncobj.transport.Transport`
  view that buffers outgoing messages in the endpoint and hands received ones to its SyncObj.
- a `RaftDriver` (driver.py) thread that polls, delivers, ticks, syncs and then flushes.

The endpoint is a non-blocking selector loop: it accepts and dials connections, runs each one
through the handshake (connection.py: a connection's state and the HELLO, CHALLENGE, AUTH,
WELCOME steps; handshake.py: keys, MACs and the frame cipher) and reads and writes frames
(codec.py: length-prefixed frames, the data-only unpickler). Nothing is unpickled before both
sides are authenticated and a frame's tag verified under the connection key. A plaintext BATCH
or PING frame is a protocol error in every state.

Threading: a MuxEndpoint is driven by exactly one thread (its RaftDriver). `wake()` and the
enqueue path are safe from any thread; everything else runs on the driver thread.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raftq.transport.raft.codec import (
    FRAME_BYTES_MAX_DEFAULT,
    HANDSHAKE_FRAME_BYTES_MAX,
    KIND_AUTH,
    KIND_BATCH,
    KIND_CHALLENGE,
    KIND_HELLO,
    KIND_PING,
    KIND_SEALED,
    KIND_WELCOME,
    FrameDecoder,
    FrameError,
    dumps_data,
    frame_header,
    loads_data,
)
from raftq.transport.raft.connection import (
    HANDSHAKING,
    AuthFailed,
    Conn,
    ConnState,
    Identity,
    on_auth,
    on_challenge,
    on_hello,
    send_hello,
)
from raftq.transport.raft.group_transport import (
    BULK_BYTES_PER_ROUND_DEFAULT,
    GroupTransport,
    sendable_before_sync,
)
from raftq.transport.raft.handshake import SEAL_OVERHEAD_BYTES, should_dial

logger = logging.getLogger("raftq.transport.raft.mux")

_BATCH_KIND = bytes((KIND_BATCH,))  # the head of an inner BATCH frame

OUT_BUFFER_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
# Accepted connections still in the handshake: at most this many in all, and per remote host.
# A new connection is always accepted; over a limit the oldest handshake of the same host (or,
# over the total, of the host holding the most) is closed, so a flood of idle connections
# from a few hosts cannot keep a real broker's link from being accepted.
UNAUTHENTICATED_CONNECTIONS_MAX = 64
UNAUTHENTICATED_PER_HOST_MAX = 8


def _split_addr(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


# --------------------------------------------------------------------------------------------
# The TCP endpoint.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MuxConfig:
    """Endpoint knobs. Times in seconds, sizes in bytes (units last in names)."""

    frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT
    out_buffer_bytes_max: int = OUT_BUFFER_BYTES_MAX_DEFAULT
    # Snapshot chunks queued for a link per round, counting its unwritten bytes (bulk_room).
    bulk_bytes_per_round: int = BULK_BYTES_PER_ROUND_DEFAULT
    handshake_timeout_s: float = 3.0
    # An idle link carries a PING this often, so "heard within silent_after_s" means the peer
    # process and its driver thread are alive: quiesced Raft groups rely on it (quiescence.py).
    ping_interval_s: float = 0.1
    silent_after_s: float = 0.4  # nothing received for this long: the link is silent
    dead_after_s: float = 5.0  # no frame at all for this long: the connection is dead
    reconnect_min_s: float = 0.05
    reconnect_max_s: float = 1.0
    housekeeping_interval_s: float = 0.1

    @property
    def healthy_gap_s(self) -> float:
        """A live peer's link carries a frame at least this often (a ping is queued once
        `ping_interval_s` passed without a send, checked every `housekeeping_interval_s`)."""
        return self.ping_interval_s + self.housekeeping_interval_s

    def __post_init__(self) -> None:
        if not self.ping_interval_s < self.silent_after_s < self.dead_after_s:
            raise ValueError("need ping_interval_s < silent_after_s < dead_after_s")
        if self.frame_bytes_max <= HANDSHAKE_FRAME_BYTES_MAX:
            raise ValueError("frame_bytes_max too small")
        if not 0 < self.reconnect_min_s <= self.reconnect_max_s:
            raise ValueError("need 0 < reconnect_min_s <= reconnect_max_s")


@dataclass
class _Dial:
    next_at: float = 0.0
    backoff_s: float = 0.0


class MuxEndpoint:
    """The broker-level Raft endpoint: one port, one connection per peer, all groups.

    Create it, then create groups with ``SyncObj(..., transportClass=ep.transport_class(name),
    conf=SyncObjConf(autoTick=False, ...))`` and register them with a `RaftDriver`, which owns the
    endpoint's thread. A group receives messages only while registered.
    """

    def __init__(
        self,
        address: str,
        secret: bytes,
        *,
        bind_address: str | None = None,
        config: MuxConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if len(secret) < 16:
            raise ValueError("cluster secret must be at least 16 bytes")
        self.config = config or MuxConfig()
        self._clock = clock
        self._sel = selectors.DefaultSelector()
        self._listener = self._bind(bind_address or address)
        host, port = _split_addr(address)
        if port == 0:  # tests: "127.0.0.2:0" becomes the address actually bound
            port = self._listener.getsockname()[1]
        self.address = f"{host}:{port}"
        self._me = Identity(secret, self.address)
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)

        self._conns: set[Conn] = set()
        self._links: dict[str, Conn] = {}  # peer address -> OPEN connection
        self._dials: dict[str, _Dial] = {}  # peers we dial -> backoff state
        self._peers: set[str] = set()
        self.peer_generation = 0
        self._connected = frozenset[str]()

        self._views_lock = threading.Lock()
        self._created: dict[str, GroupTransport] = {}  # constructed, not yet registered
        self._views: dict[str, GroupTransport] = {}  # registered: receive messages

        self._pending_lock = threading.Lock()
        self._pending: dict[str, list[tuple[str, Any]]] = {}
        self._early: dict[str, list[tuple[str, Any]]] = {}  # sendable_before_sync messages
        self._bulk_queued: dict[str, int] = {}  # snapshot bytes enqueued per peer this round
        self._next_housekeeping = 0.0
        self._closed = False
        self.stats: dict[str, int] = dict.fromkeys(
            (
                "frames_sent",
                "frames_received",
                "batches_sent",
                "bytes_sent",
                "bytes_received",
                "messages_sent",
                "messages_received",
                "messages_dropped_not_connected",
                "messages_dropped_unknown_group",
                "messages_dropped_too_large",
                "auth_failures",
                "decrypt_failures",
                "protocol_errors",
                "connections_accepted",
                "handshakes_evicted",
                "callback_errors",
            ),
            0,
        )
        logger.info("[peer=%s] raft mux endpoint listening", self.address)

    # -- public API ----------------------------------------------------------------------------

    def transport_class(self, group: str) -> Callable[[Any, Any, Iterable[Any]], GroupTransport]:
        """The `transportClass=` for group `group`'s SyncObj."""

        def make(syncObj: Any, selfNode: Any, otherNodes: Iterable[Any]) -> GroupTransport:
            return GroupTransport(self, group, syncObj, selfNode, otherNodes)

        return make

    @property
    def bound_address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return host, port

    def connected_peers(self) -> frozenset[str]:
        return self._connected

    @property
    def silent_after_s(self) -> float:
        return self.config.silent_after_s

    def link_silence_s(self, peer: str) -> float | None:
        """Seconds since anything arrived on the open link to `peer` (None: no open link). An
        idle link carries a PING every `ping_interval_s`, so a live peer stays well below
        `silent_after_s`; a hung one (SIGSTOP, a stuck driver thread) does not."""
        conn = self._links.get(peer)
        if conn is None:
            return None
        return max(0.0, self._clock() - conn.last_recv)

    def link_lag_s(self, peer: str) -> float:
        """How much longer than a live peer's pings allow (``healthy_gap_s``) the open link to
        `peer` has lately gone without a frame: a decaying max (lag.py), 0 without a link. A
        peer broker that is starved now and then (its driver not scheduled) shows here; one
        that runs on time does not, and a hang adds nothing until something arrives again."""
        conn = self._links.get(peer)
        return 0.0 if conn is None else conn.gaps.value(self._clock())

    def add_peer(self, peer: str) -> None:
        """Make sure a connection to `peer` is (being) established. Safe from any thread."""
        if peer == self.address or peer in self._peers:
            return
        with self._views_lock:
            self._peers.add(peer)
            if should_dial(self.address, peer):
                self._dials.setdefault(peer, _Dial())
        self.wake()

    def wake(self) -> None:
        """Interrupt a blocking `poll`. Safe from any thread."""
        with contextlib.suppress(OSError):  # BlockingIOError: a wake-up is already pending
            self._wake_w.send(b"\0")

    def activate(self, group: str) -> None:
        """Start delivering messages to `group` (driver thread, at registration)."""
        with self._views_lock:
            view = self._created.pop(group, None)
            if view is None:
                raise KeyError(f"[group={group}] no transport was created for this group")
            self._views[group] = view

    def deactivate(self, group: str) -> None:
        with self._views_lock:
            self._views.pop(group, None)
            self._created.pop(group, None)

    def enqueue(self, peer: str, group: str, message: Any, bulk_bytes: int = 0) -> bool:
        """Buffer `message` for `peer` until the next `flush`. False if the peer is not connected
        (the message is dropped, as a dead TCP connection would). `bulk_bytes`: the snapshot
        bytes it carries, counted against the link's round budget (`bulk_room`)."""
        if peer not in self._connected:
            self.stats["messages_dropped_not_connected"] += 1
            return False
        with self._pending_lock:
            if bulk_bytes:
                self._bulk_queued[peer] = self._bulk_queued.get(peer, 0) + bulk_bytes
            buffers = self._early if sendable_before_sync(message) else self._pending
            batch = buffers.get(peer)
            if batch is None:
                buffers[peer] = [(group, message)]
            else:
                batch.append((group, message))
        return True

    def bulk_room(self, peer: str) -> int:
        """Snapshot bytes the link to `peer` takes this round: `bulk_bytes_per_round` less the
        bulk queued since the last flush and the bytes the link has not written (TCP's
        backpressure: a slow peer gets no more until it reads). Driver thread."""
        conn = self._links.get(peer)
        if conn is None:
            return 0
        queued = self._bulk_queued.get(peer, 0)
        return self.config.bulk_bytes_per_round - queued - len(conn.out)

    def discard_pending(self, group: str) -> int:
        """Drop `group`'s buffered messages (its journal sync failed: its acks must not leave)."""
        dropped = 0
        with self._pending_lock:
            for peer, batch in self._pending.items():
                kept = [item for item in batch if item[0] != group]
                dropped += len(batch) - len(kept)
                self._pending[peer] = kept
        return dropped

    def flush_early(self) -> None:
        """Send what may leave before the groups' journal fsync (`sendable_before_sync`): the
        driver calls it after ticking, before syncing."""
        with self._pending_lock:
            early, self._early = self._early, {}
            self._bulk_queued = {}  # it is in the links' buffers now
        self._send_batches(early)

    def flush(self) -> None:
        """Encode everything buffered since the last flush: one frame per peer (split only if it
        would exceed `frame_bytes_max`) and start writing it."""
        with self._pending_lock:
            early, self._early = self._early, {}
            pending, self._pending = self._pending, {}
            self._bulk_queued = {}
        self._send_batches(early)
        self._send_batches(pending)

    def _send_batches(self, pending: dict[str, list[tuple[str, Any]]]) -> None:
        for peer, batch in pending.items():
            conn = self._links.get(peer)
            if conn is None or not batch:
                self.stats["messages_dropped_not_connected"] += len(batch)
                continue
            for plain in self._encode_batches(peer, batch):
                self._queue_plain(conn, plain)
                self.stats["batches_sent"] += 1
            if conn.state != ConnState.CLOSED:
                self._write(conn)

    def poll(self, timeout_s: float) -> set[str]:
        """Wait up to `timeout_s` for I/O, then handle it: accept, handshake, read, deliver.
        Returns the names of groups that received messages."""
        touched: set[str] = set()
        now = self._clock()
        if now >= self._next_housekeeping:
            self._housekeeping(now)
            self._next_housekeeping = now + self.config.housekeeping_interval_s
        timeout_s = max(0.0, min(timeout_s, self._next_housekeeping - now))
        for key, mask in self._sel.select(timeout_s):
            obj = key.fileobj
            if obj is self._listener:
                self._accept()
            elif obj is self._wake_r:
                self._drain_wake()
            else:
                conn: Conn = key.data
                if conn.state == ConnState.CLOSED:
                    continue
                if mask & selectors.EVENT_WRITE:
                    self._on_writable(conn)
                if mask & selectors.EVENT_READ and conn.state != ConnState.CLOSED:
                    self._on_readable(conn, touched)
        return touched

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns):
            self._close(conn, "endpoint closing", log=False)
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(sock)
            sock.close()
        self._sel.close()
        logger.info("[peer=%s] raft mux endpoint closed", self.address)

    def statistics(self) -> dict[str, int]:
        out = dict(self.stats)
        out["peers_connected"] = len(self._connected)
        out["connections_open"] = len(self._conns)
        out["groups_registered"] = len(self._views)
        return out

    # -- ViewHost ------------------------------------------------------------------------------

    def view_created(self, group: str, view: GroupTransport) -> None:
        with self._views_lock:
            if group in self._views or group in self._created:
                raise ValueError(f"[group={group}] already has a transport on {self.address}")
            self._created[group] = view

    def view_destroyed(self, group: str, view: GroupTransport) -> None:
        with self._views_lock:
            if self._views.get(group) is view:
                del self._views[group]
            if self._created.get(group) is view:
                del self._created[group]

    # -- sockets -------------------------------------------------------------------------------

    def _bind(self, addr: str) -> socket.socket:
        host, port = _split_addr(addr)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
        return sock

    def _wrap_socket(self, sock: socket.socket, *, server_side: bool) -> socket.socket:
        """Socket hook (e.g. TLS: non-blocking, ``do_handshake_on_connect=False``). Unused:
        frames are sealed with per-connection AES-GCM keys instead (module docstring)."""
        return sock

    def _accept(self) -> None:
        try:
            sock, remote = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            logger.warning("[peer=%s] accept failed: %s", self.address, exc)
            return
        label = f"{remote[0]}:{remote[1]}"
        self._make_room_for_handshake(str(remote[0]))
        self.stats["connections_accepted"] += 1
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self._wrap_socket(sock, server_side=True)
        now = self._clock()
        conn = Conn(
            sock=sock,
            dialer=False,
            state=ConnState.AWAIT_HELLO,
            label=label,
            decoder=FrameDecoder(HANDSHAKE_FRAME_BYTES_MAX),
            created_at=now,
            last_recv=now,
            last_send=now,
            remote_host=str(remote[0]),
        )
        self._conns.add(conn)
        self._sel.register(sock, selectors.EVENT_READ, conn)

    def _make_room_for_handshake(self, host: str) -> None:
        """Keep accepted handshakes within UNAUTHENTICATED_PER_HOST_MAX for ``host`` and
        UNAUTHENTICATED_CONNECTIONS_MAX in all by closing the oldest: of ``host``, or over the
        total, of the host holding the most (the flooder, not the one real dial among them)."""
        waiting = [c for c in self._conns if not c.dialer and c.state in HANDSHAKING]
        same = [c for c in waiting if c.remote_host == host]
        if len(same) >= UNAUTHENTICATED_PER_HOST_MAX:
            victims = same
        elif len(waiting) >= UNAUTHENTICATED_CONNECTIONS_MAX:
            counts = collections.Counter(c.remote_host for c in waiting)
            heaviest = max(counts, key=lambda h: (counts[h], h))
            victims = [c for c in waiting if c.remote_host == heaviest]
        else:
            return
        oldest = min(victims, key=lambda c: c.created_at)
        self.stats["handshakes_evicted"] += 1
        logger.debug(
            "[peer=%s] handshake evicted: too many from %s", oldest.label, oldest.remote_host
        )
        self._close(oldest, "evicted: too many handshakes", log=False)

    def _dial(self, peer: str, now: float) -> None:
        host, port = _split_addr(peer)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = sock.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            self._dial_failed(peer, now, os.strerror(err))
            return
        sock = self._wrap_socket(sock, server_side=False)
        conn = Conn(
            sock=sock,
            dialer=True,
            state=ConnState.CONNECTING,
            label=peer,
            decoder=FrameDecoder(HANDSHAKE_FRAME_BYTES_MAX),
            created_at=now,
            peer=peer,
            last_recv=now,
            last_send=now,
        )
        self._conns.add(conn)
        self._sel.register(sock, selectors.EVENT_WRITE, conn)
        conn.want_write = True

    def _dial_failed(self, peer: str, now: float, why: str) -> None:
        dial = self._dials.get(peer)
        if dial is None:
            return
        cfg = self.config
        dial.backoff_s = min(cfg.reconnect_max_s, max(cfg.reconnect_min_s, dial.backoff_s * 2))
        dial.next_at = now + dial.backoff_s
        logger.debug("[peer=%s] dial failed (%s); retry in %.2fs", peer, why, dial.backoff_s)

    def _housekeeping(self, now: float) -> None:
        cfg = self.config
        dialing = {c.peer for c in self._conns if c.dialer and c.state != ConnState.CLOSED}
        with self._views_lock:
            dials = list(self._dials.items())
        for peer, dial in dials:
            if peer not in self._links and peer not in dialing and now >= dial.next_at:
                dial.next_at = now + cfg.reconnect_max_s  # until it fails or succeeds
                self._dial(peer, now)
        for conn in list(self._conns):
            if conn.state == ConnState.CLOSED:
                continue
            if conn.state != ConnState.OPEN:
                if now - conn.created_at > cfg.handshake_timeout_s:
                    self._close(conn, "handshake timeout")
                continue
            if now - conn.last_recv > cfg.dead_after_s:
                self._close(conn, f"nothing received for {now - conn.last_recv:.1f}s")
            elif now - conn.last_send >= cfg.ping_interval_s:
                self._queue_frame(conn, KIND_PING)
                self._write(conn)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # -- reading -------------------------------------------------------------------------------

    def _on_readable(self, conn: Conn, touched: set[str]) -> None:
        try:
            data = conn.sock.recv(256 * 1024)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as exc:
            self._close(conn, f"recv failed: {exc}")
            return
        if not data:
            self._close(conn, "closed by peer")
            return
        now = self._clock()
        if conn.state == ConnState.OPEN:
            conn.gaps.record(now - conn.last_recv - self.config.healthy_gap_s, now)
        conn.last_recv = now
        self.stats["bytes_received"] += len(data)
        try:
            frames = conn.decoder.feed(data)
            while frames:
                for kind, body in frames:
                    self.stats["frames_received"] += 1
                    self._on_frame(conn, kind, body, touched)
                    if conn.state == ConnState.CLOSED:
                        return
                frames = conn.decoder.feed(b"")
        except FrameError as exc:
            self.stats["protocol_errors"] += 1
            self._close(conn, f"protocol error: {exc}")

    def _on_frame(self, conn: Conn, kind: int, body: bytes, touched: set[str]) -> None:
        if conn.rx is not None:
            if kind != KIND_SEALED:
                raise FrameError(f"plaintext frame kind {kind} after the key exchange")
            try:
                kind, body = conn.rx.open(body)
            except FrameError:
                self.stats["decrypt_failures"] += 1
                raise
        elif kind == KIND_SEALED:
            raise FrameError("sealed frame before the key exchange")
        state = conn.state
        if state == ConnState.OPEN:
            if kind == KIND_BATCH:
                self._on_batch(conn, body, touched)
            elif kind != KIND_PING:
                raise FrameError(f"unexpected frame kind {kind} on an open connection")
        elif state == ConnState.AWAIT_WELCOME and kind == KIND_WELCOME:
            self._open(conn)
        else:
            self._on_handshake(conn, kind, body)

    def _on_handshake(self, conn: Conn, kind: int, body: bytes) -> None:
        """One handshake step (connection.py), its answer queued and written."""

        def send(kind: int, body: bytes) -> None:
            self._queue_frame(conn, kind, body)

        state = conn.state
        try:
            if state == ConnState.AWAIT_HELLO and kind == KIND_HELLO:
                on_hello(self._me, conn, body, send)
            elif state == ConnState.AWAIT_AUTH and kind == KIND_AUTH:
                on_auth(self._me, conn, body, send)
            elif state == ConnState.AWAIT_CHALLENGE and kind == KIND_CHALLENGE:
                on_challenge(self._me, conn, body, send, self.config.frame_bytes_max)
            else:
                raise FrameError(f"unexpected frame kind {kind} in state {state}")
        except AuthFailed:
            self.stats["auth_failures"] += 1
            raise
        self._write(conn)
        if kind == KIND_AUTH and conn.state != ConnState.CLOSED:
            self._open(conn)

    def _open(self, conn: Conn) -> None:
        peer = conn.peer
        assert peer is not None
        old = self._links.get(peer)
        if old is not None:
            self._close(old, "replaced by a newer connection")
        conn.state = ConnState.OPEN
        conn.label = peer
        conn.decoder.frame_bytes_max = self.config.frame_bytes_max
        self._links[peer] = conn
        dial = self._dials.get(peer)
        if dial is not None:
            dial.backoff_s = 0.0
        self._links_changed()
        logger.info("[peer=%s] raft link up (%s)", peer, "dialed" if conn.dialer else "accepted")

    def _on_batch(self, conn: Conn, body: bytes, touched: set[str]) -> None:
        try:
            batch = loads_data(body)
        except Exception as exc:
            raise FrameError(f"undecodable batch: {exc!r}") from None
        if type(batch) is not list:
            raise FrameError("batch is not a list")
        peer = conn.label
        views = self._views
        for item in batch:
            if type(item) is not tuple or len(item) != 2:
                raise FrameError("batch item is not a (group, message) pair")
            group, message = item
            if type(group) is not str or type(message) is not dict:
                raise FrameError("batch item is not a (str, dict) pair")
            self.stats["messages_received"] += 1
            view = views.get(group)
            if view is None:
                self.stats["messages_dropped_unknown_group"] += 1
                continue
            touched.add(group)
            try:
                view.deliver(peer, message)
            except Exception:
                self.stats["callback_errors"] += 1
                logger.exception("[group=%s] [peer=%s] message handler failed", group, peer)

    # -- writing -------------------------------------------------------------------------------

    def _encode_batches(self, peer: str, batch: list[tuple[str, Any]]) -> list[bytes]:
        """Inner BATCH frames (kind byte + pickled pairs), each sealed within frame_bytes_max."""
        plain = dumps_data(batch, _BATCH_KIND)
        if len(plain) + SEAL_OVERHEAD_BYTES <= self.config.frame_bytes_max:
            self.stats["messages_sent"] += len(batch)
            return [plain]
        if len(batch) == 1:
            self.stats["messages_dropped_too_large"] += 1
            logger.error(
                "[group=%s] [peer=%s] dropped a %d-byte message: above frame_bytes_max",
                batch[0][0],
                peer,
                len(plain) - 1,
            )
            return []
        half = len(batch) // 2
        return self._encode_batches(peer, batch[:half]) + self._encode_batches(peer, batch[half:])

    def _queue_frame(self, conn: Conn, kind: int, body: bytes = b"") -> None:
        if conn.state == ConnState.CLOSED:
            return
        if conn.tx is not None:
            kind, body = KIND_SEALED, conn.tx.seal(kind, body)
        self._queue_body(conn, kind, body)

    def _queue_plain(self, conn: Conn, plain: bytes) -> None:
        """Queue an inner frame laid out as kind byte + body: sealed as it is, so a large
        batch is copied only by the cipher and into the link's buffer."""
        if conn.state == ConnState.CLOSED:
            return
        if conn.tx is not None:
            self._queue_body(conn, KIND_SEALED, conn.tx.seal_plain(plain))
        else:
            self._queue_body(conn, plain[0], plain[1:])

    def _queue_body(self, conn: Conn, kind: int, body: bytes) -> None:
        conn.out += frame_header(kind, len(body))
        conn.out += body
        self.stats["frames_sent"] += 1
        if len(conn.out) > self.config.out_buffer_bytes_max:
            self._close(conn, f"peer too slow: {len(conn.out)} bytes unsent")

    def _write(self, conn: Conn) -> None:
        if conn.state in (ConnState.CLOSED, ConnState.CONNECTING) or not conn.out:
            return
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            sent = 0
        except OSError as exc:
            self._close(conn, f"send failed: {exc}")
            return
        if sent:
            del conn.out[:sent]
            conn.last_send = self._clock()
            self.stats["bytes_sent"] += sent
        self._set_want_write(conn, bool(conn.out))

    def _set_want_write(self, conn: Conn, want: bool) -> None:
        if want == conn.want_write or conn.state == ConnState.CLOSED:
            return
        conn.want_write = want
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
        self._sel.modify(conn.sock, events, conn)

    def _on_writable(self, conn: Conn) -> None:
        if conn.state == ConnState.CONNECTING:
            err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                assert conn.peer is not None
                self._close(conn, f"connect failed: {os.strerror(err)}", log=False)
                self._dial_failed(conn.peer, self._clock(), os.strerror(err))
                return
            conn.want_write = True  # registered for WRITE only; _write recomputes the mask
            self._sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            send_hello(conn, lambda kind, body: self._queue_frame(conn, kind, body))
        self._write(conn)

    def _close(self, conn: Conn, why: str, *, log: bool = True) -> None:
        if conn.state == ConnState.CLOSED:
            return
        was_open = conn.state == ConnState.OPEN
        conn.state = ConnState.CLOSED
        self._conns.discard(conn)
        if log:
            level = logging.INFO if was_open else logging.WARNING
            logger.log(level, "[peer=%s] raft connection closed: %s", conn.label, why)
        if was_open and conn.peer is not None and self._links.get(conn.peer) is conn:
            del self._links[conn.peer]
            with self._pending_lock:
                self._pending.pop(conn.peer, None)
            self._links_changed()
            if conn.peer in self._dials:
                self._dial_failed(conn.peer, self._clock(), why)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()

    def _links_changed(self) -> None:
        self._connected = frozenset(self._links)
        self.peer_generation += 1
