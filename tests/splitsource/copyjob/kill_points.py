"""Named points a copy is killed at: ``python kill_points.py <gate> <point> <copy args...>`` runs ``splitsource
copy`` and holds its coordinator at ``point`` of the second batch the run handles (the first commits, so every run
makes progress), touching ``<gate>/reached`` there and waiting to be killed (or, once ``<gate>/release`` exists, going
on: a copy paused at the point). The coordinator plans and commits for
both engines in the copy's own process, so the points are the same for the local and the Spark engine and for every
connector: no verdict depends on how fast the copy runs, only on the plan's batches.

The points, in the order a batch passes them:

- ``planned``: the batch's offset is logged, no split of it read;
- ``mid-batch``: a read task reported a finished split; the others are still reading;
- ``written``: every task's files are pending, the batch not committed;
- ``ledger``: the batch's split counts are in the checkpoint, its commit record not made.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

POINTS = ("planned", "mid-batch", "written", "ledger")
# where an engine's tasks are reading or have just reported: at the other two the batch is the coordinator's alone
# (nothing launched yet; every task ended), the same code for both engines, which the local engine's storms and one
# Spark storm at every point (test_copy.py) kill at. A Spark storm of a connector kills here, where its readers run
# in Spark's Python workers: each kill there restarts a JVM (about 12 s under the suite's load)
ENGINE_POINTS = ("mid-batch", "written")
HOLD_S = 600.0  # a copy nobody kills ends by itself


def _hold(gate: Path, point: str) -> None:
    (gate / "reached").write_text(point)
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        if (gate / "release").exists():
            return
        time.sleep(0.05)
    os._exit(3)


def main(argv: list[str]) -> int:
    from splitsource.cli import main as cli
    from splitsource.copyjob import _coordinator

    gate, point, args = Path(argv[0]), argv[1], argv[2:]
    assert point in POINTS, point
    coordinator = _coordinator._Coordinator
    seen = {"batches": 0}

    def held() -> bool:
        return seen["batches"] == 2

    write, progress = coordinator.write, coordinator.progress
    write_and_commit, write_batch = coordinator.write_and_commit, _coordinator.write_batch

    def count(self: Any, batch_id: int, end: Any) -> None:
        seen["batches"] += 1
        if held() and point == "planned":
            _hold(gate, point)
        write_and_commit(self, batch_id, end)

    def reported(self: Any, splits_finished: int, batch_rows: int) -> None:
        progress(self, splits_finished, batch_rows)
        if held() and point == "mid-batch" and splits_finished >= 1:
            _hold(gate, point)

    def written(self: Any, batch: Any) -> Any:
        results = write(self, batch)
        if held() and point in ("written", "mid-batch"):  # a batch of one split reports it only at its end
            _hold(gate, point)
        return results

    def ledger(*a: Any, **k: Any) -> Any:
        result = write_batch(*a, **k)
        if held() and point == "ledger":
            _hold(gate, point)
        return result

    coordinator.write_and_commit = count  # type: ignore[method-assign]
    coordinator.progress = reported  # type: ignore[method-assign]
    coordinator.write = written  # type: ignore[method-assign]
    _coordinator.write_batch = ledger  # type: ignore[assignment]
    return cli(args)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    sys.exit(main(sys.argv[1:]))
