#!/usr/bin/env python3
"""splitsource side by side with the tools users would pick instead, on one 1,000,000-row table, in one run.

Methods, each run as a child process (wall time includes start-up; peak RSS covers the whole process tree,
JVMs included; Cassandra itself is not counted):

- ``dsbulk unload -> csv``: DataStax Bulk Loader 1.10.0 unloading the table to CSV;
- ``scc -> parquet``: the Spark Cassandra Connector 3.5.1 on PySpark 3.5, ``local[2]``, read + ``write.parquet``;
- ``driver per core``: a plain cassandra-driver scan of all token ranges, one process per core (no output);
- ``splitsource copy -> parquet`` and ``-> csv``: the ``splitsource copy`` command, from scratch, with its default
  Spark engine (``local[2]``), the same without the driver JVM's class archive (``SPLITSOURCE_JVM_ARCHIVE=off``),
  and with ``--engine local`` (one worker process per core, no JVM);
- ``splitsource verify``: ``splitsource verify`` of the local engine's Parquet copy (made first if this run has none);
- reads into Spark, each phase timed by ``bench/read_phases.py`` (session start, ``load()``, the first ``count()``,
  a full read of every column into the ``noop`` writer): ``spark.read.format("splitsource")``, the Spark Cassandra
  Connector's, and the nearest pure-Python peer's (a Python data source with one partition per token range, written
  in read_phases.py since none installs); and ``format("splitsource")`` reading one column (``columns=id``) and
  a query on 100 partition keys with the filter pushed to Cassandra and without (``pushdown=false``); and Spark's
  own floor for any Python data source: one that reads nothing, and one that hands Spark the table's rows from
  memory.

Every method's row count is checked (files are read back) before its time counts. Runs go round-robin,
``--repeat`` rounds, and the medians are reported with the ratio of each method's rows/s to ``splitsource copy
--engine local -> parquet`` and to the driver scan. Writes bench/results/tools.json and bench/results/tools.png
(``tools-only`` for a run with ``--only``, and ``-5m`` after either for a table of 5,000,000 rows: the table is
loaded again at each size asked for).

    python bench/bench_tools.py --repeat 3        # installs dsbulk, PySpark 3.5 + SCC, loads the table
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import tools  # noqa: E402
from bench._measure import (  # noqa: E402
    Measured,
    record_run,  # noqa: E402
    run,
)
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE, ensure_cassandra, ensure_loaded  # noqa: E402
from splitsource.spark._jvm import ensure_archive  # noqa: E402

CORES = os.cpu_count() or 1
ROWS = 1_000_000  # set from --rows: a method that counts a subset reports the table's rows once its count is right
BASELINE = "splitsource copy --engine local -> parquet"
CEILING = f"driver per core ({CORES} processes)"
NO_ARCHIVE = "splitsource copy -> parquet (Spark, no JVM archive)"
SPLITSOURCE = [sys.executable, "-m", "splitsource.cli"]
SOURCE = ["--connector", "cassandra", "-o", f"hosts={HOSTS}", "-o", f"keyspace={KEYSPACE}", "-o", f"table={TABLE}"]


def _parquet_rows(directory: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in directory.rglob("*.parquet"))


def _csv_rows(directory: Path, header: bool) -> int:
    rows = 0
    for path in directory.rglob("*.csv"):
        with path.open(newline="") as f:
            rows += sum(1 for _ in csv.reader(f)) - (1 if header else 0)
    return rows


def _fresh(out: Path) -> Path:
    for p in (out, out.with_name(out.name + ".checkpoint"), out.with_name(out.name + ".bucketing")):
        shutil.rmtree(p, ignore_errors=True)
    return out


def dsbulk(out: Path) -> tuple[Measured, int]:
    target = _fresh(out / "dsbulk")
    command = tools.dsbulk() + ["unload", "-h", HOSTS.split(",")[0], "-k", KEYSPACE, "-t", TABLE,
                                "-url", str(target), "--connector.csv.header", "false",
                                "--log.directory", str(out / "dsbulk-logs"),
                                # dsbulk 1.10's driver cannot parse vector columns (the tests' tables have some):
                                # read only this keyspace's schema
                                "--datastax-java-driver.advanced.metadata.schema.refreshed-keyspaces",
                                f'["{KEYSPACE}"]']
    measured = run(command)
    return measured, _csv_rows(target, header=False) if measured.returncode == 0 else -1


def scc(out: Path) -> tuple[Measured, int]:
    python, jars = tools.spark35()
    target = _fresh(out / "scc")
    measured = run([str(python), str(ROOT / "bench" / "scc_copy.py"), HOSTS.split(",")[0], KEYSPACE, TABLE,
                    str(target), *map(str, jars)], env={"PYSPARK_PYTHON": str(python)})
    return measured, _parquet_rows(target) if measured.returncode == 0 else -1


def driver_per_core(out: Path) -> tuple[Measured, int]:
    measured = run([sys.executable, str(ROOT / "bench" / "bench_cassandra.py"), "--method", f"driver-{CORES}"])
    return measured, _reported_rows(measured)


def copy_to(fmt: str, engine: str, env: dict[str, str] | None = None) -> Callable[[Path], tuple[Measured, int]]:
    def method(out: Path) -> tuple[Measured, int]:
        target = _fresh(out / f"splitsource-{engine}-{fmt}")
        measured = run(SPLITSOURCE + ["copy", *SOURCE, "--output", str(target), "--format", fmt, "--engine", engine,
                                      "--quiet"], env=env)
        if measured.returncode != 0:
            return measured, -1
        return measured, _parquet_rows(target) if fmt == "parquet" else _csv_rows(target, header=True)

    return method


KEYS = ", ".join(str(k) for k in range(0, 1_000_000, 10_000))  # 100 partition keys of the table
READ = [str(ROOT / "bench" / "read_phases.py")]
PUSHDOWN = ("--conf", "spark.sql.python.filterPushdown.enabled=true")
PHASES: dict[str, dict[str, list[float]]] = {}  # method: phase: seconds of each run


def verify_copy(out: Path) -> tuple[Measured, int]:
    target = out / "splitsource-local-parquet"  # the baseline copy's output
    if not (target.with_name(target.name + ".bucketing") / "_SUCCESS").exists():
        copy_to("parquet", "local")(out)
    measured = run(SPLITSOURCE + ["verify", *SOURCE, "--output", str(target)])
    found = re.match(r"MATCH: source ([\d,]+) rows", measured.output.strip())
    return measured, int(found.group(1).replace(",", "")) if found and measured.returncode == 0 else -1


def read_phases(method: str, *extra: str, rows: int | None = None) -> Callable[[Path], tuple[Measured, int]]:
    """A read into Spark by bench/read_phases.py; ``rows``: what the query counts when it is not the table."""
    def measure(out: Path) -> tuple[Measured, int]:
        env: dict[str, str] = {}
        python = sys.executable
        args = [*extra]
        if method == "scc":
            spark35, jars = tools.spark35()
            python, env = str(spark35), {"PYSPARK_PYTHON": str(spark35)}
            args += ["--jars", *map(str, jars)]
        measured = run([python, *READ, method, HOSTS.split(",")[0], KEYSPACE, TABLE, *args], env=env)
        if measured.returncode != 0:
            return measured, -1
        report = json.loads(measured.output.strip().splitlines()[-1])
        name = next(n for n, m in METHODS.items() if m is measure)
        for phase, seconds in report["phases"].items():
            PHASES.setdefault(name, {}).setdefault(phase, []).append(seconds)
        counted = int(report["rows"])
        if rows is not None:  # a query of a subset: right when it counts its rows
            return measured, ROWS if counted == rows else counted
        return measured, counted

    return measure


def _reported_rows(measured: Measured) -> int:
    if measured.returncode != 0:
        return -1
    return int(json.loads(measured.output.strip().splitlines()[-1])["rows"])


METHODS: dict[str, Callable[[Path], tuple[Measured, int]]] = {
    "dsbulk unload -> csv": dsbulk,
    "scc -> parquet": scc,
    CEILING: driver_per_core,
    BASELINE: copy_to("parquet", "local"),
    "splitsource copy --engine local -> csv": copy_to("csv", "local"),
    "splitsource copy -> parquet (Spark engine)": copy_to("parquet", "spark"),
    NO_ARCHIVE: copy_to("parquet", "spark", {"SPLITSOURCE_JVM_ARCHIVE": "off"}),
    "splitsource copy -> csv (Spark engine)": copy_to("csv", "spark"),
    "splitsource verify (of the local engine's copy)": verify_copy,
    "splitsource read + count": read_phases("splitsource"),
    "splitsource read + count + noop": read_phases("splitsource", "--noop"),
    "scc read + count + noop": read_phases("scc", "--noop"),
    "python peer read + count + noop": read_phases("peer", "--noop"),
    "splitsource read columns=id + count": read_phases("splitsource", "--option", "columns=id"),
    "floor: empty python source + count + noop": read_phases("floor", "--noop", rows=0),
    "floor: 1M rows from memory + count + noop": read_phases("floor", "--noop", "--rows", "1000000"),
    # Spark offers a Python source the query's filters only with this setting on (off by default in Spark 4.3)
    "splitsource read + count, 100 keys pushed": read_phases("splitsource", "--where", f"id IN ({KEYS})", *PUSHDOWN,
                                                             rows=100),
    "splitsource read + count, 100 keys not pushed": read_phases(
        "splitsource", "--where", f"id IN ({KEYS})", *PUSHDOWN, "--option", "pushdown=false", rows=100),
}


def chart(results: dict[str, Any], rows: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    rates = [results[n]["rows_per_s"] / 1000 for n in names]
    colors = ["#1f77b4" if n.startswith("splitsource") else "#999999" for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(names) + 1.2))
    bars = ax.barh(names[::-1], rates[::-1], color=colors[::-1])
    for bar, name in zip(bars, names[::-1], strict=True):
        r = results[name]
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {r['rows_per_s'] / 1000:.0f}k rows/s, {r['wall_s']:.1f} s, {r['peak_rss_mb']} MB",
                va="center", fontsize=8)
    ax.set_xlabel("thousand rows per second (median wall time, start-up included)")
    ax.set_title(f"Cassandra table of {rows:,} rows (~200 B each), {CORES} cores")
    ax.set_xlim(0, max(rates) * 1.6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="run only the methods whose names start with these")
    parser.add_argument("--out", type=Path, default=Path("/tmp/splitsource-bench-tools"),
                        help="scratch directory for the outputs (emptied per run)")
    args = parser.parse_args()
    global ROWS
    ROWS = args.rows
    ensure_loaded(args.rows, ensure_cassandra())
    tools.dsbulk()
    tools.spark35()
    ensure_archive()  # what scripts/setup.sh or a first copy leaves: no round pays for recording it
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in METHODS if not args.only or any(n.startswith(o) for o in args.only)]
    runs: dict[str, list[Measured]] = {n: [] for n in names}
    for round_ in range(1, args.repeat + 1):
        for name in names:
            measured, rows = METHODS[name](args.out)
            if rows != args.rows:
                raise SystemExit(f"{name}: {rows} rows instead of {args.rows} (exit {measured.returncode}):\n"
                                 f"{measured.output[-3000:]}")
            runs[name].append(measured)
            print(f"round {round_}: {name:44s} {measured.seconds:7.2f} s  peak {measured.peak_rss_mb:,.0f} MB",
                  flush=True)
    results: dict[str, Any] = {}
    for name, measured in runs.items():
        wall = statistics.median(m.seconds for m in measured)
        results[name] = {"wall_s": round(wall, 2), "rows_per_s": round(args.rows / wall),
                         "peak_rss_mb": round(max(m.peak_rss_mb for m in measured)),
                         "runs_s": [round(m.seconds, 2) for m in measured]}
        for phase, seconds in PHASES.get(name, {}).items():  # a read's phases, medians
            results[name][f"{phase}_s"] = round(statistics.median(seconds), 2)
    base, ceiling = results.get(BASELINE), results.get(CEILING)
    print(f"\n{'method':44s} {'wall s':>8s} {'rows/s':>10s} {'peak MB':>8s} {'vs copy':>8s} {'vs driver':>9s}")
    for name, r in results.items():
        if base:
            r["ratio_to_splitsource_copy"] = round(r["rows_per_s"] / base["rows_per_s"], 2)
        if ceiling:
            r["ratio_to_driver_per_core"] = round(r["rows_per_s"] / ceiling["rows_per_s"], 2)
        print(f"{name:44s} {r['wall_s']:8.2f} {r['rows_per_s']:10,d} {r['peak_rss_mb']:8,d} "
              f"{r.get('ratio_to_splitsource_copy', float('nan')):8.2f} "
              f"{r.get('ratio_to_driver_per_core', float('nan')):9.2f}")
    if PHASES:
        print(f"\n{'read phases (medians, s)':44s} " + " ".join(f"{p:>8s}" for p in ("session", "load", "count",
                                                                                     "noop", "stop")))
        for name in PHASES:
            print(f"{name:44s} " + " ".join(f"{results[name].get(p + '_s', float('nan')):8.2f}"
                                           for p in ("session", "load", "count", "noop", "stop")))
    # a partial run (--only), or one of another table size, must not replace the full side-by-side figures
    name = ("tools-only" if args.only else "tools") + ("" if args.rows == 1_000_000 else
                                                      f"-{args.rows // 1_000_000}m" if args.rows % 1_000_000 == 0
                                                      else f"-{args.rows}")
    out = record_run(name, {"rows": args.rows, "repeat": args.repeat, "baseline": BASELINE, "results": results})
    try:
        chart(results, args.rows, out.with_suffix(".png"))
        print(f"\nwrote {out} and {out.with_suffix('.png')}")
    except ImportError:  # matplotlib is in the 'bench' extra only
        print(f"\nwrote {out} (no chart: pip install matplotlib, or the project's 'bench' extra)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
