"""A fault-injecting TCP proxy on the raft links: network partitions without root or netns.

Each broker *advertises* a proxy address as its ``broker.raft_addr`` (seeds, the metadata
table, every peer dials it) and *binds* its real raft port elsewhere (tests/chaos/broker_shim.py
passes ``MuxEndpoint(bind_address=...)``). The proxy for broker L accepts every connection to
L's advertised address and relays it to L's real port.

A raft connection is dialed by the broker with the greater address (transport/raft/mux.py), so
one proxy sees several dialers. It learns which one from the handshake: the dialer's ``AUTH``
frame carries its advertised address in clear (the MAC protects it; we only read it). Frames
before that (HELLO, CHALLENGE) always pass: they change nothing.

Faults, per unordered broker pair:
- ``blackhole``: the proxy stops reading both sides, so bytes pile up in kernel buffers and TCP
  pushes back, as when a switch drops a link; the brokers' own timeouts notice. Healing
  resumes the relay (a connection a broker gave up on meets EOF and is closed).
- ``reset``: existing connections of the pair are closed and new ones are closed as soon as
  their AUTH names the pair (connection refused / reset).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field

logger = logging.getLogger("raftq.tests.chaos.proxy")

KIND_AUTH = 3  # transport/raft/mux.py: dialer -> AUTH  mac(32) + dialer_addr
MAC_BYTES = 32
_LEN = struct.Struct("!I")
HANDSHAKE_SCAN_BYTES_MAX = 4096  # the handshake is a few hundred bytes; give up after this

Pair = frozenset[int]


def dialer_from_handshake(buf: bytes) -> str | None:
    """The dialer's address from the AUTH frame in the first bytes a dialer sent, or None
    while it has not arrived (or the stream is not a raftq handshake)."""
    pos = 0
    while len(buf) - pos >= _LEN.size + 1:
        (length,) = _LEN.unpack_from(buf, pos)
        if length == 0 or length > HANDSHAKE_SCAN_BYTES_MAX:
            return None
        if len(buf) - pos - _LEN.size < length:
            return None
        kind = buf[pos + _LEN.size]
        body = buf[pos + _LEN.size + 1 : pos + _LEN.size + length]
        if kind == KIND_AUTH and len(body) > MAC_BYTES:
            return body[MAC_BYTES:].decode("utf-8", "replace")
        pos += _LEN.size + length
    return None


@dataclass(eq=False)
class _Link:
    client: socket.socket
    upstream: socket.socket
    listener: int  # broker id behind this proxy
    dialer: int | None = None
    scanned: bytearray = field(default_factory=bytearray)
    held: bytes = b""  # the AUTH bytes of a link identified while its pair was blackholed
    closed: bool = False

    @property
    def pair(self) -> Pair | None:
        return None if self.dialer is None else frozenset((self.listener, self.dialer))


class RaftProxy:
    """Proxies for every broker's raft port, driven by one thread.

    ``routes`` maps broker id -> (advertised address the proxy binds, real address it relays
    to). ``cut(a, b, mode)`` / ``heal(a, b)`` / ``heal_all()`` are safe from any thread.
    """

    def __init__(self, routes: dict[int, tuple[str, str]]) -> None:
        self.routes = routes
        self._by_addr = {adv: broker for broker, (adv, _) in routes.items()}
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._cuts: dict[Pair, str] = {}
        self._links: set[_Link] = set()
        self._stop = threading.Event()
        self.stats = {"accepted": 0, "identified": 0, "reset": 0, "bytes": 0}
        for broker, (adv, _) in routes.items():
            host, port = adv.rsplit(":", 1)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
            sock.listen(64)
            sock.setblocking(False)
            self._sel.register(sock, selectors.EVENT_READ, ("listen", broker))
        self._thread = threading.Thread(target=self._run, name="raft-proxy", daemon=True)

    def start(self) -> RaftProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()

    # -- faults (any thread) --------------------------------------------------------------------

    def cut(self, a: int, b: int, mode: str = "blackhole") -> None:
        assert mode in ("blackhole", "reset") and a != b
        with self._lock:
            self._cuts[frozenset((a, b))] = mode

    def heal(self, a: int, b: int) -> None:
        with self._lock:
            self._cuts.pop(frozenset((a, b)), None)

    def heal_all(self) -> None:
        with self._lock:
            self._cuts.clear()

    def cuts(self) -> dict[Pair, str]:
        with self._lock:
            return dict(self._cuts)

    # -- the relay thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            cuts = self.cuts()
            self._apply_cuts(cuts)
            for key, _ in self._sel.select(timeout=0.05):
                kind, data = key.data
                if kind == "listen":
                    self._accept(key.fileobj, data)  # type: ignore[arg-type]
                else:
                    self._relay(data, key.fileobj, cuts)  # type: ignore[arg-type]

    def _accept(self, sock: socket.socket, broker: int) -> None:
        try:
            client, _ = sock.accept()
        except OSError:
            return
        self.stats["accepted"] += 1
        host, port = self.routes[broker][1].rsplit(":", 1)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=1.0)
        except OSError:  # the broker is down: so is the link
            client.close()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(1.0)  # a stopped (SIGSTOP) peer may not read: do not hang forever
        link = _Link(client, upstream, broker)
        self._links.add(link)
        self._sel.register(client, selectors.EVENT_READ, ("link", link))
        self._sel.register(upstream, selectors.EVENT_READ, ("link", link))

    def _apply_cuts(self, cuts: dict[Pair, str]) -> None:
        for link in list(self._links):
            mode = cuts.get(link.pair) if link.pair is not None else None
            if mode == "reset":
                self.stats["reset"] += 1
                self._close(link)
                continue
            paused = mode == "blackhole"
            if not paused and link.held:
                held, link.held = link.held, b""
                try:
                    link.upstream.sendall(held)
                except OSError:
                    self._close(link)
                    continue
            events = 0 if paused else selectors.EVENT_READ
            for s in (link.client, link.upstream):
                if link.closed:
                    break
                registered = s in self._sel.get_map()
                if events and not registered:
                    self._sel.register(s, events, ("link", link))
                elif not events and registered:
                    self._sel.unregister(s)

    def _relay(self, link: _Link, src: socket.socket, cuts: dict[Pair, str]) -> None:
        if link.closed:
            return
        dst = link.upstream if src is link.client else link.client
        try:
            data = src.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._close(link)
            return
        if src is link.client and link.dialer is None:
            link.scanned += data
            addr = dialer_from_handshake(bytes(link.scanned))
            if addr is not None:
                link.dialer = self._by_addr.get(addr, -1)
                self.stats["identified"] += 1
                link.scanned.clear()
                mode = cuts.get(link.pair) if link.pair is not None else None
                if mode == "reset":
                    self.stats["reset"] += 1
                    self._close(link)
                    return
                if mode == "blackhole":
                    link.held = data
                    return
            elif len(link.scanned) > HANDSHAKE_SCAN_BYTES_MAX:
                link.dialer = -1  # not a raftq dialer (garbage tests): never cut, relay
                link.scanned.clear()
        try:
            dst.sendall(data)
        except OSError:
            self._close(link)
            return
        self.stats["bytes"] += len(data)

    def _close(self, link: _Link) -> None:
        if link.closed:
            return
        link.closed = True
        self._links.discard(link)
        for s in (link.client, link.upstream):
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(s)
            with contextlib.suppress(OSError):
                s.close()
