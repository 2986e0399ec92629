"""The request path, one module per RPC family.

    transport/grpc_server.py (checks a request's shape) ──► produce.py   Producer: Send
                                                       ├─► consume.py   Consumer: Poll, Ack,
                                                       │     Nack, ExtendLease; groups.py:
                                                       │     JoinGroup, Heartbeat, LeaveGroup
                                                       ├─► log.py       Log: Fetch, ListOffsets,
                                                       │     ProducerState
                                                       └─► admin.py     Admin (admin_groups.py:
                                                             the group calls; admin_ops.py:
                                                             seek, purge)
    transport/internal.py (authenticates a peer) ─────► internal.py    Internal

Each handler method takes its RPC's checked command (transport/request_checks.py: the request,
its shape checked once at the edge) and asserts what the check guarantees; it refuses only what
depends on state. Each handler takes the narrow collaborators it uses: the MetadataClient (broker/
metadata_client.py: the table, metadata proposals, calls that run on the metadata leader),
the Router (partition work on each partition's leader), the ReplicaSet, Releases (leases.py:
taking leases back), and small values. ``RequestHandlers`` builds them all for a broker.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from raftq.clock import SYSTEM_CLOCK, Clock
from raftq.coordinator import BrokerReports, LiveBrokers, SessionTable
from raftq.handlers.admin import AdminHandler
from raftq.handlers.admin_groups import GroupAdmin
from raftq.handlers.common import ByteBudget
from raftq.handlers.consume import ConsumeHandler, NewRecords
from raftq.handlers.groups import GroupHandler
from raftq.handlers.internal import InternalHandler
from raftq.handlers.leases import Releases
from raftq.handlers.log import LogHandler
from raftq.handlers.produce import ProduceHandler
from raftq.metadata.frontend import MetadataFrontend
from raftq.metadata_client import MetadataClient
from raftq.replica_set import ReplicaSet
from raftq.router import Router


class RequestHandlers:
    """Every handler of one broker, built from its collaborators. ``produce``, ``consume``,
    ``log`` and ``admin`` serve the client API (transport/grpc_server.py ApiHandlers);
    ``internal`` the broker-to-broker service; ``groups`` and ``new_records`` are what the
    backend needs (session expiry; waking long polls)."""

    def __init__(
        self,
        *,
        broker_id: int,
        metadata: MetadataClient,
        frontend: MetadataFrontend,
        router: Router,
        replicas: ReplicaSet,
        sessions: SessionTable,
        reports: BrokerReports,
        live: LiveBrokers,
        voters: Callable[[], list[str]],
        background: Executor,
        budget: ByteBudget,
        heartbeat_interval_ms: int,
        backup_dir: Path,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.new_records = NewRecords()
        self.releases = Releases(router, lambda: metadata.table, background)
        self.groups = GroupHandler(
            metadata=metadata,
            frontend=frontend,
            sessions=sessions,
            releases=self.releases,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        self.produce = ProduceHandler(metadata=metadata, router=router)
        self.consume = ConsumeHandler(
            groups=self.groups,
            router=router,
            releases=self.releases,
            new_records=self.new_records,
            budget=budget,
            monotonic=clock.monotonic_s,
        )
        self.log = LogHandler(metadata=metadata, router=router, budget=budget)
        self.group_admin = GroupAdmin(
            metadata=metadata,
            frontend=frontend,
            router=router,
            sessions=sessions,
            monotonic=clock.monotonic_s,
            sleep=clock.sleep_s,
        )
        self.admin = AdminHandler(
            broker_id=broker_id,
            metadata=metadata,
            frontend=frontend,
            router=router,
            reports=reports,
            live=live,
            replicas=replicas,
            voters=voters,
            groups=self.group_admin,
            backup_dir=backup_dir,
            monotonic=clock.monotonic_s,
            sleep=clock.sleep_s,
        )
        self.internal = InternalHandler(
            broker_id=broker_id,
            metadata=metadata,
            router=router,
            releases=self.releases,
            reports=reports,
            budget=budget,
        )
