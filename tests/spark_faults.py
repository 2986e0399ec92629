"""Fault-injecting subclasses of the raftq data source, for tests/process/test_spark.py.

They run inside Spark's Python workers (so this module imports nothing heavy) and take their
orders from options, each fault firing once: a marker file says it is still to come.

- ``raftq_crashy`` (writeStream): ``crashFile`` — while that file exists, the sink's commit of
  micro-batch ``crashBatch`` deletes it and raises, ``crashPoint`` = ``before`` (the
  watermark was not raised: the replay must resume by producer state) or ``after`` (it was:
  the replay must be skipped by the watermark).
- ``raftq_flaky`` (df.write): ``failFile`` — while it exists, attempt 0 of Spark partition 0
  hands ``failAfterRows`` rows to the sink, deletes the file and fails, as ``failMode`` says:
  ``raise`` (the input iterator raises: the last batches may still be in flight, a zombie),
  ``end`` (the input ends normally, the writer sends its short last batches and returns, then
  the task fails: what a UDF failing upstream of the writer looks like to it) or ``exit`` (the
  worker process dies mid-write: an executor kill). The retry must resume after what the
  first attempt applied. ``purgePartition`` (``end`` mode): before failing, attempt 0 purges
  that raftq partition of the topic (an operator's purge, or retention, cutting away part of
  what it wrote). ``reportFile``: commit writes every task's summary there as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

import pyarrow as pa
from pyspark import TaskContext

from raftq.client import Admin
from raftq.spark import datasource


class CommitCrash(RuntimeError):
    pass


class CrashyStreamWriter(datasource.RaftqStreamWriter):
    def __init__(self, options: Any, crash_file: str, crash_batch: int, point: str) -> None:
        super().__init__(options)
        self.crash_file, self.crash_batch, self.point = crash_file, crash_batch, point

    def commit(self, messages: Sequence[Any], batchId: int) -> None:
        due = batchId == self.crash_batch and os.path.exists(self.crash_file)
        if due and self.point == "before":
            os.remove(self.crash_file)
            raise CommitCrash(f"injected crash before the watermark of batch {batchId}")
        super().commit(messages, batchId)
        if due:
            os.remove(self.crash_file)
            raise CommitCrash(f"injected crash after the watermark of batch {batchId}")


class CrashySource(datasource.RaftqDataSource):
    extra_options = frozenset({"crashfile", "crashbatch", "crashpoint"})

    @classmethod
    def name(cls) -> str:
        return "raftq_crashy"

    def streamWriter(self, schema: Any, overwrite: bool) -> datasource.RaftqStreamWriter:
        base = super().streamWriter(schema, overwrite)
        return CrashyStreamWriter(
            base.options,
            self.options["crashfile"],
            int(self.options["crashbatch"]),
            self.options.get("crashpoint", "before"),
        )


class FlakyBatchWriter(datasource.RaftqBatchWriter):
    def __init__(self, base: datasource.RaftqBatchWriter, options: dict[str, str]) -> None:
        super().__init__(base.options, base.job_id)
        self.fail_file = options["failfile"]
        self.fail_after = int(options["failafterrows"])
        self.fail_mode = options.get("failmode", "raise")
        self.report_file = options.get("reportfile", "")
        self.purge_partition = options.get("purgepartition")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> datasource.RaftqCommitMessage:
        context = TaskContext.get()
        assert context is not None
        doomed = (
            context.partitionId() == 0
            and context.attemptNumber() == 0
            and os.path.exists(self.fail_file)
        )
        if not doomed:
            return super().write(iterator)
        if self.fail_mode == "end":
            super().write(self._head(iterator))
            if self.purge_partition is not None:
                assert self.options.topic is not None, "purgePartition needs the topic option"
                with Admin(self.options.bootstrap) as admin:
                    admin.purge_topic(self.options.topic, int(self.purge_partition))
            os.remove(self.fail_file)
            raise RuntimeError(f"injected failure upstream after {self.fail_after} rows")
        return super().write(self._failing(iterator))

    def _head(self, iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        left = self.fail_after
        for batch in iterator:
            if batch.num_rows >= left:
                yield batch.slice(0, left)
                return
            left -= batch.num_rows
            yield batch

    def _failing(self, iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from self._head(iterator)
        os.remove(self.fail_file)
        if self.fail_mode == "exit":
            os._exit(17)  # the worker dies with batches in flight
        raise RuntimeError(f"injected task failure after {self.fail_after} rows")

    def commit(self, messages: Sequence[Any]) -> None:
        super().commit(messages)
        if self.report_file:
            summaries = [asdict(m.summary) for m in messages if m is not None]
            with open(self.report_file, "w") as out:
                json.dump(summaries, out)


class FlakySource(datasource.RaftqDataSource):
    extra_options = frozenset(
        {"failfile", "failafterrows", "failmode", "reportfile", "purgepartition"}
    )

    @classmethod
    def name(cls) -> str:
        return "raftq_flaky"

    def writer(self, schema: Any, overwrite: bool) -> datasource.RaftqBatchWriter:
        return FlakyBatchWriter(super().writer(schema, overwrite), dict(self.options))
