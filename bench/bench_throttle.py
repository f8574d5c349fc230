"""How close a throttled copy keeps to its limit: ``--max-rows-per-second`` and ``--max-mb-per-second`` on both
engines, each over about ``--seconds`` of reading, against a source much faster than the limit.

    python bench/bench_throttle.py --seconds 30

The rate is measured from the copy's own progress reports: rows after the first report that saw any, over the
time from that report to the first that saw every row (so the engine's start-up and last commit are not
counted), and bytes as the Arrow size of those rows. A limit is met when the measured rate is within 10% of
it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402

COLUMNS = "id:bigint,name:string,score:double,at:timestamp"


class Samples:
    """A progress sink that keeps (time, rows) of every report."""

    def __init__(self) -> None:
        self.points: list[tuple[float, int]] = []

    def update(self, splits: int, total: int, rows: int, final: bool = False) -> None:
        self.points.append((time.monotonic(), rows))


def arrow_bytes_per_row() -> float:
    from splitsource import read_local
    from splitsource._registry import resolve_connector

    source = resolve_connector("generator")({"rows": "100000", "columns": COLUMNS})
    table = read_local(source)
    return table.nbytes / table.num_rows


def measure(engine: str, limit: str, value: float, rows: int, workdir: Path, per_batch: int,
            per_row: float) -> dict[str, object]:
    from splitsource import copy

    out = workdir / f"{engine}-{limit}"
    samples = Samples()
    options = {"rows": str(rows), "split_rows": str(max(rows // 32, 1)), "batch_rows": "2000", "columns": COLUMNS}
    kwargs = {"max_rows_per_second": value} if limit == "rows" else {"max_mb_per_second": value}
    settings = {"workers": 2} if engine == "local" else {"master": "local[2]"}
    started = time.monotonic()
    summary = copy("generator", options, str(out), engine=engine, progress=samples,  # type: ignore[arg-type]
                   max_splits_per_batch=per_batch, **settings, **kwargs)
    ended = time.monotonic()
    assert summary.total_rows == rows, summary
    first = next((t, r) for t, r in samples.points if r > 0)
    last = next(t for t, r in samples.points if r >= rows)  # every row read (the final commit is not reading)
    window = last - first[0]
    rate = (rows - first[1]) / window
    if limit == "mb":
        rate = rate * per_row / (1024 * 1024)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(f"{out}.checkpoint", ignore_errors=True)
    shutil.rmtree(f"{out}.bucketing", ignore_errors=True)  # the output's records
    return {"engine": engine, "limit": limit, "max_splits_per_batch": per_batch, "value": value, "rows": rows,
            "window_s": round(window, 1),
            "wall_s": round(ended - started, 1), "measured": round(rate, 2), "ratio": round(rate / value, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="reading time each copy should take")
    parser.add_argument("--rows-limit", type=float, default=20_000.0, help="--max-rows-per-second to measure")
    parser.add_argument("--mb-limit", type=float, default=1.0, help="--max-mb-per-second to measure")
    parser.add_argument("--engines", default="local,spark")
    parser.add_argument("--max-splits-per-batch", type=int, default=0,
                        help="splits per batch (default 0: by size, one batch here; the source has 32 splits)")
    args = parser.parse_args()
    per_row = arrow_bytes_per_row()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-throttle-") as tmp:
        for engine in args.engines.split(","):
            for limit, value in (("rows", args.rows_limit), ("mb", args.mb_limit)):
                rows_per_s = value if limit == "rows" else value * 1024 * 1024 / per_row
                result = measure(engine, limit, value, int(rows_per_s * args.seconds), Path(tmp),
                                 args.max_splits_per_batch, per_row)
                results.append(result)
                print(f"{engine:6} batches of {args.max_splits_per_batch or 'all':>3} splits  "
                      f"--max-{limit}-per-second {value:>10,g}  measured {result['measured']:>12,.2f} over "
                      f"{result['window_s']:5.1f} s ({result['rows']:,} rows, wall {result['wall_s']} s)  "
                      f"ratio {result['ratio']:.3f}", flush=True)
    suffix = f"-batches-{args.max_splits_per_batch}" if args.max_splits_per_batch else ""
    record_run(f"throttle{suffix}", {"seconds": args.seconds, "arrow_bytes_per_row": round(per_row, 1),
                                     "results": results})
    return 0 if all(0.9 <= float(r["ratio"]) <= 1.1 for r in results) else 1  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
