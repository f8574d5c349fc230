"""``format("bucketing")``: the bucketing sink as a Spark Python data source, for batch and streaming writes.

Each Spark task runs one :class:`BucketingSinkWriter` over its Arrow batches and returns the pending files in
its commit message. The driver's ``commit`` runs the :class:`BucketingGlobalCommitter`: only files listed in
successful commit messages become finished; files of failed and speculative attempts are swept away.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from serializers import read_envelope, write_envelope
from splitsource._errors import SinkError
from splitsource.copyjob._ownership import refuse_if_owned
from splitsource.sink._committer import BucketingGlobalCommitter, CommitRecord
from splitsource.sink._files import PENDING_FILE_SERIALIZER, PendingFile
from splitsource.sink._options import BucketingSinkOptions, parse_sink_options
from splitsource.sink._writer import write_files

__all__ = ["BucketingCommitMessage", "BucketingDataSource", "stream_writer_id", "task_context"]

@dataclass(frozen=True)
class BucketingCommitMessage(WriterCommitMessage):
    """What one task hands the driver: its pending files (versioned bytes) and which query and batch it ran in."""

    files: tuple[bytes, ...]
    query_id: str
    batch_id: int

    def pending_files(self) -> list[PendingFile]:
        return [read_envelope(PENDING_FILE_SERIALIZER, data) for data in self.files]


def task_context() -> tuple[int, str, int]:
    """(partition, streaming query id, micro-batch id) of the running task ("" and -1 outside a stream)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, "", -1
    query = ctx.getLocalProperty("sql.streaming.queryId") or ""
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return ctx.partitionId(), query, int(batch) if batch not in (None, "") else -1


def stream_writer_id(query_id: str) -> str:
    """The writer id of a streaming query's part files (see :func:`write_files`)."""
    return hashlib.sha256(query_id.encode()).hexdigest()[:12] if query_id else ""


def _task_output(options: BucketingSinkOptions, batches: Iterator[pa.RecordBatch],
                 writer_id: str = "") -> BucketingCommitMessage:
    """Write this task's rows into pending files (on failure its files are removed) and name them for the commit."""
    partition, query_id, batch_id = task_context()
    files = write_files(options, batches, partition, writer_id or stream_writer_id(query_id))
    return BucketingCommitMessage(tuple(write_envelope(PENDING_FILE_SERIALIZER, f) for f in files), query_id,
                                  batch_id)


def _collect(messages: list[Any]) -> tuple[list[PendingFile], str]:
    files: list[PendingFile] = []
    query_ids = set()
    for message in messages:
        if isinstance(message, BucketingCommitMessage):
            files.extend(message.pending_files())
            if message.query_id:
                query_ids.add(message.query_id)
    return files, (sorted(query_ids)[0] if query_ids else "")


def _committer(options: BucketingSinkOptions) -> BucketingGlobalCommitter:
    return options.committer()


class BucketingBatchWriter(DataSourceArrowWriter):
    """``df.write.format("bucketing")``: append or overwrite, exactly the rows of the successful tasks."""

    def __init__(self, options: BucketingSinkOptions, overwrite: bool) -> None:
        self.options = options
        self.overwrite = overwrite
        self.write_id = uuid.uuid4().hex
        committer = _committer(options)
        refuse_if_owned(committer, "df.write.format('bucketing')")
        # before any task writes: finish what a crashed commit logged, then clear orphans of writes long gone (a
        # write running beside this one keeps its files)
        committer.recover()
        committer.sweep(owner=self.write_id[:12])

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BucketingCommitMessage:
        return _task_output(self.options, iterator, self.write_id[:12])

    def commit(self, messages: list[Any]) -> None:
        committer = _committer(self.options)
        refuse_if_owned(committer, "df.write.format('bucketing')")
        files, _ = _collect(messages)
        committer.recover()
        record = committer.combine(files, kind="overwrite" if self.overwrite else "append", write_id=self.write_id)
        if not committer.commit(record):
            raise SinkError(f"{self.options.path}: a part file of this write was removed while it was being "
                            "committed, so the commit was rolled back whole; nothing of this write is visible, run it "
                            "again")
        committer.sweep(keep=(), owner=self.write_id[:12])  # failed and speculative attempts of this write
        committer.end_of_input(_summary(record))

    def abort(self, messages: list[Any]) -> None:
        # best effort: tasks may still be running, so only files named in messages go; the next write sweeps
        _committer(self.options).delete_pending(_collect(messages)[0])


class BucketingStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("bucketing")``: each micro-batch commits once, even when a restarted query replays
    it; the commit log keeps ``log_retention`` records."""

    def __init__(self, options: BucketingSinkOptions) -> None:
        # nothing is written here: Spark builds this writer again in the worker that runs ``commit``, after the
        # tasks wrote their pending files; a copy's output is refused before any task writes into it
        self.options = options
        refuse_if_owned(_committer(options), "writeStream.format('bucketing')")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BucketingCommitMessage:
        return _task_output(self.options, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's parameter name
        files, query_id = _collect(messages)
        committer = _committer(self.options)
        refuse_if_owned(committer, "writeStream.format('bucketing')")
        committer.commit_batch(files, query_id=query_id, batch_id=batchId, owner=stream_writer_id(query_id))

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        _committer(self.options).delete_pending(_collect(messages)[0])


def _summary(record: CommitRecord) -> bytes:
    return json.dumps({"commit": record.seq, "kind": record.kind, "files": len(record.files), "rows": record.rows,
                       "bytes": record.bytes, "time": time.time()}).encode()


class BucketingDataSource(DataSource):
    """Exactly-once bucketed files (Flink BucketingSink semantics) for ``df.write`` and ``writeStream``.

    Files move in-progress → pending → finished; only finished files are visible to readers (the others start with
    ``_``). Options: see :class:`BucketingSinkOptions` and ``docs/sink.md``.

    Example::

        df.write.format("bucketing").option("format", "parquet").option("bucketer", "columns") \\
            .option("bucket_columns", "country").mode("append").save("/data/events")
    """

    @classmethod
    def name(cls) -> str:
        return "bucketing"

    def schema(self) -> str:
        raise SinkError("format('bucketing') only writes; read its output with Spark's own readers "
                        "(spark.read.parquet, .json or .csv on the base path)")

    def writer(self, schema: StructType, overwrite: bool) -> BucketingBatchWriter:
        return BucketingBatchWriter(parse_sink_options(dict(self.options)), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> BucketingStreamWriter:  # noqa: N802
        if overwrite:
            raise SinkError("format('bucketing') streams append only: use outputMode('append')")
        return BucketingStreamWriter(parse_sink_options(dict(self.options)))
