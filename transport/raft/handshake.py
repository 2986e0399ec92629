"""The raft port's handshake and frame encryption: pure functions and the frame cipher.

Handshake (mutual HMAC-SHA256 challenge-response over a shared cluster secret plus an ephemeral
X25519 exchange; the higher address dials the lower one, `should_dial`, so each pair of
brokers has exactly one connection)::

    dialer   -> HELLO      magic, version, nonce_c, epk_c
    listener -> CHALLENGE  magic, version, nonce_s, epk_s,
                           mac("server", nonce_c, nonce_s, epk_c, epk_s, listener_addr),
                           listener_addr
    dialer   -> AUTH       mac("client", nonce_s, nonce_c, epk_s, epk_c, dialer_addr), dialer_addr
    listener -> SEALED(WELCOME)   (only after the dialer's mac verified; proves the keys match)

MACs are compared with `hmac.compare_digest` (by connection.py, which runs these steps per
connection). Both MACs cover both ephemeral public keys, so a man in the middle without the
secret can neither substitute its own key nor finish either side.

Encryption. After AUTH every frame in both directions is ``SEALED``: its body is
AES-256-GCM(key, nonce = 64-bit frame counter, inner kind byte + inner body). Each connection has
two fresh keys (one per direction) from HKDF-SHA256 over the cluster secret and the X25519 shared
secret, salted with both nonces and bound to both addresses and public keys (`session_keys`).
The counter is implicit (each side counts the frames it sealed and opened), so a replayed,
reordered, dropped, truncated or forged frame fails authentication and closes the connection.
Keys die with the connection: a leaked cluster secret does not decrypt recorded traffic.

Why not TLS: the secret already authenticates both ends, so frame encryption needs no
certificates (the raft port is encrypted in every deployment, dev clusters included), keeps
the non-blocking selector loop free of TLS's hidden buffering (`SSLSocket.pending()`,
SSLWant* on either side of a read or write), and checks every byte before it is decoded.
`MuxEndpoint._wrap_socket` remains the hook for wrapping sockets (the read/write paths treat
`ssl.SSLWant*Error` as would-block).
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from raftq.transport.raft.codec import FrameError

MAGIC = b"RQMX"
PROTOCOL_VERSION = 2  # 2: X25519 in the handshake, AES-GCM sealed frames
NONCE_BYTES = 32
MAC_BYTES = 32
PUBLIC_KEY_BYTES = 32  # X25519
KEY_BYTES = 32  # AES-256
TAG_BYTES = 16  # GCM tag
SEAL_OVERHEAD_BYTES = 1 + TAG_BYTES  # inner kind byte + tag

_LEN = struct.Struct("!I")  # the length prefix of each part a MAC or a key derivation covers


def _mac(secret: bytes, role: bytes, *parts: bytes) -> bytes:
    h = hmac.new(secret, b"raftq-mux-v1 " + role, hashlib.sha256)
    for part in parts:
        h.update(_LEN.pack(len(part)))
        h.update(part)
    return h.digest()


def server_proof(
    secret: bytes, nonce_c: bytes, nonce_s: bytes, epk_c: bytes, epk_s: bytes, server_addr: str
) -> bytes:
    return _mac(secret, b"server", nonce_c, nonce_s, epk_c, epk_s, server_addr.encode())


def client_proof(
    secret: bytes, nonce_s: bytes, nonce_c: bytes, epk_s: bytes, epk_c: bytes, client_addr: str
) -> bytes:
    return _mac(secret, b"client", nonce_s, nonce_c, epk_s, epk_c, client_addr.encode())


def hello_body(nonce: bytes, public_key: bytes) -> bytes:
    """HELLO's body; CHALLENGE starts with the same fields (the listener's)."""
    return MAGIC + bytes((PROTOCOL_VERSION,)) + nonce + public_key


def parse_hello(body: bytes, what: str) -> tuple[bytes, bytes, bytes]:
    """HELLO / CHALLENGE head → (nonce, ephemeral public key, the rest). Raises FrameError on
    a bad magic, a short head or another protocol version."""
    head = len(MAGIC) + 1 + NONCE_BYTES + PUBLIC_KEY_BYTES
    if len(body) < head or not body.startswith(MAGIC):
        raise FrameError(f"bad {what}")
    if body[len(MAGIC)] != PROTOCOL_VERSION:
        raise FrameError(
            f"unsupported protocol version {body[len(MAGIC)]} (this broker speaks "
            f"{PROTOCOL_VERSION}: upgrade every broker)"
        )
    nonce = body[len(MAGIC) + 1 : len(MAGIC) + 1 + NONCE_BYTES]
    return nonce, body[head - PUBLIC_KEY_BYTES : head], body[head:]


def new_key_pair() -> tuple[X25519PrivateKey, bytes]:
    """An ephemeral X25519 key and its 32-byte public key."""
    private = X25519PrivateKey.generate()
    return private, private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def session_keys(
    secret: bytes,
    private: X25519PrivateKey,
    peer_public: bytes,
    *,
    nonce_c: bytes,
    nonce_s: bytes,
    epk_c: bytes,
    epk_s: bytes,
    dialer_addr: str,
    listener_addr: str,
) -> tuple[bytes, bytes]:
    """(dialer→listener key, listener→dialer key) of one connection.

    HKDF-SHA256 over secret ‖ X25519(private, peer_public): without the cluster secret no one
    derives them (even a party to the exchange), and without the ephemeral private keys not
    even the secret's holder can, once the connection is gone. Raises FrameError for a public
    key that is malformed or of low order (an all-zero shared secret).
    """
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:
        raise FrameError(f"bad ephemeral public key: {exc}") from None
    info = b"raftq-mux-v2 keys"
    for part in (epk_c, epk_s, dialer_addr.encode(), listener_addr.encode()):
        info += _LEN.pack(len(part)) + part
    okm = HKDF(algorithm=hashes.SHA256(), length=2 * KEY_BYTES, salt=nonce_c + nonce_s, info=info)
    keys = okm.derive(secret + shared)
    return keys[:KEY_BYTES], keys[KEY_BYTES:]


class FrameCipher:
    """One direction of a connection: AES-256-GCM with an implicit 64-bit frame counter as
    the nonce. `seal` and `open` must see frames in stream order; `open` raises FrameError
    on any frame that was not sealed by the peer as the next one."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self._counter = 0

    def _nonce(self) -> bytes:
        nonce = self._counter.to_bytes(12, "big")
        self._counter += 1
        return nonce

    def seal(self, kind: int, body: bytes) -> bytes:
        return self.seal_plain(bytes((kind,)) + body)

    def seal_plain(self, plain: bytes) -> bytes:
        """Seal an inner frame already laid out as kind byte + body (no copy to join them)."""
        return self._aead.encrypt(self._nonce(), plain, None)

    def open(self, sealed: bytes) -> tuple[int, bytes]:
        try:
            plain = self._aead.decrypt(self._nonce(), sealed, None)
        except InvalidTag:
            raise FrameError("sealed frame failed authentication") from None
        if not plain:
            raise FrameError("empty sealed frame")
        return plain[0], plain[1:]


def should_dial(self_addr: str, peer_addr: str) -> bool:
    """Exactly one side of each pair dials: the one with the greater address string."""
    return self_addr > peer_addr
