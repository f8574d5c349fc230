"""Incremental copies of PostgreSQL: a run after 1% of rows changed and a run with no change, as ratios to the full
first run, beside dlt's incremental load (a cursor column and a merge) on the same changes; and the rows each loses
when a transaction commits late.

    .venv/bin/python bench/bench_incremental.py --rows 5000000

It starts the PostgreSQL 15 of bench/bench_postgres.py (port 16432, data kept under /tmp/splitsource-bench-postgres)
and makes ``inc_<rows>`` once: bench_postgres.py's rows and an ``updated_at`` cursor column for dlt. Every step is a
whole process, timed from start to exit:

1. the full first run, ours (``copy --incremental``, local engine, into Parquet; and again with ``--no-deletes``,
   which skips each run's key-only scan for deleted keys) and dlt's (``sql_table`` with ``incremental("updated_at")``
   and ``write_disposition="merge"`` into DuckDB, bench/postgres_peers.py);
2. a run with no change, each;
3. 1% of the rows updated (``updated_at = now()``), then a run each (after one untimed ``count(*)``, which sets the
   hint bits the update left to whoever reads first: on every page, since the rows are spread); and the scan
   floor: two ``psql`` sessions at once, each counting half the table's blocks, the least a run that looks at
   every row takes.

Each of the three is timed ``--repeat`` times (3) and its median recorded, since one run of a second moves by
about 0.1 s on these shared cores: ours' full copy again into outputs of its own (dlt's once: it takes minutes),
the run with no change again, and the 1% step as that many rounds, each updating another 1% of the rows, so that
every sample is the first run after its own change.

Then the late commit: a transaction updates 100 rows (its ``now()``, the transaction's start, goes into
``updated_at``) and stays open while another commits 100 updates; both tools run; the first transaction commits,
and both run again. The rows of the late transaction missing from each output are counted: the first is read with
DuckDB's query of docs/incremental.md over our files, the second from dlt's DuckDB. The figures go to
bench/results/incremental.json with the commit they measured.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import Measured, record_run, run  # noqa: E402
from bench.bench_postgres import _COLUMNS, _ROW, CONNINFO, DATA, DSN, PORT  # noqa: E402
from bench.tools import pg_peers  # noqa: E402
from scripts.postgres import PASSWORD, start, stop  # noqa: E402

PY = sys.executable
LATE = 100  # rows the late transaction updates


def make_table(rows: int) -> str:
    import psycopg

    table = f"inc_{rows}"
    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        have = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        if have and have[0]:
            conn.execute(f"DROP TABLE {table}")  # each run starts from the same table: earlier runs updated it
        print(f"making {table} ({rows:,} rows)", flush=True)
        conn.execute(f"CREATE TABLE {table} ({_COLUMNS}, updated_at timestamptz NOT NULL)")
        columns = "id, name, amount, at, uid, doc, blob, flag, score"
        # each row's cursor value its own (its "at"): rows that share one are read again by every dlt run
        conn.execute(f"INSERT INTO {table} SELECT *, at FROM ({_ROW.format(key='i', rows=rows)}) "
                     f"AS made({columns})")
        conn.execute(f"VACUUM ANALYZE {table}")
        conn.execute("CHECKPOINT")
    return table


def settle(conn: Any, table: str) -> None:
    """Read the table once after a change, untimed: the first scan after an update sets the hint bits of every page
    it touched (1% of the rows, on every page: the whole table), and would bill the first tool to run for what the
    others then read free."""
    conn.execute(f"SELECT count(*) FROM {table}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="samples of each step but the late commit's "
                        "(dlt's full copy: one); the figures are their medians")
    args = parser.parse_args()
    import psycopg

    peers = pg_peers()
    start(DATA, "15", PORT, None)
    work = Path(tempfile.mkdtemp(prefix="bench-incremental-"))
    env = {"PGPASSWORD": PASSWORD}
    try:
        table = make_table(args.rows)
        def ours(out: str, *extra: str) -> list[str]:
            return [PY, "-m", "splitsource.cli", "copy", "--connector", "postgres", "-o", f"dsn={DSN}", "-o",
                    f"table=public.{table}", "--output", str(work / out), "--engine", "local", "--incremental",
                    "--quiet", *extra]

        dlt_cmd = [str(peers), str(ROOT / "bench" / "postgres_peers.py"), "dlt_incremental", CONNINFO,
                   f"public.{table}", str(work / "dlt.duckdb")]
        commands = {"ours": ours("ours"), "ours --no-deletes": ours("ours-no-deletes", "--no-deletes"),
                    "dlt": dlt_cmd}

        samples: dict[str, dict[str, list[float]]] = {tool: {} for tool in commands}

        def step(name: str, tools: tuple[str, ...] = tuple(commands), output: str = "") -> None:
            for tool in tools:
                command = commands[tool]
                if output:  # a full copy timed again, into an output of its own (the first one goes on)
                    at = command.index("--output") + 1
                    command = [*command[:at], f"{command[at]}-{output}", *command[at + 1:]]
                measured: Measured = run(command, env=env)
                if measured.returncode != 0:
                    raise SystemExit(f"{tool} {name}: exit {measured.returncode}\n{measured.output[-3000:]}")
                samples[tool].setdefault(name, []).append(round(measured.seconds, 2))
                print(f"  {tool} {name}: {measured.seconds:.2f} s", flush=True)

        step("full")
        for again in range(1, args.repeat):  # ours again (dlt's takes minutes, and no ratio of ours rests on it)
            step("full", ("ours", "ours --no-deletes"), output=f"again{again}")
        for _ in range(args.repeat):
            step("no change")
        for k in range(args.repeat):  # each a first run after its own change: another 1% of the rows
            with psycopg.connect(CONNINFO, autocommit=True) as conn:
                conn.execute(f"UPDATE {table} SET score = -score, updated_at = now() WHERE id % 100 = {7 + k}")
                settle(conn, table)
            step("1% changed")
        floor = run(_scan_floor(table), env=env)  # what a run that looks at every row takes at least
        if floor.returncode != 0:
            raise SystemExit(f"scan floor: exit {floor.returncode}\n{floor.output[-3000:]}")
        scan_floor = round(floor.seconds, 2)
        with psycopg.connect(CONNINFO) as late, psycopg.connect(CONNINFO, autocommit=True) as other:
            late.execute(f"UPDATE {table} SET name = 'late', updated_at = now() WHERE id <= {LATE}")
            other.execute(f"UPDATE {table} SET name = 'other', updated_at = now() WHERE id > {args.rows - LATE}")
            step("late commit open")
            late.commit()
            settle(other, table)
        step("late commit done")
        lost = {"ours": _lost_ours(work / "ours"), "ours --no-deletes": _lost_ours(work / "ours-no-deletes"),
                "dlt": _lost_dlt(peers, work / "dlt.duckdb")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        stop(DATA)
    seconds = {tool: {name: statistics.median(runs) for name, runs in by.items()} for tool, by in samples.items()}
    ratios = {tool: {name: round(s / by["full"], 3) for name, s in by.items()} for tool, by in seconds.items()}
    goals = {"a run after 1% changed at most 0.15x the full copy": ratios["ours"]["1% changed"] <= 0.15,
             "a run with no change at most 0.05x": ratios["ours"]["no change"] <= 0.05,
             "no row of a late commit lost": lost["ours"] == 0}
    print(f"scan floor: {scan_floor:.2f} s ({scan_floor / seconds['ours']['full']:.3f}x ours' full copy)")
    for tool in seconds:
        print(f"{tool}: " + ", ".join(f"{name} {s:.2f} s ({ratios[tool][name]:.3f}x)" for name, s in
                                      seconds[tool].items()) + f"; late commit: {lost[tool]} of {LATE} rows lost")
    for goal, met in goals.items():
        print(f"{'met ' if met else 'MISS'} {goal}")
    results = {f"{tool} {name}": {"seconds": s, "vs_its_full": ratios[tool][name]}
               for tool, by in seconds.items() for name, s in by.items()}
    for tool, by in samples.items():
        for name, runs in by.items():
            if len(runs) > 1:
                results[f"{tool} {name}"]["runs"] = " ".join(f"{r:.2f}" for r in runs)
    results.update({f"{tool} late commit: rows lost of {LATE}": {"rows": lost[tool]} for tool in lost})
    results["scan floor"] = {"seconds": scan_floor, "vs_its_full": round(scan_floor / seconds["ours"]["full"], 3)}
    record_run("incremental", {"rows": args.rows, "repeat": args.repeat, "seconds": seconds, "samples": samples,
                               "ratio_to_full": ratios, "scan_floor_s": scan_floor,
                               "late_commit_rows_lost": lost, "late_commit_rows": LATE, "goals": goals,
                               "results": results})
    return 0


def _scan_floor(table: str) -> list[str]:
    """Two ``psql`` sessions at once, each counting half of the table's blocks with nothing tested: the least a
    run that finds the changed rows by looking at every row takes (ours: two sessions, each testing each row's
    transaction id), without starting the copy or reading a changed row."""
    blocks = f"(SELECT pg_relation_size('{table}') / 8192 / 2)"
    halves = [f"SELECT count(*) FROM {table} WHERE ctid < format('(%s,0)', {blocks})::tid",
              f"SELECT count(*) FROM {table} WHERE ctid >= format('(%s,0)', {blocks})::tid"]
    sessions = " & ".join(f"psql '{CONNINFO}' -Atc \"{query}\" > /dev/null" for query in halves)
    return ["sh", "-c", f"{sessions} & wait"]


def _lost_ours(out: Path) -> int:
    import duckdb

    newest = (f"SELECT * FROM read_parquet('{out}/**/*.parquet') "
              "QUALIFY row_number() OVER (PARTITION BY id ORDER BY _splitsource_run DESC) = 1")
    found = duckdb.sql(f"SELECT count(*) FROM ({newest}) WHERE id <= {LATE} AND name = 'late'").fetchall()[0][0]
    return LATE - int(found)


def _lost_dlt(peers: Path, database: Path) -> int:
    import subprocess

    code = ("import duckdb, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
            "print(con.execute(\"SELECT count(*) FROM bench.\" + sys.argv[2] + "
            f"\" WHERE id <= {LATE} AND name = 'late'\").fetchone()[0])")
    table = next(iter(_dlt_tables(peers, database)))
    found = subprocess.run([str(peers), "-c", code, str(database), table], capture_output=True, text=True,
                           check=True).stdout
    return LATE - int(found.strip())


def _dlt_tables(peers: Path, database: Path) -> list[str]:
    import subprocess

    code = ("import duckdb, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
            "print('\\n'.join(r[0] for r in con.execute(\"SELECT table_name FROM information_schema.tables WHERE "
            "table_schema = 'bench' AND table_name NOT LIKE '_dlt%'\").fetchall()))")
    return subprocess.run([str(peers), "-c", code, str(database)], capture_output=True, text=True,
                          check=True).stdout.split()


if __name__ == "__main__":
    sys.exit(main())
