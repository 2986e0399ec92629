"""Broker configuration: YAML files plus ``RAFTQ_*`` environment variables → frozen dataclasses.

This is the only module that imports dynaconf (tests/unit/test_layering.py enforces it). Everything
else receives a validated :class:`BrokerConfig` and never looks a setting up by name.

Layers, later wins, one setting at a time:

1. the dataclass defaults below (the same values as ``configs/default.yaml``; a test keeps
   them equal);
2. ``configs/default.yaml``;
3. the file passed to :func:`load_config` (a broker file need only hold its overrides);
4. environment variables ``RAFTQ_<SECTION>__<SETTING>``, e.g. ``RAFTQ_RAFT__FSYNC=false``,
   ``RAFTQ_BROKER__SEEDS=127.0.0.1:9070,127.0.0.1:9071`` (a list is also accepted as
   ``'["a:1", "b:2"]'``). ``RAFTQ_*`` names that do not start with a section name are left
   alone for other tools.

Mappings merge setting by setting; every other value, lists included, is replaced whole (so a
broker file's ``seeds`` replaces the default list instead of being appended to it, which is
what dynaconf's own ``merge_enabled`` would do). dynaconf reads the YAML and parses typed
environment values; this module does the layering, so it can name the file or variable a bad
setting came from and reject unknown ones (``raft.fsnyc`` is an error, not a silent no-op).

A bad setting raises :class:`ConfigError`, whose message names the setting by dotted path and
says what is allowed. The dataclasses validate themselves in ``__post_init__``, so a
``BrokerConfig`` built in code (tests, ``dataclasses.replace``) is checked the same way.
Names carry their unit last: ``_ms``, ``_s``, ``_bytes``, ``_kib``, ``_pages``.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import pathlib
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

from dynaconf import Dynaconf
from dynaconf.utils.parse_conf import boolean_fix, parse_conf_data

from raftq.client.defaults import CLIENT_DEFAULTS
from raftq.metadata.frontend import DEAD_LETTER_HEADERS_BYTES
from raftq.proto.limits import (
    CLIENT_MESSAGE_BYTES_MAX as CLIENT_MESSAGE_BYTES_MAX,
)
from raftq.proto.limits import (
    COMMAND_FRAMING_BYTES,
    FETCH_BYTES_LIMIT,
    RAFT_ENTRY_BYTES_LIMIT,
)
from raftq.proto.limits import MESSAGE_ENVELOPE_BYTES as MESSAGE_ENVELOPE_BYTES
from raftq.proto.limits import RECORD_FRAMING_BYTES as RECORD_FRAMING_BYTES
from raftq.proto.limits import message_bytes_max as message_bytes_max
from raftq.transport.admission import Capacity
from raftq.transport.auth import RESOURCE_KEYS as AUTH_RESOURCE_KEYS
from raftq.transport.auth import RESOURCE_OPERATIONS as AUTH_RESOURCE_OPERATIONS
from raftq.transport.auth import AclRule, AuthPolicy, Principal

# configs/default.yaml: beside this module in an installed wheel (package data raftq.configs),
# one level up in the source tree (broker/ is the raftq package root there).
_HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_CONFIG_PATH = next(
    (
        p
        for p in (_HERE / "configs" / "default.yaml", _HERE.parent / "configs" / "default.yaml")
        if p.is_file()
    ),
    _HERE.parent / "configs" / "default.yaml",
)
ENV_PREFIX = "RAFTQ_"

# The dev-only secret in configs/default.yaml. Accepted only while every address the broker
# binds is a loopback address, so a cluster reachable from the network cannot run with it.
DEV_CLUSTER_SECRET = "raftq-dev-only-secret-CHANGE-ME"
CLUSTER_SECRET_MIN_CHARS = 16


def raft_frame_bytes_max(max_entry_bytes: int) -> int:
    """The raft port's frame limit: one append_entries message holds entries up to
    appendEntriesBatchSizeBytes (above one entry) and may end with one more whole entry."""
    return max(16 * 1024 * 1024, 2 * max_entry_bytes + 1024 * 1024)


class Problem(NamedTuple):
    setting: str  # dotted path, e.g. "raft.heartbeat_ms"; "" for a whole file
    message: str  # a sentence that names the setting and says what is allowed


class ConfigError(ValueError):
    """One or more settings are missing, malformed, out of range or inconsistent.

    ``problems`` lists them all; ``settings`` their dotted paths. The message names each one.
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        assert problems, "ConfigError without a problem"
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            text = self.problems[0].message
        else:
            text = "invalid raftq configuration:\n  " + "\n  ".join(
                p.message for p in self.problems
            )
        super().__init__(text)

    @property
    def settings(self) -> tuple[str, ...]:
        return tuple(p.setting for p in self.problems)


# --- declaring settings -------------------------------------------------------------------


def _setting(
    default: Any,
    *,
    min: int | None = None,
    max: int | None = None,
    why: str = "",
    secret: bool = False,
) -> Any:
    """A dataclass field with its allowed range (inclusive) and the reason for the range."""
    return field(
        default=default,
        repr=not secret,
        metadata={"min": min, "max": max, "why": why, "secret": secret},
    )


def _show(value: Any, secret: bool) -> str:
    if secret:
        return f"{len(value)} characters" if isinstance(value, str) else "hidden"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def _check_type(path: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> list[Problem]:
    shown = _show(value, meta.get("secret", False))
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            names = ", ".join(str(a) for a in allowed)
            return [Problem(path, f"{path} ({shown}) must be one of {names}")]
        return []
    if hint is bool:
        if not isinstance(value, bool):
            return [Problem(path, f"{path} ({shown}) must be true or false")]
        return []
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return [Problem(path, f"{path} ({shown}) must be an integer")]
        why = f" ({meta['why']})" if meta.get("why") else ""
        low, high = meta.get("min"), meta.get("max")
        if low is not None and value < low:
            return [Problem(path, f"{path} ({shown}) must be ≥ {low}{why}")]
        if high is not None and value > high:
            return [Problem(path, f"{path} ({shown}) must be ≤ {high}{why}")]
        return []
    if hint is str:
        if not isinstance(value, str):
            return [Problem(path, f"{path} ({shown}) must be a string")]
        return []
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            return [Problem(path, f"{path} ({shown}) must be a list of strings")]
        return []
    raise AssertionError(f"{path}: no check for type {hint!r}")  # a bug in this module


class _Section:
    """Checks every field's type and range, then the section's own relationships."""

    SECTION: ClassVar[str]

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        problems: list[Problem] = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            path = f"{self.SECTION}.{f.name}"
            problems += _check_type(path, getattr(self, f.name), hints[f.name], f.metadata)
        if not problems:
            problems += self._relations()
        if problems:
            raise ConfigError(problems)

    def _relations(self) -> list[Problem]:
        return []


def _less(a_path: str, a: int, b_path: str, b: int, *, or_equal: bool = False) -> list[Problem]:
    """``a < b`` (or ``a ≤ b``), else a problem naming both settings and their values."""
    if a < b or (or_equal and a == b):
        return []
    op = "≤" if or_equal else "<"
    return [Problem(a_path, f"{a_path} ({a}) must be {op} {b_path} ({b})")]


def _split_addr(addr: str) -> tuple[str, int] | None:
    """``host:port`` or ``[v6]:port`` → (host, port); None when malformed."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None
    if host.startswith("[") != host.endswith("]"):
        return None
    return host.strip("[]"), int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- the settings ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BrokerSettings(_Section):
    """Who this broker is and where it listens."""

    SECTION: ClassVar[str] = "broker"

    id: int = _setting(1, min=1, max=2**31 - 1)
    client_addr: str = "127.0.0.1:7070"
    raft_addr: str = "127.0.0.1:9070"
    rack: str = ""
    data_dir: str = "./data/broker-1"
    seeds: tuple[str, ...] = ("127.0.0.1:9070",)
    join_addrs: tuple[str, ...] = ()
    metrics_addr: str = "127.0.0.1:9100"
    cluster_secret: str = _setting("", secret=True)
    # A partition leader hands leadership to its preferred replica on its own (Kafka's
    # auto.leader.rebalance.enable); false: only `raftq cluster rebalance-leaders` moves it.
    auto_leader_rebalance: bool = True

    @property
    def uses_dev_secret(self) -> bool:
        return self.cluster_secret == DEV_CLUSTER_SECRET

    def _relations(self) -> list[Problem]:
        problems: list[Problem] = []
        addrs = {"broker.client_addr": self.client_addr, "broker.raft_addr": self.raft_addr}
        if self.metrics_addr:
            addrs["broker.metrics_addr"] = self.metrics_addr
        for path, addr in addrs.items():
            if _split_addr(addr) is None:
                problems.append(Problem(path, f"{path} ({addr!r}) must be host:port, port 1-65535"))
        seen: dict[str, str] = {}
        for path, addr in addrs.items():
            if addr in seen:
                problems.append(Problem(path, f"{path} ({addr!r}) must differ from {seen[addr]}"))
            seen.setdefault(addr, path)
        if not self.seeds:
            problems.append(
                Problem("broker.seeds", "broker.seeds must list at least one raft address")
            )
        for seed in self.seeds:
            if _split_addr(seed) is None:
                problems.append(
                    Problem("broker.seeds", f"broker.seeds ({seed!r}) must be host:port raft addrs")
                )
        for addr in self.join_addrs:
            if _split_addr(addr) is None:
                problems.append(
                    Problem(
                        "broker.join_addrs",
                        f"broker.join_addrs ({addr!r}) must be host:port client addresses",
                    )
                )
        if len(set(self.seeds)) != len(self.seeds):
            shown = _show(self.seeds, False)
            problems.append(Problem("broker.seeds", f"broker.seeds ({shown}) has duplicates"))
        if not self.data_dir:
            problems.append(Problem("broker.data_dir", "broker.data_dir must not be empty"))
        if len(self.cluster_secret) < CLUSTER_SECRET_MIN_CHARS:
            problems.append(
                Problem(
                    "broker.cluster_secret",
                    f"broker.cluster_secret ({_show(self.cluster_secret, True)}) must be at "
                    f"least {CLUSTER_SECRET_MIN_CHARS} characters: set it in the config file "
                    "or RAFTQ_BROKER__CLUSTER_SECRET",
                )
            )
        if self.uses_dev_secret and not problems:
            public = [
                f"{path} ({addr})"
                for path, addr in addrs.items()
                if not _is_loopback((_split_addr(addr) or ("", 0))[0])
            ]
            if public:
                problems.append(
                    Problem(
                        "broker.cluster_secret",
                        "broker.cluster_secret is the development default from "
                        "configs/default.yaml, allowed only on loopback addresses, but "
                        f"{', '.join(public)} is not: set a secret of your own",
                    )
                )
        return problems


@dataclass(frozen=True, kw_only=True)
class RaftSettings(_Section):
    """Consensus: the metadata group and every partition group."""

    SECTION: ClassVar[str] = "raft"

    fsync: bool = True
    election_timeout_min_ms: int = _setting(800, min=10)
    election_timeout_max_ms: int = _setting(1300, min=10)
    heartbeat_ms: int = _setting(250, min=1)
    max_entry_bytes: int = _setting(
        2 * 1024 * 1024,
        min=4096,
        max=RAFT_ENTRY_BYTES_LIMIT,
        why="an entry travels whole in one raft message; larger entries stall replication",
    )
    max_inflight_entries_per_partition: int = _setting(4, min=1, max=1024)
    snapshot_interval_s: int = _setting(300, min=1)
    metadata_voters: int = _setting(3, min=1, max=7)
    max_clock_skew_ms: int = _setting(
        2000,
        min=0,
        max=3_600_000,
        why="an hour; expired leases and retention wait this long past their deadline",
    )

    def _relations(self) -> list[Problem]:
        problems: list[Problem] = []
        if 3 * self.heartbeat_ms >= self.election_timeout_min_ms:
            # a follower must miss at least three heartbeats before it stands for election
            # (transport/raft/node.py RaftTimings.validate checks the same)
            problems.append(
                Problem(
                    "raft.heartbeat_ms",
                    f"raft.heartbeat_ms ({self.heartbeat_ms}) must be < "
                    f"raft.election_timeout_min_ms ({self.election_timeout_min_ms}) / 3: a "
                    "follower misses three heartbeats before it stands for election",
                )
            )
        problems += _less(
            "raft.election_timeout_min_ms",
            self.election_timeout_min_ms,
            "raft.election_timeout_max_ms",
            self.election_timeout_max_ms,
        )
        if self.metadata_voters % 2 == 0:
            problems.append(
                Problem(
                    "raft.metadata_voters",
                    f"raft.metadata_voters ({self.metadata_voters}) must be odd (1, 3, 5 or 7): "
                    "an even count tolerates no more failures than one fewer voter",
                )
            )
        return problems


@dataclass(frozen=True, kw_only=True)
class TopicDefaults(_Section):
    """Configuration of a topic created without it; names match proto TopicConfig."""

    SECTION: ClassVar[str] = "topic_defaults"

    partitions: int = _setting(3, min=1, max=10_000)
    replication_factor: int = _setting(3, min=1, max=7)
    ordering: Literal["fifo", "priority", "fair"] = "fifo"
    lease_ms: int = _setting(30_000, min=1, max=43_200_000, why="12 hours, as SQS")
    max_deliveries: int = _setting(5, min=0, max=1_000_000)
    retention_ms: int = _setting(604_800_000, min=0)
    retention_bytes: int = _setting(0, min=0)
    max_record_bytes: int = _setting(1024 * 1024, min=1)
    dedup_window_ms: int = _setting(300_000, min=0)
    nack_backoff_base_ms: int = _setting(1000, min=0)
    nack_backoff_max_ms: int = _setting(60_000, min=0)

    def _relations(self) -> list[Problem]:
        return _less(
            "topic_defaults.nack_backoff_base_ms",
            self.nack_backoff_base_ms,
            "topic_defaults.nack_backoff_max_ms",
            self.nack_backoff_max_ms,
            or_equal=True,
        )


@dataclass(frozen=True, kw_only=True)
class StorageSettings(_Section):
    """The SQLite file of each partition replica."""

    SECTION: ClassVar[str] = "storage"

    synchronous: Literal["FULL", "NORMAL", "OFF"] = "NORMAL"
    cache_kib: int = _setting(2048, min=64)
    wal_autocheckpoint_pages: int = _setting(1000, min=0)
    wal_size_limit_bytes: int = _setting(1_048_576, min=-1)
    wal_trim_idle_ms: int = _setting(10_000, min=0)


@dataclass(frozen=True, kw_only=True)
class GroupSettings(_Section):
    """Consumer group sessions."""

    SECTION: ClassVar[str] = "groups"

    session_timeout_ms: int = _setting(45_000, min=1)
    session_timeout_min_ms: int = _setting(6000, min=1)
    session_timeout_max_ms: int = _setting(1_800_000, min=1)
    heartbeat_interval_ms: int = _setting(3000, min=1)
    # How long a group without members keeps its offsets (Kafka's offsets.retention.minutes,
    # 7 days): then the metadata leader deletes it. 0 = never.
    offsets_retention_ms: int = _setting(604_800_000, min=0)

    def _relations(self) -> list[Problem]:
        problems = _less(
            "groups.session_timeout_min_ms",
            self.session_timeout_min_ms,
            "groups.session_timeout_ms",
            self.session_timeout_ms,
            or_equal=True,
        )
        problems += _less(
            "groups.session_timeout_ms",
            self.session_timeout_ms,
            "groups.session_timeout_max_ms",
            self.session_timeout_max_ms,
            or_equal=True,
        )
        # Below the *minimum*: a member that asks for the shortest session must still get
        # more than one heartbeat in before it expires.
        problems += _less(
            "groups.heartbeat_interval_ms",
            self.heartbeat_interval_ms,
            "groups.session_timeout_min_ms",
            self.session_timeout_min_ms,
        )
        return problems


@dataclass(frozen=True, kw_only=True)
class CapacitySettings(_Section):
    """Calls of each kind a broker runs at once; one more is refused RESOURCE_EXHAUSTED with a
    retry hint, never queued (transport/admission.py). The gRPC pool is their sum plus spare
    threads, so no kind can starve another."""

    SECTION: ClassVar[str] = "capacity"

    control_calls_max: int = _setting(8, min=1, max=1024)
    internal_calls_max: int = _setting(32, min=1, max=1024)
    admin_calls_max: int = _setting(8, min=1, max=1024)
    long_polls_max: int = _setting(32, min=1, max=1024)
    client_calls_max: int = _setting(48, min=1, max=1024)
    send_streams_max: int = _setting(16, min=1, max=1024)

    def to_capacity(self) -> Capacity:
        return Capacity(**dataclasses.asdict(self))


@dataclass(frozen=True, kw_only=True)
class ClientSettings(_Section):
    """Defaults of the Python client and of broker-to-broker forwarding."""

    SECTION: ClassVar[str] = "client"

    request_timeout_ms: int = _setting(CLIENT_DEFAULTS.request_timeout_ms, min=1)
    linger_ms: int = _setting(CLIENT_DEFAULTS.linger_ms, min=0)
    batch_records_max: int = _setting(CLIENT_DEFAULTS.batch_records_max, min=1, max=100_000)
    # Encoded bytes of the records in one Send (each record's protobuf size, headers, keys,
    # priorities and idempotency keys included): at most what one raft entry carries.
    batch_bytes_max: int = _setting(
        CLIENT_DEFAULTS.batch_bytes_max,
        min=1,
        max=RAFT_ENTRY_BYTES_LIMIT - COMMAND_FRAMING_BYTES,
        why="one Send is one raft entry",
    )
    # Record bytes in one Poll, PollStream or Fetch answer when the request sets no max_bytes,
    # and the most a request may set (Kafka's fetch.max.bytes); a record larger on its own
    # still goes alone. The broker's gRPC message limit is derived from it.
    fetch_bytes_max: int = _setting(
        CLIENT_DEFAULTS.fetch_bytes_max, min=1024, max=FETCH_BYTES_LIMIT
    )
    send_streams: bool = CLIENT_DEFAULTS.send_streams
    # Bytes of records a Producer holds (queued or in flight) at most; send() then blocks up
    # to max_block_ms for room (Kafka's buffer.memory and max.block.ms).
    buffer_memory_bytes: int = _setting(CLIENT_DEFAULTS.buffer_memory_bytes, min=1)
    max_block_ms: int = _setting(CLIENT_DEFAULTS.max_block_ms, min=0)
    # How long a Producer keeps trying to deliver a record (Kafka: delivery.timeout.ms): its
    # topic's first metadata fetch is retried this long while no broker answers, and a batch
    # is retried until its retries are spent or it is this old.
    delivery_timeout_ms: int = _setting(CLIENT_DEFAULTS.delivery_timeout_ms, min=1)
    # A Producer refetches a topic's metadata (leaders, partition count) at least this often
    # (Kafka's metadata.max.age.ms), so it sees partitions added to a topic it writes.
    metadata_max_age_ms: int = _setting(CLIENT_DEFAULTS.metadata_max_age_ms, min=0)

    def _relations(self) -> list[Problem]:
        return (
            _less(
                "client.linger_ms",
                self.linger_ms,
                "client.request_timeout_ms",
                self.request_timeout_ms,
            )
            + _less(
                "client.batch_bytes_max",
                self.batch_bytes_max,
                "client.buffer_memory_bytes",
                self.buffer_memory_bytes,
                or_equal=True,
            )
            + _less(
                "client.request_timeout_ms",
                self.request_timeout_ms,
                "client.delivery_timeout_ms",
                self.delivery_timeout_ms,
                or_equal=True,
            )
        )


@dataclass(frozen=True, kw_only=True)
class SecuritySettings(_Section):
    """TLS on the client port, token authentication with per-topic ACLs. (The raft port is
    always authenticated by broker.cluster_secret and encrypted; nothing to set here.)"""

    SECTION: ClassVar[str] = "security"

    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    tls_ca_file: str = ""
    auth_required: bool = False
    auth_file: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    def _relations(self) -> list[Problem]:
        problems: list[Problem] = []
        files = {
            "security.tls_cert_file": self.tls_cert_file,
            "security.tls_key_file": self.tls_key_file,
            "security.tls_client_ca_file": self.tls_client_ca_file,
            "security.tls_ca_file": self.tls_ca_file,
            "security.auth_file": self.auth_file,
        }
        for path, file in files.items():
            if file and not pathlib.Path(file).is_file():
                problems.append(Problem(path, f"{path} ({file!r}) is not a readable file"))
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            problems.append(
                Problem(
                    "security.tls_cert_file",
                    "security.tls_cert_file and security.tls_key_file must be set together",
                )
            )
        if self.tls_client_ca_file and not self.tls:
            problems.append(
                Problem(
                    "security.tls_client_ca_file",
                    "security.tls_client_ca_file (mutual TLS) needs security.tls_cert_file",
                )
            )
        if self.tls and not self.tls_ca_file:
            problems.append(
                Problem(
                    "security.tls_ca_file",
                    "security.tls_ca_file must name the CA of the brokers' certificates when "
                    "security.tls_cert_file is set: brokers call each other over TLS",
                )
            )
        if self.auth_required and not self.auth_file:
            problems.append(
                Problem(
                    "security.auth_required",
                    "security.auth_required needs security.auth_file (principals, token "
                    "digests and ACLs)",
                )
            )
        if self.auth_file and not self.auth_required:
            problems.append(
                Problem(
                    "security.auth_file",
                    "security.auth_file is set but security.auth_required is false: set it "
                    "to true to enforce the tokens and ACLs",
                )
            )
        if self.auth_file and not problems:
            try:
                load_auth_policy(self.auth_file)
            except ConfigError as exc:
                problems += exc.problems
        return problems


@dataclass(frozen=True, kw_only=True)
class LogSettings(_Section):
    """What a broker logs and how (broker/logs.py)."""

    SECTION: ClassVar[str] = "log"

    format: Literal["text", "json"] = "text"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


@dataclass(frozen=True, kw_only=True)
class TxnSettings(_Section):
    """Spark writers' committed-batch watermarks (Admin.CommitTxn) in the metadata table."""

    SECTION: ClassVar[str] = "txns"

    # A watermark not raised for this long is forgotten (Kafka's transactional.id.expiration.ms,
    # 7 days): a Spark query restarted later from an old checkpoint may write that batch again.
    # 0 = never.
    expiration_ms: int = _setting(604_800_000, min=0)


_SECTIONS: dict[str, type[_Section]] = {
    "broker": BrokerSettings,
    "raft": RaftSettings,
    "topic_defaults": TopicDefaults,
    "storage": StorageSettings,
    "groups": GroupSettings,
    "client": ClientSettings,
    "security": SecuritySettings,
    "log": LogSettings,
    "txns": TxnSettings,
    "capacity": CapacitySettings,
}


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """The whole, validated configuration of one broker. Frozen: pass it, never mutate it."""

    broker: BrokerSettings  # required: broker.cluster_secret has no usable default
    raft: RaftSettings = field(default_factory=RaftSettings)
    topic_defaults: TopicDefaults = field(default_factory=TopicDefaults)
    storage: StorageSettings = field(default_factory=StorageSettings)
    groups: GroupSettings = field(default_factory=GroupSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    log: LogSettings = field(default_factory=LogSettings)
    txns: TxnSettings = field(default_factory=TxnSettings)
    capacity: CapacitySettings = field(default_factory=CapacitySettings)

    def __post_init__(self) -> None:
        problems = self._relations()
        if problems:
            raise ConfigError(problems)

    @property
    def record_bytes_max(self) -> int:
        """The largest max_record_bytes a topic may set: one record, its command framing and
        the headers of its dead letter fit one raft entry."""
        return self.raft.max_entry_bytes - COMMAND_FRAMING_BYTES - DEAD_LETTER_HEADERS_BYTES

    @property
    def message_bytes_max(self) -> int:
        """This broker's gRPC message limit, received and sent, on every hop it serves or
        dials (see :func:`message_bytes_max`)."""
        return message_bytes_max(self.raft.max_entry_bytes, self.client.fetch_bytes_max)

    def _relations(self) -> list[Problem]:
        """Relationships between sections (each section checked its own already)."""
        raft, topics = self.raft, self.topic_defaults
        problems = _less(
            "topic_defaults.max_record_bytes",
            topics.max_record_bytes,
            f"raft.max_entry_bytes - {COMMAND_FRAMING_BYTES + DEAD_LETTER_HEADERS_BYTES} bytes of "
            "command framing and dead-letter headers",
            self.record_bytes_max,
            or_equal=True,
        )
        problems += _less(
            "client.batch_bytes_max",
            self.client.batch_bytes_max,
            f"raft.max_entry_bytes - {COMMAND_FRAMING_BYTES} bytes of command framing",
            raft.max_entry_bytes - COMMAND_FRAMING_BYTES,
            or_equal=True,
        )
        # A request must be able to outlive one election and its retry to the new leader.
        problems += _less(
            "raft.election_timeout_max_ms",
            raft.election_timeout_max_ms,
            "client.request_timeout_ms",
            self.client.request_timeout_ms,
        )
        security = self.security
        host = (_split_addr(self.broker.client_addr) or ("", 0))[0]
        if security.auth_required and not security.tls and not _is_loopback(host):
            problems.append(
                Problem(
                    "security.auth_required",
                    "security.auth_required without TLS would send tokens in clear text to "
                    f"broker.client_addr ({self.broker.client_addr}), which is not loopback: "
                    "set security.tls_cert_file and security.tls_key_file",
                )
            )
        seeds = len(self.broker.seeds)
        if seeds > raft.metadata_voters:
            problems.append(
                Problem(
                    "broker.seeds",
                    f"broker.seeds ({seeds} brokers) must not outnumber raft.metadata_voters "
                    f"({raft.metadata_voters}): the seeds are the metadata group's first voters",
                )
            )
        return problems


# --- the auth file -----------------------------------------------------------------------

_HEX64 = re.compile(r"[0-9a-f]{64}")


def load_auth_policy(path: str | os.PathLike[str]) -> AuthPolicy:
    """Read ``security.auth_file``: principals with their token's SHA-256 and ACL rules::

        principals:
          orders-app:
            token_sha256: "<64 hex digits: sha256 of the token>"   # raftq dev token NAME
            acls:
              - topics: ["orders", "orders.*"]     # shell globs
                operations: [produce, consume]     # produce, consume, admin
              - groups: ["orders-workers"]         # consumer groups
                operations: [consume]              # consume, admin
              - txn_apps: ["orders-etl"]           # Spark writers' exactly-once app ids
                operations: [produce]              # produce, admin

    Raises ConfigError naming the file and the bad entry.
    """
    where = f"security.auth_file ({os.fspath(path)!r})"
    try:
        data = Dynaconf(settings_files=[os.fspath(path)], envvar_prefix=None).as_dict()
    except Exception as exc:  # the YAML parser's own errors are many and unexported
        problem = Problem("security.auth_file", f"{where} is not valid YAML: {exc}")
        raise ConfigError([problem]) from None
    problems: list[Problem] = []

    def bad(message: str) -> None:
        problems.append(Problem("security.auth_file", f"{where}: {message}"))

    entries = {str(k).lower(): v for k, v in data.items()}
    unknown = sorted(set(entries) - {"principals"})
    if unknown:
        bad(f"unknown key(s) {', '.join(unknown)}: only 'principals'")
    raw = entries.get("principals")
    if not isinstance(raw, Mapping) or not raw:
        bad("needs 'principals', a mapping of name → {token_sha256, acls}")
        raise ConfigError(problems)
    principals: list[Principal] = []
    for name, entry in raw.items():
        name = str(name)
        if not isinstance(entry, Mapping):
            bad(f"principals.{name} must be a mapping with token_sha256 and acls")
            continue
        digest = str(entry.get("token_sha256", "")).lower()
        if not _HEX64.fullmatch(digest):
            bad(f"principals.{name}.token_sha256 must be 64 hex digits (sha256 of the token)")
        rules: list[AclRule] = []
        for i, rule in enumerate(entry.get("acls") or ()):
            at = f"principals.{name}.acls[{i}]"
            if not isinstance(rule, Mapping):
                bad(f"{at} must be a mapping with topics (or groups, or txn_apps) and operations")
                continue
            kinds = [key for key in AUTH_RESOURCE_KEYS if key in rule]
            extra_keys = sorted(set(map(str, rule)) - {*AUTH_RESOURCE_KEYS, "operations"})
            if len(kinds) != 1 or extra_keys:
                keys = ", ".join(AUTH_RESOURCE_KEYS)
                bad(f"{at} must name exactly one of {keys}, and operations")
                continue
            resource = AUTH_RESOURCE_KEYS[kinds[0]]
            names = rule.get(kinds[0], ())
            names = [names] if isinstance(names, str) else list(names or ())
            ops = rule.get("operations", ())
            ops = [ops] if isinstance(ops, str) else list(ops or ())
            if not names or not all(isinstance(t, str) and t for t in names):
                bad(f"{at}.{kinds[0]} must list names or globs")
            allowed = AUTH_RESOURCE_OPERATIONS[resource]
            if not ops or any(op not in allowed for op in ops):
                bad(f"{at}.operations must list some of {', '.join(allowed)} for {kinds[0]}")
            rules.append(AclRule(tuple(map(str, names)), frozenset(map(str, ops)), resource))
        extra = sorted(set(map(str, entry)) - {"token_sha256", "acls"})
        if extra:
            bad(f"principals.{name}: unknown key(s) {', '.join(extra)}")
        if not problems:
            principals.append(Principal(name, bytes.fromhex(digest), tuple(rules)))
    if not problems:
        try:
            return AuthPolicy(principals)
        except ValueError as exc:
            bad(str(exc))
    raise ConfigError(problems)


# --- loading --------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Load ``configs/default.yaml``, then ``path``, then ``RAFTQ_*`` variables of ``env``.

    ``env`` defaults to ``os.environ``; tests pass a dict. Raises ConfigError (a ValueError)
    naming every bad setting and where it was set; that is the only error callers should expect.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    files: list[pathlib.Path] = []
    if DEFAULT_CONFIG_PATH.is_file():
        files.append(DEFAULT_CONFIG_PATH)
    if path is not None:
        chosen = pathlib.Path(path).resolve()
        if not chosen.is_file():
            raise ConfigError([Problem("", f"config file {os.fspath(path)!r} does not exist")])
        if chosen != DEFAULT_CONFIG_PATH:
            files.append(chosen)

    layers = _Layers()
    for file in files:
        layers.add_file(file)
    layers.add_env(environ)
    if layers.problems:
        raise ConfigError(layers.problems)
    return layers.build()


class _Layers:
    """Settings gathered from files and environment, each with the place it was set."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
        self.sources: dict[str, str] = {}  # dotted path → file or variable name
        self.problems: list[Problem] = []

    def add_file(self, file: pathlib.Path) -> None:
        source = _relative(file)
        try:
            data = Dynaconf(settings_files=[str(file)], envvar_prefix=None).as_dict()
        except Exception as exc:  # the YAML parser's own errors are many and unexported
            self.problems.append(Problem("", f"{source} is not valid YAML: {exc}"))
            return
        for section_key, section in data.items():
            name = str(section_key).lower()
            if name not in _SECTIONS:
                self.problems.append(_unknown("section", name, _SECTIONS, source))
                continue
            if not isinstance(section, Mapping):
                self.problems.append(
                    Problem(name, f"{name} in {source} must be a mapping of settings")
                )
                continue
            for key, value in section.items():
                self._set(name, str(key).lower(), value, source, from_env=False)

    def add_env(self, environ: Mapping[str, str]) -> None:
        for variable in sorted(environ):
            if not variable.startswith(ENV_PREFIX):
                continue
            rest = variable[len(ENV_PREFIX) :].lower()
            section, sep, key = rest.partition("__")
            if section not in _SECTIONS:
                if any(rest.startswith(f"{name}_") for name in _SECTIONS):
                    self.problems.append(
                        Problem(
                            variable,
                            f"{variable}: separate section and setting with a double "
                            f"underscore, e.g. {ENV_PREFIX}RAFT__FSYNC",
                        )
                    )
                continue  # not a setting: a RAFTQ_* variable of some other tool
            if not sep or not key or "__" in key:
                self.problems.append(
                    Problem(
                        variable, f"{variable} must be {ENV_PREFIX}{section.upper()}__<SETTING>"
                    )
                )
                continue
            self._set(section, key, environ[variable], variable, from_env=True)

    def _set(self, section: str, key: str, value: Any, source: str, *, from_env: bool) -> None:
        hints = _hints(_SECTIONS[section])
        path = f"{section}.{key}"
        if key not in hints:
            known = {f"{section}.{k}" for k in hints}
            self.problems.append(_unknown("setting", path, known, source))
            return
        hint = hints[key]
        typed = hint in (int, bool) or typing.get_origin(hint) is tuple
        if from_env and typed and isinstance(value, str):
            # dynaconf's env parser: "false" → False, "1_000" → 1000, '["a", "b"]' → list.
            # str settings keep the variable verbatim (a secret of digits stays a string).
            value = parse_conf_data(boolean_fix(value), tomlfy=True, box_settings={})
        self.values[section][key] = _coerce(hint, value)
        self.sources[path] = source

    def build(self) -> BrokerConfig:
        sections: dict[str, _Section] = {}
        problems: list[Problem] = []
        for name, cls in _SECTIONS.items():
            try:
                sections[name] = cls(**self.values[name])
            except ConfigError as exc:
                problems += exc.problems
        if not problems:
            try:
                return BrokerConfig(**sections)  # type: ignore[arg-type]
            except ConfigError as exc:
                problems += exc.problems
        raise ConfigError([self._located(p) for p in problems])

    def _located(self, problem: Problem) -> Problem:
        """Append where each setting the message names was set (defaults are not noted)."""
        named = sorted(
            (problem.message.find(path), path)
            for path in self.sources
            if re.search(rf"(?<![\w.]){re.escape(path)}(?![\w.])", problem.message)
        )
        if not named:
            return problem
        if len(named) == 1:
            where = f"set in {self.sources[named[0][1]]}"
        else:
            where = "; ".join(f"{path} set in {self.sources[path]}" for _, path in named)
        return problem._replace(message=f"{problem.message} [{where}]")


def _hints(cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}


def _coerce(hint: Any, value: Any) -> Any:
    """Forgiving shapes for file and env values; the dataclass then checks the result."""
    if typing.get_origin(hint) is tuple:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, list | tuple):
            return tuple(value)
    if typing.get_origin(hint) is Literal and isinstance(value, str):
        upper = all(str(a).isupper() for a in typing.get_args(hint))
        return value.upper() if upper else value.lower()
    return value


def _unknown(noun: str, path: str, known: Iterable[str], source: str) -> Problem:
    close = difflib.get_close_matches(path, list(known), n=1)
    hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(sorted(known))}"
    return Problem(path, f"unknown {noun} {path} [set in {source}]: {hint}")


def _relative(file: pathlib.Path) -> str:
    try:
        return file.relative_to(pathlib.Path.cwd()).as_posix()
    except ValueError:
        return file.as_posix()


__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEV_CLUSTER_SECRET",
    "BrokerConfig",
    "BrokerSettings",
    "ClientSettings",
    "ConfigError",
    "GroupSettings",
    "Problem",
    "RaftSettings",
    "SecuritySettings",
    "StorageSettings",
    "TopicDefaults",
    "load_auth_policy",
    "load_config",
]
