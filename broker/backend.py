"""The backend: reconciles this broker toward the metadata table, with retries.

One thread, a step every ``interval_s`` (sooner when the table changes; every
``IDLE_INTERVAL_S`` while no send is in flight, no consumer session is due to expire here
(the metadata leader of a group with members), no WAL trim is queued and no replica is left
to open). Each step:

1. registers this broker in the table if it is missing or its addresses changed;
2. opens a PartitionReplica for every partition the table places here and closes the replicas
   of topics that no longer exist; then removes the directory of every topic the table has
   deleted (``deleted_topic_dirs``: an id below ``next_topic_id`` that no topic has), so the
   files of a topic deleted while this broker was down go at its first reconcile;
3. for every partition it leads whose topic the latest table still has (never one deleted
   meanwhile: its peers are gone and a proposal would only time out): replicates the topic's
   config into the partition (``Configure``) when it differs, applies retention (``Retain``)
   every ``retain_interval_s``, forwards dead letters from the outbox to the dead-letter topic
   (creating that topic on first use; as many per round as fit ``client.batch_bytes_max``
   encoded bytes, a lone larger one alone) and then proposes ``DeadLetterDone``, and hands
   leadership to the partition's preferred leader when that broker is alive (leader balance,
   like Kafka's preferred-leader election: placement spreads preferred leaders evenly; off
   with ``broker.auto_leader_rebalance: false``, then ``raftq cluster rebalance-leaders``);
   a replica whose duties left nothing pending is passed over until the table, its applied
   index or its term changes, or ``LEAD_SETTLED_S`` passed (``_still_settled``);
4. on the metadata leader: expires consumer sessions (LeaveGroup + lease release), deletes
   groups empty for ``groups.offsets_retention_ms`` by its clock, and groups an interrupted
   DeleteGroup left deleting, and forgets Spark txn watermarks not raised for
   ``txns.expiration_ms`` (both on the broker's background pool: a slow partition or a
   metadata group without quorum never delays this thread), and promotes a caught-up learner
   while voters are missing (``Membership.promote_voters``);
5. refreshes the broker's gRPC health (``Broker.not_ready``), so health ``Watch`` streams follow;
6. every 0.1 s, runs the proposer housekeeping of replicas with sends in flight (a send
   stream's sends have no waiting thread to do it: broker/proposer.py ``maintain``);
7. truncates the SQLite WAL of partitions idle for ``storage.wal_trim_idle_ms``, one at a
   time on the driver (broker/wal_trim.py).

Every step is idempotent; a failure is logged and retried on the next step.

Reports of this broker's replicas to the metadata leader (its liveness, leadership, offsets)
go from a thread of their own every ``REPORT_INTERVAL_S``: no backend duty (a proposal to a
partition without quorum waits up to 5 s) can delay them past the leader's 3 s liveness window.
A report that says what the last answered one said goes only every ``REPORT_UNCHANGED_MAX_S``.
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING

from raftq.clock import SYSTEM_CLOCK, Clock
from raftq.config import RECORD_FRAMING_BYTES
from raftq.dead_letters import dead_letter_partition, dead_letter_record
from raftq.metadata.machine import EXPIRE_TXNS_MAX
from raftq.metadata.table import Table
from raftq.partitions.rows import OutboxRow
from raftq.partitions.schedules import plan_fire
from raftq.proto import api_pb2, common_pb2, errors, internal_pb2, partition_pb2
from raftq.replica import PartitionReplica, group_name
from raftq.transport.request_checks import check_send
from raftq.wal_trim import WalTrimmer

if TYPE_CHECKING:
    from raftq.config import BrokerConfig
    from raftq.coordinator import BrokerReports, SessionTable
    from raftq.handlers import RequestHandlers
    from raftq.membership import Membership
    from raftq.metadata.frontend import MetadataFrontend
    from raftq.metadata_client import MetadataClient
    from raftq.metadata_replica import MetadataReplica
    from raftq.replica_set import ReplicaSet
    from raftq.transport.internal import InternalClient
    from raftq.transport.raft import RaftTimings
    from raftq.transport.raft.driver import RaftDriver

logger = logging.getLogger("raftq.broker.backend")

REPORT_INTERVAL_S = 0.5
# A report that says what the last one the same metadata leader answered said is sent only once
# this long passed (liveness: the leader's window is 3 s, and raft link traffic counts too).
REPORT_UNCHANGED_MAX_S = 1.0
PROPOSER_MAINTAIN_S = 0.1
RETAIN_INTERVAL_S = 5.0
# A partition whose state did not change since its last Retain is retained this seldom (only
# time can expire its records or dedup state); one never appended to is never retained.
IDLE_RETAIN_INTERVAL_S = 60.0
DLQ_INTERVAL_S = 0.5
# Leader duties run this often (and at once when the table changes): at 1,000 partitions a
# pass over every led replica each 0.1 s step was a measurable share of an idle broker's CPU.
LEAD_INTERVAL_S = 0.5
# A led replica whose duties found nothing pending (config replicated, no dead letters, no
# schedules, not moving) is passed over until the table, its applied index or its term
# changes, or this long passed (retention and leader balancing are judged on this grain).
LEAD_SETTLED_S = 5.0
# The step interval while nothing needs the 0.1 s grain: no send in flight (proposer
# housekeeping), no group member (the metadata leader's session expiry), no replica to open.
IDLE_INTERVAL_S = 0.5
# Replicas are reconciled on every table change and, for retries, this often.
RECONCILE_INTERVAL_S = 1.0
BALANCE_INTERVAL_S = 5.0
# A leadership an election moved off its preferred replica is handed back on its own only
# after its new leader has held it this long (a new group's first leader at once): when the
# preferred broker lost it by being slow (CPU contention), handing it straight back made it
# lose it again, an election every few seconds (issue 16). Kafka checks every 300 s.
PREFER_LEADER_AFTER_S = 30.0
# Seconds one step may spend opening replicas; the rest open in the next steps, so a broker
# given hundreds of new partitions still reports (stays alive for the metadata leader).
OPEN_BUDGET_S = 0.5
RESTORE_INTERVAL_S = 0.5  # how often a restore marker (broker/backup.py) is looked at
RESTORE_DIR = "restore"  # <data_dir>/restore/{backup_id,table.bin}: written by `raftq restore`
REFUSED_RESTORE_DIR = "restore.refused"
DLQ_BATCH = 200
GROUP_DELETE_TIMEOUT_S = 30.0


def expiry_interval_s(retention_ms: int) -> float:
    """How often the metadata leader looks for expired groups: a tenth of the retention,
    within 1-60 s."""
    return min(60.0, max(1.0, retention_ms / 10_000))


def expired_groups(table: Table, retention_ms: int, now_ms: int) -> list[tuple[str, int]]:
    """(group, empty_since_ms) of the groups to delete: left deleting by an interrupted
    DeleteGroup (empty_since 0: finish it whatever happened since), or empty for at least
    ``retention_ms`` by the metadata leader's ``now_ms`` (0 = never expire)."""
    out = []
    for name, group in table.groups.items():
        if group.deleting:
            out.append((name, 0))
        elif retention_ms and not group.members and group.empty_since_ms + retention_ms <= now_ms:
            out.append((name, group.empty_since_ms))
    return sorted(out)


def expired_txns(table: Table, expiration_ms: int, now_ms: int) -> list[tuple[str, str]]:
    """Spark watermarks ((app id, scope)) last raised at least ``expiration_ms`` before the
    metadata leader's ``now_ms``, sorted (0 = never expire)."""
    if not expiration_ms:
        return []
    return sorted(
        key for key in table.txns if table.txn_committed_ms.get(key, 0) + expiration_ms <= now_ms
    )


class Backend:
    """See the module docstring. ``draining``: the metadata leader's last report ack said
    this broker is being removed (gRPC health then says NOT_SERVING)."""

    def __init__(
        self,
        *,
        broker_id: int,
        config: BrokerConfig,
        meta: MetadataReplica,
        metadata: MetadataClient,
        frontend: MetadataFrontend,
        replicas: ReplicaSet,
        handlers: RequestHandlers,
        membership: Membership,
        sessions: SessionTable,
        reports: BrokerReports,
        internal: InternalClient,
        driver: RaftDriver,
        partition_timings: RaftTimings,
        connected_peers: Callable[[], frozenset[str]],
        refresh_health: Callable[[], object],
        on_open: Callable[[PartitionReplica], None],
        background: Executor,
        interval_s: float = 0.1,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``handlers``: the calls the backend makes as any client would (dead letters sent,
        their topic created, sessions expired, groups deleted, txns expired) and the
        ``new_records`` a replica's apply wakes; ``on_open``: a new replica (metrics attach
        their hook); ``background``: the broker's small pool for deletions and expiries;
        ``clock``: the time its duties and the replicas it opens read, and how it waits."""
        self.broker_id = broker_id
        self._config = config
        self._data_dir = Path(config.broker.data_dir)
        self._meta = meta
        self._metadata = metadata
        self._frontend = frontend
        self._replicas = replicas
        self._handlers = handlers
        self._membership = membership
        self._sessions = sessions
        self._reports = reports
        self._internal = internal
        self._driver = driver
        self._partition_timings = partition_timings
        self._connected_peers = connected_peers
        self._refresh_health = refresh_health
        self._on_open = on_open
        self._background = background
        self.draining = False
        self.interval_s = interval_s
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raftq-backend", daemon=True)
        self._reporter = threading.Thread(
            target=self._report_run, name="raftq-reporter", daemon=True
        )
        self._due: dict[str, float] = {}
        self._was_meta_leader = False
        self._registered: tuple[str, str, str] | None = None
        self._led_table: Table | None = None
        self._reconciled_table: Table | None = None
        self._retained_at: dict[str, int] = {}  # replica name -> raft applied index after Retain
        self._outbox_empty_at: dict[str, int] = {}  # replica name -> outbox_seq seen empty
        self._swept: tuple[int, frozenset[int]] | None = None  # table topic ids last swept
        self._deleting: set[str] = set()  # groups whose deletion runs on the background pool
        self._expiring_txns = False  # an ExpireTxns runs on the background pool
        self._wal_trimmer = WalTrimmer(config.storage.wal_trim_idle_ms / 1000)
        # replica name -> (table, applied index, term, monotonic until): duties found settled
        self._settled: dict[str, tuple[Table, int, int, float]] = {}
        self._busy = True  # the last step found something needing the 0.1 s grain
        # (metadata leader, monotonic time, report) of the last report it answered
        self._last_report: tuple[str, float, internal_pb2.BrokerReport] | None = None

    def start(self) -> None:
        self._thread.start()
        self._reporter.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in (self._thread, self._reporter):
            if thread.is_alive():
                thread.join(timeout=10)

    def wake(self, _table: Table | None = None) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:
                logger.exception("[broker=%d] backend step failed; retrying", self.broker_id)
            interval_s = self.interval_s if self._busy else max(self.interval_s, IDLE_INTERVAL_S)
            self._clock.wait_s(self._wake, interval_s)
            self._wake.clear()

    def _report_run(self) -> None:
        """Report every REPORT_INTERVAL_S on a fixed cadence, whatever the backend step does."""
        next_at = self._clock.monotonic_s()
        while not self._stop.is_set():
            try:
                self.report()
            except errors.RaftqError as exc:
                logger.info("[broker=%d] report: %s (will retry)", self.broker_id, exc)
            except Exception:
                logger.exception("[broker=%d] report failed; retrying", self.broker_id)
            next_at = max(next_at + REPORT_INTERVAL_S, self._clock.monotonic_s())
            self._clock.wait_s(self._stop, next_at - self._clock.monotonic_s())

    def _every(self, key: str, interval_s: float) -> bool:
        now = self._clock.monotonic_s()
        if now < self._due.get(key, 0.0):
            return False
        self._due[key] = now + interval_s
        return True

    # ------------------------------------------------------------------------------------

    def step(self) -> None:
        table = self._meta.table
        self._guarded("register", lambda: self._register(table))
        if table is not self._reconciled_table or self._every("reconcile", RECONCILE_INTERVAL_S):
            self._reconciled_table = table  # a retry (failed open) waits for the next interval
            self._reconcile(table)
        if self._every("restore", RESTORE_INTERVAL_S):
            self._guarded("restore", lambda: self._restore_table(table))
        self._guarded("members", self._membership.persist)
        self._guarded("voters", self._membership.promote_voters)
        self._refresh_health()  # gRPC health follows metadata quorum and registration
        if self._every("lead", LEAD_INTERVAL_S) or table is not self._led_table:
            self._led_table = table
            now = self._clock.monotonic_s()
            for replica in self._replicas.replicas():
                if replica.is_leader():
                    # the latest table: a topic deleted since this step began is skipped
                    latest = self._meta.table
                    if not self._still_settled(replica, latest, now):
                        lead = functools.partial(self._lead_once, replica, latest, now)
                        self._guarded(replica.where, lead)
        self._guarded("sessions", lambda: self._coordinate(table))
        busy = (
            (self._meta.is_leader() and any(g.members for g in table.groups.values()))
            or self._reconciled_table is None  # replicas left to open
            or table.broker(self.broker_id) is None  # not registered yet
        )
        if self._every("proposers", PROPOSER_MAINTAIN_S):
            # Sends taken without a waiting thread (a send stream's) have no waiter to run
            # the proposer's housekeeping (NotLeader for queued sends after a leadership
            # loss, expiry of lost entries): run it here.
            for replica in self._replicas.replicas():
                if replica.proposer.busy():
                    busy = True
                    replica.proposer.maintain()
        self._wal_trimmer.step(self._replicas.replicas, self._clock.monotonic_s())
        self._busy = busy or self._wal_trimmer.busy()  # one trim a step: keep stepping

    def _still_settled(self, replica: PartitionReplica, table: Table, now: float) -> bool:
        """Whether ``replica``'s leader duties found nothing pending last time and nothing they
        read has changed since (the table, its applied index, its term), within
        LEAD_SETTLED_S."""
        settled = self._settled.get(replica.name)
        if settled is None:
            return False
        was_table, applied, term, until = settled
        node = replica.node
        same = was_table is table and (applied, term) == (node.applied_index, node.term)
        if same and now < until:
            return True
        del self._settled[replica.name]
        return False

    def _lead_once(self, replica: PartitionReplica, table: Table, now: float) -> None:
        """Run ``replica``'s leader duties; when they left nothing pending, remember it so the
        next passes skip the replica (``_still_settled``)."""
        self._settled.pop(replica.name, None)
        if not self._lead(replica, table):
            return
        node = replica.node
        self._settled[replica.name] = (table, node.applied_index, node.term, now + LEAD_SETTLED_S)

    def _guarded(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except errors.RaftqError as exc:
            logger.info("[broker=%d] %s: %s (will retry)", self.broker_id, what, exc)

    def _register(self, table: Table) -> None:
        me = (
            self._config.broker.client_addr,
            self._config.broker.raft_addr,
            self._config.broker.rack,
        )
        known = table.broker(self.broker_id)
        if known is not None and (known.client_addr, known.raft_addr, known.rack) == me:
            return
        if not self._every("register", 1.0) or self._meta.leader() is None:
            return
        data = self._frontend.register_broker(
            table, self.broker_id, *me, now_ms=self._metadata.now_ms()
        )
        self._metadata.propose(data, 5.0)
        logger.info("[broker=%d] registered %s", self.broker_id, me)

    def _restore_table(self, table: Table) -> None:
        """A data directory seeded by ``raftq restore`` holds ``restore/table.bin``: the metadata
        leader proposes it as RestoreTable into the fresh cluster; every broker removes the
        marker once its table was restored from that backup (broker/backup.py)."""
        marker = restore_marker(self._data_dir)
        if marker is None:
            return
        backup_id, data = marker
        if table.restored_from == backup_id:
            shutil.rmtree(self._data_dir / RESTORE_DIR, ignore_errors=True)
            logger.info("[broker=%d] restored from backup %s", self.broker_id, backup_id)
            return
        if table.restored_from or table.topics or table.groups:
            logger.error(
                "[broker=%d] %s holds backup %s to restore, but this cluster is not fresh "
                "(topics or groups exist): nothing restored; the marker is kept as %s",
                self.broker_id,
                self._data_dir / RESTORE_DIR,
                backup_id,
                REFUSED_RESTORE_DIR,
            )
            shutil.rmtree(self._data_dir / REFUSED_RESTORE_DIR, ignore_errors=True)
            (self._data_dir / RESTORE_DIR).rename(self._data_dir / REFUSED_RESTORE_DIR)
            return
        if self._meta.is_leader():
            command = self._frontend.restore_table(
                table, data, backup_id, now_ms=self._metadata.now_ms()
            )
            self._metadata.propose(command, 5.0)

    def _reconcile(self, table: Table) -> None:
        wanted: dict[tuple[str, int], tuple[int, list[str]]] = {}
        for topic, partition in table.partitions_of(self.broker_id):
            info = table.topics[topic]
            replicas = info.partitions[partition].replicas
            addrs = [table.brokers[r].raft_addr for r in replicas if r in table.brokers]
            if len(addrs) == len(replicas):  # every replica broker registered
                wanted[(topic, partition)] = (info.topic_id, addrs)
        for key, replica in self._replicas.snapshot():
            topic_id = wanted.get(key, (None, []))[0]
            if topic_id == replica.topic_id:
                self._membership.forget_orphan(key)
                continue
            current = table.topic(replica.topic)
            if current is not None and current.topic_id == replica.topic_id:
                # Moved off this broker: stay in the group until its leader removed us.
                if not self._membership.keep_orphan(key, replica):
                    self._remove(key, replica, delete_files=True)
                continue
            self._remove(key, replica)
        self._sweep_deleted_topics(table)
        started = self._clock.monotonic_s()
        for key, (topic_id, addrs) in wanted.items():
            if key not in self._replicas:
                if self._clock.monotonic_s() - started > OPEN_BUDGET_S:
                    self._reconciled_table = None  # open the rest in the next step,
                    self._wake.set()  # after its report
                    break
                self._guarded(f"open {key}", lambda k=key, t=topic_id, a=addrs: self._open(k, t, a))  # type: ignore[misc]

    def _partition_dir(self, topic: str, topic_id: int) -> Path:
        return Path(self._data_dir) / "partitions" / f"{topic}-{topic_id}"

    def _open(self, key: tuple[str, int], topic_id: int, peers: list[str]) -> None:
        topic, partition = key
        data_dir = self._partition_dir(topic, topic_id)
        info = self._meta.table.topic(topic)
        # A replica moved here joins a running group (the leader adds it): no campaigns first.
        fresh = not (data_dir / f"{group_name(topic_id, partition)}.journal").exists()
        standby = fresh and info is not None and info.moved(partition)
        replica = PartitionReplica(
            topic,
            partition,
            topic_id,
            data_dir=self._partition_dir(topic, topic_id),
            self_addr=self._config.broker.raft_addr,
            peers=peers,
            driver=self._driver,
            fsync=self._config.raft.fsync,
            synchronous=self._config.storage.synchronous,
            cache_kib=self._config.storage.cache_kib,
            wal_autocheckpoint_pages=self._config.storage.wal_autocheckpoint_pages,
            wal_size_limit_bytes=self._config.storage.wal_size_limit_bytes,
            max_inflight_entries=self._config.raft.max_inflight_entries_per_partition,
            max_clock_skew_ms=self._config.raft.max_clock_skew_ms,
            timings=self._partition_timings,
            clock=self._clock.wall_s,
            monotonic=self._clock.monotonic_s,
            standby=standby,
        )
        replica.on_applied = self._handlers.new_records.notify
        self._on_open(replica)  # metrics: the apply latency histogram
        self._replicas.add(key, replica)

    def _remove(
        self, key: tuple[str, int], replica: PartitionReplica, *, delete_files: bool = False
    ) -> None:
        """Close a replica. A moved replica's files go now (``delete_files``); a deleted
        topic's directory goes in ``_sweep_deleted_topics``, once no replica of it is open
        here (the topic's partitions share it)."""
        self._replicas.remove(key)
        self._settled.pop(replica.name, None)
        replica.close()
        if delete_files:  # moved to another broker: this replica's files only
            data_dir = self._partition_dir(replica.topic, replica.topic_id)
            for path in data_dir.glob(f"{replica.name}.*"):
                path.unlink(missing_ok=True)
        logger.info("%s [group=%s] replica removed", replica.where, replica.name)

    def _sweep_deleted_topics(self, table: Table) -> None:
        """Remove the directories of deleted topics (none of their replicas is open here).
        Runs when the table's topic ids change, so also at the first reconcile after a restart:
        a topic deleted while this broker was down, or mid-removal, leaves nothing behind."""
        swept = (table.next_topic_id, frozenset(t.topic_id for t in table.topics.values()))
        if swept == self._swept:
            return
        open_ids = {replica.topic_id for replica in self._replicas.replicas()}
        root = Path(self._data_dir) / "partitions"
        names = [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
        failed = False
        for name, topic_id in deleted_topic_dirs(table, names):
            if topic_id in open_ids:
                continue
            try:
                shutil.rmtree(root / name)
            except OSError as exc:
                failed = True
                logger.warning(
                    "[broker=%d] deleted topic's %s not removed: %s", self.broker_id, name, exc
                )
                continue
            logger.info("[broker=%d] removed %s: its topic was deleted", self.broker_id, name)
        self._swept = None if failed else swept

    def report(self) -> None:
        report = internal_pb2.BrokerReport(
            broker_id=self.broker_id, sent_ms=self._metadata.now_ms()
        )
        for (topic, partition), replica in self._replicas.snapshot():
            try:  # in-memory state, read without locks: a report is a hint, not a read
                offsets = replica.machine.offsets()
                applied_index, term = replica.node.applied_index, replica.node.term
            except Exception:  # a replica closing under us
                continue
            report.replicas.add(
                topic=topic,
                partition=partition,
                topic_id=replica.topic_id,
                leader=replica.is_leader(),
                leader_raft_addr=replica.leader() or "",
                log_start=offsets.log_start,
                end=offsets.end,
                applied_index=applied_index,
                healthy=replica.healthy,
                term=term,
                members=replica.node.voters() if replica.is_leader() else [],
            )
        if self._meta.is_leader():
            self._reports.record(report)
            self.draining = self.broker_id in self._membership.draining
            return
        target = self._metadata.leader_addr()
        if not target:
            return
        now = self._clock.monotonic_s()
        last = self._last_report
        if (
            last is not None
            and last[0] == target
            and now - last[1] < REPORT_UNCHANGED_MAX_S
            and last[2].replicas == report.replicas
        ):
            return  # the leader has all of it; the raft link keeps this broker live meanwhile
        self._last_report = None  # until this one is answered
        self.draining = self._internal.report(target, report, 2.0).draining
        self._last_report = (target, now, report)

    # -- leader duties -----------------------------------------------------------------------

    def _lead(self, replica: PartitionReplica, table: Table) -> bool:
        """One pass of a led replica's duties; True when nothing is left pending (config
        replicated, outbox empty, no schedules, not moving): only time (retention, leader
        balance) or a change of the table, applied index or term gives it more to do."""
        info = table.topic(replica.topic)
        if info is None or info.topic_id != replica.topic_id:
            return False  # deleted (the next reconcile closes it): nothing to propose to
        settled = True
        if replica.config_bytes() != info.config_bytes:
            configure = partition_pb2.Configure(
                config=info.config, topic=replica.topic, partition=replica.partition
            )
            replica.propose(partition_pb2.PartitionCommand(configure=configure), 5.0)
            logger.info("%s config replicated", replica.where)
            settled = False
        # an idle partition is still retained at least once per retention_ms (5 s at least)
        retention_s = info.config.retention_ms / 1000 or IDLE_RETAIN_INTERVAL_S
        idle_s = max(RETAIN_INTERVAL_S, min(IDLE_RETAIN_INTERVAL_S, retention_s))
        if self._every(f"retain {replica.name}", RETAIN_INTERVAL_S) and self._retain_due(
            replica, idle_s
        ):
            replica.propose(partition_pb2.PartitionCommand(retain=partition_pb2.Retain()), 5.0)
            self._retained_at[replica.name] = replica.node.applied_index
            self._due[f"idle retain {replica.name}"] = self._clock.monotonic_s() + idle_s
        if self._every(f"dlq {replica.name}", DLQ_INTERVAL_S):
            self._forward_dead_letters(replica, table)
        if self._outbox_empty_at.get(replica.name) != replica.machine.meta.outbox_seq:
            settled = False  # dead letters to forward
        if replica.machine.schedule_count:
            settled = False  # schedules fire by time
            self._fire_schedules(replica)
        if self._membership.lead_partition(replica, table):
            return False  # replicas moving (broker/membership.py): no leader balancing meanwhile
        if self._every(f"balance {replica.name}", BALANCE_INTERVAL_S):
            self._prefer_leader(replica, table)
        return settled

    def _fire_schedules(self, replica: PartitionReplica) -> None:
        """Propose the recurring records due at the partition's clock (partitions/schedules.py
        ``plan_fire``); the machine fires each slot once, whatever else proposes it."""
        fire, problems = plan_fire(replica.schedules(), replica.now_ms())
        if problems and self._every(f"schedule problems {replica.name}", 60.0):
            logger.warning("%s schedules that cannot be planned: %s", replica.where, problems)
        if fire is None:
            return
        try:  # a failed proposal is planned again at the next tick (a stale plan fires nothing)
            replica.propose(partition_pb2.PartitionCommand(fire_schedules=fire), 5.0)
        except errors.RaftqError as exc:
            logger.info("%s firing schedules: %s (the next tick plans again)", replica.where, exc)

    def _retain_due(self, replica: PartitionReplica, idle_s: float) -> bool:
        """Whether a Retain may change something. Never for a partition that was never appended
        to (no records, no dedup state); every ``idle_s`` when nothing was applied since the
        last Retain; else every RETAIN_INTERVAL_S."""
        if replica.machine.offsets().end == 0:
            return False
        if self._retained_at.get(replica.name) != replica.node.applied_index:
            return True
        return self._every(f"idle retain {replica.name}", idle_s)

    def _forward_dead_letters(self, replica: PartitionReplica, table: Table) -> None:
        seq = replica.machine.meta.outbox_seq  # dead letters ever; unchanged = still none
        if self._outbox_empty_at.get(replica.name) == seq:
            return
        rows = replica.outbox(DLQ_BATCH)
        if not rows:
            self._outbox_empty_at[replica.name] = seq
            return
        info = table.topics[replica.topic]
        target = info.config.dead_letter_topic
        if target:
            dlq = table.topic(target)
            if dlq is None:  # created on the metadata leader: its view of live brokers
                self._handlers.admin.create_dead_letter_topic(replica.topic, 5.0)
                return  # next round, once the topic has leaders
            rows = _dead_letters_within(replica, rows, self._config.client.batch_bytes_max)
            self._send_dead_letters(replica, rows, target, dlq.partition_count)
        else:
            logger.warning(
                "%s dropping %d dead letters: the topic has no dead_letter_topic",
                replica.where,
                len(rows),
            )
        done = partition_pb2.DeadLetterDone(up_to_seq=rows[-1].seq)
        replica.propose(partition_pb2.PartitionCommand(dead_letter_done=done), 5.0)
        logger.info("%s forwarded %d dead letters to %r", replica.where, len(rows), target)

    def _send_dead_letters(
        self, replica: PartitionReplica, rows: list[OutboxRow], target: str, partitions: int
    ) -> None:
        """Append the outbox rows to the dead-letter topic, each to the partition it goes to
        on every attempt with an idempotency key naming it: forwarding rows again (a new
        leader after the old one died before ``DeadLetterDone``) stores nothing twice.
        Raises Unavailable (will retry) when some row was not stored."""
        by_partition: dict[int, list[common_pb2.Record]] = {}
        for row in rows:
            record = dead_letter_record(replica.topic, replica.partition, row, replica.topic_id)
            partition = dead_letter_partition(record, replica.partition, partitions)
            by_partition.setdefault(partition, []).append(record)
        for partition, records in sorted(by_partition.items()):
            request = api_pb2.SendRequest(topic=target, records=records, partition=partition)
            response = self._handlers.produce.send(check_send(request), timeout_s=5.0)
            failed = [r for r in response.results if r.error]
            if failed:
                raise errors.Unavailable(
                    f"{replica.where} dead letters not forwarded to {target}/{partition}: "
                    f"{failed[0].message}"
                )

    def _prefer_leader(self, replica: PartitionReplica, table: Table) -> None:
        if self._config.broker.auto_leader_rebalance:
            self.prefer_leader(replica, table, settle_s=PREFER_LEADER_AFTER_S)

    def prefer_leader(
        self, replica: PartitionReplica, table: Table, *, settle_s: float = 0.0
    ) -> bool:
        """Hand a replica this broker leads to its preferred leader when that broker is
        connected and a voter of the group (not mid-move), and this broker has led it for
        `settle_s` (a new group's first leader at once); True when a transfer started."""
        replicas = table.replicas(replica.topic, replica.partition) or ()
        if not replicas or replicas[0] == self.broker_id:
            return False
        if replica.node.term > 1 and replica.node.led_for_s() < settle_s:
            return False  # an election moved it here: let it settle (PREFER_LEADER_AFTER_S)
        preferred = table.broker(replicas[0])
        if preferred is None or preferred.raft_addr not in self._connected_peers():
            return False
        if preferred.raft_addr not in replica.node.members():
            return False
        logger.info(
            "%s handing leadership to preferred leader broker %d", replica.where, replicas[0]
        )
        replica.node.transfer_leadership(preferred.raft_addr)
        return True

    # -- metadata leader ---------------------------------------------------------------------

    def _coordinate(self, table: Table) -> None:
        leader = self._meta.is_leader()
        if leader != self._was_meta_leader:
            self._sessions.reset()  # a new leader gives every member a fresh session
            self._reports.reset()
            self._was_meta_leader = leader
        if not leader:
            return
        for group, members in self._sessions.expired(table).items():
            logger.info("[group=%s] sessions expired: %s", group, members)
            self._handlers.groups.remove_members(group, members, "session expired", 5.0)
        retention_ms = self._config.groups.offsets_retention_ms
        if self._every("group expiry", expiry_interval_s(retention_ms)):
            now_ms = self._meta.expiry_now_ms()  # quorum clock less the skew: never early
            for name, empty_since_ms in expired_groups(table, retention_ms, now_ms):
                self._delete_group(name, empty_since_ms)
        expiration_ms = self._config.txns.expiration_ms
        if expiration_ms and self._every("txn expiry", expiry_interval_s(expiration_ms)):
            now_ms = self._metadata.now_ms()
            apps = expired_txns(table, expiration_ms, now_ms)
            if apps:
                self._expire_txns(apps[:EXPIRE_TXNS_MAX], now_ms - expiration_ms)

    def _expire_txns(self, apps: list[tuple[str, str]], committed_before_ms: int) -> None:
        """Propose ExpireTxns on the broker's background pool (one at a time)."""
        if self._expiring_txns:
            return
        self._expiring_txns = True

        def run() -> None:
            try:
                self._handlers.admin.expire_txns_here(
                    apps, committed_before_ms, GROUP_DELETE_TIMEOUT_S
                )
            except errors.RaftqError as exc:
                logger.info("[group=metadata] txn expiry deferred: %s (will retry)", exc)
            finally:
                self._expiring_txns = False

        try:
            self._background.submit(run)
        except RuntimeError:  # shutting down
            self._expiring_txns = False

    def _delete_group(self, name: str, empty_since_ms: int) -> None:
        """Delete an expired group (or finish a deletion left half done) on the broker's
        background pool, so a slow partition never holds up this thread's liveness reports."""
        if name in self._deleting:
            return
        self._deleting.add(name)

        def run() -> None:
            try:
                self._handlers.group_admin.delete_group_here(
                    name, GROUP_DELETE_TIMEOUT_S, empty_since_ms=empty_since_ms
                )
                logger.info("[group=%s] expired: empty since %d ms", name, empty_since_ms)
            except errors.RaftqError as exc:
                logger.info("[group=%s] expiry deferred: %s (will retry)", name, exc)
            finally:
                self._deleting.discard(name)

        try:
            self._background.submit(run)
        except RuntimeError:  # shutting down
            self._deleting.discard(name)


def restore_marker(data_dir: Path) -> tuple[str, bytes] | None:
    """(backup id, table bytes) a restore left in ``data_dir``, or None."""
    path = data_dir / RESTORE_DIR
    try:
        return (path / "backup_id").read_text().strip(), (path / "table.bin").read_bytes()
    except FileNotFoundError:
        return None


def deleted_topic_dirs(table: Table, names: list[str]) -> list[tuple[str, int]]:
    """The partition directories (``<topic>-<topic_id>``) among ``names`` that belong to a
    deleted topic: an id the table has handed out (below ``next_topic_id``; ids are never
    reused) that no current topic has. Safe on a table still replaying after a restart: a topic
    the table has not created yet has an id at or above ``next_topic_id`` and is kept."""
    live = {topic.topic_id for topic in table.topics.values()}
    out = []
    for name in names:
        topic, _, raw_id = name.rpartition("-")
        if not topic or not raw_id.isdigit():
            continue
        topic_id = int(raw_id)
        if topic_id < table.next_topic_id and topic_id not in live:
            out.append((name, topic_id))
    return out


def _dead_letters_within(
    replica: PartitionReplica, rows: list[OutboxRow], batch_bytes_max: int
) -> list[OutboxRow]:
    """The first outbox rows whose dead-letter records fit ``batch_bytes_max`` encoded bytes
    (so each Send is within one raft entry on the dead-letter topic's leader); a lone row over
    it goes alone (its topic admits it: metadata/frontend.py DEAD_LETTER_HEADERS_BYTES), so the
    outbox never jams on a batch too big to append."""
    total = 0
    for i, row in enumerate(rows):
        record = dead_letter_record(replica.topic, replica.partition, row, replica.topic_id)
        total += record.ByteSize() + RECORD_FRAMING_BYTES
        if i and total > batch_bytes_max:
            return rows[:i]
    return rows
