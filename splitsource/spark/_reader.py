"""Batch reads of ``format("splitsource")``: the enumerator runs to the end once in the driver-side Python
worker (``partitions()``), its splits are packed into Spark partitions, and executor workers read each partition's
splits in order (``read()``) through the runtime's :class:`~splitsource.runtime.SourceReader`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from splitsource._api import Split
from splitsource._planning import (
    FrameworkOptions,
    TaskEnvironment,
    all_splits,
    build_source,
    concurrent_readers,
    pack_for,
)
from splitsource.runtime._read import read_splits

__all__ = ["SplitSourceBatchReader", "SplitsPartition", "partitions_of", "read_partition", "spark_arrow_schema"]


def spark_arrow_schema(schema: pa.Schema) -> tuple[StructType, pa.Schema]:
    """The Spark schema for a source's Arrow schema, and the exact Arrow schema Spark expects batches in."""
    struct = from_arrow_schema(schema, prefer_timestamp_ntz=False)
    return struct, to_arrow_schema(struct, timezone="UTC")


@dataclass(frozen=True)
class SplitsPartition(InputPartition):
    """One Spark partition: the splits one reader reads in order, the planner's environment to check, and how
    many of the job's readers run at once (its share of the read rate limit)."""

    splits: tuple[Split, ...]
    environment: TaskEnvironment
    readers: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", len(self.splits))

    def __repr__(self) -> str:
        return f"SplitsPartition({len(self.splits)} splits)"


def partitions_of(framework: FrameworkOptions, groups: list[tuple[Split, ...]], slots: int = 0
                  ) -> list[InputPartition]:
    """One partition per group; ``slots``: the tasks Spark runs at once (0: unknown, see ``reader_slots``)."""
    environment = TaskEnvironment.current()
    readers = concurrent_readers(framework, len(groups), slots)
    return [SplitsPartition(group, environment, readers) for group in groups]


def read_partition(options: Mapping[str, str], partition: SplitsPartition, expected: pa.Schema | None
                   ) -> Iterator[pa.RecordBatch]:
    """Read one partition's splits in order, in ``expected`` (None: the source's own schema)."""
    partition.environment.check()
    remaining = iter(partition.splits)
    yield from read_splits(options, lambda: next(remaining, None), expected, f"partition-{len(partition.splits)}",
                           partition.readers)


class SplitSourceBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = dict(options)
        self._expected = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[InputPartition]:
        framework, source = build_source(self._options)
        groups = pack_for(framework, all_splits(source, max(framework.partitions, 1)))
        # an empty source: one partition that reads nothing gives an empty DataFrame
        return partitions_of(framework, groups or [()])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_partition(self._options, partition, self._expected)
