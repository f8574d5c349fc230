"""Small fakes for edge cases a real server cannot produce on demand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from connectors.generator import GeneratorSource, GeneratorSplit
from connectors.generator._source import GeneratorEnumerator
from splitsource import RecordsBySplits, SplitReader


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


class FlakyConnectionSource(GeneratorSource):
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
