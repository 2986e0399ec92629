"""One raft connection's state and the handshake steps that advance it (no sockets).

The endpoint (mux.py) owns the sockets and the selector loop; when a handshake frame arrives
it calls the step for the connection's state here, which checks the frame, updates the
:class:`Conn` and hands the answering frame to ``send`` (the endpoint's queue: a frame queued
before the keys are set goes plaintext, after them sealed). The steps and the frames they
exchange are described in handshake.py, whose pure functions (MACs, keys, cipher) they use.
A step refuses a bad frame by raising FrameError (:class:`AuthFailed` when a proof does not
verify); the endpoint then closes the connection.
"""

from __future__ import annotations

import hmac
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from raftq.transport.raft.codec import (
    KIND_AUTH,
    KIND_CHALLENGE,
    KIND_HELLO,
    KIND_WELCOME,
    FrameDecoder,
    FrameError,
)
from raftq.transport.raft.handshake import (
    MAC_BYTES,
    NONCE_BYTES,
    FrameCipher,
    client_proof,
    hello_body,
    new_key_pair,
    parse_hello,
    server_proof,
    session_keys,
    should_dial,
)
from raftq.transport.raft.lag import SchedulingLag

Send = Callable[[int, bytes], None]  # queue one frame (kind, body) on the connection


class ConnState:
    CONNECTING = "connecting"  # dialer: TCP connect in progress
    AWAIT_CHALLENGE = "await_challenge"  # dialer: HELLO sent
    AWAIT_WELCOME = "await_welcome"  # dialer: AUTH sent
    AWAIT_HELLO = "await_hello"  # listener: accepted
    AWAIT_AUTH = "await_auth"  # listener: CHALLENGE sent
    OPEN = "open"
    CLOSED = "closed"


HANDSHAKING = (ConnState.AWAIT_HELLO, ConnState.AWAIT_AUTH)  # accepted, not yet authenticated


@dataclass(eq=False)
class Conn:
    sock: socket.socket
    dialer: bool
    state: str
    label: str  # "ip:port" of the remote end until authenticated, then the peer's raft address
    decoder: FrameDecoder
    created_at: float
    peer: str | None = None  # authenticated (or, for a dialer, expected) peer raft address
    nonce_mine: bytes = b""
    nonce_theirs: bytes = b""
    key_mine: X25519PrivateKey | None = None  # ephemeral, dropped once the keys are derived
    epk_mine: bytes = b""
    epk_theirs: bytes = b""
    tx: FrameCipher | None = None  # set once keys are derived: every later frame is sealed
    rx: FrameCipher | None = None
    out: bytearray = field(default_factory=bytearray)
    last_recv: float = 0.0
    # Open link: how far apart its frames arrive beyond what a live, idle peer's pings allow
    # (a decaying max, lag.py); a peer broker whose driver stalls now and then shows here.
    gaps: SchedulingLag = field(default_factory=SchedulingLag)
    last_send: float = 0.0
    want_write: bool = False
    remote_host: str = ""  # accepted connections: the remote IP (handshake limits per host)


class AuthFailed(FrameError):
    """The other end's proof did not verify: it does not hold the cluster secret."""


@dataclass(frozen=True)
class Identity:
    """This endpoint in the handshake: the cluster secret and its own raft address."""

    secret: bytes
    address: str


def send_hello(conn: Conn, send: Send) -> None:
    """Dialer, TCP connected: a fresh nonce and ephemeral key; HELLO."""
    conn.state = ConnState.AWAIT_CHALLENGE
    conn.nonce_mine = os.urandom(NONCE_BYTES)
    conn.key_mine, conn.epk_mine = new_key_pair()
    send(KIND_HELLO, hello_body(conn.nonce_mine, conn.epk_mine))


def on_hello(me: Identity, conn: Conn, body: bytes, send: Send) -> None:
    """Listener: answer a HELLO with CHALLENGE (our nonce, key and proof)."""
    conn.nonce_theirs, conn.epk_theirs, rest = parse_hello(body, "HELLO")
    if rest:
        raise FrameError("bad HELLO")
    conn.nonce_mine = os.urandom(NONCE_BYTES)
    conn.key_mine, conn.epk_mine = new_key_pair()
    proof = server_proof(
        me.secret, conn.nonce_theirs, conn.nonce_mine, conn.epk_theirs, conn.epk_mine, me.address
    )
    send(KIND_CHALLENGE, hello_body(conn.nonce_mine, conn.epk_mine) + proof + me.address.encode())
    conn.state = ConnState.AWAIT_AUTH


def on_challenge(me: Identity, conn: Conn, body: bytes, send: Send, frame_bytes_max: int) -> None:
    """Dialer: verify the listener's proof and address, answer AUTH (plaintext), then derive
    the keys: every later frame is sealed, and may be up to ``frame_bytes_max``."""
    conn.nonce_theirs, conn.epk_theirs, rest = parse_hello(body, "CHALLENGE")
    if len(rest) < MAC_BYTES:
        raise FrameError("bad CHALLENGE")
    mac = rest[:MAC_BYTES]
    server_addr = rest[MAC_BYTES:].decode("utf-8", "replace")
    assert conn.peer is not None and conn.key_mine is not None
    expected = server_proof(
        me.secret, conn.nonce_mine, conn.nonce_theirs, conn.epk_mine, conn.epk_theirs, server_addr
    )
    if not hmac.compare_digest(mac, expected):
        raise AuthFailed("listener failed authentication (wrong cluster secret?)")
    if server_addr != conn.peer:
        raise FrameError(f"dialed {conn.peer} but it says it is {server_addr}")
    proof = client_proof(
        me.secret, conn.nonce_theirs, conn.nonce_mine, conn.epk_theirs, conn.epk_mine, me.address
    )
    send(KIND_AUTH, proof + me.address.encode())
    to_listener, to_dialer = session_keys(
        me.secret,
        conn.key_mine,
        conn.epk_theirs,
        nonce_c=conn.nonce_mine,
        nonce_s=conn.nonce_theirs,
        epk_c=conn.epk_mine,
        epk_s=conn.epk_theirs,
        dialer_addr=me.address,
        listener_addr=server_addr,
    )
    conn.key_mine = None
    conn.tx, conn.rx = FrameCipher(to_listener), FrameCipher(to_dialer)
    # The listener proved the secret: its frames may be full size from here on.
    conn.decoder.frame_bytes_max = frame_bytes_max
    conn.state = ConnState.AWAIT_WELCOME


def on_auth(me: Identity, conn: Conn, body: bytes, send: Send) -> None:
    """Listener: verify the dialer's proof and that it is the side that dials, derive the
    keys, answer a sealed WELCOME (proves the keys match). The endpoint then opens the link."""
    if len(body) <= MAC_BYTES:
        raise FrameError("bad AUTH")
    mac, claimed = body[:MAC_BYTES], body[MAC_BYTES:].decode("utf-8", "replace")
    expected = client_proof(
        me.secret, conn.nonce_mine, conn.nonce_theirs, conn.epk_mine, conn.epk_theirs, claimed
    )
    if not hmac.compare_digest(mac, expected):
        raise AuthFailed("dialer failed authentication (wrong cluster secret?)")
    if claimed == me.address or not should_dial(claimed, me.address):
        raise FrameError(f"{claimed} must not dial {me.address}")
    assert conn.key_mine is not None
    to_listener, to_dialer = session_keys(
        me.secret,
        conn.key_mine,
        conn.epk_theirs,
        nonce_c=conn.nonce_theirs,
        nonce_s=conn.nonce_mine,
        epk_c=conn.epk_theirs,
        epk_s=conn.epk_mine,
        dialer_addr=claimed,
        listener_addr=me.address,
    )
    conn.key_mine = None
    conn.tx, conn.rx = FrameCipher(to_dialer), FrameCipher(to_listener)
    conn.peer = claimed
    send(KIND_WELCOME, b"")
