"""ADBC's PostgreSQL driver, wheel by wheel: the client's CPU to decode the same 1M-row table, and whether a query on
a connection whose backend was terminated raises (a reader retries) or aborts the whole process.

    .venv/bin/python bench/bench_adbc_wheels.py --repeat 3

The connector reads with ``adbc-driver-postgresql`` 1.13 (pyproject.toml). The wheels from 1.9 on carry a library
built without the compiler's optimizations, and 1.8.0 aborts the process on a terminated backend (docs/postgres.md);
this measures 1.8.0, 1.11.0, 1.12.0 and 1.13.0 side by side, in one run, each installed with its own driver manager
into ``bench/.tools/adbc-<version>``. For each: one connection reads ``bench_1000000`` (bench_postgres.py's table,
on its PostgreSQL 15) through the driver manager's own API, batches dropped, in a process of its own, and the CPU
that process spent in the read (``getrusage``) is the figure (median of ``--repeat``); the symbols the library
exports for ``std::vector::operator[]`` (``nm -C``: an optimized build inlines them) and whether it has the
built-in type table (``adbc.postgresql.type_resolver_mode``, without which each connection reads ``pg_type``) are
recorded beside it. Results go to bench/results/adbc_wheels.json with the commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402
from bench.bench_postgres import DATA, PORT, make_tables  # noqa: E402
from bench.tools import TOOLS  # noqa: E402
from scripts.postgres import PASSWORD, start, stop  # noqa: E402

VERSIONS = ("1.8.0", "1.11.0", "1.12.0", "1.13.0")
TABLE = "bench_1000000"
URI = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{PORT}/postgres"

# run in a process of its own, with one wheel first on its path: the read's CPU, or what a query on a terminated
# backend does ("raised" and the error's class; an abort ends the process, which the parent sees by its signal)
_CHILD = r"""
import json, resource, subprocess, sys
sys.path.insert(0, sys.argv[1])
import adbc_driver_manager, adbc_driver_postgresql
import pyarrow as pa

uri, what = sys.argv[2], sys.argv[3]
statement = adbc_driver_manager.AdbcStatement(adbc_driver_manager.AdbcConnection(adbc_driver_postgresql.connect(uri)))

def query(sql):
    statement.set_sql_query(sql)
    stream, _ = statement.execute_query()
    return pa.RecordBatchReader.from_stream(stream)

if what == "read":
    before = resource.getrusage(resource.RUSAGE_SELF)
    rows = sum(batch.num_rows for batch in query(sys.argv[4]))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"rows": rows, "cpu_s": cpu}))
else:
    pid = query("SELECT pg_backend_pid()").read_all().column(0)[0].as_py()
    other = adbc_driver_manager.AdbcStatement(adbc_driver_manager.AdbcConnection(adbc_driver_postgresql.connect(uri)))
    other.set_sql_query(f"SELECT pg_terminate_backend({pid}, 5000)")
    stream, _ = other.execute_query()
    pa.RecordBatchReader.from_stream(stream).read_all()
    try:
        query("SELECT 1").read_all()
        print(json.dumps({"terminated_backend": "no error"}))
    except Exception as exc:
        print(json.dumps({"terminated_backend": "raised " + type(exc).__name__}))
"""


def install(version: str) -> Path:
    """The wheel and its driver manager of the same version, with their dependencies, into a folder of their own."""
    target = TOOLS / f"adbc-{version}"
    if not (target / ".installed").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "--upgrade",
                        f"adbc-driver-postgresql=={version}", f"adbc-driver-manager=={version}"], check=True)
        (target / ".installed").write_text(version + "\n")
    return target


def child(target: Path, *args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(target), URI, *args], capture_output=True, text=True,
                          timeout=600)
    if done.returncode < 0:
        return {"terminated_backend": f"process killed by signal {-done.returncode}",
                "stderr": done.stderr.strip().splitlines()[-1:]}
    if done.returncode != 0:
        raise SystemExit(f"{target.name} {args[0]}: exit {done.returncode}\n{done.stderr[-2000:]}")
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def library_facts(target: Path) -> dict[str, object]:
    library = next(target.glob("adbc_driver_postgresql/libadbc_driver_postgresql.so*"))
    symbols = subprocess.run(["nm", "-C", str(library)], capture_output=True, text=True).stdout
    return {"operator_index_symbols": sum("operator[]" in line for line in symbols.splitlines()),
            "builtin_type_table": b"adbc.postgresql.type_resolver_mode" in library.read_bytes()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    targets = {version: install(version) for version in VERSIONS}
    start(DATA, "15", PORT, None)
    try:
        make_tables([1_000_000])
        child(targets[VERSIONS[-1]], "read", f"SELECT * FROM {TABLE}")  # the table read once, untimed
        cpu: dict[str, list[float]] = {v: [] for v in VERSIONS}
        for round_ in range(args.repeat):
            for version in VERSIONS[round_ % len(VERSIONS):] + VERSIONS[:round_ % len(VERSIONS)]:
                read = child(targets[version], "read", f"SELECT * FROM {TABLE}")
                if read["rows"] != 1_000_000:
                    raise SystemExit(f"{version}: read {read['rows']} rows of {TABLE}")
                cpu[version].append(float(str(read["cpu_s"])))
        results = {}
        for version in VERSIONS:
            results[version] = {"cpu_s": round(statistics.median(cpu[version]), 3),
                                "cpu_s_runs": [round(c, 3) for c in cpu[version]],
                                **child(targets[version], "terminate"), **library_facts(targets[version])}
    finally:
        stop(DATA)
    reference = results[VERSIONS[-1]]["cpu_s"]
    for version, found in results.items():
        found["cpu_vs_1.13"] = round(float(str(found["cpu_s"])) / float(str(reference)), 2)
        print(f"{version}: {found['cpu_s']:.2f} s of CPU ({found['cpu_vs_1.13']:.2f}x 1.13), terminated backend: "
              f"{found['terminated_backend']}, operator[] symbols {found['operator_index_symbols']}, built-in type "
              f"table: {found['builtin_type_table']}")
    record_run("adbc_wheels", {"table": TABLE, "rows": 1_000_000, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
