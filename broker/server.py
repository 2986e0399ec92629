"""A raftq broker process: one raft endpoint and driver, the metadata replica, the partition
replicas the table places here, the backend that reconciles them, and the gRPC API.

    config ──► MuxEndpoint (raft port) ◄──► RaftDriver thread ──► RaftNodes (meta, p.*)
           └─► gRPC server (client port): API services + Internal ──► broker/handlers/
           └─► Backend thread: register, open/close replicas, report, leader duties, sessions

Cluster bring-up: the brokers named in ``broker.seeds`` are the metadata group's first voters;
they elect a leader among themselves on first start (no separate bootstrap step). A broker not
in the seeds joins through ``broker.join_addrs`` and becomes a voter too (broker/membership.py).
Every broker registers itself through the metadata leader. A restart with the same data
directory replays the journals and rejoins without loss (and without joining again).
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import grpc

from raftq.backend import Backend
from raftq.clock import SYSTEM_CLOCK, Clock
from raftq.config import BrokerConfig, raft_frame_bytes_max
from raftq.coordinator import BrokerReports, LiveBrokers, SessionTable
from raftq.handlers import RequestHandlers
from raftq.handlers.common import ByteBudget
from raftq.membership import Membership, initial_voters
from raftq.metadata.frontend import GroupLimits, MetadataFrontend, TopicDefaults
from raftq.metadata_client import MetadataClient
from raftq.metadata_replica import MetadataReplica
from raftq.metrics import BrokerMetrics, MetricSources
from raftq.replica_set import ReplicaSet
from raftq.router import Router
from raftq.security import BrokerSecurity
from raftq.transport.admission import AdmissionInterceptor, Capacity
from raftq.transport.grpc_server import ApiHandlers, Health, serve
from raftq.transport.internal import InternalClient, InternalServicer, add_internal_service
from raftq.transport.raft import RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.group_transport import BrokerEndpoint
from raftq.transport.raft.mux import OUT_BUFFER_BYTES_MAX_DEFAULT, MuxConfig, MuxEndpoint
from raftq.transport.tls import message_size_options

logger = logging.getLogger("raftq.broker")
DRIVER_ROUND_S = 0.05  # how often the raft driver checks every group's timers
PARTITION_COMMIT_PUSH_S = 0.01  # a partition commit waits this long for an append to ride on


def raft_timings(config: BrokerConfig) -> RaftTimings:
    raft = config.raft
    election_max_s = raft.election_timeout_max_ms / 1000
    return RaftTimings(
        election_timeout_min_s=raft.election_timeout_min_ms / 1000,
        election_timeout_max_s=election_max_s,
        heartbeat_s=raft.heartbeat_ms / 1000,
        connection_timeout_s=max(3.5, election_max_s),
        max_entry_bytes=raft.max_entry_bytes,
        append_batch_bytes=raft.max_entry_bytes + 4096,
        compaction_min_time_s=float(raft.snapshot_interval_s),
    )


class Broker:
    """Raises (constructor): ``errors.Unavailable`` when a port cannot be bound.

    ``interceptors``: more gRPC server interceptors on the client port, run after the broker's
    own (metrics, admission, auth); tests record or fail calls with them.

    Built from injected collaborators (the simulation tier, tests/sim/brokers.py, passes its
    own; production takes the defaults): ``endpoint``, the raft endpoint (default: a
    `MuxEndpoint` on ``broker.raft_addr``); ``clock``, the wall and monotonic time, sleep and
    waits of the broker's duties, replicas and retry loops (default: the system's);
    ``internal``, the client of other brokers' Internal service (default: gRPC);
    ``raft_thread=False``: no driver thread, the caller runs ``driver.run_once``;
    ``serve_clients=False``: no gRPC server, ``handlers`` are the API."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        interceptors: Sequence[grpc.ServerInterceptor] = (),
        endpoint: BrokerEndpoint | None = None,
        clock: Clock = SYSTEM_CLOCK,
        internal: InternalClient | None = None,
        raft_thread: bool = True,
        serve_clients: bool = True,
    ) -> None:
        self.config = config
        self.clock = clock
        self.id = config.broker.id
        self.data_dir = Path(config.broker.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.timings = raft_timings(config)
        # Partition groups let a commit ride on the next append_entries (RaftTimings): a
        # send's followers wake once instead of twice. The metadata group pushes at once, so
        # every broker sees a new topic or assignment as soon as it commits.
        self.partition_timings = replace(
            self.timings, commit_push_s=min(PARTITION_COMMIT_PUSH_S, self.timings.heartbeat_s)
        )
        secret = config.broker.cluster_secret
        # A frame carries at least one whole entry (raft.max_entry_bytes), and a link's unsent
        # bytes hold a few frames before the peer counts as too slow.
        frame_bytes_max = raft_frame_bytes_max(config.raft.max_entry_bytes)
        self.endpoint: BrokerEndpoint = endpoint or MuxEndpoint(
            config.broker.raft_addr,
            secret.encode(),
            config=MuxConfig(
                frame_bytes_max=frame_bytes_max,
                out_buffer_bytes_max=max(OUT_BUFFER_BYTES_MAX_DEFAULT, 4 * frame_bytes_max),
            ),
            clock=clock.monotonic_s,
        )
        # Every round asks every group "due?" (1,000 groups x 50 rounds/s was 40 % of an idle
        # broker's CPU); received messages and proposals tick their group at once anyway.
        self.driver = RaftDriver(
            self.endpoint, tick_interval_s=DRIVER_ROUND_S, clock=clock.monotonic_s
        )
        # Seeds bootstrap the metadata group; any other broker joins it (broker/membership.py).
        members, learners, joining = initial_voters(config, self.data_dir / "meta")
        self.meta = MetadataReplica(
            data_dir=self.data_dir / "meta",
            self_addr=config.broker.raft_addr,
            voters=members,
            learners=learners,
            driver=self.driver,
            timings=self.timings,
            fsync=config.raft.fsync,
            standby=joining,
            max_clock_skew_ms=config.raft.max_clock_skew_ms,
            clock=clock.wall_s,
        )
        self.frontend = MetadataFrontend(
            topic_defaults=TopicDefaults.from_settings(config.topic_defaults),
            group_limits=GroupLimits.from_settings(config.groups),
            command_bytes_max=config.raft.max_entry_bytes,
            record_bytes_max=config.record_bytes_max,
        )
        self.replicas = ReplicaSet()
        # Client-port TLS, tokens and ACLs; TLS on broker-to-broker calls (broker/security.py).
        self.security = BrokerSecurity.from_config(config, lambda: self.meta.table)
        self.internal = internal or InternalClient(
            secret, broker_id=self.id, channel_factory=self.security.channel
        )
        self.sessions = SessionTable(clock_s=clock.monotonic_s, wall_ms=clock.wall_ms)
        self.reports = BrokerReports(clock_s=clock.monotonic_s)
        self.live = LiveBrokers(self.id, self.reports, self.heard_brokers)
        self.metadata_client = MetadataClient(
            meta=self.meta,
            internal=self.internal,
            client_addr=config.broker.client_addr,
            clock=clock.wall_s,
            monotonic=clock.monotonic_s,
            sleep=clock.sleep_s,
        )
        self.router = Router(
            broker_id=self.id,
            client_addr=config.broker.client_addr,
            table=lambda: self.meta.table,
            replicas=self.replicas.get,
            internal=self.internal,
            topic=self.metadata_client.known_topic,
            hung=self.hung,
            monotonic=clock.monotonic_s,
            sleep=clock.sleep_s,
        )
        # Lease releases, group deletions, txn expiry: off the calling (or backend) thread.
        self.background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="raftq-background")
        # Partition copies being streamed to `raftq backup`; a crash's leftovers go now.
        backup_dir = self.data_dir / "backup-tmp"
        shutil.rmtree(backup_dir, ignore_errors=True)
        self.handlers = RequestHandlers(
            broker_id=self.id,
            metadata=self.metadata_client,
            frontend=self.frontend,
            router=self.router,
            replicas=self.replicas,
            sessions=self.sessions,
            reports=self.reports,
            live=self.live,
            voters=lambda: list(self.meta.node.voters()),
            background=self.background,
            budget=ByteBudget(config.client.fetch_bytes_max, config.message_bytes_max),
            heartbeat_interval_ms=config.groups.heartbeat_interval_ms,
            backup_dir=backup_dir,
            clock=clock,
        )
        self.membership = Membership(
            broker_id=self.id,
            config=config,
            meta=self.meta,
            metadata=self.metadata_client,
            frontend=self.frontend,
            internal=self.internal,
            reports=self.reports,
            live=self.live,
            joining=joining,
            clock=clock,
        )
        self.live.draining = lambda: self.membership.draining
        self.handlers.internal.membership = self.membership
        self.handlers.admin.remove_broker_here = self.membership.remove_broker
        self.handlers.admin.move_partition_here = self.membership.move_partition
        # Each kind of call (internal, control, admin, long poll, client) runs under a cap of
        # its own in a pool sized to their sum: no kind starves another (transport/admission.py).
        capacity = config.capacity.to_capacity()
        self.admission = AdmissionInterceptor(capacity)
        # Prometheus /metrics on broker.metrics_addr ("" = off); the bound address, port 0 kept.
        self.metrics: BrokerMetrics | None = None
        self.metrics_addr = ""
        if config.broker.metrics_addr:
            self.metrics = BrokerMetrics(self._metric_sources())
            self.metrics_addr = self.metrics.start(config.broker.metrics_addr)
        metrics = self.metrics
        self.backend = Backend(
            broker_id=self.id,
            config=config,
            meta=self.meta,
            metadata=self.metadata_client,
            frontend=self.frontend,
            replicas=self.replicas,
            handlers=self.handlers,
            membership=self.membership,
            sessions=self.sessions,
            reports=self.reports,
            internal=self.internal,
            driver=self.driver,
            partition_timings=self.partition_timings,
            connected_peers=self.endpoint.connected_peers,
            refresh_health=lambda: self.health.refresh(),  # the backend starts after health
            on_open=metrics.attach if metrics is not None else lambda _replica: None,
            background=self.background,
            clock=clock,
        )
        self.handlers.admin.prefer_leader = self.backend.prefer_leader
        self.meta.on_change(self.backend.wake)
        if raft_thread:
            self.driver.start()
        self.health = Health(self.not_ready)
        self.grpc = self._serve_clients(interceptors, capacity) if serve_clients else None
        self.backend.start()
        self.membership.start()
        self._stopped = threading.Event()
        logger.info(
            "[broker=%d] serving clients on %s, raft on %s, metrics on %s, data in %s",
            self.id,
            config.broker.client_addr,
            config.broker.raft_addr,
            self.metrics_addr or "(off)",
            self.data_dir,
        )

    def _serve_clients(
        self, interceptors: Sequence[grpc.ServerInterceptor], capacity: Capacity
    ) -> grpc.Server:
        """The gRPC server on ``broker.client_addr``: the API services and Internal."""
        config = self.config
        internal = InternalServicer(
            self.handlers.internal,
            config.broker.cluster_secret,
            default_timeout_s=10.0,
            own_addresses=(config.broker.client_addr,),
        )
        chain: list[grpc.ServerInterceptor] = []
        if self.metrics is not None:
            chain.append(self.metrics.interceptor)
        chain.append(self.admission)  # after metrics: refusals are timed too
        if self.security.interceptor is not None:
            chain.append(self.security.interceptor)
        chain += interceptors
        h = self.handlers
        return serve(
            ApiHandlers(h.produce, h.consume, h.log, h.admin),
            config.broker.client_addr,
            max_workers=capacity.workers,
            max_streams=capacity.send_streams_max,
            interceptors=chain,
            extra_services=[lambda server: add_internal_service(server, internal)],
            credentials=self.security.credentials,
            health_servicer=self.health,
            options=message_size_options(config.message_bytes_max),
        )

    def _metric_sources(self) -> MetricSources:
        broker = self.config.broker
        return MetricSources(
            broker_id=self.id,
            client_addr=broker.client_addr,
            raft_addr=broker.raft_addr,
            data_dir=self.data_dir,
            replicas=self.replicas.replicas,
            metadata=self.meta.statistics,
            groups=lambda: self.meta.table.groups,
            transport=self.endpoint.statistics,
            driver=self.driver.statistics,
            admission=self.admission.statistics,
        )

    def heard_brokers(self) -> set[int]:
        """Registered brokers heard on their raft link (pings every 0.1 s) within the liveness
        window of broker reports: alive, whether or not their reports arrived yet."""
        window_s = self.reports.alive_s
        heard = set()
        for broker in self.meta.table.brokers.values():
            silence = self.endpoint.link_silence_s(broker.raft_addr)
            if silence is not None and silence <= window_s:
                heard.add(broker.broker_id)
        return heard

    def not_ready(self) -> str | None:
        """Why this broker should not get clients now (gRPC health NOT_SERVING), or None: it is
        being removed (draining, as the metadata leader's last report ack said), joining the
        metadata group, hears no metadata leader, is cut off from a majority of
        the metadata voters, or is not (or no longer) registered."""
        node = self.meta.node
        if self.backend.draining:
            return "being removed: RemoveBroker is moving its replicas away"
        if node.standby:
            return "joining the metadata group"
        if node.leader() is None:
            return "no metadata leader"
        if not node.has_quorum():
            return "no link to a majority of the metadata voters"
        if self.meta.table.broker(self.id) is None:
            return "not registered in the metadata table"
        return None

    def hung(self, client_addr: str) -> bool:
        """Whether the broker at ``client_addr`` looks hung: its raft link is open but silent
        (nothing, not even a 0.1 s ping, for ``silent_after_s``): a SIGSTOPped process or a
        stuck host, whose sockets stay open. A closed link is not hung (calls fail fast)."""
        for broker in self.meta.table.brokers.values():
            if broker.client_addr == client_addr:
                silence = self.endpoint.link_silence_s(broker.raft_addr)
                return silence is not None and silence > self.endpoint.silent_after_s
        return False

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, close every replica and the raft endpoint. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.shutdown()  # NOT_SERVING while the in-flight calls finish
        if self.grpc is not None:
            self.grpc.stop(grace_s).wait(grace_s + 1)
        if self.metrics is not None:
            self.metrics.stop()
        self.membership.stop()
        self.backend.stop()
        self.background.shutdown(wait=False, cancel_futures=True)
        self.replicas.close_all()
        self.meta.close()
        self.driver.stop()
        self.endpoint.close()
        self.internal.close()
        logger.info("[broker=%d] stopped", self.id)

    def wait(self) -> None:
        self._stopped.wait()


def run_until_signalled(config: BrokerConfig) -> int:
    """``raftq serve``: run one broker until SIGINT/SIGTERM."""
    broker = Broker(config)
    done = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logger.info("[broker=%d] signal %d: stopping", broker.id, signum)
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not done.wait(0.5):
        pass
    started = time.monotonic()
    broker.stop()
    logger.info("[broker=%d] stopped in %.1f s", broker.id, time.monotonic() - started)
    return 0
