"""The Spark engine's progress moves while a batch runs, not only when it commits (issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark]

GATED = "tests.splitsource.gated_rows:GatedRowsSource"


def test_progress_moves_while_the_only_batch_is_still_running(tmp_path: Path, spark: Any) -> None:
    """One batch of 8 splits; one reader stops before row 4500 until the progress shows rows. The batch cannot
    commit before the gate opens, so rows seen before the final update can only come from the read tasks."""
    import splitsource

    gate = tmp_path / "gate"
    gate.mkdir()
    seen: list[tuple[int, int, bool]] = []

    class Recorder:
        def update(self, splits: int, total: int, rows: int, final: bool = False) -> None:
            seen.append((splits, rows, final))
            if rows > 0 and not final:
                (gate / "release").touch()

    options = {"rows": "8000", "split_rows": "1000", "batch_rows": "500", "gate": str(gate), "gate_row": "4500"}
    summary = splitsource.copy(GATED, options, str(tmp_path / "out"), spark=spark,
                               progress=Recorder())  # type: ignore[arg-type]
    assert (gate / "reached").exists(), "no reader stopped at the gate: the test proved nothing"
    assert summary.total_rows == 8000 and summary.batches == 1
    live = [(splits, rows) for splits, rows, final in seen if not final and rows > 0]
    assert live and live[0][1] < 8000, seen  # rows shown mid-batch (the gate held the batch open)
    assert all(rows <= 8000 and splits <= 8 for splits, rows, _ in seen), "a report was counted twice"
    assert seen[-1] == (8, 8000, True)
    assert not (tmp_path / "out.checkpoint" / "progress").exists(), "the task reports are left behind"
