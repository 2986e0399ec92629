"""raftq for Spark: a PySpark data source named ``raftq`` (writer and streaming source).

Install ``raftq[spark]`` (pyspark, pyarrow); only ``broker/spark/datasource.py`` imports them,
so the broker never needs pyspark. Register the format once per session::

    from raftq.spark import register
    register(spark)

    df.write.format("raftq").option("bootstrap", "h1:7070,h2:7070").option("topic", "t") \\
        .mode("append").save()
    df.writeStream.format("raftq").option("bootstrap", ...).option("topic", "t") \\
        .option("checkpointLocation", path).start()
    def each(batch_df, batch_id):                   # foreachBatch, replay-safe
        batch_df.write.format("raftq").option("bootstrap", ...).option("topic", "t") \\
            .option("txnAppId", "my-app").option("txnVersion", batch_id).mode("append").save()
    spark.read.format("raftq").option("bootstrap", ...).option("topic", "t").load()
    spark.readStream.format("raftq").option("bootstrap", ...).option("topic", "t") \\
        .option("maxOffsetsPerTrigger", 10000).load()

Writer columns: ``value`` (required; binary or string), ``key`` (binary/string; partitions by
the broker's murmur2, like Kafka), ``topic`` (string: routes the row when no ``topic`` option
is set; the option wins over the column, as in Spark's Kafka sink, so a DataFrame read from
one topic can be written to another; to route by the column, leave the option out),
``partition``, ``headers`` (map<string, binary|string>, or Kafka's array<struct<key,
value>>), ``priority`` (int), ``deliver_at`` (timestamp, or long Unix ms). Other columns are
ignored; a known column of the wrong type fails naming it. Options: ``bootstrap``, ``topic``,
``deliveryGuarantee`` (``exactly_once``, the default, or ``at_least_once``), ``txnAppId`` +
``txnVersion``, ``batchRecords`` (10,000; a partition's first batches hold 1,000, 1,000,
2,000, 4,000, ... rows), ``batchBytes`` (1 MiB - 4 KiB, the most: one
partition Raft entry; cut by encoded size), ``requestTimeoutMs``.
``mode("overwrite")`` is refused (topics are append-only).

Source columns: topic, partition, offset, timestamp, key, value, headers, priority,
deliver_at. Options: ``bootstrap``, ``topic`` (comma-separated list), ``startingOffsets`` /
``endingOffsets`` (``earliest``, ``latest`` or JSON ``{"t": {"0": 42}}``, -2 = earliest,
-1 = latest; a partition the topic lacks is an error; streams start at earliest by default,
batch reads end at latest), ``maxOffsetsPerTrigger``, ``failOnDataLoss`` (true),
``fetchMaxBytes`` (1 MiB per Fetch answer, at most 3 MiB; a larger record comes alone),
``requestTimeoutMs``. Trigger.AvailableNow reads up to the offsets current when the query
starts, in maxOffsetsPerTrigger steps. Reads go through Log.Fetch and Log.ListOffsets only:
no consumer-group state is touched.

Both sides refuse an option they do not know (a misspelling, a ``kafka.*`` setting), listing
the valid ones and the raftq name of a Kafka-connector option.

Exactly-once writing
--------------------
Two mechanisms, one per way a write can repeat:

1. **A replayed batch** (a streaming query restarted from its checkpoint re-runs its last
   micro-batch with the same batch id; a foreachBatch function is called again with the same
   batch id). The broker keeps a *committed-batch watermark* per app and scope in the metadata
   group (``Admin.CommitTxn`` / ``Admin.GetTxn``, on the metadata leader). The sink's
   driver-side ``commit`` raises it to the batch id once every task succeeded; each task first
   reads it and writes nothing when its batch id equals it (the replay of the last batch). The
   app id is ``txnAppId``, or for ``writeStream`` the query id (stable across restarts from
   the same checkpoint); the scope is the ``topic`` option ("" when a topic column routes
   rows), so a foreachBatch writing one batch to two topics under one txnAppId/txnVersion
   has both writes counted once. A batch id *below* the watermark is no replay (Spark only
   replays the last batch): the checkpoint was reset, or another query reuses the txnAppId.
   Skipping it would silently write nothing, so the write fails with StaleTxnVersion (before
   any task, for ``df.write``): use a new txnAppId with a new checkpoint.
2. **A retried task, or a replay that crashed before the watermark moved** (a task died
   mid-write, its worker or executor was killed, a UDF upstream of the writer failed after
   handing rows over so the writer saw a normal end of input and sent short last batches, a
   speculative twin ran; the query crashed inside its sink commit, and restarted after any
   delay). Each task writes under the idempotent producer id
   ``spark:<app>:<batch>:<spark partition>`` (batch writes without txn ids: a random id per
   write job), with its own sequence per raftq partition. A retry resumes by *rows already
   written*, not by batch numbering: it first asks each partition's leader (one
   ``Log.ProducerState`` call per leader broker) how many records of its producer id the log
   holds, with the last batch's sequence and offsets; it skips exactly that many of its rows for
   that partition, compares the last batch of them with the log, and sends the rest from the
   next sequence. Those counts come from the records themselves (partitions index the rows of
   ``spark:`` producers), so they hold after the topic's ``dedup_window_ms`` too. A send whose
   outcome was unknown is resent with the same sequence (deduplicated by the broker). An
   OUT_OF_ORDER_SEQUENCE answer (a zombie or speculative twin of the task, same producer id,
   got further) re-reads the state and skips what the twin applied.

Cases it cannot cover, and what the writer does:

- **Rows in a different order (or different rows) on the retry**: after a shuffle without a
  sort, ``repartition`` of non-deterministic input, ``rand()``, ``limit`` without order, or a
  source that is not replayable. Skipping the first N rows would then drop some rows and
  duplicate others. The writer spot-checks: the last batch the earlier attempt wrote is
  fetched back and compared (keys and values) with this attempt's rows at the same positions;
  an attempt with fewer rows for a partition than were written there, or none for a partition
  an earlier attempt wrote to, is caught too. Either raises NondeterministicInput and the task
  (eventually the job) fails loudly instead of writing wrong data. Rows before that last batch
  are not compared. Fix: ``sortWithinPartitions`` on a unique key before writing, or
  checkpoint/cache the shuffled data, or use ``at_least_once`` and dedupe downstream.
  A query whose every retry differs would fail on every restart; the error names the way out:
  ``raftq spark recover --app <app> [--topic <topic>] --batch <id>`` marks that batch (a
  watermark under the scope ``<topic>..at-least-once``), and its next attempt, on seeing rows
  of the failed attempts, writes all its rows without producer ids: at-least-once for that one
  batch (nothing lost; the failed attempts' rows stay), exactly-once again from the next. A
  ``df.write`` without txn ids needs nothing: a new job has new producer ids.
- Retention that deleted some of a failed attempt's records before the retry makes the retry
  write those rows again.
- A metadata leader elected moments before ``GetTxn`` may not have applied the latest
  ``CommitTxn`` yet; the producer-id dedup (2) still covers that batch.
- ``at_least_once`` uses no producer ids and no watermark (unless txnAppId is set): a task
  retry or a replay may duplicate rows.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``raftq`` format with ``spark`` (imports pyspark on first use)."""
    from raftq.spark.datasource import register as register_source

    register_source(spark)
