"""Small fakes for edge cases a real server cannot produce on demand."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from connectors.generator import GeneratorSource
from splitsource import RecordEmitter, RecordsBySplits, SplitReader, SplitState
from tests.splitsource.full_api import GeneratorEnumerator, GeneratorSplit, RowsSource


class _FlakyReader(SplitReader[GeneratorSplit, Any]):
    def __init__(self, owner: FlakyConnectionSource, inner: SplitReader[GeneratorSplit, Any]) -> None:
        self._owner = owner
        self._inner = inner
        self.closed = False

    def add_splits(self, splits: Sequence[GeneratorSplit]) -> None:
        self._inner.add_splits(splits)

    def fetch(self) -> RecordsBySplits[Any]:
        if self.closed:
            raise AssertionError("fetch on a closed reader")
        self._owner.fetches += 1
        if self._owner.fetches % self._owner.fail_every == 0:
            raise ConnectionError("connection reset by peer (fake)")
        return self._inner.fetch()

    def close(self) -> None:
        self.closed = True


class FlakyConnectionSource(RowsSource):
    """A generator whose split readers lose their 'connection' every ``fail_every`` fetches."""

    def __init__(self, rows: int, fail_every: int) -> None:
        super().__init__({"rows": str(rows), "split_rows": "700", "batch_rows": "100"})
        self.fail_every = fail_every
        self.fetches = 0
        self.readers_opened = 0

    def create_split_reader(self) -> _FlakyReader:  # type: ignore[override]
        self.readers_opened += 1
        return _FlakyReader(self, super().create_split_reader())

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, ConnectionError) or super().is_transient(error)

    def enumerator(self) -> GeneratorEnumerator:
        return self.create_enumerator(None)  # type: ignore[arg-type]

    def expected(self) -> pa.Table:
        reference = GeneratorSource({"rows": str(self.options.rows)})
        from splitsource import read_local

        return read_local(reference, 1)


class _GatedReader(SplitReader[GeneratorSplit, Any]):
    """Finishes its split in one fetch; ``wake_up`` releases the owner's gate (as a real reader's wake-up would
    make a blocked call return)."""

    def __init__(self, owner: GatedSupplySource, inner: SplitReader[GeneratorSplit, Any]) -> None:
        self._owner = owner
        self._inner = inner

    def add_splits(self, splits: Sequence[GeneratorSplit]) -> None:
        self._inner.add_splits(splits)

    def fetch(self) -> RecordsBySplits[Any]:
        return self._inner.fetch()

    def wake_up(self) -> None:
        self._owner.release.set()


class GatedSupplySource(RowsSource):
    """A generator whose split supply blocks on the second request until the reader is woken up: the moment a
    reader is stopped while a split is being handed out."""

    def __init__(self) -> None:
        super().__init__({"rows": "200", "split_rows": "100", "batch_rows": "100"})
        self.release = threading.Event()
        self.inside_supply = threading.Event()
        self.taken: list[GeneratorSplit] = []
        self._enumerator = self.create_enumerator(None)  # type: ignore[arg-type]

    def next_split(self) -> GeneratorSplit | None:
        if self.taken:
            self.inside_supply.set()
            self.release.wait(10)
        split = self._enumerator.next_split()
        if split is not None:
            self.taken.append(split)
        return split

    def create_split_reader(self) -> _GatedReader:  # type: ignore[override]
        return _GatedReader(self, super().create_split_reader())


class DownForSource(RowsSource):
    """A generator whose split readers cannot be created (as when a node is down) until ``down_until``; its
    connection errors are transient, as Cassandra's are."""

    def __init__(self, options: dict[str, str], down_after_fetches: int, down_for_s: float,
                 down_at_start: bool = False) -> None:
        super().__init__(options)
        self.fetches = 0
        self.down_after_fetches = down_after_fetches
        self.down_for_s = down_for_s
        self.down_until: float | None = time.monotonic() + down_for_s if down_at_start else None
        self.refused = 0

    def create_record_emitter(self) -> Any:  # as Cassandra's, it reads the table's metadata: it connects
        if self.down_until is not None and time.monotonic() < self.down_until:
            self.refused += 1
            raise ConnectionRefusedError("cannot reach node 127.0.0.9:9042 (fake: restarting)")
        return super().create_record_emitter()

    def create_split_reader(self) -> Any:
        if self.down_until is not None and time.monotonic() < self.down_until:
            self.refused += 1
            raise ConnectionRefusedError("cannot reach node 127.0.0.9:9042 (fake: restarting)")
        inner = super().create_split_reader()
        owner = self

        class Reader(SplitReader[GeneratorSplit, Any]):
            def add_splits(self, splits: Sequence[GeneratorSplit]) -> None:
                inner.add_splits(splits)

            def fetch(self) -> RecordsBySplits[Any]:
                owner.fetches += 1
                if owner.fetches == owner.down_after_fetches:
                    owner.down_until = time.monotonic() + owner.down_for_s
                    raise ConnectionResetError("node 127.0.0.9:9042 went away (fake)")
                return inner.fetch()

        return Reader()

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, ConnectionError) or super().is_transient(error)


class RewritingEmitter(RecordEmitter[Any, Any]):
    """An emitter that rewrites one column of each batch its ``inner`` emitter makes: a planted conversion bug."""

    def __init__(self, inner: RecordEmitter[Any, Any], column: str, rewrite: Callable[[pa.Array], pa.Array]) -> None:
        self._inner = inner
        self._column = column
        self._rewrite = rewrite

    def emit(self, raw: Any, state: SplitState[Any]) -> pa.RecordBatch | None:
        batch = self._inner.emit(raw, state)
        if batch is None or self._column not in batch.schema.names:
            return batch
        i = batch.schema.get_field_index(self._column)
        return batch.set_column(i, batch.schema.field(i), self._rewrite(batch.column(i)))
