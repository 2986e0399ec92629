"""The credential one broker shows another on every Internal call: per broker, per call, fresh.

A caller sends ``raftq-internal: 3.<broker id>.<boot>.<ts ms>.<counter>.<mac>`` where

    key = HMAC-SHA256(cluster secret, "raftq-internal-key-v2:" + broker id)
    mac = HMAC-SHA256(key, method + "\\n" + target + "\\n" + "<broker id>.<boot>.<ts ms>.<counter>")

and ``target`` is the address the caller dialed: the receiving broker's ``client_addr``, which
every broker learns from the metadata table. A receiver accepts only credentials made for one
of its own addresses, so a credential read off the wire is worth nothing at another broker
either. Version ``2`` (no target) is accepted only for the two calls a broker makes before it
knows the cluster, to the operator's ``join_addrs`` (JoinCluster: its own join; MetaMembers:
a read of the voters).

``boot`` is 16 random hex digits chosen when the caller's :class:`CredentialSigner` is built,
``counter`` rises by one per call. The receiver (:class:`CredentialVerifier`) accepts a
credential only when the MAC verifies for that broker's key and that method, the timestamp is
within ``freshness_s`` of its own clock (brokers' clocks may differ by that much), and the
(broker, boot, counter) was not seen before: per (broker, boot) it keeps the highest counter and
which of the ``window_calls`` below it were seen (calls arrive slightly out of order), like
IPsec's anti-replay window. A credential read off the wire is therefore worth nothing: not for
another method, not twice at the same broker, not after ``freshness_s`` anywhere (a receiver
that restarted forgot what it saw, the timestamp bounds that). Keys differ per broker id, so a
log of refusals names the broker; every broker still holds the cluster secret and could derive
any key: the secret is the trust boundary (ARCHITECTURE.md, Security).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

VERSION = "3"  # bound to the receiving broker's address
UNBOUND_VERSION = "2"
UNBOUND_METHODS = frozenset({"JoinCluster", "MetaMembers"})  # dialed at join_addrs
FRESHNESS_S = 300.0  # Kerberos' default clock-skew allowance
WINDOW_CALLS = 1 << 16


def broker_key(secret: str, broker_id: int) -> bytes:
    """The key broker ``broker_id`` signs its internal calls with (0: a tool, not a broker)."""
    label = f"raftq-internal-key-v2:{broker_id}".encode()
    return hmac.new(secret.encode(), label, hashlib.sha256).digest()


def _mac(key: bytes, method: str, body: str, target: str | None = None) -> str:
    text = f"{method}\n{body}" if target is None else f"{method}\n{target}\n{body}"
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


class CredentialSigner:
    """Makes the credential of each call of one caller (thread-safe)."""

    def __init__(
        self, secret: str, broker_id: int, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = broker_key(secret, broker_id)
        self._prefix = f"{broker_id}.{os.urandom(8).hex()}"
        self._counter = itertools.count(1)  # next() is atomic under the GIL
        self._clock = clock

    def credential(self, method: str, target: str | None = None) -> str:
        """The credential of one call of ``method`` to the broker at ``target`` (its client
        address); ``None``: bound to no receiver (accepted only for UNBOUND_METHODS)."""
        body = f"{self._prefix}.{int(self._clock() * 1000)}.{next(self._counter)}"
        version = UNBOUND_VERSION if target is None else VERSION
        return f"{version}.{body}.{_mac(self._key, method, body, target)}"


@dataclass
class _Window:
    high: int = 0
    seen: set[int] = field(default_factory=set)
    last_ms: int = 0


class CredentialVerifier:
    """Checks credentials for one receiving broker (thread-safe). ``check`` returns None when
    the credential is good, else the reason it is refused (for UNAUTHENTICATED)."""

    def __init__(
        self,
        secret: str,
        *,
        clock: Callable[[], float] = time.time,
        freshness_s: float = FRESHNESS_S,
        window_calls: int = WINDOW_CALLS,
        own_addresses: tuple[str, ...] = (),
    ) -> None:
        """``own_addresses``: this broker's addresses; credentials must be made for one of
        them (empty: a verifier that accepts unbound credentials, for tests and tools)."""
        self._own = own_addresses
        self._secret = secret
        self._clock = clock
        self._freshness_ms = int(freshness_s * 1000)
        self._window_calls = window_calls
        self._keys: dict[int, bytes] = {}
        self._windows: dict[tuple[int, str], _Window] = {}
        self._lock = threading.Lock()
        self._next_prune_ms = 0

    def check(self, method: str, shown: object) -> str | None:
        parts = shown.split(".") if isinstance(shown, str) else []
        if len(parts) != 6 or parts[0] not in (VERSION, UNBOUND_VERSION):
            return "internal call without a broker credential"
        version, broker, boot, ts, counter, mac = parts
        if version == UNBOUND_VERSION and self._own and method not in UNBOUND_METHODS:
            return f"broker credential for {method} is not bound to this broker"
        if not (
            broker.isdigit()
            and ts.isdigit()
            and counter.isdigit()
            and len(broker) <= 10
            and len(boot) <= 32
            and len(ts) <= 16
            and len(counter) <= 20
        ):
            return "malformed broker credential"
        broker_id, ts_ms, count = int(broker), int(ts), int(counter)
        key = self._keys.get(broker_id) or broker_key(self._secret, broker_id)
        body = f"{broker}.{boot}.{ts}.{counter}"
        targets: tuple[str | None, ...] = (None,) if version == UNBOUND_VERSION else self._own
        if not any(hmac.compare_digest(mac, _mac(key, method, body, t)) for t in targets):
            return (
                f"broker credential for {method} does not verify under the cluster secret "
                "for this broker's address"
            )
        self._keys[broker_id] = key  # cached only once verified: no growth from forgeries
        now_ms = int(self._clock() * 1000)
        if abs(now_ms - ts_ms) > self._freshness_ms:
            return (
                f"broker {broker_id}'s credential is {abs(now_ms - ts_ms) / 1000:.0f} s off this "
                f"broker's clock (allowed {self._freshness_ms / 1000:.0f} s): replayed, or "
                "the clocks differ"
            )
        with self._lock:
            self._prune(now_ms)
            window = self._windows.setdefault((broker_id, boot), _Window())
            window.last_ms = max(window.last_ms, ts_ms)
            if count <= window.high - self._window_calls or count in window.seen:
                return f"broker {broker_id}'s credential was used before (replay)"
            window.seen.add(count)
            if count > window.high:
                window.high = count
                if len(window.seen) > 2 * self._window_calls:
                    floor = count - self._window_calls
                    window.seen = {c for c in window.seen if c > floor}
        return None

    def _prune(self, now_ms: int) -> None:
        """Forget callers (boots) silent for longer than the freshness window: their old
        credentials fail the timestamp check anyway."""
        if now_ms < self._next_prune_ms:
            return
        self._next_prune_ms = now_ms + self._freshness_ms // 10
        stale = now_ms - 2 * self._freshness_ms
        for key in [k for k, w in self._windows.items() if w.last_ms < stale]:
            del self._windows[key]
