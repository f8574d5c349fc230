"""Reading a sequence of splits as Arrow batches in one fixed schema: the body of every reader task (a Spark
partition, a copy task of either engine)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from splitsource._api import Source, Split
from splitsource._planning import FrameworkOptions
from splitsource.runtime._source_reader import ReaderMetrics, SourceReader, call_with_retry

__all__ = ["conform_batch", "read_splits"]


def conform_batch(batch: pa.RecordBatch, expected: pa.Schema) -> pa.RecordBatch:
    """Return ``batch`` in exactly ``expected`` (field nullability and metadata included); casts if needed."""
    if batch.schema.equals(expected):
        return batch
    if batch.schema.remove_metadata().equals(expected, check_metadata=False) or [
        f.type for f in batch.schema
    ] == [f.type for f in expected]:
        return pa.RecordBatch.from_arrays(batch.columns, schema=expected)
    return batch.cast(expected)


def read_splits(framework: FrameworkOptions, source: Source[Any, Any, Any, Any],
                next_split: Callable[[], Split | None], expected: pa.Schema | None, name: str, readers: int = 1,
                metrics: ReaderMetrics | None = None) -> Iterator[pa.RecordBatch]:
    """Read the splits ``next_split`` hands out (None: no more) from ``source`` through one :class:`SourceReader`,
    as Arrow batches in ``expected`` (None: the source's own schema, read with retries: a task may start while a
    node restarts). ``readers``: how many readers of the job run at once, sharing its read rate limit;
    ``metrics``: where the reader counts (rows per split, retries, time throttled)."""
    if expected is None:
        expected = call_with_retry(source, source.schema, framework.retry, f"{name}: reading the schema")
    reader = SourceReader(source, next_split, queue_capacity=framework.queue_capacity, retry=framework.retry,
                          rate=framework.rate.shared(readers), name=name, metrics=metrics)
    for batch in reader.read():
        yield conform_batch(batch, expected)
