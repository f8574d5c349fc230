"""A source of the full API for the framework's and the kit's own tests: the generator's rows (its options and
values, ``connectors/generator``), cut by an enumerator and read by a split reader of its own, with the split and
position the short path would build. The framework's paths for a source that is not on the short path (a restore
from the plan, not from the enumerator's state) and the kit's mutants of an enumerator or a reader stand on it."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connectors.generator import GeneratorOptions, GeneratorSource, generate_batch
from connectors.generator._source import _TYPES
from serializers import SimpleVersionedSerializer, dataclass_serializer
from splitsource import (
    Changes,
    EnumeratorState,
    OptionsError,
    RecordsBySplits,
    Source,
    Split,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitQueue,
    SplitReader,
)

__all__ = ["GeneratorEnumerator", "GeneratorPosition", "GeneratorSplit", "GeneratorSplitReader", "RowsSource"]


@dataclass(frozen=True)
class GeneratorSplit(Split):
    """Rows ``start``..``end`` (half-open) of split number ``index``; its state moves ``start`` on."""

    index: int
    start: int
    end: int
    row_bytes: int = 0

    @property
    def split_id(self) -> str:
        return f"generator-{self.index}"

    @property
    def estimated_size_bytes(self) -> int:
        return (self.end - self.start) * self.row_bytes


@dataclass(frozen=True)
class GeneratorPosition:
    """The enumerator's plan position: the index of the next split to cut."""

    next_index: int


class GeneratorEnumerator(SplitEnumerator[GeneratorSplit, GeneratorPosition]):
    """Cuts ``rows`` into splits of ``rows_per_split`` on request, from row ``first`` (an incremental run's: the
    rows the run before read; the generator's rows only ever grow); its state is one integer."""

    def __init__(
        self,
        options: GeneratorOptions,
        context: SplitEnumeratorContext | None = None,
        position: GeneratorPosition = GeneratorPosition(0),
        pending: Sequence[GeneratorSplit] = (),
        first: int = 0,
    ) -> None:
        super().__init__(context, pending)
        self._options = options
        self._next = position.next_index
        self._first = first

    def instant(self) -> dict[str, int]:
        return {"rows": self._options.total}

    def generate_split(self) -> GeneratorSplit | None:
        per = self._options.rows_per_split
        start = self._first + self._next * per
        if start >= self._options.total:
            return None
        split = GeneratorSplit(self._next, start, min(start + per, self._options.total), self._options.row_bytes)
        self._next += 1
        return split

    def position(self) -> GeneratorPosition:
        return GeneratorPosition(self._next)

    def estimated_total_splits(self) -> int:
        return -(-(self._options.total - self._first) // self._options.rows_per_split)


_Raw = tuple[pa.RecordBatch, GeneratorSplit]  # a batch, and what is left of its split after it


class GeneratorSplitReader(SplitReader[GeneratorSplit, _Raw]):
    """Generates ``batch_rows`` rows per fetch from the first unfinished split."""

    def __init__(self, source: RowsSource) -> None:
        self._source = source
        self._options = source.options
        self._schema = source.schema()
        self._queue: SplitQueue[GeneratorSplit, int] = SplitQueue(lambda split: split.start)
        self._woken = threading.Event()

    def add_splits(self, splits: Sequence[GeneratorSplit]) -> None:
        self._queue.add(splits)

    def fetch(self) -> RecordsBySplits[_Raw]:
        split = self._queue.head
        if split is None:
            return RecordsBySplits()
        if self._options.fetch_delay_ms and self._woken.wait(self._options.fetch_delay_ms / 1000):
            self._woken.clear()
            return RecordsBySplits()  # woken up: return at once, position unchanged
        start = self._queue.position
        assert start is not None
        end = min(start + self._options.batch_rows, split.end)
        end = self._source._maybe_fail(start, end, split.split_id)
        batches: list[tuple[str, _Raw]] = []
        if end > start:
            batch = generate_batch(self._options, self._schema, start, end)
            batches.append((split.split_id, (batch, dataclasses.replace(split, start=end))))
        if end < split.end:
            self._queue.position = end
            return RecordsBySplits(batches)
        self._queue.pop()
        return RecordsBySplits(batches, frozenset({split.split_id}))

    def wake_up(self) -> None:
        self._woken.set()


class RowsSource(Source[GeneratorSplit, GeneratorPosition, _Raw, GeneratorOptions]):
    """The generator's rows on the full API: its options, values, injected failures, identity and reference rows
    (those of a generator of the same options)."""

    name = "rows"
    options_class = GeneratorOptions

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._generator = GeneratorSource(self.options)

    def _maybe_fail(self, start: int, end: int, split_id: str) -> int:
        return self._generator._maybe_fail(start, end, split_id)

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, _TYPES[c.type_name][0], nullable=True) for c in self.options.columns])

    def create_enumerator(self, context: SplitEnumeratorContext) -> GeneratorEnumerator:
        return GeneratorEnumerator(self.options, context, first=self._first_row())

    def restore_enumerator(
        self, context: SplitEnumeratorContext, state: EnumeratorState[GeneratorSplit, GeneratorPosition]
    ) -> GeneratorEnumerator:
        return GeneratorEnumerator(self.options, context, state.position, state.pending, self._first_row())

    def incremental(self) -> Changes:
        """Rows are only ever added (option ``appended`` grows): an incremental run reads the rows after the last
        run's."""
        return Changes.APPENDS

    def _first_row(self) -> int:
        """The first row this read reads: 0, or with ``since`` the rows the run before read."""
        if self.since is None:
            return 0
        first = self.since.get("rows")
        if not isinstance(first, int) or first < 0:
            raise OptionsError(f"option 'since': {self.since} is not a generator's instant (rows=N)")
        if first > self.options.total:
            raise OptionsError(f"option 'appended': {self.options.total} rows in all, fewer than the {first} the run "
                               "before read: a generator's rows only grow")
        return first

    def create_split_reader(self) -> GeneratorSplitReader:
        return GeneratorSplitReader(self)

    def split_serializer(self) -> SimpleVersionedSerializer[GeneratorSplit]:
        return dataclass_serializer(GeneratorSplit)

    def position_serializer(self) -> SimpleVersionedSerializer[GeneratorPosition]:
        return dataclass_serializer(GeneratorPosition)

    def identity(self) -> dict[str, Any]:
        return dict(self._generator.identity(), connector=self.name)

    def reference_rows(self, part: int = 0, parts: int = 1) -> Any:
        return self._generator.reference_rows(part, parts)
