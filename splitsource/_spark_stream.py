"""``spark.readStream.format("splitsource")``: a bounded source read as micro-batches of splits.

Each micro-batch takes the next splits from the enumerator, up to a read limit (``max_splits_per_batch`` splits,
or ``max_bytes_per_batch_mb`` of estimated size). The offset (:mod:`splitsource._offsets`) carries the enumerator's
state and the batch's splits, so Spark's own checkpoint is the copy job's checkpoint and ``partitions(start,
end)`` returns exactly the same splits on any replay.

Bounded: once the enumerator has no split left, ``latestOffset`` returns its start offset unchanged, which ends a
``trigger(availableNow=True)`` query after its last batch is committed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
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

from splitsource._errors import OptionsError
from splitsource._offsets import check_offset, initial_offset, next_offset, offset_splits, source_fingerprint
from splitsource._spark_reader import SplitsPartition, build_source, conform_batch, pack_splits, read_partition
from splitsource._version import __version__

__all__ = ["SplitSourceStreamReader"]


def _copy_sink(raw: str) -> Any:
    if not raw:
        return None
    from splitsource.sink._options import parse_sink_options

    try:
        options = json.loads(raw)
    except ValueError:
        raise OptionsError("option 'copy_sink' is not JSON (it is set by splitsource copy)") from None
    return parse_sink_options(options)


class SplitSourceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of splits over one bounded source (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = dict(options)
        self._expected = to_arrow_schema(schema, timezone="UTC")
        framework, source = build_source(self._options)
        self._framework = framework
        self._fingerprint = source_fingerprint(source)
        # the copy job: each read task writes its splits' rows into pending files and emits only the committables,
        # so the rows never cross into the JVM and back (see docs/architecture.md, "The copy job's write path")
        self._sink = _copy_sink(framework.copy_sink)

    # -- offsets -----------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        _, source = build_source(self._options)
        return initial_offset(source, self._fingerprint, self._parallelism())

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self._framework.max_splits_per_batch > 0:
            return ReadMaxFiles(self._framework.max_splits_per_batch)
        return ReadMaxBytes(int(self._framework.max_bytes_per_batch_mb * 1024 * 1024))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        # the source is bounded: "all data available now" is all of it; nothing to record
        return None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        _, source = build_source(self._options)
        if isinstance(limit, ReadMaxFiles):
            bounds = {"max_splits": limit.max_files}
        elif isinstance(limit, ReadMaxBytes):
            bounds = {"max_bytes": limit.max_bytes}
        elif isinstance(limit, ReadAllAvailable):
            bounds = {}
        else:
            bounds = {"max_splits": 1}  # a limit we do not know: one split per batch is always safe
        end = next_offset(source, self._fingerprint, start, self._parallelism(), **bounds)
        return start if end is None else end  # unchanged: the bounded source is done

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if start == end:
            return []
        _, source = build_source(self._options)
        check_offset(end, self._fingerprint)
        splits = offset_splits(source, end)
        groups = pack_splits(splits, target_bytes=int(self._framework.partition_size_mb * 1024 * 1024),
                             partitions=self._framework.partitions, min_partitions=self._framework.min_partitions)
        python = (sys.version_info[0], sys.version_info[1])
        return [SplitsPartition(group, python, __version__) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        if self._sink is None:
            yield from read_partition(self._options, partition, self._expected)
            return
        from splitsource.sink._spark import committables_batch, write_task

        message = write_task(self._sink, read_partition(self._options, partition, None))
        yield conform_batch(committables_batch(message), self._expected)

    def commit(self, end: dict[str, Any]) -> None:
        return None

    # -- internals ---------------------------------------------------------------------------------------------

    def _parallelism(self) -> int:
        return max(self._framework.partitions, self._framework.min_partitions, 1)
