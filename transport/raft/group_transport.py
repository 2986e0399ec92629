"""The view a SyncObj sees: a pysyncobj Transport per Raft group onto its broker's endpoint.

Shared by the TCP endpoint (mux.py) and the in-memory hub (hub.py), which both implement
`ViewHost`. A group's `GroupTransport` only buffers outgoing ``(group, message)`` pairs in the
host and hands received messages to its SyncObj; the host decides when they travel (the driver
flushes after the groups' journal sync, `sendable_before_sync` marks what may go before it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pysyncobj.transport import Transport

from raftq.transport.raft.driver import DriverEndpoint

# Bulk bytes (snapshot chunks) a link takes per driver round, counting what it has not yet
# written: the heartbeats of every other group never queue behind more than this.
BULK_BYTES_PER_ROUND_DEFAULT = 2 << 20


def sendable_before_sync(message: Any) -> bool:
    """A leader's ``append_entries`` may leave before the leader's own journal fsync (Raft
    §10.2.1: the leader writes its log in parallel with replicating it): the leader counts
    itself toward commit only up to its fsync'd index (durability.py), so this only overlaps its
    fsync with the followers' round trip. Everything else (acks, votes) waits for the fsync."""
    return type(message) is dict and message.get("type") == "append_entries"


class ViewHost(Protocol):
    """What a `GroupTransport` needs from its broker-level endpoint (TCP or hub)."""

    address: str

    @property
    def peer_generation(self) -> int:
        """Changes whenever the set of connected peers may have changed."""
        ...

    def connected_peers(self) -> frozenset[str]: ...

    @property
    def silent_after_s(self) -> float:
        """A link heard from less recently than this is silent (its peer may be hung)."""
        ...

    def link_silence_s(self, peer: str) -> float | None:
        """Seconds since anything arrived from `peer`; None when no link to it is open."""
        ...

    def link_lag_s(self, peer: str) -> float:
        """How much later than a live peer's pings allow its frames have lately arrived (a
        decaying max, lag.py); 0 when no link to it is open."""
        ...

    def enqueue(self, peer: str, group: str, message: Any, bulk_bytes: int = 0) -> bool:
        """Buffer ``message`` for ``peer``; ``bulk_bytes``: the bulk data it carries."""
        ...

    def bulk_room(self, peer: str) -> int:
        """Bulk bytes (snapshot chunks) the link to ``peer`` takes now: its per-round budget
        less the bulk queued this round and what the link has not written yet."""
        ...

    def view_created(self, group: str, view: GroupTransport) -> None: ...

    def view_destroyed(self, group: str, view: GroupTransport) -> None: ...

    def add_peer(self, peer: str) -> None: ...


class BrokerEndpoint(ViewHost, DriverEndpoint, Protocol):
    """A broker's whole raft endpoint: what its groups' views, its driver and the broker
    itself (liveness, metrics, shutdown) use. `MuxEndpoint` over TCP, `HubEndpoint` in the
    simulation; both pass tests/contract/test_endpoint_contract.py."""

    def transport_class(
        self, group: str
    ) -> Callable[[Any, Any, Iterable[Any]], GroupTransport]: ...

    def statistics(self) -> dict[str, int]: ...

    def close(self) -> None: ...


class GroupTransport(Transport):
    """A pysyncobj Transport for one Raft group: a view onto the broker's endpoint.

    Nodes are named by the broker's raft address, so node id == peer endpoint address. Sends are
    buffered in the endpoint until the driver flushes. Connection state is reconciled on the
    group's tick (SyncObj installs its callbacks only after constructing the transport, so
    nothing may be announced from the constructor).
    """

    def __init__(
        self, host: ViewHost, group: str, syncObj: Any, selfNode: Any, otherNodes: Iterable[Any]
    ) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        if selfNode is None:
            raise ValueError(f"[group={group}] read-only nodes are not supported")
        if selfNode.id != host.address:
            raise ValueError(
                f"[group={group}] self node {selfNode.id} is not this endpoint ({host.address})"
            )
        self.group = group
        self._host = host
        self._nodes: dict[str, Any] = {}
        self._announced: set[str] = set()
        self._seen_generation = -1
        self._destroyed = False
        for node in otherNodes:
            self.addNode(node)
        syncObj.addOnTickCallback(self._on_tick)
        host.view_created(group, self)

    # -- pysyncobj Transport API --------------------------------------------------------------

    def send(self, node: Any, message: Any) -> bool:
        if self._destroyed:
            return False
        return self._host.enqueue(node.id, self.group, message)

    def send_bulk(self, node: Any, message: Any, nbytes: int) -> bool:
        """`send` a message carrying ``nbytes`` of bulk data (a snapshot chunk), which counts
        against the link's budget (`bulk_room`)."""
        if self._destroyed:
            return False
        return self._host.enqueue(node.id, self.group, message, bulk_bytes=nbytes)

    def bulk_room(self, node: Any) -> int:
        """Bulk bytes the link to ``node`` takes now (`ViewHost.bulk_room`)."""
        return self._host.bulk_room(node.id)

    def link_silence_s(self, peer: str) -> float | None:
        """Seconds since the broker `peer` was last heard from (any frame, pings included);
        None when no link to it is open. See `ViewHost.link_silence_s`."""
        return self._host.link_silence_s(peer)

    def link_lag_s(self, peer: str) -> float:
        """How late the broker `peer`'s frames have lately been arriving (its broker starved
        now and then); 0 without a link. See `ViewHost.link_lag_s`."""
        return self._host.link_lag_s(peer)

    @property
    def silent_after_s(self) -> float:
        return self._host.silent_after_s

    @property
    def peer_generation(self) -> int:
        """The host's link generation: changes whenever a link to some peer opened or closed."""
        return self._host.peer_generation

    def addNode(self, node: Any) -> None:
        self._nodes[node.id] = node
        self._host.add_peer(node.id)
        self._seen_generation = -1

    def dropNode(self, node: Any) -> None:
        self._nodes.pop(node.id, None)
        if node.id in self._announced:
            self._announced.discard(node.id)
            self._onNodeDisconnected(node)

    def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        self.setOnMessageReceivedCallback(None)
        self.setOnNodeConnectedCallback(None)
        self.setOnNodeDisconnectedCallback(None)
        self._host.view_destroyed(self.group, self)

    # -- endpoint side -------------------------------------------------------------------------

    def deliver(self, peer: str, message: Any) -> None:
        """Hand one received message to the SyncObj (driver thread). Messages from nodes that
        are not members of the group are dropped, as stock pysyncobj refuses their connection."""
        node = self._nodes.get(peer)
        if node is not None:
            self._onMessageReceived(node, message)

    def _on_tick(self) -> None:
        if self._seen_generation != self._host.peer_generation:
            self.reconcile()

    def reconcile(self) -> None:
        """Announce connects/disconnects so SyncObj's connected set matches the endpoint's."""
        self._seen_generation = self._host.peer_generation
        up = self._host.connected_peers()
        for peer, node in self._nodes.items():
            if peer in up and peer not in self._announced:
                self._announced.add(peer)
                self._onNodeConnected(node)
            elif peer not in up and peer in self._announced:
                self._announced.discard(peer)
                self._onNodeDisconnected(node)
