"""The generator's rows on the full API (tests/splitsource/full_api.py), whose readers stop before a given row
until the test opens a gate (a file): for tests that must see something happen while a batch is provably still
running, in this process, local workers or Spark's workers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.generator import GeneratorOptions
from splitsource import RecordsBySplits, SplitReader, option
from tests.splitsource.full_api import GeneratorSplit, RowsSource


@dataclass(frozen=True)
class GatedRowsOptions(GeneratorOptions):
    gate: str = option("", doc="directory of the gate: readers wait for <gate>/release")
    gate_row: int = option(-1, doc="stop before this row until the gate opens (-1: never)")
    gate_wait_s: float = option(60.0, doc="fail the read if the gate stays shut this long")


class GatedRowsSource(RowsSource):
    name = "gated-rows"
    options_class = GatedRowsOptions

    def create_split_reader(self) -> Any:
        inner = super().create_split_reader()
        options: GatedRowsOptions = self.options  # type: ignore[assignment]
        gate = Path(options.gate)

        class Reader(SplitReader[GeneratorSplit, Any]):
            def add_splits(self, splits: Sequence[GeneratorSplit]) -> None:
                inner.add_splits(splits)

            def fetch(self) -> RecordsBySplits[Any]:
                position = inner._queue.position
                if position is not None and position == options.gate_row:
                    (gate / "reached").touch()
                    deadline = time.monotonic() + options.gate_wait_s
                    while not (gate / "release").exists():
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"the gate at row {position} was never opened")
                        time.sleep(0.02)
                return inner.fetch()

            def wake_up(self) -> None:
                inner.wake_up()

        return Reader()
