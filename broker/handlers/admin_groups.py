"""Admin calls on consumer groups: ListGroups, DescribeGroup, DeleteGroup, SeekGroup (and the
deletions of expired groups the backend asks for).

Describe, delete and seek run on the metadata leader (MetadataClient.call forwards them there):
only it knows the members' sessions for sure. ListGroups answers from this broker's table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from raftq.coordinator import SessionTable
from raftq.handlers import admin_ops
from raftq.handlers.common import timeout
from raftq.handlers.groups import assignment_of
from raftq.metadata.frontend import MetadataFrontend
from raftq.metadata.table import GroupInfo
from raftq.metadata_client import LeaderCall
from raftq.proto import api_pb2, errors, internal_pb2, partition_pb2
from raftq.router import Router
from raftq.transport.request_checks import (
    CheckedDeleteGroup,
    CheckedDescribeGroup,
    CheckedSeekGroup,
    check_delete_group,
    check_describe_group,
    check_seek_group,
)

if TYPE_CHECKING:
    from raftq.metadata_client import MetadataClient

logger = logging.getLogger("raftq.broker.admin")


class GroupAdmin:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        *,
        metadata: MetadataClient,
        frontend: MetadataFrontend,
        router: Router,
        sessions: SessionTable,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._monotonic = monotonic  # deadlines of waits and retries (the broker's Clock)
        self._sleep = sleep
        self._metadata = metadata
        self._frontend = frontend
        self._router = router
        self._sessions = sessions
        metadata.register(
            "describe_group",
            LeaderCall(
                api_pb2.DescribeGroupRequest,
                api_pb2.GroupDescription,
                lambda request, left, _principal: self._describe_here(request, left),
                check=check_describe_group,
            ),
        )
        metadata.register(
            "delete_group",
            LeaderCall(
                api_pb2.DeleteGroupRequest,
                api_pb2.DeleteGroupResponse,
                lambda request, left, _principal: self.delete_group_here(request.group, left),
                check=check_delete_group,
            ),
        )
        metadata.register(
            "seek_group",
            LeaderCall(
                api_pb2.SeekGroupRequest,
                api_pb2.SeekGroupResponse,
                lambda request, left, _principal: admin_ops.seek_group(
                    self._metadata.table, self._router, request, left, monotonic=self._monotonic
                ),
                check=check_seek_group,
            ),
        )

    def list_groups(
        self, request: api_pb2.ListGroupsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListGroupsResponse:
        table = self._metadata.table
        return api_pb2.ListGroupsResponse(
            groups=[
                api_pb2.GroupSummary(
                    group=name,
                    generation=group.generation,
                    members=len(group.members),
                    topics=group.topics,
                    empty_since_ms=group.empty_since_ms,
                    deleting=group.deleting,
                )
                for name, group in sorted(table.groups.items())
            ]
        )

    def delete_group(
        self, request: CheckedDeleteGroup, *, timeout_s: float | None
    ) -> api_pb2.DeleteGroupResponse:
        response: api_pb2.DeleteGroupResponse = self._metadata.call(
            "delete_group", request, timeout(timeout_s)
        )
        return response

    def delete_group_here(
        self, name: str, timeout_s: float, *, empty_since_ms: int = 0
    ) -> api_pb2.DeleteGroupResponse:
        """On the metadata leader: mark the group deleting (unless it already is), have every
        partition of its topics forget it, then remove it (metadata/machine.py's two steps).
        ``empty_since_ms``: a retention expiry, refused if the group was joined since.

        Raises (normal): UnknownGroup, GroupNotEmpty, Unavailable (a partition did not answer:
        call again; the group stays deleting and the backend finishes it), Timeout.
        """
        deadline = self._monotonic() + timeout_s
        group = self._metadata.table.group(name)
        if group is None:
            raise errors.UnknownGroup(f"group {name!r} does not exist")
        if not group.deleting:
            data = self._frontend.delete_group(
                self._metadata.table,
                name,
                now_ms=self._metadata.now_ms(),
                empty_since_ms=empty_since_ms,
            )
            self._metadata.propose(data, max(0.001, deadline - self._monotonic()))
            group = self._metadata.table.group(name)
            assert group is not None and group.deleting, f"group {name!r} not marked deleting"
        out = self._forget_group(group, deadline)
        data = self._frontend.delete_group(
            self._metadata.table, name, now_ms=self._metadata.now_ms(), finish=True
        )
        self._metadata.propose(data, max(0.001, deadline - self._monotonic()))
        logger.info(
            "[group=%s] deleted: %d partitions forgot it (%d pending rows)",
            name,
            out.partitions,
            out.pending,
        )
        return out

    def _forget_group(self, group: GroupInfo, deadline: float) -> api_pb2.DeleteGroupResponse:
        """ForgetGroup on every partition of the group's existing topics (idempotent)."""
        out = api_pb2.DeleteGroupResponse()
        command = partition_pb2.PartitionCommand(
            forget_group=partition_pb2.ForgetGroup(group=group.name)
        )
        table = self._metadata.table
        for topic in table.state_topics(group):
            info = table.topics[topic]
            for partition in range(info.partition_count):
                left = max(0.001, deadline - self._monotonic())
                try:
                    response = self._router.propose(topic, partition, command, left)
                except errors.RaftqError as exc:
                    raise errors.Unavailable(
                        f"group {group.name!r}: {topic}/{partition} did not forget it ({exc}); "
                        "the group stays deleting: delete it again"
                    ) from exc
                if response.result.error:
                    raise errors.error_for(response.result.error, response.result.message)
                out.partitions += 1
                out.pending += response.result.count
        return out

    def seek_group(
        self, request: CheckedSeekGroup, *, timeout_s: float | None
    ) -> api_pb2.SeekGroupResponse:
        response: api_pb2.SeekGroupResponse = self._metadata.call(
            "seek_group", request, timeout(timeout_s)
        )
        return response

    def describe_group(
        self, request: CheckedDescribeGroup, *, timeout_s: float | None
    ) -> api_pb2.GroupDescription:
        response: api_pb2.GroupDescription = self._metadata.call(
            "describe_group", request, timeout(timeout_s)
        )
        return response

    def _describe_here(
        self, request: CheckedDescribeGroup, timeout_s: float
    ) -> api_pb2.GroupDescription:
        table = self._metadata.table
        group = table.group(request.group)
        if group is None:
            raise errors.UnknownGroup(f"group {request.group!r} does not exist")
        out = api_pb2.GroupDescription(
            group=group.name,
            generation=group.generation,
            empty_since_ms=group.empty_since_ms,
            deleting=group.deleting,
        )
        for member_id, member in sorted(group.members.items()):
            out.members.add(
                member_id=member_id,
                topics=list(member.topics),
                assignment=assignment_of(member),
                session_timeout_ms=member.session_timeout_ms,
                last_heartbeat_ms=self._sessions.last_heartbeat_ms(group.name, member_id),
            )
        deadline = self._monotonic() + timeout_s
        for topic_name in group.topics:  # members or not: every topic it holds state on
            info = table.topic(topic_name)
            if info is None:
                continue
            for partition in range(info.partition_count):
                lag = self._partition_lag(group.name, topic_name, partition, deadline)
                lag.member_id = group.owner(topic_name, partition) or ""
                out.partitions.append(lag)
        return out

    def _partition_lag(
        self, group: str, topic: str, partition: int, deadline: float
    ) -> api_pb2.PartitionLag:
        read = internal_pb2.ReadRequest(
            topic=topic, partition=partition, lag=internal_pb2.LagRead(groups=[group])
        )
        out = api_pb2.PartitionLag(topic=topic, partition=partition)
        try:
            response = self._router.read(read, max(0.2, deadline - self._monotonic()))
        except errors.RaftqError as exc:
            logger.info("[topic/partition=%s/%d] lag unavailable: %s", topic, partition, exc)
            return out
        entry = response.lags[0]
        if entry.known:
            out.committed, out.end, out.lag = entry.committed, entry.end, entry.lag
            out.pending, out.leased = entry.pending, entry.leased
        else:  # the group has not leased here yet: everything is pending
            out.committed, out.end = response.log_start, response.end
            out.lag = out.pending = response.end - response.log_start
        return out
