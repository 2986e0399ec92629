"""Consumer group membership: JoinGroup, Heartbeat, LeaveGroup, session expiry, and the
member check every Poll and settle makes (fencing).

Membership changes run on the metadata leader (MetadataClient.call forwards them there);
heartbeats are not Raft writes: the leader's SessionTable (broker/coordinator.py) keeps each
member's session. A member unknown to the group is UNKNOWN_MEMBER (join again); a generation
other than the group's is FENCED. A rebalance releases the leases of the partitions it moved
(broker/handlers/leases.py).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from typing import TYPE_CHECKING

from raftq.coordinator import SessionTable
from raftq.handlers.common import timeout
from raftq.handlers.leases import Releases
from raftq.metadata.frontend import MetadataFrontend
from raftq.metadata.table import GroupInfo, MemberInfo, Table
from raftq.metadata_client import TABLE_CATCH_UP_S, LeaderCall
from raftq.proto import api_pb2, errors
from raftq.transport.request_checks import (
    CheckedHeartbeat,
    CheckedJoinGroup,
    CheckedLeaveGroup,
    check_heartbeat,
    check_join_group,
    check_leave_group,
)

if TYPE_CHECKING:
    from raftq.metadata_client import MetadataClient

logger = logging.getLogger("raftq.broker.groups")


def assignment_of(member: MemberInfo) -> list[api_pb2.TopicPartitions]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in member.assignment:
        by_topic[topic].append(partition)
    return [
        api_pb2.TopicPartitions(topic=t, partitions=sorted(ps))
        for t, ps in sorted(by_topic.items())
    ]


class GroupHandler:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        *,
        metadata: MetadataClient,
        frontend: MetadataFrontend,
        sessions: SessionTable,
        releases: Releases,
        heartbeat_interval_ms: int,
    ) -> None:
        self._metadata = metadata
        self._frontend = frontend
        self._sessions = sessions
        self._releases = releases
        self._heartbeat_interval_ms = heartbeat_interval_ms
        metadata.register(
            "join_group",
            LeaderCall(
                api_pb2.JoinGroupRequest,
                api_pb2.JoinGroupResponse,
                self._join_here,
                check=check_join_group,
            ),
        )
        metadata.register(
            "heartbeat",
            LeaderCall(
                api_pb2.HeartbeatRequest,
                api_pb2.HeartbeatResponse,
                lambda request, left, _principal: self._heartbeat_here(request),
                check=check_heartbeat,
            ),
        )
        metadata.register(
            "leave_group",
            LeaderCall(
                api_pb2.LeaveGroupRequest,
                api_pb2.LeaveGroupResponse,
                lambda request, left, _principal: self._leave_here(request, left),
                check=check_leave_group,
            ),
        )

    def join_group(
        self, request: CheckedJoinGroup, *, timeout_s: float | None, principal: str = ""
    ) -> api_pb2.JoinGroupResponse:
        """Join as a new member (the broker issues its id, bound to ``principal``) or rejoin
        with a member id this principal was issued. Raises UnknownMember for a member id the
        group does not hold, PermissionDenied for another principal's."""
        response: api_pb2.JoinGroupResponse = self._metadata.call(
            "join_group", request, timeout(timeout_s), principal
        )
        return response

    def _join_here(
        self, request: CheckedJoinGroup, timeout_s: float, principal: str
    ) -> api_pb2.JoinGroupResponse:
        before = self._metadata.table.group(request.group)
        if request.HasField("member_id"):
            member_id = request.member_id
            if before is None or member_id not in before.members:
                raise errors.UnknownMember(
                    f"{member_id!r} is not in group {request.group!r}: member ids are issued by "
                    "the broker; join without one to get a new member id"
                )
        else:
            member_id = f"m-{uuid.uuid4().hex}"
        data = self._frontend.join_group(
            self._metadata.table,
            request.group,
            member_id,
            list(request.topics),
            request.session_timeout_ms,
            start_from=request.start_from,
            principal=principal,
            now_ms=self._metadata.now_ms(),
        )
        result = self._metadata.propose(data, timeout_s)
        group = self._metadata.table.group(request.group)
        assert group is not None and member_id in group.members
        member = group.members[member_id]
        self._sessions.touch(request.group, member_id, member.session_timeout_ms)
        self._releases.revoke(before, group)
        return api_pb2.JoinGroupResponse(
            member_id=member_id,
            generation=result.generation or group.generation,
            assignment=assignment_of(member),
            session_timeout_ms=member.session_timeout_ms,
            heartbeat_interval_ms=min(
                self._heartbeat_interval_ms, max(1, member.session_timeout_ms // 3)
            ),
        )

    def heartbeat(
        self, request: CheckedHeartbeat, *, timeout_s: float | None
    ) -> api_pb2.HeartbeatResponse:
        response: api_pb2.HeartbeatResponse = self._metadata.call(
            "heartbeat", request, timeout(timeout_s)
        )
        return response

    def _heartbeat_here(self, request: CheckedHeartbeat) -> api_pb2.HeartbeatResponse:
        group = self._metadata.table.group(request.group)
        if group is None or request.member_id not in group.members:
            raise errors.UnknownMember(
                f"{request.member_id!r} is not in group {request.group!r} (session expired or "
                "left): join again"
            )
        member = group.members[request.member_id]
        self._sessions.touch(request.group, request.member_id, member.session_timeout_ms)
        if request.generation != group.generation:
            raise errors.Fenced(
                f"generation {request.generation} is not the group's {group.generation}: "
                "rejoin with your member_id to get the current assignment"
            )
        return api_pb2.HeartbeatResponse(
            generation=group.generation, assignment=assignment_of(member)
        )

    def leave_group(
        self, request: CheckedLeaveGroup, *, timeout_s: float | None
    ) -> api_pb2.LeaveGroupResponse:
        response: api_pb2.LeaveGroupResponse = self._metadata.call(
            "leave_group", request, timeout(timeout_s)
        )
        return response

    def _leave_here(
        self, request: CheckedLeaveGroup, timeout_s: float
    ) -> api_pb2.LeaveGroupResponse:
        group = self._metadata.table.group(request.group)
        if group is None or request.member_id not in group.members:
            raise errors.UnknownMember(f"{request.member_id!r} is not in group {request.group!r}")
        self.remove_members(request.group, [request.member_id], "leave", timeout_s)
        return api_pb2.LeaveGroupResponse()

    def remove_members(self, group: str, members: list[str], reason: str, timeout_s: float) -> None:
        """Leave or session expiry (metadata leader): replicate, then release their leases."""
        before = self._metadata.table.group(group)
        data = self._frontend.leave_group(
            self._metadata.table, group, members, reason=reason, now_ms=self._metadata.now_ms()
        )
        self._metadata.propose(data, timeout_s)
        self._sessions.forget(group, members)
        logger.info("[group=%s] members %s removed (%s)", group, members, reason)
        self._releases.revoke(before, self._metadata.table.group(group))

    def member(
        self, group_name: str, member_id: str, generation: int
    ) -> tuple[GroupInfo, MemberInfo]:
        """The member, fenced by generation. Normal errors: UnknownMember, Fenced, Unavailable.

        The metadata leader's table is the truth. Another broker whose copy lacks the member
        (or its generation) may only be behind: it asks the leader (a forwarded Heartbeat,
        which also counts as one) instead of sleeping on a guess, so a bad member id is
        answered at once; for a member the leader knows it waits, on the table's condition,
        until its own copy has applied it (replication lag, at most TABLE_CATCH_UP_S)."""

        def current(table: Table) -> tuple[GroupInfo, MemberInfo] | None:
            group = table.group(group_name)
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None or generation != group.generation:
                return None
            return group, member

        found = current(self._metadata.table)
        if found is not None:
            return found
        group = self._metadata.table.group(group_name)
        member = group.members.get(member_id) if group is not None else None
        behind = group is None or member is None or generation > group.generation
        if behind and not self._metadata.is_leader():
            heartbeat = api_pb2.HeartbeatRequest(
                group=group_name, member_id=member_id, generation=generation
            )
            self._metadata.call("heartbeat", heartbeat, TABLE_CATCH_UP_S)  # raises the verdict
            caught_up = self._metadata.wait_until(
                lambda table: current(table) is not None, TABLE_CATCH_UP_S
            )
            if caught_up:
                found = current(self._metadata.table)
                if found is not None:
                    return found
            raise errors.Unavailable(
                f"this broker's copy of group {group_name!r} is behind the metadata leader's: retry"
            )
        if group is None or member is None:
            raise errors.UnknownMember(
                f"{member_id!r} is not in group {group_name!r}: join the group again"
            )
        raise errors.Fenced(
            f"generation {generation} is not group {group_name!r}'s current {group.generation}: "
            "rejoin to get the current assignment"
        )

    def still_owns(
        self, group_name: str, member_id: str, generation: int, topic: str, partition: int
    ) -> bool:
        """Whether the member still owns the partition after a lease (a rebalance may have
        moved it meanwhile)."""
        group = self._metadata.table.group(group_name)
        if group is None or member_id not in group.members:
            return False
        if group.generation == generation:
            return True
        return (topic, partition) in group.members[member_id].assignment
