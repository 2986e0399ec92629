"""What the Spark writer and reader share: option helpers (integer options, the check that
refuses an unknown option naming the valid ones and a Kafka-connector option's raftq name, the
bootstrap option), how workers reach the brokers (TLS files, token), and each worker process's
connection to them."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from raftq.client import Admin, parse_bootstrap
from raftq.client.streams import SendStreams
from raftq.proto import api_pb2_grpc, errors
from raftq.proto.limits import CLIENT_MESSAGE_BYTES_MAX
from raftq.transport.tls import ChannelSecurity, open_channel


def int_option(
    options: Mapping[str, str], name: str, default: int, low: int, high: int | None = None
) -> int:
    """Option ``name`` as an int in [low, high]; raises InvalidArgument naming it."""
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise errors.InvalidArgument(f"option {name}={raw!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise errors.InvalidArgument(f"option {name}={value} must be {bound}")
    return value


# Kafka-connector option names a user may bring along, and what raftq calls them.
KAFKA_EQUIVALENTS = {
    "kafka.bootstrap.servers": "bootstrap",
    "subscribepattern": "topic (a comma-separated list; no patterns)",
    "assign": "startingOffsets / endingOffsets JSON naming the partitions",
    "includeheaders": "nothing: the headers column is always there",
    "startingoffset": "startingOffsets",
    "endingoffset": "endingOffsets",
    "startingtimestamp": "startingOffsets (offsets, not timestamps)",
    "kafka.security.protocol": "tlsCaFile / tlsCertFile / tlsKeyFile",
    "kafka.sasl.jaas.config": "token",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "kafka.max.partition.fetch.bytes": "fetchMaxBytes",
    "kafka.fetch.max.bytes": "fetchMaxBytes",
    "kafka.request.timeout.ms": "requestTimeoutMs",
    "kafka.batch.size": "batchBytes / batchRecords",
}
# Options Spark itself passes to every data source; not ours to refuse.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})
SECURITY_OPTIONS = ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "token")


def check_known(opts: Mapping[str, str], valid: Sequence[str], what: str) -> None:
    """Raise InvalidArgument naming every option of (lower-cased) ``opts`` that is not one of
    ``valid`` (or Spark's own), with the valid list and the raftq name of a Kafka option."""
    allowed = {v.lower() for v in valid} | SPARK_OPTIONS
    unknown = sorted(k for k in opts if k not in allowed)
    if not unknown:
        return
    hints = [
        f"{k} (raftq: {KAFKA_EQUIVALENTS[k]})" if k in KAFKA_EQUIVALENTS else k for k in unknown
    ]
    raise errors.InvalidArgument(
        f"unknown raftq {what} option(s): {', '.join(hints)}; valid: {', '.join(valid)}"
    )


def bootstrap_option(opts: Mapping[str, str]) -> str:
    """The ``bootstrap`` (or Kafka's ``bootstrap.servers``) option of lower-cased ``opts``,
    checked; raises InvalidArgument saying what to fix."""
    bootstrap = opts.get("bootstrap") or opts.get("bootstrap.servers") or ""
    parse_bootstrap(bootstrap)
    return bootstrap


@dataclass(frozen=True)
class Security:
    """How workers reach the brokers: options tlsCaFile, tlsCertFile, tlsKeyFile, token (all
    optional; the files must be readable on every executor). Never printed with the token."""

    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    token: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Security:
        return cls(
            tls_ca_file=opts.get("tlscafile") or None,
            tls_cert_file=opts.get("tlscertfile") or None,
            tls_key_file=opts.get("tlskeyfile") or None,
            token=opts.get("token") or None,
        )

    def channel_security(self) -> ChannelSecurity:
        """Raises InvalidArgument for an unreadable file or a certificate without its key."""
        return ChannelSecurity.from_files(
            tls_ca_file=self.tls_ca_file,
            tls_cert_file=self.tls_cert_file,
            tls_key_file=self.tls_key_file,
            token=self.token,
        )


# --- connections, one per process and bootstrap -----------------------------------------------


class Connection:
    """Admin calls plus one Producer stub per broker address. Created inside a Spark worker,
    reused by every task that worker runs (``connection()``); never pickled."""

    def __init__(
        self, bootstrap: str, request_timeout_ms: int, security: Security | None = None
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.timeout_s = request_timeout_ms / 1000
        security = security or Security()
        self._security = security.channel_security()
        self.admin = Admin(
            bootstrap,
            request_timeout_ms=request_timeout_ms,
            tls_ca_file=security.tls_ca_file,
            tls_cert_file=security.tls_cert_file,
            tls_key_file=security.tls_key_file,
            token=security.token,
        )
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, api_pb2_grpc.ProducerStub] = {}
        self._logs: dict[str, api_pb2_grpc.LogStub] = {}
        self._streams: SendStreams | None = None

    def _channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(
                address, self._security, message_bytes_max=CLIENT_MESSAGE_BYTES_MAX
            )
        return channel

    def producer(self, address: str) -> api_pb2_grpc.ProducerStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = api_pb2_grpc.ProducerStub(self._channel(address))
            return stub

    def log(self, address: str) -> api_pb2_grpc.LogStub:
        """The Log service of one broker (a read it does not lead is forwarded)."""
        with self._lock:
            stub = self._logs.get(address)
            if stub is None:
                stub = self._logs[address] = api_pb2_grpc.LogStub(self._channel(address))
            return stub

    def streams(self) -> SendStreams:
        """One long-lived SendStream per broker, as the Producer sends (a unary call costs
        both ends a call set-up); started on first use."""
        with self._lock:
            if self._streams is None:
                self._streams = SendStreams(lambda address: self.producer(address).SendStream)
            return self._streams

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            streams, self._streams = self._streams, None
            self._channels, self._stubs, self._logs = {}, {}, {}
        if streams is not None:
            streams.close()
        for channel in channels:
            channel.close()
        self.admin.close()


_CONNECTIONS: dict[tuple[int, str, int, Security], Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def connection(
    bootstrap: str, request_timeout_ms: int = 30_000, security: Security | None = None
) -> Connection:
    """This process's connection to ``bootstrap`` (PySpark forks and reuses workers: keyed by
    pid, so a forked child never uses its parent's channels)."""
    security = security or Security()
    key = (os.getpid(), bootstrap, request_timeout_ms, security)
    with _CONNECTIONS_LOCK:
        found = _CONNECTIONS.get(key)
        if found is None:
            found = _CONNECTIONS[key] = Connection(bootstrap, request_timeout_ms, security)
        return found
