"""The Admin family: topics (create, delete, alter, describe, add partitions, purge), records
(update, cancel), the cluster (describe, remove a broker, rebalance leaders), Spark txn
watermarks, and consumer groups (broker/handlers/admin_groups.py).

Calls that change the table or need the leader's in-memory view (broker reports, placement
over live brokers) run on the metadata leader: MetadataClient.call forwards them there.
ListTopics answers from this broker's table; purge and record updates run on any broker
(partition work goes to each partition's leader, broker/router.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raftq import backup_source
from raftq.coordinator import BrokerReports, LiveBrokers
from raftq.handlers import admin_ops
from raftq.handlers.admin_groups import GroupAdmin
from raftq.handlers.common import timeout
from raftq.handlers.schedules import ScheduleAdmin
from raftq.metadata.frontend import MetadataFrontend, TopicSpec
from raftq.metadata.table import Table
from raftq.metadata_client import LeaderCall
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.replica_set import ReplicaSet
from raftq.router import Router
from raftq.transport import request_checks
from raftq.transport.request_checks import (
    CheckedAddPartitions,
    CheckedAlterTopicConfig,
    CheckedBackupPartition,
    CheckedCancelRecord,
    CheckedCommitTxn,
    CheckedCreateSchedule,
    CheckedCreateTopic,
    CheckedDeleteSchedule,
    CheckedDeleteTopic,
    CheckedDescribeTopic,
    CheckedGetTxn,
    CheckedListSchedules,
    CheckedMovePartition,
    CheckedPauseSchedule,
    CheckedPurgeTopic,
    CheckedRemoveBroker,
    CheckedUpdateRecord,
)

if TYPE_CHECKING:
    from raftq.metadata_client import MetadataClient
    from raftq.replica import PartitionReplica

logger = logging.getLogger("raftq.broker.admin")

LEADER_WAIT_S = 10.0


def _config_changes(update: api_pb2.TopicConfigUpdate) -> dict[str, int | str]:
    return {field.name: value for field, value in update.ListFields()}


def described(name: str) -> CheckedDescribeTopic:
    """The Describe that answers a create or alter of the topic ``name`` (a checked name)."""
    return request_checks.check_describe_topic(api_pb2.DescribeTopicRequest(name=name))


def _here(run: Callable[[Any, float], Any]) -> Callable[[Any, float, str], Any]:
    """A leader call that does not act as its caller."""
    return lambda request, left, _principal: run(request, left)


class AdminHandler:
    """Implements the Admin service (transport/grpc_server.py AdminHandler). Thread-safe.

    ``prefer_leader(replica, table)`` (the backend's: hand a led replica to its preferred
    leader, True when a transfer started), ``remove_broker_here(broker_id, timeout_s)`` and
    ``move_partition_here`` (membership's) are set by the broker once those exist."""

    def __init__(
        self,
        *,
        broker_id: int,
        metadata: MetadataClient,
        frontend: MetadataFrontend,
        router: Router,
        reports: BrokerReports,
        live: LiveBrokers,
        replicas: ReplicaSet,
        voters: Callable[[], list[str]],
        groups: GroupAdmin,
        backup_dir: Path,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``backup_dir``: where copies of partitions being backed up are written."""
        self._monotonic = monotonic  # deadlines of waits and retries (the broker's Clock)
        self._sleep = sleep
        self._broker_id = broker_id
        self._metadata = metadata
        self._frontend = frontend
        self._router = router
        self._reports = reports
        self._live = live
        self._replicas = replicas
        self._voters = voters
        self._backup_dir = backup_dir
        self._schedules = ScheduleAdmin(
            lambda: metadata.table, router.propose, router.read, monotonic=monotonic
        )
        self.prefer_leader: Callable[[PartitionReplica, Table], bool] = lambda r, t: False
        self.remove_broker_here: Callable[[int, float], api_pb2.RemoveBrokerResponse] | None = None
        # membership's: move a partition's replicas (topic, partition, replicas, timeout_s)
        self.move_partition_here: (
            Callable[[str, int, list[int], float], api_pb2.MovePartitionResponse] | None
        ) = None
        self.list_groups = groups.list_groups
        self.describe_group = groups.describe_group
        self.delete_group = groups.delete_group
        self.seek_group = groups.seek_group
        A, C = api_pb2, request_checks
        # A client request forwarded to the leader is checked there again (LeaderCall.check);
        # create_dead_letter_topic is broker code's only, the others carry no client input.
        checks: dict[str, Callable[[Any], Any]] = {
            "create_topic": C.check_create_topic,
            "delete_topic": C.check_delete_topic,
            "alter_topic_config": C.check_alter_topic_config,
            "describe_topic": C.check_describe_topic,
            "add_partitions": C.check_add_partitions,
            "remove_broker": C.check_remove_broker,
            "move_partition": C.check_move_partition,
            "commit_txn": C.check_commit_txn,
            "get_txn": C.check_get_txn,
        }
        for method, request_type, response_type, run in (
            ("create_topic", A.CreateTopicRequest, A.TopicDescription, self._create_topic),
            ("delete_topic", A.DeleteTopicRequest, A.DeleteTopicResponse, self._delete_topic),
            ("alter_topic_config", A.AlterTopicConfigRequest, A.TopicDescription, self._alter),
            ("describe_topic", A.DescribeTopicRequest, A.TopicDescription, self._describe_topic),
            ("add_partitions", A.AddPartitionsRequest, A.TopicDescription, self._add_partitions),
            # the source topic's name in, the dead-letter topic's name out
            ("create_dead_letter_topic", A.DescribeTopicRequest, A.TopicDescription, self._dlq),
            ("describe_cluster", A.DescribeClusterRequest, A.ClusterDescription, self._cluster),
            ("remove_broker", A.RemoveBrokerRequest, A.RemoveBrokerResponse, self._remove_broker),
            ("rebalance_leaders", A.RebalanceLeadersRequest, A.RebalanceLeadersResponse, self._rb),
            ("move_partition", A.MovePartitionRequest, A.MovePartitionResponse, self._move),
            ("commit_txn", A.CommitTxnRequest, A.TxnState, self._commit_txn),
            ("get_txn", A.GetTxnRequest, A.TxnState, self._get_txn),
            ("backup_metadata", A.BackupMetadataRequest, A.BackupMetadataResponse, self._backup),
        ):
            call = LeaderCall(request_type, response_type, _here(run), check=checks.get(method))
            metadata.register(method, call)
        metadata.register(
            "lead_preferred_here",
            LeaderCall(
                A.RebalanceLeadersRequest,
                A.RebalanceLeadersResponse,
                _here(self.lead_preferred_here),
                on_broker=True,
            ),
        )

    def _call(self, method: str, request: Any, timeout_s: float | None) -> Any:
        return self._metadata.call(method, request, timeout(timeout_s))

    # -- topics ------------------------------------------------------------------------------

    def create_topic(
        self, request: CheckedCreateTopic, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._call("create_topic", request, timeout_s)
        return response

    def _create_topic(
        self, request: CheckedCreateTopic, timeout_s: float
    ) -> api_pb2.TopicDescription:
        spec = TopicSpec(
            name=request.name,
            partitions=request.partitions if request.HasField("partitions") else None,
            replication_factor=(
                request.replication_factor if request.HasField("replication_factor") else None
            ),
            config=_config_changes(request.config),
        )
        data = self._frontend.create_topic(
            self._metadata.table, spec, live_ids=self._live(), now_ms=self._metadata.now_ms()
        )
        self._metadata.propose(data, timeout_s)
        self.wait_for_leaders(request.name, min(timeout_s, LEADER_WAIT_S))
        return self._describe_topic(described(request.name), timeout_s)

    def create_dead_letter_topic(self, source: str, timeout_s: float) -> None:
        """Create ``source``'s dead-letter topic unless it exists, on the metadata leader: its
        replication factor comes from the leader's view of live brokers (a partition leader
        elsewhere knows only itself). Raises UnknownTopic, Unavailable, Timeout (normal)."""
        request = api_pb2.DescribeTopicRequest(name=source)
        self._metadata.call("create_dead_letter_topic", request, timeout_s)

    def _dlq(
        self, request: api_pb2.DescribeTopicRequest, timeout_s: float
    ) -> api_pb2.TopicDescription:
        table = self._metadata.table
        plan = self._frontend.dead_letter_topic(
            table, request.name, live_ids=self._live(), now_ms=self._metadata.now_ms()
        )
        if plan is not None:
            self._metadata.propose(plan, timeout_s)
        source = table.topic(request.name)
        return api_pb2.TopicDescription(name=source.config.dead_letter_topic if source else "")

    def wait_for_leaders(self, topic: str, timeout_s: float) -> bool:
        """Wait (on the metadata leader) until every partition of ``topic`` reports a leader."""
        deadline = self._monotonic() + timeout_s
        while self._monotonic() < deadline:
            table = self._metadata.table
            info = table.topic(topic)
            if info is None:
                return False
            views = self._reports.partitions(table)
            if all(
                views.get((topic, p)) is not None and views[(topic, p)].leader
                for p in range(info.partition_count)
            ):
                return True
            self._sleep(0.05)
        return False

    def delete_topic(
        self, request: CheckedDeleteTopic, *, timeout_s: float | None
    ) -> api_pb2.DeleteTopicResponse:
        response: api_pb2.DeleteTopicResponse = self._call("delete_topic", request, timeout_s)
        return response

    def _delete_topic(
        self, request: CheckedDeleteTopic, timeout_s: float
    ) -> api_pb2.DeleteTopicResponse:
        data = self._frontend.delete_topic(
            self._metadata.table, request.name, now_ms=self._metadata.now_ms()
        )
        self._metadata.propose(data, timeout_s)
        return api_pb2.DeleteTopicResponse()

    def alter_topic_config(
        self, request: CheckedAlterTopicConfig, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._call("alter_topic_config", request, timeout_s)
        return response

    def _alter(
        self, request: CheckedAlterTopicConfig, timeout_s: float
    ) -> api_pb2.TopicDescription:
        data = self._frontend.alter_topic_config(
            self._metadata.table,
            request.name,
            _config_changes(request.config),
            now_ms=self._metadata.now_ms(),
        )
        self._metadata.propose(data, timeout_s)
        return self._describe_topic(described(request.name), timeout_s)

    def add_partitions(
        self, request: CheckedAddPartitions, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._call("add_partitions", request, timeout_s)
        return response

    def _add_partitions(
        self, request: CheckedAddPartitions, timeout_s: float
    ) -> api_pb2.TopicDescription:
        """Grow the topic, wait for the new partitions' leaders, describe it. Raises
        UnknownTopic, InvalidArgument (metadata/frontend.py add_partitions)."""
        data = self._frontend.add_partitions(
            self._metadata.table,
            request.name,
            request.partitions,
            live_ids=self._live(),
            now_ms=self._metadata.now_ms(),
        )
        self._metadata.propose(data, timeout_s)
        self.wait_for_leaders(request.name, min(timeout_s, LEADER_WAIT_S))
        return self._describe_topic(described(request.name), timeout_s)

    def list_topics(
        self, request: api_pb2.ListTopicsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListTopicsResponse:
        table = self._metadata.table
        return api_pb2.ListTopicsResponse(
            topics=[
                api_pb2.TopicSummary(
                    name=name,
                    partitions=table.topics[name].partition_count,
                    replication_factor=table.topics[name].replication_factor,
                )
                for name in sorted(table.topics)
            ]
        )

    def describe_topic(
        self, request: CheckedDescribeTopic, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._call("describe_topic", request, timeout_s)
        return response

    def _describe_topic(
        self, request: CheckedDescribeTopic, timeout_s: float
    ) -> api_pb2.TopicDescription:
        table = self._metadata.table
        info = self._metadata.topic(request.name)
        views = self._reports.partitions(table)
        out = api_pb2.TopicDescription(
            name=info.name, replication_factor=info.replication_factor, config=info.config
        )
        for index, partition in enumerate(info.partitions):
            view = views.get((info.name, index))
            described = out.partitions.add(partition=index, replicas=list(partition.replicas))
            if view is None:
                continue
            described.log_start, described.end = view.log_start, view.end
            if view.leader:
                described.leader = view.leader
                leader = table.broker(view.leader)
                described.leader_addr = leader.client_addr if leader else ""
                top = view.applied.get(view.leader, 0)
                described.in_sync.extend(
                    b for b in partition.replicas if top - view.applied.get(b, -(10**9)) <= 1000
                )
        return out

    def purge_topic(
        self, request: CheckedPurgeTopic, *, timeout_s: float | None
    ) -> api_pb2.PurgeTopicResponse:
        return admin_ops.purge_topic(
            self._metadata.table,
            self._router,
            request,
            timeout(timeout_s),
            monotonic=self._monotonic,
        )

    # -- recurring records (broker/handlers/schedules.py) -------------------------------------

    def create_schedule(
        self, request: CheckedCreateSchedule, *, timeout_s: float | None
    ) -> api_pb2.ScheduleResponse:
        return self._schedules.create_schedule(request, timeout(timeout_s))

    def list_schedules(
        self, request: CheckedListSchedules, *, timeout_s: float | None
    ) -> api_pb2.ListSchedulesResponse:
        return self._schedules.list_schedules(request, timeout(timeout_s))

    def pause_schedule(
        self, request: CheckedPauseSchedule, *, timeout_s: float | None
    ) -> api_pb2.ScheduleResponse:
        return self._schedules.pause_schedule(request, timeout(timeout_s))

    def delete_schedule(
        self, request: CheckedDeleteSchedule, *, timeout_s: float | None
    ) -> api_pb2.DeleteScheduleResponse:
        return self._schedules.delete_schedule(request, timeout(timeout_s))

    # -- records -----------------------------------------------------------------------------

    def update_record(
        self, request: CheckedUpdateRecord, *, timeout_s: float | None
    ) -> api_pb2.UpdateRecordResponse:
        update = partition_pb2.UpdateRecord(offset=request.offset)
        if request.HasField("priority"):
            update.priority = request.priority
        if request.HasField("deliver_at_ms"):
            update.deliver_at_ms = request.deliver_at_ms
        self._record_command(
            request.topic,
            request.partition,
            partition_pb2.PartitionCommand(update_record=update),
            timeout_s,
        )
        return api_pb2.UpdateRecordResponse()

    def cancel_record(
        self, request: CheckedCancelRecord, *, timeout_s: float | None
    ) -> api_pb2.CancelRecordResponse:
        command = partition_pb2.PartitionCommand(
            cancel_record=partition_pb2.CancelRecord(offset=request.offset)
        )
        self._record_command(request.topic, request.partition, command, timeout_s)
        return api_pb2.CancelRecordResponse()

    def _record_command(
        self,
        topic: str,
        partition: int,
        command: partition_pb2.PartitionCommand,
        timeout_s: float | None,
    ) -> None:
        response = self._router.propose(topic, partition, command, timeout(timeout_s))
        if response.result.error:
            raise errors.error_for(response.result.error, response.result.message)

    # -- the cluster -------------------------------------------------------------------------

    def describe_cluster(
        self, request: api_pb2.DescribeClusterRequest, *, timeout_s: float | None
    ) -> api_pb2.ClusterDescription:
        response: api_pb2.ClusterDescription = self._call("describe_cluster", request, timeout_s)
        return response

    def _cluster(
        self, request: api_pb2.DescribeClusterRequest, timeout_s: float
    ) -> api_pb2.ClusterDescription:
        table = self._metadata.table
        alive = self._live()
        voters = set(self._voters())
        out = api_pb2.ClusterDescription(metadata_leader=self._broker_id, topics=len(table.topics))
        for broker_id, broker in sorted(table.brokers.items()):
            out.brokers.add(
                id=broker_id,
                client_addr=broker.client_addr,
                raft_addr=broker.raft_addr,
                rack=broker.rack,
                alive=broker_id in alive,
                metadata_voter=broker.raft_addr in voters,
            )
            if broker_id not in alive:
                out.problems.append(f"broker {broker_id} ({broker.client_addr}) is not reporting")
        views = self._reports.partitions(table)
        for name, info in sorted(table.topics.items()):
            for index, partition in enumerate(info.partitions):
                out.partitions += 1
                view = views.get((name, index))
                if view is None or not view.leader:
                    out.partitions_without_leader += 1
                    out.problems.append(f"{name}/{index} has no leader")
                elif any(b not in alive or b not in view.applied for b in partition.replicas):
                    out.under_replicated_partitions += 1
        if out.partitions_without_leader:
            out.health = api_pb2.UNHEALTHY
        elif out.under_replicated_partitions or len(alive) < len(table.brokers):
            out.health = api_pb2.DEGRADED
        else:
            out.health = api_pb2.HEALTHY
        return out

    def remove_broker(
        self, request: CheckedRemoveBroker, *, timeout_s: float | None
    ) -> api_pb2.RemoveBrokerResponse:
        """Runs on the metadata leader in slices (a forwarded call is cut at the internal
        timeout); each slice resumes where the last one stopped (broker/membership.py)."""
        deadline = self._monotonic() + timeout(timeout_s)
        while True:
            try:
                response: api_pb2.RemoveBrokerResponse = self._metadata.call(
                    "remove_broker", request, timeout(deadline - self._monotonic())
                )
                return response
            except (errors.Timeout, errors.NotLeader):
                if self._monotonic() >= deadline - 0.1:
                    raise
                self._sleep(0.1)

    def _remove_broker(
        self, request: CheckedRemoveBroker, timeout_s: float
    ) -> api_pb2.RemoveBrokerResponse:
        assert self.remove_broker_here is not None
        return self.remove_broker_here(request.broker_id, timeout_s)

    def move_partition(
        self, request: CheckedMovePartition, *, timeout_s: float | None
    ) -> api_pb2.MovePartitionResponse:
        """On the metadata leader, in slices like remove_broker (broker/membership.py)."""
        deadline = self._monotonic() + timeout(timeout_s)
        while True:
            try:
                response: api_pb2.MovePartitionResponse = self._metadata.call(
                    "move_partition", request, timeout(deadline - self._monotonic())
                )
                return response
            except (errors.Timeout, errors.NotLeader):
                if self._monotonic() >= deadline - 0.1:
                    raise
                self._sleep(0.1)

    def _move(
        self, request: CheckedMovePartition, timeout_s: float
    ) -> api_pb2.MovePartitionResponse:
        assert self.move_partition_here is not None
        return self.move_partition_here(
            request.topic, request.partition, list(request.replicas), timeout_s
        )

    def rebalance_leaders(
        self, request: api_pb2.RebalanceLeadersRequest, *, timeout_s: float | None
    ) -> api_pb2.RebalanceLeadersResponse:
        response: api_pb2.RebalanceLeadersResponse = self._call(
            "rebalance_leaders", request, timeout_s
        )
        return response

    def _off_preferred(self, table: Table) -> set[tuple[str, int]]:
        """Partitions whose reported leader is not their preferred replica, a live broker."""
        live = self._live()
        return {
            key
            for key, view in self._reports.partitions(table).items()
            if view.leader
            and (replicas := table.replicas(*key))
            and replicas[0] != view.leader
            and replicas[0] in live
        }

    def _rb(
        self, request: api_pb2.RebalanceLeadersRequest, timeout_s: float
    ) -> api_pb2.RebalanceLeadersResponse:
        """On the metadata leader: each broker leading a partition off its preferred replica
        hands it over (``lead_preferred_here``), then the reports are awaited (within the call,
        at most LEADER_WAIT_S). Raises Timeout/Unavailable only when no broker was reached."""
        # a second of the call's time is left for the answer to travel back (forwarded calls)
        deadline = self._monotonic() + max(0.1, min(timeout_s - 1.0, LEADER_WAIT_S))
        table = self._metadata.table
        before = self._off_preferred(table)
        views = self._reports.partitions(table)
        for broker_id in sorted({views[key].leader for key in before}):
            left = max(deadline - self._monotonic(), 0.001)
            try:
                if broker_id == self._broker_id:
                    self.lead_preferred_here(request, left)
                elif (info := table.broker(broker_id)) is not None:
                    self._metadata.call_on(info.client_addr, "lead_preferred_here", request, left)
            except errors.RaftqError as exc:  # that broker's partitions stay: counted remaining
                logger.info("rebalance leaders: broker %d: %s", broker_id, exc)
        remaining = before
        while remaining and self._monotonic() < deadline:
            self._sleep(0.05)
            table = self._metadata.table
            views = self._reports.partitions(table)
            # moved = reported led by the preferred replica (no leader mid-transfer is not)
            remaining = {
                key
                for key in remaining
                if key not in views or views[key].leader != (table.replicas(*key) or (0,))[0]
            }
        return api_pb2.RebalanceLeadersResponse(
            moved=len(before - remaining), remaining=len(remaining)
        )

    def lead_preferred_here(
        self, request: api_pb2.RebalanceLeadersRequest, timeout_s: float
    ) -> api_pb2.RebalanceLeadersResponse:
        """Hand every partition this broker leads to its preferred replica (when connected);
        answers how many transfers started."""
        table = self._metadata.table
        started = 0
        for replica in self._replicas.leading(table.partitions_of(self._broker_id)):
            if self.prefer_leader(replica, table):
                started += 1
        return api_pb2.RebalanceLeadersResponse(moved=started)

    # -- backups (broker/backup.py is the client side) --------------------------------------

    def backup_metadata(
        self, request: api_pb2.BackupMetadataRequest, *, timeout_s: float | None
    ) -> api_pb2.BackupMetadataResponse:
        response: api_pb2.BackupMetadataResponse = self._call("backup_metadata", request, timeout_s)
        return response

    def _backup(
        self, _request: api_pb2.BackupMetadataRequest, _timeout_s: float
    ) -> api_pb2.BackupMetadataResponse:
        return backup_source.metadata(self._metadata.table)

    def backup_partition(
        self, request: CheckedBackupPartition, cancelled: threading.Event
    ) -> Iterator[api_pb2.BackupChunk]:
        """The BackupPartition stream, on the partition's leader (broker/backup_source.py)."""
        key = (request.topic, request.partition)
        return backup_source.partition_chunks(
            request,
            self._metadata.table,
            self._replicas.get(key),
            lambda: self._router.leader_hint(*key),
            self._backup_dir,
            cancelled,
        )

    # -- Spark txn watermarks ----------------------------------------------------------------

    def commit_txn(self, request: CheckedCommitTxn, *, timeout_s: float | None) -> api_pb2.TxnState:
        response: api_pb2.TxnState = self._call("commit_txn", request, timeout_s)
        return response

    def _commit_txn(self, request: CheckedCommitTxn, timeout_s: float) -> api_pb2.TxnState:
        """Raise the app's watermark; a stale version is a no-op answering the current one."""
        data = self._frontend.commit_txn(
            self._metadata.table,
            request.app_id,
            request.version,
            now_ms=self._metadata.now_ms(),
            scope=request.scope,
        )
        result = self._metadata.propose(data, timeout_s)
        return api_pb2.TxnState(
            app_id=request.app_id, scope=request.scope, known=True, version=result.txn_version
        )

    def get_txn(self, request: CheckedGetTxn, *, timeout_s: float | None) -> api_pb2.TxnState:
        response: api_pb2.TxnState = self._call("get_txn", request, timeout_s)
        return response

    def _get_txn(self, request: CheckedGetTxn, timeout_s: float) -> api_pb2.TxnState:
        """On the metadata leader, whose table has applied every CommitTxn it answered (a
        leader elected moments ago may still lag; the Spark writer's producer ids cover that)."""
        version = self._metadata.table.txn_version(request.app_id, request.scope)
        return api_pb2.TxnState(
            app_id=request.app_id,
            scope=request.scope,
            known=version is not None,
            version=version or 0,
        )

    def expire_txns_here(
        self, keys: list[tuple[str, str]], committed_before_ms: int, timeout_s: float
    ) -> None:
        """On the metadata leader: forget the watermarks of ``keys`` ((app id, scope)) not
        raised since ``committed_before_ms``. Raises InvalidArgument, Unavailable, Timeout."""
        data = self._frontend.expire_txns(keys, committed_before_ms, now_ms=self._metadata.now_ms())
        self._metadata.propose(data, timeout_s)
        logger.info("[group=metadata] txn watermarks expired: %s", keys[:20])
