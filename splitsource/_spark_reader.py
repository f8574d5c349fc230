"""The ``splitsource`` Spark data source: batch reads of any connector through the FLIP-27 contracts.

``spark.read.format("splitsource").option("connector", NAME).options(...).load()``

Framework options (everything else goes to the connector):

====================  =======  ====================================================================
option                default  meaning
====================  =======  ====================================================================
connector             —        built-in name (``generator``, ``cassandra``) or ``package.module:Class``
partition_size_mb     128      pack splits into Spark partitions of about this estimated size
partitions            0        exact number of Spark partitions instead (0: by size)
min_partitions        2        by size, still make at least this many partitions (if there are splits)
queue_capacity        4        batches buffered between a partition's fetcher thread and Spark
max_attempts          5        attempts per split for transient errors, in a row without progress
max_retry_wait_s      300      and keep retrying them this long without progress (a restarting node)
initial_backoff_ms    200      first retry wait; doubles per attempt up to max_backoff_ms
max_backoff_ms        10000    longest retry wait
max_splits_per_batch  0        streaming: splits per micro-batch (0: by max_bytes_per_batch_mb)
max_bytes_per_batch_mb 256     streaming: estimated size of the splits of one micro-batch
copy_sink             —        set by ``splitsource copy``: the bucketing sink's options (JSON); read
                               tasks write the part files themselves and emit only their committables
====================  =======  ====================================================================

Runs in Spark's Python workers, not in the user's process: the driver-side worker calls ``partitions()`` (the
enumerator runs to the end once), executor workers call ``read()`` for each partition.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from splitsource._api import Source, Split, _FixedContext
from splitsource._errors import ExecutorEnvironmentError, OptionsError
from splitsource._options import option, parse_options
from splitsource._registry import resolve_connector
from splitsource._source_reader import RetryPolicy, SourceReader, call_with_retry
from splitsource._version import __version__

__all__ = [
    "FrameworkOptions",
    "SplitSourceDataSource",
    "SplitsPartition",
    "build_source",
    "conform_batch",
    "pack_splits",
    "read_partition",
    "read_splits",
    "spark_arrow_schema",
]


@dataclass(frozen=True)
class FrameworkOptions:
    """Options the framework reads itself; every other option is the connector's."""

    connector: str = option(doc="built-in connector name or package.module:ClassName")
    partition_size_mb: float = option(128.0, doc="target estimated size of a Spark partition", minimum=0.001)
    partitions: int = option(0, doc="exact number of Spark partitions (0: by size)", minimum=0)
    min_partitions: int = option(2, doc="by size, at least this many partitions", minimum=1)
    queue_capacity: int = option(4, doc="batches buffered per partition", minimum=1, maximum=1024)
    max_attempts: int = option(5, doc="attempts per split on transient errors", minimum=1)
    max_retry_wait_s: float = option(300.0, doc="keep retrying transient errors this long without progress",
                                     minimum=0.0)
    initial_backoff_ms: int = option(200, doc="first retry wait in ms", minimum=0)
    max_backoff_ms: int = option(10_000, doc="longest retry wait in ms", minimum=0)
    max_splits_per_batch: int = option(0, doc="streaming: splits per micro-batch (0: by max_bytes_per_batch_mb)",
                                       minimum=0)
    max_bytes_per_batch_mb: float = option(256.0, doc="streaming: estimated size of a micro-batch's splits",
                                           minimum=0.001)
    copy_sink: str = option("", doc="splitsource copy: the sink's options as JSON; tasks write the files and emit "
                                    "only their committables")

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.initial_backoff_ms / 1000, self.max_backoff_ms / 1000,
                           self.max_retry_wait_s)


FRAMEWORK_KEYS = frozenset(f.lower() for f in FrameworkOptions.__dataclass_fields__)
# Spark adds these itself (load(path), Hive-style options); connectors never see them.
_SPARK_KEYS = frozenset({"path", "paths"})


def build_source(options: Mapping[str, str]) -> tuple[FrameworkOptions, Source[Any, Any, Any, Any]]:
    """Split Spark's options into the framework's and the connector's, and build the connector's Source."""
    lowered = {k.lower(): str(v) for k, v in options.items()}
    framework = parse_options(
        FrameworkOptions,
        {k: v for k, v in lowered.items() if k in FRAMEWORK_KEYS},
        context="format('splitsource')",
    )
    connector_options = {k: v for k, v in lowered.items() if k not in FRAMEWORK_KEYS and k not in _SPARK_KEYS}
    return framework, resolve_connector(framework.connector)(connector_options)


def spark_arrow_schema(schema: pa.Schema) -> tuple[StructType, pa.Schema]:
    """The Spark schema for a source's Arrow schema, and the exact Arrow schema Spark expects batches in."""
    struct = from_arrow_schema(schema, prefer_timestamp_ntz=False)
    return struct, to_arrow_schema(struct, timezone="UTC")


def conform_batch(batch: pa.RecordBatch, expected: pa.Schema) -> pa.RecordBatch:
    """Return ``batch`` in exactly ``expected`` (field nullability and metadata included); casts if needed."""
    if batch.schema.equals(expected):
        return batch
    if batch.schema.remove_metadata().equals(expected, check_metadata=False) or [
        f.type for f in batch.schema
    ] == [f.type for f in expected]:
        return pa.RecordBatch.from_arrays(batch.columns, schema=expected)
    return batch.cast(expected)


@dataclass(frozen=True)
class SplitsPartition(InputPartition):
    """One Spark partition: the splits one reader reads in order, and the driver's environment to check."""

    splits: tuple[Split, ...]
    python: tuple[int, int]
    version: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", len(self.splits))

    def __repr__(self) -> str:
        return f"SplitsPartition({len(self.splits)} splits)"


def pack_splits(
    splits: Sequence[Split], *, target_bytes: int, partitions: int = 0, min_partitions: int = 1
) -> list[tuple[Split, ...]]:
    """Pack splits, in order, into groups: ``partitions`` balanced groups, or groups of about ``target_bytes``.

    Order is preserved inside a group, so an enumerator that interleaves splits across replicas keeps readers
    spread. Splits of unknown size (0) count as one byte each in the by-count mode.
    """
    if not splits:
        return []
    if partitions > 0:
        count = min(partitions, len(splits))
        groups: list[list[Split]] = [[] for _ in range(count)]
        loads = [0] * count
        for split in splits:  # greedy: next split to the lightest group, ties to the lowest index
            i = loads.index(min(loads))
            groups[i].append(split)
            loads[i] += max(split.estimated_size_bytes, 1)
        return [tuple(g) for g in groups if g]
    total = sum(s.estimated_size_bytes for s in splits)
    if min_partitions > 1 and total // min_partitions < target_bytes:
        return pack_splits(splits, target_bytes=target_bytes, partitions=min_partitions)
    out: list[tuple[Split, ...]] = []
    current: list[Split] = []
    size = 0
    for split in splits:
        est = split.estimated_size_bytes
        if current and size + est > target_bytes:
            out.append(tuple(current))
            current, size = [], 0
        current.append(split)
        size += est
    if current:
        out.append(tuple(current))
    return out


def check_executor(partition: SplitsPartition) -> None:
    """Fail plainly when an executor runs another Python or another splitsource than the driver planned with."""
    here = sys.version_info[:2]
    if tuple(partition.python) != here:
        raise ExecutorEnvironmentError(
            f"executor runs Python {here[0]}.{here[1]} ({sys.executable}) but the driver planned with Python "
            f"{partition.python[0]}.{partition.python[1]}; set PYSPARK_PYTHON to the same interpreter everywhere"
        )
    if partition.version != __version__:
        raise ExecutorEnvironmentError(
            f"executor has splitsource {__version__} but the driver planned with {partition.version}; install "
            "the same version on every executor (see docs/operations.md, 'Shipping to a cluster')"
        )


class SplitSourceBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = dict(options)
        self._expected = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[InputPartition]:
        framework, source = build_source(self._options)
        enumerator = source.create_enumerator(_FixedContext(max(framework.partitions, 1)))
        enumerator.start()
        splits = []
        try:
            while (split := enumerator.next_split()) is not None:
                splits.append(split)
        finally:
            enumerator.close()
        groups = pack_splits(
            splits,
            target_bytes=int(framework.partition_size_mb * 1024 * 1024),
            partitions=framework.partitions,
            min_partitions=framework.min_partitions,
        )
        python = (sys.version_info[0], sys.version_info[1])
        if not groups:  # an empty source: one partition that reads nothing gives an empty DataFrame
            return [SplitsPartition((), python, __version__)]
        return [SplitsPartition(group, python, __version__) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_partition(self._options, partition, self._expected)


def read_partition(options: Mapping[str, str], partition: SplitsPartition, expected: pa.Schema | None
                   ) -> Iterator[pa.RecordBatch]:
    """Read one partition's splits in order, in exactly the Arrow schema Spark expects (batch and streaming);
    ``expected`` None: the schema Spark would expect for the source's own schema (the copy job's write path)."""
    check_executor(partition)
    remaining = iter(partition.splits)
    yield from read_splits(options, lambda: next(remaining, None), expected, f"partition-{len(partition.splits)}")


def read_splits(options: Mapping[str, str], next_split: Callable[[], Split | None], expected: pa.Schema | None,
                name: str) -> Iterator[pa.RecordBatch]:
    """Read the splits ``next_split`` hands out (None: no more) through one :class:`SourceReader`, as Arrow
    batches in ``expected`` (None: the Spark-conformed form of the source's schema)."""
    framework, source = build_source(options)
    if expected is None:
        expected = spark_arrow_schema(call_with_retry(source, source.schema, framework.retry,
                                                      f"{name}: reading the schema"))[1]
    reader = SourceReader(
        source,
        next_split,
        queue_capacity=framework.queue_capacity,
        retry=framework.retry,
        name=name,
    )
    for batch in reader.read():
        yield conform_batch(batch, expected)


class SplitSourceDataSource(DataSource):
    """``format("splitsource")``: read any splitsource connector into Spark.

    Example::

        df = (spark.read.format("splitsource")
              .option("connector", "generator").option("rows", "1000000").load())

    See the module docstring for the framework options and each connector's docs for its own.
    """

    @classmethod
    def name(cls) -> str:
        return "splitsource"

    def schema(self) -> StructType:
        framework, source = build_source(self.options)
        if framework.copy_sink:  # the copy job's stream: committables, not the source's rows
            from splitsource.sink._spark import COMMITTABLES_SCHEMA

            return from_arrow_schema(COMMITTABLES_SCHEMA)
        return spark_arrow_schema(source.schema())[0]

    def reader(self, schema: StructType) -> DataSourceReader:
        framework, _ = build_source(self.options)  # fail on bad options in the driver, before any task starts
        if framework.copy_sink:
            raise OptionsError("option 'copy_sink' is set by splitsource copy for its stream; a batch read cannot "
                               "use it")
        return SplitSourceBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        from splitsource._spark_stream import SplitSourceStreamReader

        return SplitSourceStreamReader(self.options, schema)
