"""The offline checker of a chaos run: reads a run directory (tests/chaos/harness.py writes it)
and returns every violation it finds. ``python -m tests.chaos check DIR`` runs it alone.

What it verifies, per record (its value is its id, unique per run) and for the one group:

1. **Nothing acknowledged is lost**: every acknowledged send is in the final log (read back by
   Fetch) at the partition and offset it was acknowledged with, holding the same value; every
   acknowledged attempt of one idempotency key names the same offset.
2. **Nothing invented**: every record in the log, in a lease and in the dead-letter topic was
   sent, with the key, priority and deliver_at it was sent with; no value is in the log twice
   (idempotent producer, idempotency keys) and no origin is dead-lettered twice.
3. **Delivered or dead-lettered per max_deliveries**: the group settled (lag 0 on every
   partition); every acknowledged record was leased at least once or dead-lettered; every
   acknowledged poison record (nacked on every delivery) is in the dead-letter topic with
   ``delivery_count = max_deliveries``; a record whose ack succeeded is never dead-lettered and
   never leased again; no lease carries a delivery count above max_deliveries. An ack of an
   acked record answers OK (a retry cannot tell it apart), so a member whose delivery k was
   taken over (a rebalance, an expiry) may see its late ack of k succeed after the new
   holder's ack of the last delivery: that is no lease after the ack when every later
   delivery was leased before the ack of k was answered and the last one was acked.
4. **Never leased to two members at once**: when delivery k+1 goes to another member before
   delivery k's deadline, the broker must have ended delivery k: its member was killed, nacked
   it (a nack answered OUTCOME_UNKNOWN may have), lost the partition in a rebalance, or was
   replaced (session expiry); otherwise it is a violation. (Times are the leader's: lease
   stamp = lease_deadline_ms - lease_ms.)
5. **Delivery counts only grow**: a record's logged deliveries have distinct counts, and
   ordered by count their lease stamps do not go back.
6. **FIFO order**: on a fifo topic, within a partition, the *first* deliveries
   (delivery_count 1) of records sent without deliver_at happen in offset order (lease stamps
   non-decreasing with the offset). Redeliveries (count > 1, after a nack, an expiry or a
   release) and delayed records may come later than higher offsets: that is the contract. So
   may a record whose delivery a broker took back (a Poll answer its client did not wait for:
   ``Release.undelivered`` restores the delivery_count, so its next lease is delivery 1 again;
   the brokers' logs name those offsets, ``taking back ... (offsets ...)``). Per
   key, one producer's first attempts acknowledged in send order have increasing offsets in one
   partition, so per-key order is the offset order above.
7. **Delayed records never early**: a lease of a record sent with deliver_at_ms has a lease
   stamp >= deliver_at_ms (and was logged no earlier than deliver_at_ms).
8. **Replicas byte-identical**: after healing and a clean stop, replicas of a partition at the
   same applied index have the same canonical dump (SHA-256).
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import read_jsonl

RecordId = tuple[str, int, int]  # topic, partition, offset
VIOLATIONS_SHOWN = 50
# broker/handlers/leases.py Releases.undeliver_refs, logged before it proposes the Release
TAKING_BACK = re.compile(
    r"\[group=\S+ topic/partition=(?P<topic>\S+)/(?P<partition>\d+)\] taking back \d+ "
    r"undelivered leases of \S+ \(offsets (?P<offsets>[\d,-]*)"
)


@dataclass
class Report:
    seed: int | None
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "violations": len(self.violations),
            "first_violations": self.violations[:VIOLATIONS_SHOWN],
            **self.figures,
        }

    def render(self) -> str:
        lines = [f"chaos check (seed={self.seed}):"]
        for name, value in self.figures.items():
            lines.append(f"  {name}: {value}")
        lines.append(f"  violations: {len(self.violations)}")
        lines += [f"    - {v}" for v in self.violations[:VIOLATIONS_SHOWN]]
        if self.violations:
            lines.append(f"  replay: RAFTQ_SEED={self.seed} make chaos")
        return "\n".join(lines)


def check(root: Path) -> Report:
    workload = read_jsonl(root / "workload.jsonl")
    config = next((e for e in workload if e["ev"] == "config"), None)
    report = Report(config["seed"] if config else None)
    if config is None:
        report.violations.append("no config line in workload.jsonl")
        return report
    consumer_events: list[dict[str, Any]] = []
    for path in sorted(root.glob("consumer-*.jsonl")):
        for e in read_jsonl(path):
            e["proc"] = path.name
            consumer_events.append(e)
    final = (
        json.loads((root / "final.json").read_text()) if (root / "final.json").exists() else None
    )
    replicas_path = root / "replicas.json"
    replicas = json.loads(replicas_path.read_text()) if replicas_path.exists() else None
    back = taken_back(root / "cluster")
    Checker(config, workload, consumer_events, final, replicas, report, back).run()
    return report


def taken_back(cluster: Path) -> set[RecordId]:
    """Every record whose delivery a broker set out to take back (``Release.undelivered``),
    from the brokers' logs (``cluster/broker-N.log``); a line cut short after its first
    runs of offsets names only those."""
    out: set[RecordId] = set()
    for path in sorted(cluster.glob("broker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = TAKING_BACK.search(line)
            if match is None:
                continue
            topic, partition = match["topic"], int(match["partition"])
            for run in filter(None, match["offsets"].split(",")):
                first, _, last = run.partition("-")
                for offset in range(int(first), int(last or first) + 1):
                    out.add((topic, partition, offset))
    return out


def _acked_after_takeover(
    ack: dict[str, Any],
    later: list[dict[str, Any]],
    ok_acks: list[dict[str, Any]],
    lease_ms: int,
) -> bool:
    """A late ack of a delivery taken over: every later delivery was leased (its stamp) before
    this ack was answered, and the last of them was acked, so this ack found the record
    already acked (answered OK) rather than ending a lease that was then granted again."""
    last = max(x["delivery_count"] for x in later)
    stamps_before = all(x["lease_deadline_ms"] - lease_ms < ack["wall_ms"] for x in later)
    return stamps_before and any(a["delivery_count"] == last for a in ok_acks)


class Checker:
    def __init__(
        self,
        config: dict[str, Any],
        workload: list[dict[str, Any]],
        events: list[dict[str, Any]],
        final: dict[str, Any] | None,
        replicas: dict[str, Any] | None,
        report: Report,
        taken_back: set[RecordId] | None = None,
    ) -> None:
        self.config, self.workload, self.events = config, workload, events
        self.final, self.replicas, self.report = final, replicas, report
        self.topics: list[str] = config["topics"]
        self.fifo: set[str] = set(config["fifo_topics"])
        self.max_deliveries: int = config["max_deliveries"]
        self.lease_ms: int = config["lease_ms"]
        self.sends: dict[str, dict[str, Any]] = {}
        self.outcomes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in workload:
            if e["ev"] == "send":
                self.sends.setdefault(e["id"], e)
            elif e["ev"] == "sent":
                self.outcomes[e["id"]].append(e)
        self.acked: dict[str, RecordId] = {}
        self.log: dict[RecordId, dict[str, Any]] = {}
        self.dlq: dict[RecordId, list[dict[str, Any]]] = defaultdict(list)
        # records whose delivery a broker took back (Release.undelivered)
        self.taken_back: set[RecordId] = taken_back or set()

    def fail(self, what: str) -> None:
        self.report.violations.append(what)

    def run(self) -> None:
        self.check_sends()
        self.check_log()
        self.check_deliveries()
        self.check_leases()
        self.check_order()
        self.check_replicas()
        self.figures()

    # 1, 2: sends and the log ------------------------------------------------------------------

    def check_sends(self) -> None:
        for rid, outcomes in self.outcomes.items():
            places = {
                (self.sends[rid]["topic"], o["partition"], o["offset"]) for o in outcomes if o["ok"]
            }
            if len(places) > 1:
                self.fail(f"{rid}: acknowledged at different offsets {sorted(places)}")
            if places:
                self.acked[rid] = min(places)

    def check_log(self) -> None:
        if self.final is None:
            self.fail("no final.json: the run did not reach its final state")
            return
        logs = self.final["logs"]
        where: dict[str, list[RecordId]] = defaultdict(list)
        for topic in self.topics:
            for partition, records in logs.get(topic, {}).items():
                for r in records:
                    rid = (topic, int(partition), r["offset"])
                    self.log[rid] = r
                    where[r["value"]].append(rid)
                    sent = self.sends.get(r["value"])
                    if sent is None:
                        self.fail(f"{rid}: value {r['value']!r} in the log was never sent")
                        continue
                    got = (topic, r["key"], r["priority"], r["deliver_at_ms"])
                    want = (sent["topic"], sent["key"], sent["priority"], sent["deliver_at_ms"])
                    if got != want:
                        self.fail(f"{rid}: log holds {got}, {r['value']} was sent as {want}")
        for value, rids in where.items():
            if len(rids) > 1:
                self.fail(f"{value}: in the log {len(rids)} times {sorted(rids)}")
        for value, rid in self.acked.items():
            record = self.log.get(rid)
            if record is None or record["value"] != value:
                found = record["value"] if record else "nothing"
                self.fail(f"{value}: acknowledged at {rid}, which holds {found} (lost)")
        for topic in self.topics:
            for records in logs.get(f"{topic}.dlq", {}).values():
                for r in records:
                    h = r["headers"]
                    origin = (
                        h.get("raftq.dlq.topic", ""),
                        int(h.get("raftq.dlq.partition", -1)),
                        int(h.get("raftq.dlq.offset", -1)),
                    )
                    self.dlq[origin].append(r)
                    source = self.log.get(origin)
                    if source is None or source["value"] != r["value"]:
                        self.fail(f"dead letter {r['value']!r} names {origin}, not its origin")
        for origin, letters in self.dlq.items():
            if len(letters) > 1:
                self.fail(f"{origin}: dead-lettered {len(letters)} times")

    # 3: delivered or dead-lettered ----------------------------------------------------------

    def check_deliveries(self) -> None:
        if self.final is None:
            return
        if not self.final["settled"]:
            self.fail("the group did not settle after healing (see group lag below)")
        for p in self.final["group"]:
            if p["lag"]:
                self.fail(f"group lag {p['lag']} on {p['topic']}/{p['partition']}: {p}")
        leased: set[RecordId] = set()
        acked_ok: set[RecordId] = set()
        for e in self.events:
            if e["ev"] == "lease":
                leased.add((e["topic"], e["partition"], e["offset"]))
                if e["delivery_count"] > self.max_deliveries > 0:
                    self.fail(f"{e['value']}: delivery {e['delivery_count']} > max_deliveries")
            elif e["ev"] == "ack" and e["ok"]:
                acked_ok.add((e["topic"], e["partition"], e["offset"]))
        for value, rid in self.acked.items():
            letters = self.dlq.get(rid, [])
            if value.startswith("P"):
                if not letters:
                    self.fail(f"{value} at {rid}: poison record not dead-lettered")
            elif rid not in leased and not letters:
                self.fail(f"{value} at {rid}: acknowledged but never delivered nor dead-lettered")
        for origin, letters in self.dlq.items():
            for r in letters:
                count = int(r["headers"].get("raftq.dlq.delivery_count", -1))
                if count != self.max_deliveries:
                    self.fail(f"{origin}: dead-lettered at delivery {count}")
            if origin in acked_ok:
                self.fail(f"{origin}: dead-lettered although an ack of it succeeded")

    # 4, 5, 7: leases --------------------------------------------------------------------------

    def check_leases(self) -> None:
        killed = {e["log"] for e in self.workload if e["ev"] == "consumer_kill"}
        leases: dict[RecordId, list[dict[str, Any]]] = defaultdict(list)
        settles: dict[RecordId, list[dict[str, Any]]] = defaultdict(list)
        # (proc, member) -> partitions it was seen without, or True once replaced/closed
        lost: dict[tuple[str, str], set[tuple[str, int]]] = defaultdict(set)
        replaced: set[tuple[str, str]] = set()
        current: dict[str, str] = {}
        owned_before: dict[tuple[str, str], set[tuple[str, int]]] = {}
        for e in self.events:
            ev = e["ev"]
            if ev in ("lease", "ack", "nack"):
                rid = (e["topic"], e["partition"], e["offset"])
                (leases if ev == "lease" else settles)[rid].append(e)
            if ev == "join":
                old = current.get(e["proc"])
                if old is not None and old != e["member"]:
                    replaced.add((e["proc"], old))
                current[e["proc"]] = e["member"]
                who = (e["proc"], e["member"])
                owned = {(t, p) for t, p in e["assignment"]}
                lost[who] |= owned_before.get(who, set()) - owned
                owned_before[who] = owned
            elif ev == "closed":
                replaced.add((e["proc"], e["member"]))
        for rid, ls in leases.items():
            record = self.log.get(rid)
            value = ls[0]["value"]
            if record is None or record["value"] != value or any(x["value"] != value for x in ls):
                self.fail(f"{rid}: leased as {value!r}, the log holds {record and record['value']}")
                continue
            ls.sort(key=lambda x: x["delivery_count"])
            counts = [x["delivery_count"] for x in ls]
            if len(set(counts)) != len(counts):
                self.fail(f"{rid}: a delivery count was leased twice: {counts}")
                continue
            stamps = [x["lease_deadline_ms"] - self.lease_ms for x in ls]
            if stamps != sorted(stamps):
                self.fail(f"{rid}: delivery counts {counts} do not grow with time {stamps}")
            ok_acks = [s for s in settles[rid] if s["ev"] == "ack" and s["ok"]]
            for a in ok_acks:
                later = [x for x in ls if x["delivery_count"] > a["delivery_count"]]
                if later and not _acked_after_takeover(a, later, ok_acks, self.lease_ms):
                    self.fail(
                        f"{rid}: ack of delivery {a['delivery_count']} succeeded, yet "
                        f"delivered again as {[x['delivery_count'] for x in later]}"
                    )
            deliver_at = self.sends.get(value, {}).get("deliver_at_ms", 0)
            for x, stamp in zip(ls, stamps, strict=True):
                if deliver_at and (stamp < deliver_at or x["wall_ms"] < deliver_at):
                    self.fail(
                        f"{rid}: delivered at {stamp} (logged {x['wall_ms']}) before "
                        f"deliver_at_ms {deliver_at}"
                    )
            for prev, cur in itertools.pairwise(ls):
                if cur["lease_deadline_ms"] - self.lease_ms >= prev["lease_deadline_ms"]:
                    continue
                if cur["member"] == prev["member"]:
                    continue
                who = (prev["proc"], prev["member"])
                ended = (
                    prev["proc"] in killed
                    or who in replaced
                    or (rid[0], rid[1]) in lost[who]
                    or any(
                        s["ev"] == "nack"
                        and (s["ok"] or s["error"] == "OUTCOME_UNKNOWN")  # it may have applied
                        and s["member"] == prev["member"]
                        and s["delivery_count"] == prev["delivery_count"]
                        for s in settles[rid]
                    )
                )
                if not ended:
                    self.fail(
                        f"{rid}: leased to {cur['member']} (delivery {cur['delivery_count']}) "
                        f"while {prev['member']} held delivery {prev['delivery_count']}, which "
                        "nothing ended"
                    )
        self.leases = leases

    # 6: order ---------------------------------------------------------------------------------

    def check_order(self) -> None:
        firsts: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        for rid, ls in getattr(self, "leases", {}).items():
            if rid[0] not in self.fifo:
                continue
            sent = self.sends.get(ls[0]["value"])
            if sent is None or sent["deliver_at_ms"] or rid in self.taken_back:
                continue  # delayed, or leased again as delivery 1 after a take-back
            for x in ls:
                if x["delivery_count"] == 1:
                    firsts[(rid[0], rid[1])].append((rid[2], x["lease_deadline_ms"]))
        for tp, pairs in firsts.items():
            pairs.sort()
            for (a, da), (b, db) in itertools.pairwise(pairs):
                if db < da:
                    self.fail(
                        f"{tp}: offset {b} first delivered at {db - self.lease_ms}, "
                        f"before offset {a} at {da - self.lease_ms} (fifo)"
                    )
        by_key: dict[tuple[str, str], list[tuple[int, RecordId]]] = defaultdict(list)
        for rid, outcomes in self.outcomes.items():
            sent = self.sends[rid]
            first = [o for o in outcomes if o["attempt"] == 1 and o["ok"]]
            if first and sent["topic"] in self.fifo:
                place = (sent["topic"], first[0]["partition"], first[0]["offset"])
                by_key[(sent["producer"], sent["key"])].append((sent["seq"], place))
        for key, places in by_key.items():
            places.sort()
            for (sa, pa), (sb, pb) in itertools.pairwise(places):
                if pa[1] != pb[1] or pb[2] <= pa[2]:
                    self.fail(f"producer/key {key}: send {sa} at {pa}, later send {sb} at {pb}")

    # 8: replicas ------------------------------------------------------------------------------

    def check_replicas(self) -> None:
        compared = uneven = single = 0
        if not self.replicas:
            self.fail("no replica stores in replicas.json: replicas were not compared")
        else:
            for name, brokers in self.replicas.items():
                by_index: dict[int, set[str]] = defaultdict(set)
                for b in brokers.values():
                    by_index[b["applied"]].add(b["sha256"])
                for index, hashes in by_index.items():
                    if len(hashes) > 1:
                        self.fail(
                            f"{name}: replicas at applied index {index} differ "
                            f"({len(hashes)} dumps: {brokers})"
                        )
                if len(brokers) == 1:
                    single += 1
                elif len(by_index) == 1:
                    compared += 1
                else:
                    uneven += 1
        self.report.figures["replica_groups_identical"] = compared
        self.report.figures["replica_groups_at_different_indexes"] = uneven
        # e.g. a dead-letter topic created while brokers were down (metadata/frontend.py:
        # its RF is min(source RF, live brokers)): nothing to compare
        self.report.figures["replica_groups_with_one_replica"] = single

    # figures ----------------------------------------------------------------------------------

    def figures(self) -> None:
        f = self.report.figures
        ev = Counter(e["ev"] for e in self.events)
        sent = [o for os in self.outcomes.values() for o in os]
        faults = Counter(e["kind"] for e in self.workload if e["ev"] == "fault")
        f["send_attempts"] = sum(1 for e in self.workload if e["ev"] == "send")
        f["sends_acknowledged"] = sum(1 for o in sent if o["ok"])
        f["sends_failed"] = sum(1 for o in sent if not o["ok"])
        f["leases"] = ev["lease"]
        f["acks"] = ev["ack"]
        f["nacks"] = ev["nack"]
        f["operations"] = f["send_attempts"] + ev["lease"] + ev["ack"] + ev["nack"]
        f["faults"] = dict(sorted(faults.items()))
        f["faults_total"] = sum(faults.values())
        f["records_checked"] = len(self.log)
        f["records_acknowledged"] = len(self.acked)
        f["dead_lettered"] = sum(len(v) for v in self.dlq.values())
        f["redelivered"] = sum(1 for ls in getattr(self, "leases", {}).values() if len(ls) > 1)
        f["deliveries_taken_back"] = len(self.taken_back)
