"""Cluster membership: brokers joining the metadata group, and broker removal that moves every
replica first.

Joining (a broker whose raft address is not in ``broker.seeds``):

    joiner                                   any broker            metadata leader
      │ MetaMembers ──────────────────────────► members, learners, leader
      │ start the metadata replica in standby as a learner (peers = members; it does not
      │ campaign: members drop a non-member's messages, and a learner never campaigns)
      │ JoinCluster(raft_addr) ───────────────────────────────────► change_membership("learner")
      │                                                              (one change at a time,
      │ ◄──────────────── append_entries: standby ends, catches up    waits for the commit)
      │ members.json written; the backend registers the broker (RegisterBroker)

The metadata group has ``raft.metadata_voters`` voters; every other broker is a *learner*: a
non-voting member that receives the metadata log like any follower (its table is as current)
but is not counted toward commit or elections and never campaigns
(transport/raft/membership.py). Every joiner starts as a learner. The metadata leader's
backend promotes one learner at a time while the voters are fewer than
``raft.metadata_voters`` (a new cluster growing, a voter removed by RemoveBroker): only a
learner that has acknowledged the leader's whole committed log, and only once everything
before is committed. The seeds are the first voters. ``meta/members.json`` holds the members
and learners as last seen; a restart starts from it (plus the journal's membership entries,
which are re-applied), so a joined broker rejoins without asking anyone and is never added
twice.

Moving a partition's replicas (the table's replica set differs from the group's voters), run
by the partition's leader, one change at a time per group, state-based so any step can be
retried:

1. a leader that is not in the new set hands leadership to a caught-up voter of the new set
   (while there is none, it carries on with 2 itself);
2. add the first missing replica as a learner (the new broker opened it in standby with the
   full new replica set as peers: it counts toward no quorum while it catches up), wait until
   it has caught up, then promote it to a voter;
3. once every replica of the new set votes and has caught up, remove one replica that is not
   in it (never the leader itself: it hands over first).

A replica the table no longer places on this broker (an *orphan*) stays open while its group
still talks to it; once no leader has reached it for ``ORPHAN_QUIET_S`` (its leader removed it
from the group) it is closed and its files deleted.

Removing a broker (``RemoveBroker``, on the metadata leader; resumable): propose a
ReassignPartition for each of its replicas (planned by ``frontend.deregister_broker``:
``assignors.reassign_without``), wait until the partition leaders report groups without it and
the broker reports no replicas, remove it from the metadata group, then propose
DeregisterBroker (with no moves left). While it runs the broker gets no new replicas.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from raftq.clock import SYSTEM_CLOCK, Clock
from raftq.metadata.machine import check_addr
from raftq.metadata.table import Table
from raftq.proto import api_pb2, errors, internal_pb2, metadata_pb2
from raftq.security import peer_channels
from raftq.transport.internal import InternalClient

if TYPE_CHECKING:
    from raftq.config import BrokerConfig
    from raftq.coordinator import BrokerReports, LiveBrokers
    from raftq.metadata.frontend import MetadataFrontend
    from raftq.metadata_client import MetadataClient
    from raftq.metadata_replica import MetadataReplica
    from raftq.replica import PartitionReplica

logger = logging.getLogger("raftq.broker.membership")

MEMBERS_FILE = "members.json"
CHANGE_TIMEOUT_S = 30.0
CATCH_UP_SLACK = 64  # entries a new replica may trail the commit index and count as caught up
RETRY_S = 0.5


# -- the metadata group's voters on disk -------------------------------------------------------


def read_members(meta_dir: Path) -> tuple[list[str], list[str]]:
    """The metadata members and, among them, the learners saved by ``write_members`` ([] and
    [] when never saved)."""
    try:
        data = json.loads((meta_dir / MEMBERS_FILE).read_text())
    except FileNotFoundError:
        return [], []
    members, learners = data.get("members", []), data.get("learners", [])
    for names in (members, learners):
        assert isinstance(names, list) and all(isinstance(m, str) for m in names), data
    return members, learners


def write_members(meta_dir: Path, members: list[str], learners: list[str]) -> None:
    """Save the members atomically and durably (tmp, fsync, rename, directory fsync)."""
    meta_dir.mkdir(parents=True, exist_ok=True)
    tmp = meta_dir / (MEMBERS_FILE + ".tmp")
    with tmp.open("w") as f:
        json.dump({"members": sorted(members), "learners": sorted(learners)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, meta_dir / MEMBERS_FILE)
    fd = os.open(meta_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def initial_voters(
    config: BrokerConfig, meta_dir: Path, stop: threading.Event | None = None
) -> tuple[list[str], list[str], bool]:
    """The members the metadata replica starts with, the learners among them, and whether it
    must join (standby, as a learner).

    Saved members win (a restart); a seed starts with the seeds; any other broker asks the
    brokers in ``broker.join_addrs`` for the current members, retrying until one answers.
    Raises ``errors.InvalidArgument`` when a new non-seed broker has no ``join_addrs``.
    """
    me = config.broker.raft_addr
    saved, learners = read_members(meta_dir)
    if saved:
        return sorted(set(saved) | {me}), learners, False
    if me in config.broker.seeds:
        return list(config.broker.seeds), [], False
    if not config.broker.join_addrs:
        raise errors.InvalidArgument(
            f"broker.raft_addr {me} is not in broker.seeds and this broker never joined: set "
            "broker.join_addrs to the client addresses of running brokers"
        )
    client = InternalClient(
        config.broker.cluster_secret,
        broker_id=config.broker.id,
        channel_factory=peer_channels(config),
    )
    try:
        while stop is None or not stop.is_set():
            for addr in config.broker.join_addrs:
                try:
                    answer = client.meta_members(addr, 2.0)
                except errors.RaftqError as exc:
                    logger.info("[group=meta] members from %s: %s (retrying)", addr, exc)
                    continue
                if answer.members:
                    logger.info(
                        "[group=meta] joining members %s (learners %s)",
                        list(answer.members),
                        list(answer.learners),
                    )
                    learners = sorted(set(answer.learners) | {me})
                    return sorted(set(answer.members) | {me}), learners, True
            time.sleep(RETRY_S)
        raise errors.Unavailable("stopped before any broker in broker.join_addrs answered")
    finally:
        client.close()


# -- the membership component ------------------------------------------------------------------


class Membership:
    """Joins, partition moves and broker removal for one broker. See the module docstring."""

    def __init__(
        self,
        *,
        broker_id: int,
        config: BrokerConfig,
        meta: MetadataReplica,
        metadata: MetadataClient,
        frontend: MetadataFrontend,
        internal: InternalClient,
        reports: BrokerReports,
        live: LiveBrokers,
        joining: bool,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``meta``: this broker's metadata replica (its raft node: members, learners,
        membership changes); ``metadata``: proposals and the leader's address; ``live``: the
        brokers that may take replicas; ``clock``: how long moves and removals wait."""
        self.broker_id = broker_id
        self._clock = clock
        self._config = config
        self._meta = meta
        self._metadata = metadata
        self._frontend = frontend
        self._internal = internal
        self._reports = reports
        self._live_brokers = live
        self.meta_dir = Path(config.broker.data_dir) / "meta"
        self.joining = joining
        self.draining: set[int] = set()  # brokers being removed: no new replicas on them
        self._saved = read_members(self.meta_dir)
        self._promoting = threading.Lock()  # one promotion at a time (pool thread)
        self._stop = threading.Event()
        self._moving: set[str] = set()
        self._moving_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="raftq-move")
        self._orphan_heard: dict[tuple[str, int], float] = {}
        self._last_transfer: dict[str, float] = {}
        self._join_thread: threading.Thread | None = None
        election_max_s = config.raft.election_timeout_max_ms / 1000
        self.orphan_quiet_s = max(3.0, 3 * election_max_s)

    def start(self) -> None:
        if self.joining:
            self._join_thread = threading.Thread(target=self._join, name="raftq-join", daemon=True)
            self._join_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._join_thread is not None:
            self._join_thread.join(timeout=5)

    # -- joining (this broker) ----------------------------------------------------------------

    def _join(self) -> None:
        request = internal_pb2.JoinClusterRequest(
            broker_id=self.broker_id, raft_addr=self._config.broker.raft_addr
        )
        targets = list(self._config.broker.join_addrs)
        while not self._stop.is_set():
            for addr in list(targets):
                try:
                    answer = self._internal.join_cluster(addr, request, 15.0)
                except errors.NotLeader as exc:
                    if exc.leader_hint and exc.leader_hint not in targets:
                        targets.insert(0, exc.leader_hint)
                    continue
                except errors.RaftqError as exc:
                    logger.info("[group=meta] join through %s: %s (retrying)", addr, exc)
                    continue
                logger.info(
                    "[group=meta] [broker=%d] joined the metadata group (%s); voters %s",
                    self.broker_id,
                    "added" if answer.added else "already a member",
                    list(answer.members),
                )
                self.joining = False
                return
            self._stop.wait(RETRY_S)

    def persist(self) -> None:
        """Save the metadata members when they changed (backend thread). Not while joining: a
        restart before the join completed must join again."""
        node = self._meta.node
        if self.joining or node.standby:
            return
        saved = (node.members(), node.learners())
        if saved != self._saved:
            write_members(self.meta_dir, *saved)
            self._saved = saved
            logger.info("[group=meta] members saved: %s, learners %s", *saved)

    # -- the metadata leader's side of a join ---------------------------------------------------

    def meta_members(self) -> internal_pb2.MetaMembersResponse:
        leader = self._meta.leader() or ""
        return internal_pb2.MetaMembersResponse(
            members=self._meta.node.members(),
            learners=self._meta.node.learners(),
            leader_raft_addr=leader,
            leader_client_addr=self._metadata.leader_addr() if leader else "",
        )

    def join_cluster(
        self, request: internal_pb2.JoinClusterRequest, timeout_s: float
    ) -> internal_pb2.MetaMembersResponse:
        """Add ``request.raft_addr`` to the metadata group as a learner (leader only;
        idempotent); ``promote_voters`` makes it a voter later if voters are missing.

        Normal errors: NotLeader (hint: the leader's client address), InvalidArgument (a bad
        address, or one a registered broker with another id uses), Timeout, Unavailable.
        """
        if not self._meta.is_leader():
            raise errors.NotLeader(
                "not the metadata leader", leader_hint=self._metadata.leader_addr()
            )
        check_addr(request.raft_addr, "raft_addr")
        for broker_id, info in sorted(self._meta.table.brokers.items()):
            if info.raft_addr == request.raft_addr and broker_id != request.broker_id:
                raise errors.InvalidArgument(
                    f"raft address {request.raft_addr} belongs to broker {broker_id}: remove "
                    "that broker first or use another address"
                )
        added = self._meta.node.change_membership("learner", request.raft_addr, timeout_s)
        if added:
            logger.info(
                "[group=meta] broker %d (%s) added as a learner",
                request.broker_id,
                request.raft_addr,
            )
        answer = self.meta_members()
        answer.added = added
        return answer

    def promote_voters(self) -> None:
        """Metadata leader, backend thread: while the voters are fewer than
        ``raft.metadata_voters``, promote a learner that has acknowledged the whole committed
        log (one change at a time, on the pool: the change waits for its commit)."""
        node = self._meta.node
        if not node.is_leader() or self._promoting.locked():
            return
        learners = node.learners()
        if not learners or len(node.voters()) >= self._config.raft.metadata_voters:
            return
        commit = node.commit_index
        ready = [a for a in learners if node.caught_up(a, index=commit)]
        if not ready:
            return
        with contextlib.suppress(RuntimeError):  # shutting down
            self._pool.submit(self._promote, ready[0])

    def _promote(self, addr: str) -> None:
        if not self._promoting.acquire(blocking=False):
            return
        node = self._meta.node
        try:
            if node.change_membership("promote", addr, CHANGE_TIMEOUT_S):
                logger.info("[group=meta] %s promoted to voter; voters %s", addr, node.voters())
        except errors.RaftqError as exc:
            logger.info("[group=meta] promoting %s: %s (will retry)", addr, exc)
        finally:
            self._promoting.release()

    # -- partition moves (backend thread, on the partition's leader) ----------------------------

    def lead_partition(self, replica: PartitionReplica, table: Table) -> bool:
        """Move the group toward the table's replica set; True while they differ (the caller
        then skips its other leader duties, leader balancing in particular)."""
        desired = self._desired(replica, table)
        if desired is None:
            return False
        node = replica.node
        members = node.members()
        if set(desired) == set(members) == set(node.voters()):
            return False  # moved: every replica of the new set votes, no other is a member
        if node.self_addr not in desired and self._hand_over(replica, desired):
            return True  # a new voter takes over; until one can, this leader adds them
        with self._moving_lock:
            if replica.name in self._moving:
                return True
            self._moving.add(replica.name)
        try:
            self._pool.submit(self._move_step, replica, desired)
        except RuntimeError:  # shutting down
            with self._moving_lock:
                self._moving.discard(replica.name)
        return True

    @staticmethod
    def _desired(replica: PartitionReplica, table: Table) -> list[str] | None:
        info = table.topic(replica.topic)
        if info is None or info.topic_id != replica.topic_id:
            return None
        ids = info.partitions[replica.partition].replicas
        addrs = [table.brokers[r].raft_addr for r in ids if r in table.brokers]
        return addrs if len(addrs) == len(ids) else None

    def _hand_over(self, replica: PartitionReplica, desired: list[str]) -> bool:
        """Hand leadership to a caught-up voter of the new set; False when there is none yet
        (the new replicas are not voters: this leader must add them first)."""
        node = replica.node
        voters = set(node.voters())
        target = next(
            (a for a in desired if a in voters and node.caught_up(a, CATCH_UP_SLACK)), None
        )
        if target is None:
            return False
        now = self._clock.monotonic_s()
        if now - self._last_transfer.get(replica.name, 0.0) < 1.0:
            return True
        self._last_transfer[replica.name] = now
        logger.info(
            "%s [group=%s] leaving the replica set: handing leadership to %s",
            replica.where,
            replica.name,
            target,
        )
        node.transfer_leadership(target)
        return True

    def _move_step(self, replica: PartitionReplica, desired: list[str]) -> None:
        node = replica.node
        where = f"{replica.where} [group={replica.name}]"
        try:
            members = node.members()
            learners = set(node.learners())
            missing = [a for a in desired if a not in members]
            if missing:
                # A learner first (Raft thesis 4.2.1): it counts toward no quorum while it
                # catches up, so the group commits as before even if an old replica is down.
                addr = missing[0]
                logger.info("%s adding replica %s as a learner (voters %s)", where, addr, members)
                node.change_membership("learner", addr, CHANGE_TIMEOUT_S)
                learners.add(addr)
            for addr in [a for a in desired if a in learners]:
                # caught up: it acknowledged the whole log up to now (and beyond)
                target = node.commit_index
                deadline = self._clock.monotonic_s() + 60.0
                while not node.caught_up(addr, index=target):
                    late = self._clock.monotonic_s() > deadline
                    if late or self._stop.is_set() or not node.is_leader():
                        return  # the next round looks again
                    self._clock.sleep_s(0.05)
                node.change_membership("promote", addr, CHANGE_TIMEOUT_S)
                logger.info("%s replica %s caught up and votes", where, addr)
                return
            lagging = [
                a for a in desired if a != node.self_addr and not node.caught_up(a, CATCH_UP_SLACK)
            ]
            if lagging:
                return  # remove nothing until the new set can carry the group
            # never itself: a leader leaving hands over first, once a new voter caught up
            extra = sorted(set(members) - set(desired) - {node.self_addr})
            if extra:
                logger.info("%s removing replica %s", where, extra[0])
                node.change_membership("remove", extra[0], CHANGE_TIMEOUT_S)
                logger.info("%s voters now %s", where, node.members())
        except errors.RaftqError as exc:
            logger.info("%s membership change: %s (will retry)", where, exc)
        except Exception:
            logger.exception("%s membership change failed (will retry)", where)
        finally:
            with self._moving_lock:
                self._moving.discard(replica.name)

    def keep_orphan(self, key: tuple[str, int], replica: PartitionReplica) -> bool:
        """Whether a replica the table no longer places here must stay open: its group still
        includes it (a leader reached it within ``orphan_quiet_s``, or it leads)."""
        now = self._clock.monotonic_s()
        if replica.is_leader() or replica.leader() is not None:
            self._orphan_heard[key] = now
            return True
        heard = self._orphan_heard.setdefault(key, now)
        if now - heard < self.orphan_quiet_s:
            return True
        del self._orphan_heard[key]
        logger.info(
            "%s [group=%s] no leader for %.1f s and not placed here: the group removed this "
            "replica",
            replica.where,
            replica.name,
            now - heard,
        )
        return False

    def forget_orphan(self, key: tuple[str, int]) -> None:
        self._orphan_heard.pop(key, None)

    # -- removing a broker (on the metadata leader) ---------------------------------------------

    def remove_broker(self, broker_id: int, timeout_s: float) -> api_pb2.RemoveBrokerResponse:
        """See the module docstring. Normal errors: InvalidArgument (not registered, or some
        replica has nowhere to go), NotLeader (this broker is the one removed: leadership was
        handed over, call again), Timeout (call again: it resumes), Unavailable."""
        deadline = self._clock.monotonic_s() + timeout_s
        info = self._meta.table.broker(broker_id)
        if info is None:
            raise errors.InvalidArgument(f"broker {broker_id} is not registered (removed already?)")
        if broker_id == self.broker_id:
            self._hand_over_metadata(deadline)
        self._wait_for_reports(broker_id, deadline)
        self.draining.add(broker_id)
        moved = 0
        try:
            moved_keys: set[tuple[str, int]] = set()
            while True:
                table = self._meta.table
                holding = table.partitions_of(broker_id)
                if holding:
                    for move in self._plan_moves(table, broker_id):
                        command = metadata_pb2.MetaCommand(
                            now_ms=self._metadata.now_ms(), reassign_partition=move
                        )
                        self._metadata.propose(command.SerializeToString(), self._left(deadline))
                        moved += 1
                        moved_keys.add((move.topic, move.partition))
                        logger.info(
                            "[topic/partition=%s/%d] replicas %s -> %s (removing broker %d)",
                            move.topic,
                            move.partition,
                            list(table.topics[move.topic].partitions[move.partition].replicas),
                            list(move.replicas),
                            broker_id,
                        )
                    continue
                pending = self._moves_pending(table, broker_id, info.raft_addr, moved_keys)
                if not pending:
                    break
                if self._clock.monotonic_s() >= deadline:
                    raise errors.Timeout(
                        f"broker {broker_id}: replicas still moving ({', '.join(pending[:5])}); "
                        "call RemoveBroker again to keep waiting"
                    )
                self._clock.sleep_s(0.2)
            if info.raft_addr in self._meta.node.members():
                self._meta.node.change_membership("remove", info.raft_addr, self._left(deadline))
                logger.info("[group=meta] broker %d (%s) removed", broker_id, info.raft_addr)
            data = self._frontend.deregister_broker(
                self._meta.table,
                broker_id,
                live_ids=self._live(broker_id),
                now_ms=self._metadata.now_ms(),
            )
            self._metadata.propose(data, self._left(deadline))
            logger.info("[broker=%d] deregistered broker %d", self.broker_id, broker_id)
        finally:
            self.draining.discard(broker_id)
        return api_pb2.RemoveBrokerResponse(moved_partitions=moved)

    def _wait_for_reports(self, broker_id: int, deadline: float) -> None:
        """A metadata leader elected moments ago has no reports yet and would see every other
        broker as dead: give the others one liveness window to report before planning."""
        until = min(deadline, self._clock.monotonic_s() + self._reports.alive_s + 1.0)
        while self._clock.monotonic_s() < until:
            others = set(self._meta.table.brokers) - {broker_id}
            if others <= self._live_brokers() | self.draining:
                return
            self._clock.sleep_s(0.1)

    def _left(self, deadline: float) -> float:
        left = deadline - self._clock.monotonic_s()
        if left <= 0:
            raise errors.Timeout("RemoveBroker ran out of time: call it again to resume")
        return left

    def _live(self, broker_id: int) -> set[int]:
        return self._live_brokers() - {broker_id}

    def _plan_moves(self, table: Table, broker_id: int) -> list[metadata_pb2.ReassignPartition]:
        data = self._frontend.deregister_broker(
            table, broker_id, live_ids=self._live(broker_id), now_ms=self._metadata.now_ms()
        )
        return list(metadata_pb2.MetaCommand.FromString(data).deregister_broker.moves)

    # -- moving one partition (on the metadata leader) ------------------------------------------

    def move_partition(
        self, topic: str, partition: int, replicas: list[int], timeout_s: float
    ) -> api_pb2.MovePartitionResponse:
        """``raftq partition move``: set the partition's replicas (a ReassignPartition, unless
        the table already has them) and wait until the leader reports the group's voters as
        exactly the new set; the partition's leader moves the data (``_move_step``). A new set
        that keeps none of the old replicas goes through their union first: a new replica
        hears only from the members it was opened with (the table's set), so the leader that
        adds it must be one of them. Normal errors: UnknownTopic, UnknownPartition,
        InvalidArgument (frontend.reassign_partition), Timeout (still moving: call again, it
        resumes), Unavailable."""
        deadline = self._clock.monotonic_s() + timeout_s
        current = self._meta.table.replicas(topic, partition)
        if current is not None and not set(current) & set(replicas):
            self._reassign_and_wait(topic, partition, [*replicas, *current], deadline)
        leader = self._reassign_and_wait(topic, partition, replicas, deadline)
        return api_pb2.MovePartitionResponse(replicas=replicas, leader=leader)

    def _reassign_and_wait(
        self, topic: str, partition: int, replicas: list[int], deadline: float
    ) -> int:
        """Propose ``replicas`` unless the table has them; wait for the move; its leader."""
        table = self._meta.table
        if table.replicas(topic, partition) != tuple(replicas):
            data = self._frontend.reassign_partition(
                table,
                topic,
                partition,
                replicas,
                live_ids=self._live_brokers(),
                now_ms=self._metadata.now_ms(),
            )
            before = table.replicas(topic, partition)
            self._metadata.propose(data, max(deadline - self._clock.monotonic_s(), 0.1))
            logger.info(
                "[topic/partition=%s/%d] replicas %s -> %s (move)",
                topic,
                partition,
                list(before or ()),
                replicas,
            )
        while True:
            table = self._meta.table
            if table.replicas(topic, partition) != tuple(replicas):
                raise errors.Unavailable(
                    f"{topic}/{partition} was moved again meanwhile: "
                    f"now {list(table.replicas(topic, partition) or ())}"
                )
            leader = self._moved_leader(table, topic, partition)
            if leader is not None:
                return leader
            if self._clock.monotonic_s() >= deadline:
                raise errors.Timeout(
                    f"{topic}/{partition} is still moving to {replicas}: call again to keep "
                    "waiting (it goes on meanwhile)"
                )
            self._clock.sleep_s(0.1)

    def _moved_leader(self, table: Table, topic: str, partition: int) -> int | None:
        """The broker leading ``topic/partition`` with exactly the table's replicas as voters
        (the latest term reported), or None while the move goes on."""
        info = table.topic(topic)
        replicas = table.replicas(topic, partition)
        if info is None or replicas is None:
            return None
        want = {table.brokers[r].raft_addr for r in replicas if r in table.brokers}
        best: tuple[int, int, set[str]] | None = None
        for broker_id, report in self._reports.latest().items():
            for r in report.replicas:
                if (r.topic, r.partition, r.topic_id) != (topic, partition, info.topic_id):
                    continue
                if r.leader and (best is None or r.term >= best[0]):
                    best = (r.term, broker_id, set(r.members))
        if best is None or best[2] != want or best[1] not in replicas:
            return None
        return best[1]

    def _moves_pending(
        self, table: Table, broker_id: int, raft_addr: str, moved: set[tuple[str, int]]
    ) -> list[str]:
        """What still keeps the broker in some partition group, from the live reports."""
        reports = self._reports.latest()
        pending: list[str] = []
        own = reports.get(broker_id)
        if own is not None:
            pending += [f"{r.topic}/{r.partition} open on it" for r in own.replicas]
        leaders: dict[tuple[str, int], tuple[int, list[str]]] = {}
        for report in reports.values():
            for r in report.replicas:
                current = table.topic(r.topic)
                if current is None or current.topic_id != r.topic_id or not r.leader:
                    continue
                key = (r.topic, r.partition)
                if r.term >= leaders.get(key, (-1, []))[0]:
                    leaders[key] = (r.term, list(r.members))
        for (name, partition), (_term, members) in sorted(leaders.items()):
            if raft_addr in members:
                pending.append(f"{name}/{partition} group still has it")
        for key in sorted(moved):
            replicas = table.replicas(*key)
            if replicas is None:
                continue  # deleted meanwhile
            want = {table.brokers[r].raft_addr for r in replicas if r in table.brokers}
            if key not in leaders or set(leaders[key][1]) != want:
                pending.append(f"{key[0]}/{key[1]} not yet on {sorted(replicas)}")
        return pending

    def _hand_over_metadata(self, deadline: float) -> None:
        """This broker is being removed and leads the metadata group: hand leadership over and
        tell the caller to retry on the new leader."""
        meta = self._meta
        if meta.is_leader():
            meta.node.transfer_leadership()
            until = min(deadline, self._clock.monotonic_s() + 5.0)
            while meta.is_leader() and self._clock.monotonic_s() < until:
                self._clock.sleep_s(0.05)
        raise errors.NotLeader(
            "this broker is being removed: the metadata leadership moved, retry there",
            leader_hint=self._metadata.leader_addr(),
        )
