"""Prometheus metrics of one broker: the only module that imports ``prometheus_client``.

    GET http://<broker.metrics_addr>/metrics
        BrokerCollector ──(at scrape time)──► statistics() of MuxEndpoint, RaftDriver,
                                               MetadataReplica, every PartitionReplica,
                                               lags read from the partitions this broker leads
        raftq_partition_apply_duration_seconds ◄── PartitionReplica.on_apply_s (tick thread)
        raftq_rpc_duration_seconds             ◄── RpcLatencyInterceptor (every gRPC call)
        process_*, python_*                    ◄── prometheus_client's process/platform/gc

Gauges and counters are read from the components' ``statistics()`` when Prometheus scrapes:
nothing is counted twice and an idle broker costs nothing. The two histograms need every
observation, so they are real ``Histogram`` objects fed by a hook and an interceptor.

Counters are per broker process: they start at zero when the broker (or the replica) starts,
which Prometheus' ``rate()`` handles. Records and bytes *in* count on the leader that appended
them; *out* counts records leased (``via="lease"``) and read by Fetch (``via="fetch"``) on the
leader that served them. Consumer-group lag, pending and leases in flight are exported only by
the partition's leader, so a sum over brokers counts each partition once. The table of every
metric is in README.md ("Metrics").

Each broker has its own ``CollectorRegistry`` (never the process-global one), so several
brokers in one process (tests) do not collide.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from raftq.proto import errors

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from raftq.metadata.table import GroupInfo
    from raftq.replica import PartitionReplica

logger = logging.getLogger("raftq.broker.metrics")

# An apply is one SQLite transaction: tens of microseconds to tens of milliseconds with fsync.
APPLY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
# An RPC is a Raft round trip (ms) up to a long poll (seconds) or a stream (minutes).
RPC_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip

PARTITION = ("topic", "partition")
RAFT = ("raft_group", "topic", "partition")
GROUP_LAG = ("group", "topic", "partition")

# MuxEndpoint.statistics() keys that are levels, not counts.
TRANSPORT_GAUGES = frozenset({"peers_connected", "connections_open", "groups_registered"})
DRIVER_GAUGES = frozenset({"groups", "quiesced", "lag_seconds"})


@dataclass(frozen=True)
class MetricSources:
    """What a scrape reads: this broker's names, and each component's ``statistics()``."""

    broker_id: int
    client_addr: str
    raft_addr: str
    data_dir: Path
    replicas: Callable[[], list[PartitionReplica]]
    metadata: Callable[[], dict[str, int | str | bool]]  # MetadataReplica.statistics
    groups: Callable[[], Mapping[str, GroupInfo]]  # the table's consumer groups
    transport: Callable[[], dict[str, int]]  # MuxEndpoint.statistics
    driver: Callable[[], dict[str, float]]  # RaftDriver.statistics
    admission: Callable[[], dict[str, dict[str, int]] | None]  # None until the server starts


class BrokerMetrics:
    """The broker's registry, its two histograms, the scrape-time collector and the HTTP
    endpoint. ``attach(replica)`` wires a replica's apply hook (the backend calls it when it
    opens a replica; every scrape re-checks). Thread-safe."""

    def __init__(self, sources: MetricSources) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.apply_seconds = Histogram(
            "raftq_partition_apply_duration_seconds",
            "Time to apply one Raft entry to the partition's SQLite state (every replica).",
            PARTITION,
            buckets=APPLY_BUCKETS_S,
            registry=None,
        )
        self.rpc_seconds = Histogram(
            "raftq_rpc_duration_seconds",
            "Time to serve one gRPC call (whole stream for streaming calls), by status code.",
            ("service", "method", "code"),
            buckets=RPC_BUCKETS_S,
            registry=None,
        )
        self.collector = BrokerCollector(sources, self)
        self.registry.register(self.collector)  # first: it re-attaches hooks before histograms
        self.registry.register(self.apply_seconds)
        self.registry.register(self.rpc_seconds)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.interceptor = RpcLatencyInterceptor(self.rpc_seconds)
        self._lock = threading.Lock()
        self._hooks: dict[tuple[str, str], Callable[[float], None]] = {}
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # -- apply latency hooks -----------------------------------------------------------------

    def attach(self, replica: PartitionReplica) -> None:
        """Route ``replica``'s apply durations into the apply histogram."""
        key = (replica.topic, str(replica.partition))
        with self._lock:
            hook = self._hooks.get(key)
            if hook is None:
                hook = self._hooks[key] = self.apply_seconds.labels(*key).observe
            replica.on_apply_s = hook

    def sync_hooks(self, replicas: Iterable[PartitionReplica]) -> None:
        """Attach replicas that lack the hook; drop the series of partitions no longer here."""
        live = {(r.topic, str(r.partition)): r for r in replicas}
        with self._lock:
            for key in [k for k in self._hooks if k not in live]:
                del self._hooks[key]
                self.apply_seconds.remove(*key)
        for key, replica in live.items():
            if replica.on_apply_s is None or replica.on_apply_s is not self._hooks.get(key):
                self.attach(replica)

    # -- exposition --------------------------------------------------------------------------

    def render(self) -> bytes:
        """The exposition text a scrape would get now."""
        return generate_latest(self.registry)

    def start(self, address: str) -> str:
        """Serve ``GET /metrics`` on ``address`` (``host:port``; port 0 picks one) on a daemon
        thread; returns the bound ``host:port``.

        Raises ``errors.Unavailable`` when the address cannot be bound."""
        host, port = split_addr(address)
        try:
            self._server, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise errors.Unavailable(f"cannot serve metrics on {address}: {exc}") from exc
        bound = f"{host}:{self._server.server_port}"
        logger.info("metrics on http://%s/metrics", bound)
        return bound

    def stop(self) -> None:
        """Stop the HTTP endpoint. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def split_addr(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


# ---------------------------------------------------------------------------------------------


class BrokerCollector:
    """Reads ``statistics()`` of the broker's components at scrape time."""

    def __init__(self, sources: MetricSources, metrics: BrokerMetrics) -> None:
        self.sources = sources
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # names are not known before the first scrape; skip the registry's check

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        b = self.sources
        replicas = b.replicas()
        self.metrics.sync_hooks(replicas)
        out = _Families()
        out.gauge(
            "raftq_broker_info",
            "Always 1; the labels name this broker.",
            ("broker_id", "client_addr", "raft_addr"),
        ).add_metric([str(b.broker_id), b.client_addr, b.raft_addr], 1)
        self._metadata(out)
        self._disk(out)
        self._raft_runtime(out)
        self._admission(out)
        for replica in replicas:
            try:
                self._partition(out, replica)
            except Exception as exc:  # a replica closing under the scrape: skip it this time
                logger.debug("%s skipped in metrics: %r", replica.where, exc)
        out.gauge(
            "raftq_metrics_collect_seconds", "Time to collect this scrape's statistics.", ()
        ).add_metric([], time.perf_counter() - started)
        yield from out.families()

    def _disk(self, out: _Families) -> None:
        usage = shutil.disk_usage(self.sources.data_dir)
        for name, text, value in (
            ("raftq_data_dir_free_bytes", "Free bytes on the data directory's file system.",
             usage.free),
            ("raftq_data_dir_size_bytes", "Size of the data directory's file system.",
             usage.total),
        ):  # fmt: skip
            out.gauge(name, text, ()).add_metric([], value)

    def _metadata(self, out: _Families) -> None:
        stats = self.sources.metadata()
        out.gauge(
            "raftq_metadata_leader", "1 when this broker leads the metadata group.", ()
        ).add_metric([], int(bool(stats["is_leader"])))
        for key in ("brokers", "topics", "groups"):
            out.gauge(
                f"raftq_metadata_{key}", f"{key.capitalize()} in this broker's metadata table.", ()
            ).add_metric([], int(stats[key]))
        self._raft(out, ("meta", "", ""), stats, bool(stats["is_leader"]))

    def _raft(
        self, out: _Families, labels: tuple[str, str, str], stats: dict[str, Any], leader: bool
    ) -> None:
        for name, text, value in (
            ("raftq_raft_leader", "1 when this replica leads its Raft group.", int(leader)),
            ("raftq_raft_term", "Current Raft term on this replica.", stats["raft_term"]),
            ("raftq_raft_commit_index", "Raft commit index known to this replica.",
             stats["raft_commit_index"]),
            ("raftq_raft_applied_index", "Last Raft index applied on this replica.",
             stats["raft_applied_index"]),
        ):  # fmt: skip
            out.gauge(name, text, RAFT).add_metric(labels, int(value))
        out.counter(
            "raftq_raft_fsyncs", "Journal fsyncs of the group on this replica.", RAFT
        ).add_metric(labels, int(stats["fsync_count"]))

    def _admission(self, out: _Families) -> None:
        stats = self.sources.admission()
        if stats is None:
            return
        for name, text, key, family in (
            ("raftq_grpc_calls_admitted", "Calls admitted under their kind's cap.", "admitted",
             out.counter),
            ("raftq_grpc_calls_refused", "Calls refused RESOURCE_EXHAUSTED: their kind was at "
             "its cap.", "refused", out.counter),
            ("raftq_grpc_calls_running", "Calls of the kind running now.", "running", out.gauge),
            ("raftq_grpc_calls_cap", "Calls of the kind that may run at once (capacity.*).",
             "cap", out.gauge),
        ):  # fmt: skip
            metric = family(name, text, ("kind",))
            for kind, value in sorted(stats[key].items()):
                metric.add_metric([kind], value)

    def _raft_runtime(self, out: _Families) -> None:
        for prefix, stats, gauges, what in (
            ("raftq_raft_transport", self.sources.transport(), TRANSPORT_GAUGES, "mux"),
            ("raftq_raft_driver", self.sources.driver(), DRIVER_GAUGES, "driver"),
        ):
            for key, value in sorted(stats.items()):
                if key in gauges:
                    out.gauge(f"{prefix}_{key}", f"Raft {what}: {key}.", ()).add_metric([], value)
                else:
                    out.counter(f"{prefix}_{key}", f"Raft {what}: {key}.", ()).add_metric([], value)

    def _partition(self, out: _Families, replica: PartitionReplica) -> None:
        stats = replica.statistics()
        leader = replica.is_leader()
        labels = (replica.topic, str(replica.partition))
        counters = (
            ("raftq_partition_records_in", "records_in", "Records appended (leader)."),
            ("raftq_partition_bytes_in", "bytes_in", "Key+value bytes appended (leader)."),
            ("raftq_partition_dead_lettered", "dead_lettered", "Records ever dead-lettered."),
            ("raftq_partition_entries_applied", "entries_applied", "Raft entries applied."),
            ("raftq_partition_expired", "expired",
             "Records whose time to live ran out, ended (dropped or dead-lettered) per group."),
        )  # fmt: skip
        for name, key, text in counters:
            out.counter(name, text, PARTITION).add_metric(labels, int(stats[key]))
        for unit, via, key in (
            ("records", "lease", "records_leased"),
            ("records", "fetch", "records_fetched"),
            ("bytes", "lease", "bytes_leased"),
            ("bytes", "fetch", "bytes_fetched"),
        ):
            out.counter(
                f"raftq_partition_{unit}_out",
                f"{unit.capitalize()} delivered (leader): leased to consumers or read by Fetch.",
                (*PARTITION, "via"),
            ).add_metric([*labels, via], int(stats[key]))
        gauges = (
            ("raftq_partition_dead_letter_outbox", "dead_letter_outbox",
             "Dead letters waiting to be forwarded to the dead-letter topic."),
            ("raftq_partition_log_start_offset", "log_start", "First offset still in the log."),
            ("raftq_partition_end_offset", "end_offset", "Offset the next record will get."),
            ("raftq_partition_calls_in_flight", "calls_in_flight", "Sends/proposals waiting."),
            ("raftq_partition_healthy", "healthy", "0 once the replica has latched a failure."),
        )  # fmt: skip
        for name, key, text in gauges:
            out.gauge(name, text, PARTITION).add_metric(labels, int(stats[key]))
        proposer = stats["proposer"]
        for name, key, text in (
            ("raftq_partition_proposer_sends", "sends", "Sends group-committed."),
            ("raftq_partition_proposer_entries", "entries", "Raft entries proposed for sends."),
            ("raftq_partition_proposer_rejected", "rejected_queue_full", "Sends refused: full."),
        ):
            out.counter(name, text, PARTITION).add_metric(labels, int(proposer[key]))
        out.gauge(
            "raftq_partition_proposer_queued_sends", "Sends waiting for an entry.", PARTITION
        ).add_metric(labels, int(proposer["queued_sends"]))
        self._raft(out, (replica.name, *labels), stats, leader)
        if leader:
            self._lags(out, replica, stats)

    def _lags(self, out: _Families, replica: PartitionReplica, stats: dict[str, Any]) -> None:
        lags = {lag.group: lag for lag in replica.lags()}
        for name, group in self.sources.groups().items():
            if name not in lags and replica.topic in group.subscribed_topics():
                # subscribed, never leased here yet: all of the log is pending (DescribeGroup too)
                backlog = int(stats["end_offset"]) - int(stats["log_start"])
                out.gauge_lag(name, replica, backlog, int(stats["log_start"]), backlog, 0)
        now_ms = int(time.time() * 1000)
        for name, lag in sorted(lags.items()):
            out.gauge_lag(name, replica, lag.lag, lag.committed, lag.pending, lag.leased)
            age_s = max(0, now_ms - lag.committed_timestamp_ms) / 1000 if lag.lag else 0.0
            out.gauge(
                "raftq_group_lag_seconds",
                "Age of the group's oldest unacknowledged record (0 when caught up).",
                GROUP_LAG,
            ).add_metric((name, replica.topic, str(replica.partition)), age_s)


class _Families:
    """Metric families of one scrape, created on first use, yielded in creation order."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def gauge(self, name: str, text: str, labels: Iterable[str]) -> Any:
        if name not in self._families:
            self._families[name] = GaugeMetricFamily(name, text, labels=list(labels))
        return self._families[name]

    def counter(self, name: str, text: str, labels: Iterable[str]) -> Any:
        if name not in self._families:
            self._families[name] = CounterMetricFamily(name, text, labels=list(labels))
        return self._families[name]

    def gauge_lag(
        self,
        group: str,
        replica: PartitionReplica,
        lag: int,
        committed: int,
        pending: int,
        leased: int,
    ) -> None:
        labels = (group, replica.topic, str(replica.partition))
        for name, text, value in (
            ("raftq_group_lag_records", "End offset minus the group's committed offset.", lag),
            ("raftq_group_committed_offset", "The group's lowest unacknowledged offset.",
             committed),
            ("raftq_group_pending_records", "Records the group has not acknowledged yet.",
             pending),
            ("raftq_group_leases_in_flight", "Records leased to the group's members now.",
             leased),
        ):  # fmt: skip
            self.gauge(name, text, GROUP_LAG).add_metric(labels, value)

    def families(self) -> Iterator[Metric]:
        yield from self._families.values()


# ---------------------------------------------------------------------------------------------


class RpcLatencyInterceptor(grpc.ServerInterceptor):
    """Times every gRPC call into ``raftq_rpc_duration_seconds{service, method, code}``.

    ``code`` is the gRPC status name (``OK``, ``UNAVAILABLE``, ...): what the handler aborted
    with, ``UNKNOWN`` for an exception that escaped it, ``CANCELLED`` for a stream the client
    closed. A streaming call is timed from its start to its end."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        full = str(getattr(handler_call_details, "method", "") or "")
        service, _, method = full.lstrip("/").rpartition("/")
        h: Any = handler
        kwargs = {
            "request_deserializer": h.request_deserializer,
            "response_serializer": h.response_serializer,
        }
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(h.unary_unary, service, method), **kwargs
            )
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(h.stream_unary, service, method), **kwargs
            )
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(h.unary_stream, service, method), **kwargs
            )
        if h.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(h.stream_stream, service, method), **kwargs
            )
        return handler

    def _observe(
        self, service: str, method: str, context: Any, started: float, escaped: str | None
    ) -> None:
        code = context.code()
        name = escaped if escaped is not None else (code.name if code is not None else "OK")
        if escaped == "UNKNOWN" and code is not None:
            name = code.name  # context.abort() raises: the code it set is the answer
        self._histogram.labels(service, method, name).observe(time.perf_counter() - started)

    def _unary(
        self, behavior: Callable[[Any, Any], Any], service: str, method: str
    ) -> Callable[[Any, Any], Any]:
        def timed(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            escaped: str | None = None
            try:
                return behavior(request, context)
            except BaseException:
                escaped = "UNKNOWN"
                raise
            finally:
                self._observe(service, method, context, started, escaped)

        return timed

    def _streaming(
        self, behavior: Callable[[Any, Any], Iterator[Any]], service: str, method: str
    ) -> Callable[[Any, Any], Iterator[Any]]:
        def timed(request: Any, context: Any) -> Iterator[Any]:
            started = time.perf_counter()
            escaped: str | None = None
            try:
                yield from behavior(request, context)
            except GeneratorExit:
                escaped = "CANCELLED"
                raise
            except BaseException:
                escaped = "UNKNOWN"
                raise
            finally:
                self._observe(service, method, context, started, escaped)

        return timed


__all__ = ["BrokerCollector", "BrokerMetrics", "RpcLatencyInterceptor", "split_addr"]
