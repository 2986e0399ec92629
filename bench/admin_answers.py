"""What reading a Fetch answer into Admin's dataclasses costs (broker/client/types.py, issue 18).

``Admin.fetch`` answers a ``FetchResult`` of ``StoredRecord`` dataclasses read from the
``FetchResponse`` protobuf (broker/client/admin_calls.py ``read_fetch_result``); the Spark
source reads every record through it. One process, no broker: a FetchResponse of N records
(100 B values, a 4 B key, one header) is serialized once, then parsed and each record's fields
read off the protobuf into a tuple (what a reader of the raw answer, such as the Spark source
before, does), and parsed and read into a FetchResult (what Admin.fetch does now).

    python -m bench admin_answers [--answer-records 10000]
    python -m bench admin_answers --quick        (2,000 records)
"""

from __future__ import annotations

import argparse
import time

from bench.common import Result, median
from raftq.client import admin_calls
from raftq.proto import api_pb2, common_pb2

NAME = "admin_answers"


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--answer-records", type=int, default=10_000, help="records per answer")


def answer_bytes(records: int) -> bytes:
    stored = [
        common_pb2.StoredRecord(
            offset=i,
            timestamp_ms=1_800_000_000_000 + i,
            record=common_pb2.Record(
                key=b"k%03d" % (i % 1000), value=b"x" * 100, headers={"h": b"1"}
            ),
        )
        for i in range(records)
    ]
    return api_pb2.FetchResponse(records=stored, log_start=0, end=records).SerializeToString()


def raw_fields(answer: api_pb2.FetchResponse) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for s in answer.records:
        r = s.record
        key = r.key if r.HasField("key") else None
        out.append((s.offset, s.timestamp_ms, key, r.value, dict(r.headers), r.priority))
    return out


def rate(data: bytes, records: int, repeat: int, *, typed: bool) -> float:
    """Records per second of parsing ``data`` and reading every record."""
    seconds = []
    for _ in range(max(repeat, 3)):
        started = time.perf_counter()
        answer = api_pb2.FetchResponse.FromString(data)
        if typed:
            admin_calls.read_fetch_result(answer)
        else:
            raw_fields(answer)
        seconds.append(time.perf_counter() - started)
    return records / median(seconds)


def run(options: argparse.Namespace) -> list[Result]:
    records = 2_000 if options.quick else options.answer_records
    data = answer_bytes(records)
    parsed = rate(data, records, options.repeat, typed=False)
    typed = rate(data, records, options.repeat, typed=True)
    note = f"{records:,} records of 100 B in one answer, one thread"
    cost_us = (1 / typed - 1 / parsed) * 1e6
    return [
        Result("fetch answer: protobuf fields read", parsed, "rec/s", note=note),
        Result("fetch answer: read into a FetchResult", typed, "rec/s", note=note),
        Result("fetch answer: dataclass cost per record", cost_us, "us"),
    ]
