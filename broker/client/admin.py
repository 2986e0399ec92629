"""The raftq :class:`Admin` client: topics, groups, the cluster, records, transactions.

Each call goes to any bootstrap broker (:meth:`_Channels.call_any`) and answers the API's
protobufs (``proto/api.proto``); failures raise the typed :mod:`proto.errors`. An Admin holds
no threads: it pickles as its bootstrap (and security), and channels are re-created where it
lands, so a Spark driver can ship one to its executors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from broker.client.channels import _DEFAULTS, DEFAULT_BOOTSTRAP, _Channels, channel_security
from proto import api_pb2, common_pb2, errors


def _config_update(config: Mapping[str, Any]) -> api_pb2.TopicConfigUpdate:
    """Keyword settings (``ordering="priority"``, ``lease_ms=5000``...) → TopicConfigUpdate."""
    update = api_pb2.TopicConfigUpdate()
    for name, value in config.items():
        if value is None:
            continue
        if name not in api_pb2.TopicConfigUpdate.DESCRIPTOR.fields_by_name:
            known = ", ".join(api_pb2.TopicConfigUpdate.DESCRIPTOR.fields_by_name)
            raise errors.InvalidArgument(f"no topic setting {name!r}; known: {known}")
        if name == "ordering" and isinstance(value, str):
            if value.upper() not in ("FIFO", "PRIORITY"):
                raise errors.InvalidArgument(f"ordering {value!r}: use fifo or priority")
            value = common_pb2.Ordering.Value(value.upper())
        setattr(update, name, value)
    return update


class Admin:
    """Topic, group, cluster and record administration. Answers are the API's protobufs
    (``proto/api.proto``); failures raise typed :mod:`proto.errors`."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        *,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)

    def _admin(self, method: str, request: Any) -> Any:
        return self._channels.call_any(lambda s, t: getattr(s.admin, method)(request, timeout=t))

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        **config: Any,
    ) -> api_pb2.TopicDescription:
        """Create a topic; absent settings take the broker's topic_defaults. TopicExists and
        InvalidArgument are normal failures."""
        request = api_pb2.CreateTopicRequest(name=name, config=_config_update(config))
        if partitions is not None:
            request.partitions = partitions
        if replication_factor is not None:
            request.replication_factor = replication_factor
        result: api_pb2.TopicDescription = self._admin("CreateTopic", request)
        return result

    def delete_topic(self, name: str) -> None:
        self._admin("DeleteTopic", api_pb2.DeleteTopicRequest(name=name))

    def list_topics(self) -> list[api_pb2.TopicSummary]:
        return list(self._admin("ListTopics", api_pb2.ListTopicsRequest()).topics)

    def describe_topic(self, name: str) -> api_pb2.TopicDescription:
        result: api_pb2.TopicDescription = self._admin(
            "DescribeTopic", api_pb2.DescribeTopicRequest(name=name)
        )
        return result

    def alter_topic_config(self, name: str, **config: Any) -> api_pb2.TopicDescription:
        request = api_pb2.AlterTopicConfigRequest(name=name, config=_config_update(config))
        result: api_pb2.TopicDescription = self._admin("AlterTopicConfig", request)
        return result

    def list_groups(self) -> list[api_pb2.GroupSummary]:
        return list(self._admin("ListGroups", api_pb2.ListGroupsRequest()).groups)

    def describe_group(self, group: str) -> api_pb2.GroupDescription:
        result: api_pb2.GroupDescription = self._admin(
            "DescribeGroup", api_pb2.DescribeGroupRequest(group=group)
        )
        return result

    def delete_group(self, group: str) -> api_pb2.DeleteGroupResponse:
        """Delete an empty group and its delivery state on every partition.

        Raises (normal): UnknownGroup, GroupNotEmpty (members live), Unavailable (retry)."""
        result: api_pb2.DeleteGroupResponse = self._admin(
            "DeleteGroup", api_pb2.DeleteGroupRequest(group=group)
        )
        return result

    def describe_cluster(self) -> api_pb2.ClusterDescription:
        result: api_pb2.ClusterDescription = self._admin(
            "DescribeCluster", api_pb2.DescribeClusterRequest()
        )
        return result

    def update_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        priority: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> None:
        request = api_pb2.UpdateRecordRequest(topic=topic, partition=partition, offset=offset)
        if priority is not None:
            request.priority = priority
        if deliver_at_ms is not None:
            request.deliver_at_ms = deliver_at_ms
        self._admin("UpdateRecord", request)

    def cancel_record(self, topic: str, partition: int, offset: int) -> None:
        self._admin(
            "CancelRecord",
            api_pb2.CancelRecordRequest(topic=topic, partition=partition, offset=offset),
        )

    def remove_broker(self, broker_id: int, timeout_s: float = 300.0) -> int:
        """Move every replica off ``broker_id``, deregister it and take it out of the metadata
        group (Admin.RemoveBroker); returns the number of replicas moved. Blocks until done or
        ``timeout_s``; after a Timeout or Unavailable call it again (it resumes). InvalidArgument
        (not registered, no live broker can take a replica) is normal."""
        request = api_pb2.RemoveBrokerRequest(broker_id=broker_id)
        response: api_pb2.RemoveBrokerResponse = self._channels.call_any(
            lambda s, t: s.admin.RemoveBroker(request, timeout=max(t, timeout_s))
        )
        return response.moved_partitions

    def list_offsets(self, topic: str) -> list[api_pb2.PartitionOffsets]:
        request = api_pb2.ListOffsetsRequest(topic=topic)
        response = self._channels.call_any(lambda s, t: s.log.ListOffsets(request, timeout=t))
        return list(response.partitions)

    def fetch(
        self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int = 0
    ) -> api_pb2.FetchResponse:
        """Read the log without touching group state (replay, backfill)."""
        request = api_pb2.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_records=max_records,
            max_bytes=max_bytes,
        )
        result: api_pb2.FetchResponse = self._channels.call_any(
            lambda s, t: s.log.Fetch(request, timeout=t)
        )
        return result

    def producer_state(
        self, topic: str, producer_id: str, partitions: Sequence[int] = ()
    ) -> dict[int, api_pb2.PartitionProducerState]:
        """An idempotent producer's last applied batch per partition (all partitions when
        none are named): ``known``, ``last_sequence``, ``last_offsets``. Forgotten after the
        topic's ``dedup_window_ms``. UnknownTopic / UnknownPartition are normal."""
        request = api_pb2.ProducerStateRequest(
            topic=topic, producer_id=producer_id, partitions=list(partitions)
        )
        response = self._channels.call_any(lambda s, t: s.log.ProducerState(request, timeout=t))
        return {p.partition: p for p in response.partitions}

    def commit_txn(self, app_id: str, version: int, scope: str = "") -> int:
        """Raise ``app_id``'s committed-batch watermark for ``scope`` (the Spark writer's: its
        target topic) to ``version``; returns the watermark after the call (a stale version
        changes nothing). InvalidArgument is normal."""
        request = api_pb2.CommitTxnRequest(app_id=app_id, version=version, scope=scope)
        state = self._admin("CommitTxn", request)
        return int(state.version)

    def get_txn(self, app_id: str, scope: str = "") -> int | None:
        """``app_id``'s committed-batch watermark for ``scope``; None when it never committed."""
        state = self._admin("GetTxn", api_pb2.GetTxnRequest(app_id=app_id, scope=scope))
        return int(state.version) if state.known else None

    def close(self) -> None:
        self._channels.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
