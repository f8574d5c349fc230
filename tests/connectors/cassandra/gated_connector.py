"""A Cassandra connector whose readers stop at a gate mid-split, for node-crash tests that cannot pass by luck.

Each reader process counts the pages it fetches. Before page ``gate_page`` of a split (so the split is provably
half read) it writes ``<gate>/reached-<pid>`` and waits until the test creates ``<gate>/release``; the test kills
the node in between. Every error a fetch or a connect raises writes ``<gate>/failed-<pid>-<n>``: the proof that the
crash reached the reader. Works in this process, in local-engine workers and in Spark's Python workers alike,
since it only talks through files.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.cassandra import CassandraOptions, CassandraSource
from connectors.cassandra._reader import CassandraSplitReader
from splitsource import RecordsBySplits, option

_failures = itertools.count()


@dataclass(frozen=True)
class GatedOptions(CassandraOptions):
    gate: str = option("", doc="directory of the gate files")
    gate_page: int = option(3, doc="stop before this page of a split", minimum=2)
    gate_splits: str = option("", doc="';'-separated split ids to stop in (empty: any split)")


def _failed(gate: Path, error: BaseException) -> None:
    (gate / f"failed-{os.getpid()}-{next(_failures)}").write_text(f"{type(error).__name__}: {error}")


class _GatedReader(CassandraSplitReader):
    def __init__(self, source: GatedCassandraSource) -> None:
        super().__init__(source.options, source.select_cql(), source.token_of)
        self._gate = Path(source.options.gate)
        self._gate_page = source.options.gate_page
        self._pages: dict[str, int] = {}
        self._only = {s for s in source.options.gate_splits.split(";") if s}

    def fetch(self) -> RecordsBySplits[Any]:
        if self._queue.head is not None:
            split_id = self._queue.head.split_id
            page = self._pages[split_id] = self._pages.get(split_id, 0) + 1
            gated = not self._only or split_id in self._only
            if gated and page == self._gate_page and not (self._gate / "release").exists():
                (self._gate / f"reached-{os.getpid()}").write_text(split_id)
                deadline = time.monotonic() + 600
                while not (self._gate / "release").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
        try:
            return super().fetch()
        except BaseException as exc:
            _failed(self._gate, exc)
            raise


class GatedCassandraSource(CassandraSource):
    """``cassandra`` with a gate (see the module docstring); reads, names and identity as ``cassandra``."""

    options_class = GatedOptions

    def create_split_reader(self) -> CassandraSplitReader:
        try:
            return _GatedReader(self)
        except BaseException as exc:
            _failed(Path(self.options.gate), exc)
            raise
