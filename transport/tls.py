"""TLS and bearer tokens for gRPC channels and the client-port server.

One place builds every channel a raftq process opens to a broker's client port (the Python
client's and broker-to-broker forwarding): :func:`open_channel` with a
:class:`ChannelSecurity` — TLS when a CA is given (mutual TLS when a certificate and key are
given too), and ``authorization: Bearer <token>`` metadata on every call when a token is.
Certificates are read once, when the ``ChannelSecurity`` is made, so a missing file fails at
construction with InvalidArgument, and the object pickles with the PEM bytes (a Spark executor
needs no local copy of the files).

Every channel and server states its message-size limit (:func:`message_size_options`): no hop
keeps gRPC's 4 MiB default (broker/config.py ``message_bytes_max`` derives the limit).
"""

from __future__ import annotations

import collections
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from raftq.proto import errors

# The call metadata that carries a client's token (checked by raftq.transport.auth).
AUTH_METADATA_KEY = "authorization"


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return ((AUTH_METADATA_KEY, f"Bearer {token}"),)


def read_pem(path: str, what: str) -> bytes:
    """The file's bytes; InvalidArgument naming ``what`` when it cannot be read or is no PEM."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise errors.InvalidArgument(f"{what} {path!r} cannot be read: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise errors.InvalidArgument(f"{what} {path!r} is not a PEM file")
    return data


@dataclass(frozen=True)
class ChannelSecurity:
    """How to reach a broker's client port. All None: plaintext, no token."""

    ca_pem: bytes | None = None  # trust anchors for the broker's certificate: TLS on
    cert_pem: bytes | None = None  # client certificate (mutual TLS)
    key_pem: bytes | None = None
    token: str | None = None

    @classmethod
    def from_files(
        cls,
        *,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> ChannelSecurity:
        """Raises InvalidArgument for an unreadable file or a certificate without its key."""
        if bool(tls_cert_file) != bool(tls_key_file):
            raise errors.InvalidArgument("a client certificate needs its key, and a key its cert")
        if tls_cert_file and not tls_ca_file:
            raise errors.InvalidArgument("a client certificate needs tls_ca_file (TLS) as well")
        return cls(
            ca_pem=read_pem(tls_ca_file, "tls_ca_file") if tls_ca_file else None,
            cert_pem=read_pem(tls_cert_file, "tls_cert_file") if tls_cert_file else None,
            key_pem=read_pem(tls_key_file, "tls_key_file") if tls_key_file else None,
            token=token or None,
        )

    @property
    def tls(self) -> bool:
        return self.ca_pem is not None

    def __repr__(self) -> str:  # never print a token
        return f"ChannelSecurity(tls={self.tls}, mtls={self.cert_pem is not None}, token=...)"


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _TokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the bearer token to every call's metadata."""

    def __init__(self, token: str) -> None:
        self._metadata = bearer_metadata(token)

    def _details(self, details: Any) -> _CallDetails:
        metadata = list(details.metadata or ()) + list(self._metadata)
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


# A broker that stops answering while its sockets stay open (SIGSTOP, a hung host) is found by
# HTTP/2 pings, not by waiting out a call's deadline: a ping goes out at most once a second
# (gRPC's floor) and a channel whose ping is unanswered for PING_TIMEOUT_MS fails its calls
# UNAVAILABLE, so callers move to another broker within about 1.5 s. Pings are answered by
# gRPC's C core, not by Python threads: a busy broker still answers them. A connection attempt
# to such a broker (TCP connects, HTTP/2 never does) gives up after CONNECT_TIMEOUT_MS.
KEEPALIVE_MS = 1_000
PING_TIMEOUT_MS = 500
CONNECT_TIMEOUT_MS = 1_000
KEEPALIVE_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", PING_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", PING_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),  # gRPC's minimum connect timeout
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # Each channel its own subchannels: a new channel to a broker that just started must not
    # inherit the reconnect backoff of another channel's refused connects (gRPC shares
    # subchannels process-wide by default; calls then failed UNAVAILABLE "connection refused"
    # from a broker that was listening).
    ("grpc.use_local_subchannel_pool", 1),
)
# What a broker's server needs to accept those pings (gRPC's default refuses pings more often
# than every 5 minutes without data and closes the connection).
KEEPALIVE_SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),
)


def message_size_options(message_bytes_max: int) -> tuple[tuple[str, int], ...]:
    """gRPC channel/server options: send and receive messages up to ``message_bytes_max``."""
    assert message_bytes_max > 0, message_bytes_max
    return (
        ("grpc.max_send_message_length", message_bytes_max),
        ("grpc.max_receive_message_length", message_bytes_max),
    )


def open_channel(
    address: str,
    security: ChannelSecurity | None = None,
    options: Sequence[tuple[str, Any]] = (),
    *,
    message_bytes_max: int,
) -> grpc.Channel:
    """A channel to ``address`` (host:port): TLS when ``security`` has a CA, the token on every
    call when it has one. The server's certificate must name the host (SAN IP or DNS).
    ``KEEPALIVE_OPTIONS`` apply unless ``options`` names them. Messages up to
    ``message_bytes_max`` travel both ways."""
    named = {name for name, _ in options}
    options = (
        *(o for o in KEEPALIVE_OPTIONS if o[0] not in named),
        *message_size_options(message_bytes_max),
        *options,
    )
    if security is None or not security.tls:
        channel = grpc.insecure_channel(address, options=tuple(options))
    else:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=security.ca_pem,
            private_key=security.key_pem,
            certificate_chain=security.cert_pem,
        )
        channel = grpc.secure_channel(address, credentials, options=tuple(options))
    if security is not None and security.token:
        channel = grpc.intercept_channel(channel, _TokenInterceptor(security.token))
    return channel


class _AioTokenInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
):
    """Adds the bearer token to every call of an asyncio channel."""

    def __init__(self, token: str) -> None:
        self._metadata = tuple(bearer_metadata(token))

    def _details(self, details: Any) -> Any:
        metadata = grpc.aio.Metadata(*(tuple(details.metadata or ()) + self._metadata))
        return details._replace(metadata=metadata)

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


def open_aio_channel(
    address: str,
    security: ChannelSecurity | None = None,
    options: Sequence[tuple[str, Any]] = (),
    *,
    message_bytes_max: int,
) -> grpc.aio.Channel:
    """:func:`open_channel` for asyncio (``grpc.aio``): the same options, limits, TLS, token."""
    named = {name for name, _ in options}
    options = (
        *(o for o in KEEPALIVE_OPTIONS if o[0] not in named),
        *message_size_options(message_bytes_max),
        *options,
    )
    interceptors = (
        [_AioTokenInterceptor(security.token)] if security is not None and security.token else None
    )
    if security is None or not security.tls:
        return grpc.aio.insecure_channel(address, options=tuple(options), interceptors=interceptors)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=security.ca_pem,
        private_key=security.key_pem,
        certificate_chain=security.cert_pem,
    )
    return grpc.aio.secure_channel(
        address, credentials, options=tuple(options), interceptors=interceptors
    )


def server_credentials(
    cert_file: str, key_file: str, client_ca_file: str = ""
) -> grpc.ServerCredentials:
    """TLS for the client port; with ``client_ca_file`` every client must present a
    certificate it signed (mutual TLS). Raises InvalidArgument for unreadable files."""
    pair = (
        read_pem(key_file, "security.tls_key_file"),
        read_pem(cert_file, "security.tls_cert_file"),
    )
    client_ca = read_pem(client_ca_file, "security.tls_client_ca_file") if client_ca_file else None
    return grpc.ssl_server_credentials(
        [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


__all__ = [
    "AUTH_METADATA_KEY",
    "KEEPALIVE_OPTIONS",
    "KEEPALIVE_SERVER_OPTIONS",
    "ChannelSecurity",
    "bearer_metadata",
    "message_size_options",
    "open_aio_channel",
    "open_channel",
    "read_pem",
    "server_credentials",
]
