"""The cost of durability: the same copy with the storage door's syncs and without them, alternating, in one run.

    .venv/bin/python bench/bench_durability.py --rows 2000000 --repeat 3

Each round copies the generator's rows to Parquet (4 batches, two buckets) with ``--engine local`` and with the
Spark engine, once as shipped and once with ``SPLITSOURCE_BENCH_NO_SYNC=1`` (no fsync: a benchmark switch, never
for real data), and prints the medians side by side. The result goes to bench/results/durability.json with the
commit, machine and date it measured.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record, run  # noqa: E402


def copy_command(out: Path, rows: int, engine: str) -> list[str]:
    split_rows = max(1, rows // 16)
    return [sys.executable, "-m", "splitsource.cli", "copy", "--connector", "generator", "-o", f"rows={rows}",
            "-o", f"split_rows={split_rows}", "-o", "columns=id:bigint,flag:boolean,value:double,name:string",
            "--bucketer", "columns", "--sink-option", "bucket_columns=flag", "--max-splits-per-batch", "4",
            "--engine", engine, "--output", str(out), "--quiet"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-durability-"))
    try:
        for round_ in range(args.repeat):
            for engine in ("local", "spark"):
                for mode in (("synced", "unsynced") if round_ % 2 == 0 else ("unsynced", "synced")):
                    out = work / f"{engine}-{mode}-{round_}"
                    env = {"SPLITSOURCE_BENCH_NO_SYNC": "1"} if mode == "unsynced" else {}
                    measured = run(copy_command(out, args.rows, engine), env=env)
                    if measured.returncode != 0:
                        print(measured.output[-2000:], file=sys.stderr)
                        return 1
                    times.setdefault(f"{engine} {mode}", []).append(measured.seconds)
                    shutil.rmtree(out, ignore_errors=True)
                    shutil.rmtree(f"{out}.checkpoint", ignore_errors=True)
                    shutil.rmtree(f"{out}.bucketing", ignore_errors=True)  # the output's records
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'copy of ' + format(args.rows, ',') + ' generator rows':<40} {'median s':>9}  runs")
    for key, value in medians.items():
        print(f"{key:<40} {value:>9.2f}  {', '.join(f'{t:.2f}' for t in times[key])}")
    ratios = {engine: medians[f"{engine} synced"] / medians[f"{engine} unsynced"] for engine in ("local", "spark")}
    for engine, ratio in ratios.items():
        print(f"{engine}: durable / not durable = {ratio:.3f} ({(ratio - 1) * 100:+.1f}%)")
    record("durability", f"bench/bench_durability.py --rows {args.rows} --repeat {args.repeat}",
           rows=args.rows, seconds=times, median_s=medians, ratio_durable=ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
