"""Batch reads of ``format("splitsource")``: the enumerator runs to the end once in the driver-side Python
worker (``partitions()``), its splits are packed into Spark partitions, and executor workers read each partition's
splits in order (``read()``) through the runtime's :class:`~splitsource.runtime.SourceReader`."""

from __future__ import annotations

import logging
import pickle
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from splitsource._api import Predicate, Source, Split
from splitsource._planning import (
    FrameworkOptions,
    ReadSettings,
    TaskEnvironment,
    all_splits,
    concurrent_readers,
    pack_for,
)
from splitsource.runtime._read import read_splits

__all__ = ["PushdownBatchReader", "SplitSourceBatchReader", "SplitsPartition", "carried", "partitions_of",
           "predicate_of", "read_partition", "source_of", "spark_arrow_schema"]

log = logging.getLogger("splitsource.spark")


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


def carried(source: Source[Any, Any, Any, Any]) -> bytes | None:
    """``source`` pickled with what it has read of its metadata, for the later steps of the same read (Spark's
    planning worker, its tasks), or None when it does not pickle (a lock among its attributes). Only ever handed
    from one step of a read to the next, never kept: nothing persisted is pickled."""
    from pyspark import cloudpickle

    try:
        data: bytes = cloudpickle.dumps(source)  # type: ignore[no-untyped-call]
        return data
    except Exception:  # noqa: BLE001 - any object that does not pickle: the next steps build the source again
        return None


def source_of(settings: ReadSettings, planned: bytes | None) -> Source[Any, Any, Any, Any]:
    """The source of ``settings``: the one the schema step carried (``planned``), else built again."""
    if planned is not None:
        try:
            source = pickle.loads(planned)
            if isinstance(source, Source):
                return source
        except Exception:  # noqa: BLE001 - a worker that cannot load it builds the source again
            pass
    return settings.source()


def read_partition(settings: ReadSettings, partition: SplitsPartition, expected: pa.Schema | None,
                   planned: bytes | None = None) -> Iterator[pa.RecordBatch]:
    """Read one partition's splits in order, in ``expected`` (None: the source's own schema); ``planned``: the
    source as the schema step carried it."""
    partition.environment.check()
    remaining = iter(partition.splits)
    yield from read_splits(settings.framework, source_of(settings, planned), lambda: next(remaining, None),
                           expected, f"partition-{len(partition.splits)}", partition.readers)


_OPS = {EqualTo: "=", In: "in", LessThan: "<", LessThanOrEqual: "<=", GreaterThan: ">", GreaterThanOrEqual: ">="}


def predicate_of(spark_filter: Filter) -> Predicate | None:
    """A Spark filter as the framework's :class:`Predicate`; None for what it does not express (nested columns,
    NOT, string matching, null tests)."""
    op = _OPS.get(type(spark_filter))
    attribute: tuple[str, ...] = tuple(getattr(spark_filter, "attribute", ()))
    if op is None or len(attribute) != 1:
        return None
    value: Any = getattr(spark_filter, "value", None)
    return Predicate(attribute[0], op, tuple(value) if op == "in" else value)


_PUSHDOWN_STEP = "data_source_pushdown_filters.py"  # the module of Spark's worker that offers a query's filters


def spark_offers_filters() -> bool:
    """Whether the reader is being asked for by Spark's filter pushdown step (pyspark's
    ``sql/worker/data_source_pushdown_filters.py``), which Spark runs only while
    ``spark.sql.python.filterPushdown.enabled`` is true; otherwise a reader with ``pushFilters`` is refused."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PUSHDOWN_STEP):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class SplitSourceBatchReader(DataSourceReader):
    """A batch read: its options parsed once, in the driver (``settings``), travel with it, pickled, to the
    planning worker and every task."""

    def __init__(self, settings: ReadSettings, schema: StructType, planned: bytes | None = None) -> None:
        self._settings = settings
        self._expected = to_arrow_schema(schema, timezone="UTC")
        self._planned = planned  # the source as the schema step carried it (see SplitSourceDataSource.schema)

    def partitions(self) -> list[InputPartition]:
        framework, source = self._settings.framework, source_of(self._settings, self._planned)
        groups = pack_for(framework, all_splits(source, max(framework.partitions, 1)))
        # an empty source: one partition that reads nothing gives an empty DataFrame
        return partitions_of(framework, groups or [()])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_partition(self._settings, partition, self._expected, self._planned)


class PushdownBatchReader(SplitSourceBatchReader):
    """The batch reader with filter pushdown (whenever ``spark.sql.python.filterPushdown.enabled`` is true, unless
    option ``pushdown`` is false)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - Spark's name
        """Offer the filters to the connector (:meth:`~splitsource.Source.push_predicates`); those it takes are
        read with its added options (visible to ``partitions()`` and ``read()``: this object is pickled after),
        the rest are returned for Spark to evaluate. Called only when
        ``spark.sql.python.filterPushdown.enabled`` is true."""
        offered = [(f, p) for f in filters if (p := predicate_of(f)) is not None]
        source = source_of(self._settings, self._planned)
        added, taken = source.push_predicates([p for _, p in offered])
        pushed = {id(offered[i][0]) for i in taken}
        if pushed:
            self._settings = self._settings.with_connector(added)
            self._planned = None  # the carried source reads with the options it was built with
        left = [f for f in filters if id(f) not in pushed]
        if filters:  # Spark's explain shows a Python scan as "(Python)" only: one line on the console says it
            shown = ", ".join(f"{k}={v}" for k, v in added.items()) if pushed else ""
            print(f"splitsource: {source.name} reads with {shown} ({len(pushed)} of {len(filters)} filters pushed)"
                  if pushed else f"splitsource: no filter pushed to {source.name} ({len(filters)} left to Spark)",
                  file=sys.stderr, flush=True)
        return left
