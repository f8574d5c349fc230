"""A copy into a table costs little more than a copy into plain Parquet: the 1M-row benchmark table copied to
Parquet files, to a Delta Lake table and to an Iceberg table, with both engines, alternating, in one run.

    .venv/bin/python bench/bench_tables.py --repeat 3

Needs the benchmark table (``bench/cassandra_table.py --rows 1000000`` starts the node and loads it). Each round
copies the table once per engine and target, in rotating order; the medians and each table format's ratio to
plain Parquet are printed side by side (target: at most 1.15) and go to bench/results/tables.json with the
commit, machine and date they measured.
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
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE  # noqa: E402

TARGETS = ("parquet", "delta", "iceberg")


def copy_command(out: Path, engine: str, target: str) -> list[str]:
    table = [] if target == "parquet" else ["--table-format", target]
    return [sys.executable, "-m", "splitsource.cli", "copy", "--connector", "cassandra", "-o", f"hosts={HOSTS}",
            "-o", f"keyspace={KEYSPACE}", "-o", f"table={TABLE}", "--engine", engine, *table,
            "--output", str(out), "--quiet"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-tables-"))
    try:
        for round_ in range(args.repeat):
            order = TARGETS[round_ % 3:] + TARGETS[:round_ % 3]
            for engine in ("local", "spark"):
                for target in order:
                    out = work / f"{engine}-{target}-{round_}"
                    measured = run(copy_command(out, engine, target))
                    if measured.returncode != 0:
                        print(measured.output[-2000:], file=sys.stderr)
                        return 1
                    times.setdefault(f"{engine} {target}", []).append(measured.seconds)
                    for path in (out, f"{out}.checkpoint", f"{out}.bucketing"):
                        shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'copy of the 1M-row table':<28} {'median s':>9}  {'vs parquet':>10}  runs")
    ratios: dict[str, float] = {}
    for key, value in medians.items():
        engine, target = key.split()
        ratio = value / medians[f"{engine} parquet"]
        if target != "parquet":
            ratios[key] = ratio
        print(f"{key:<28} {value:>9.2f}  {ratio:>10.3f}  {', '.join(f'{t:.2f}' for t in times[key])}")
    record("tables", f"bench/bench_tables.py --repeat {args.repeat}", seconds=times, median_s=medians,
           ratio_to_parquet=ratios, results={key: {"median_s": round(value, 2), "vs_parquet": round(
               value / medians[f"{key.split()[0]} parquet"], 3)} for key, value in medians.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
