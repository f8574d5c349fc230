#!/usr/bin/env python3
"""The Spark engine's fixed cost, side by side in one run: a bare Spark session, the local engine, the Spark engine.

Each method runs as a child process (wall time includes its start-up), ``--repeat`` rounds, medians reported:

- ``bare spark``: start a session as ``splitsource copy`` does (``local[2]``, same settings) and run one job
  (``spark.range(1).count()``), then stop it as the copy does: what any Spark job pays before its data;
- ``copy --engine local``: ``splitsource copy`` of the generator (``--rows`` rows) to Parquet, no JVM;
- ``copy`` (Spark engine): the same copy, one batch; and again without the driver JVM's class archive
  (``SPLITSOURCE_JVM_ARCHIVE=off``; the bare session and the other copies use it, as ``splitsource copy`` does);
- ``re-run``: the Spark engine's copy run again once finished (nothing to do).

Target (issue 17): Spark engine <= bare spark + local engine + 5 s; a re-run under 5 s.

    python bench/bench_spark_overhead.py --rows 2000000 --repeat 3
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

from bench._measure import (  # noqa: E402
    Measured,
    record_run,  # noqa: E402
    run,
)
from splitsource.spark._jvm import ensure_archive  # noqa: E402

BARE = """
from splitsource.spark._session import start_session, stop_session
spark = start_session("local[2]")
spark.range(1).count()
stop_session(spark)
"""


NO_ARCHIVE = "copy (Spark engine, no JVM class archive)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ensure_archive()  # what scripts/setup.sh or a first copy leaves: no round pays for recording it
    cli = [sys.executable, "-m", "splitsource.cli", "copy", "--connector", "generator", "-o", f"rows={args.rows}",
           "--quiet"]
    runs: dict[str, list[Measured]] = {"bare spark": [], "copy --engine local": [], "copy (Spark engine)": [],
                                       NO_ARCHIVE: [], "re-run of the finished copy (Spark engine)": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(1, args.repeat + 1):
            out = Path(tmp, "out")
            steps = [("bare spark", [sys.executable, "-c", BARE]),
                     ("copy --engine local", [*cli, "--engine", "local", "--output", str(out)]),
                     ("copy (Spark engine)", [*cli, "--output", str(out) + "-spark"]),
                     (NO_ARCHIVE, [*cli, "--output", str(out) + "-plain"]),
                     ("re-run of the finished copy (Spark engine)", [*cli, "--output", str(out) + "-spark"])]
            for name, command in steps:
                measured = run(command, env={"SPLITSOURCE_JVM_ARCHIVE": "off"} if name == NO_ARCHIVE else None)
                if measured.returncode != 0:
                    raise SystemExit(f"{name}: exit {measured.returncode}\n{measured.output[-2000:]}")
                runs[name].append(measured)
                print(f"round {round_}: {name:44s} {measured.seconds:7.2f} s", flush=True)
            for path in Path(tmp).iterdir():
                shutil.rmtree(path)
    wall = {name: statistics.median(m.seconds for m in measured) for name, measured in runs.items()}
    budget = wall["bare spark"] + wall["copy --engine local"] + 5
    print(f"\n{'method':46s} {'wall s (median)':>16s}")
    for name, seconds in wall.items():
        print(f"{name:46s} {seconds:16.2f}")
    print(f"\nSpark engine {wall['copy (Spark engine)']:.2f} s against bare Spark + local engine + 5 s = "
          f"{budget:.2f} s: {'within' if wall['copy (Spark engine)'] <= budget else 'over by'} "
          f"{abs(wall['copy (Spark engine)'] - budget):.2f} s")
    record_run("spark_overhead", {
        "rows": args.rows, "repeat": args.repeat, "target_s": round(budget, 2),
        "results": {k: {"wall_s": round(v, 2), "runs_s": [round(m.seconds, 2) for m in runs[k]]}
                    for k, v in wall.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
