"""``spark.readStream.format("splitsource")``: a bounded source read as micro-batches of splits.

Each micro-batch takes the next splits from the enumerator, up to a read limit (``max_splits_per_batch`` splits,
or ``max_bytes_per_batch_mb`` of estimated size). The offset (:mod:`splitsource._offsets`) carries the enumerator's
state and the batch's splits, so Spark's own checkpoint is the copy job's checkpoint and ``partitions(start,
end)`` returns exactly the same splits on any replay.

Bounded: once the enumerator has no split left, ``latestOffset`` returns its start offset unchanged, which ends a
``trigger(availableNow=True)`` query after its last batch is committed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from splitsource._api import Source
from splitsource._fs import locate
from splitsource._offsets import (
    PlanStore,
    check_offset,
    end_plan,
    initial_offset,
    next_offset,
    offset_splits,
    source_fingerprint,
)
from splitsource._planning import BatchLimit, ReadSettings, pack_for
from splitsource.spark._reader import SplitsPartition, partitions_of, read_partition

__all__ = ["SplitSourceStreamReader", "batch_limit_of"]


def batch_limit_of(limit: ReadLimit) -> BatchLimit:
    """Spark's read limit as the framework's :class:`BatchLimit`."""
    if isinstance(limit, ReadMaxFiles):
        return BatchLimit(max_splits=limit.max_files)
    if isinstance(limit, ReadMaxBytes):
        return BatchLimit(max_bytes=limit.max_bytes)
    if isinstance(limit, ReadAllAvailable):
        return BatchLimit()
    return BatchLimit(max_splits=1)  # a limit we do not know: one split per batch is always safe


class SplitSourceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of splits over one bounded source (see the module docstring)."""

    def __init__(self, settings: ReadSettings, schema: StructType) -> None:
        self._settings, self._framework = settings, settings.framework
        self._expected = to_arrow_schema(schema, timezone="UTC")
        self._fingerprint = source_fingerprint(self._source)
        self._plans = PlanStore(locate(self._framework.plan_location) if self._framework.plan_location else None)

    @functools.cached_property
    def _source(self) -> Source[Any, Any, Any, Any]:
        """The source, built once in the process that plans the stream's batches; never pickled (a task reads
        from the settings)."""
        return self._settings.source()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_source"}

    # -- offsets -----------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        return initial_offset(self._source, self._fingerprint, self._framework.parallelism, self._plans)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self._framework.max_splits_per_batch > 0:
            return ReadMaxFiles(self._framework.max_splits_per_batch)
        return ReadMaxBytes(int(self._framework.max_bytes_per_batch_mb * 1024 * 1024))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        # the source is bounded: "all data available now" is all of it; nothing to record
        return None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        end = next_offset(self._source, self._fingerprint, start, self._framework.parallelism, batch_limit_of(limit),
                          self._plans)
        return start if end is None else end  # unchanged: the bounded source is done

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if start == end:
            return []
        check_offset(end, self._fingerprint)
        return partitions_of(self._framework, pack_for(self._framework, offset_splits(self._source, end)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_partition(self._settings, partition, self._expected)

    def commit(self, end: dict[str, Any]) -> None:
        return None

    def stop(self) -> None:
        end_plan(self._fingerprint)  # the enumerator kept for the next batch, and what it holds
