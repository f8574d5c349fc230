"""``splitsource copy --table-format delta|iceberg`` as a user runs it: killed with SIGKILL ten times (whole process
groups, and the coordinator alone), run again to the end; then the table, as Polars reads it through delta-rs or
pyiceberg, holds every row the source holds exactly once, ``verify`` (which reads the table's current files) says
MATCH, and the table's history holds exactly one commit per committed batch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from splitsource.sink import open_table, parse_sink_options
from tests.fixtures import polars_table
from tests.splitsource.copyjob.kill_points import ENGINE_POINTS
from tests.splitsource.copyjob.test_copy import kill_and_rerun, run

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("pyiceberg_planner")]

ROWS = 80_000
GEN = ["--connector", "generator", "-o", f"rows={ROWS}", "-o", "split_rows=4000", "-o", "batch_rows=500",
       "-o", "fetch_delay_ms=40", "-o", "columns=id:bigint,name:string?,score:double,at:timestamp"]
ENGINES = {"local": ["--engine", "local", "--workers", "2"], "spark": []}


def logged_and_tagged(out: Path, fmt: str) -> tuple[int, list[int]]:
    """The number of the last commit the sink logged, and the commit numbers the table's history carries."""
    return logged_and_tagged_at(str(out), fmt)


def logged_and_tagged_at(uri: str, fmt: str, catalog: str = "") -> tuple[int, list[int]]:
    extra = {"iceberg_catalog": catalog} if catalog and fmt == "iceberg" else {}
    committer = parse_sink_options({"path": uri, "table_format": fmt, **extra}).committer()
    records = committer.records()
    assert committer.table is not None and records
    return records[-1][0].seq, [c.seq for c in committer.table.history(committer) if c.seq is not None]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_copy_killed_ten_times_holds_every_row_once_and_one_commit_per_batch(
        tmp_path: Path, fmt: str, engine: str) -> None:
    out = tmp_path / "table"
    source = [*GEN[:-1], GEN[-1] + ",flag:boolean?"]  # partitioned by a nullable bucket column
    args = ["copy", *source, *ENGINES[engine], "--output", str(out), "--table-format", fmt, "--bucketer", "columns",
            "--sink-option", "bucket_columns=flag", "--max-splits-per-batch", "1", "--quiet"]
    # ten kills of the local engine at every named point, every third of the coordinator alone; two of the Spark
    # engine where its tasks run, the second of the coordinator alone (kill_points.ENGINE_POINTS)
    seed = 31 if fmt == "delta" else 37
    if engine == "local":
        stdout = kill_and_rerun(args, out, kills=10, seed=seed, coordinator_alone=lambda kill: kill % 3 == 2)
    else:
        stdout = kill_and_rerun(args, out, kills=2, seed=seed, coordinator_alone=lambda kill: kill == 1,
                                points=ENGINE_POINTS)
    assert f"copy finished: {ROWS:,} rows" in stdout
    frame = polars_table(out, fmt)
    assert frame.height == ROWS and sorted(frame["id"].to_list()) == list(range(ROWS))
    assert {p.name for p in out.iterdir() if p.is_dir()} >= {"flag=true", "flag=false"}
    assert frame["flag"].null_count() > 0 and frame["flag"].n_unique() == 3
    assert partitions_by_directory(out, fmt) == {"flag=true": "true", "flag=false": "false",
                                                 "flag=__HIVE_DEFAULT_PARTITION__": None}
    last, tagged = logged_and_tagged(out, fmt)
    assert tagged == list(range(1, last + 1)), f"table commits by log number: {tagged} (logged 1..{last})"
    check = run(["verify", *source, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


def partitions_by_directory(out: Path, fmt: str) -> dict[str, str | None]:
    """Each bucket directory's partition value as the table's own metadata records it for every file there
    (Delta's add actions, Iceberg's manifests), as text; a directory whose files disagree fails."""
    found: dict[str, set[str | None]] = {}
    if fmt == "delta":
        from deltalake import DeltaTable

        actions = pa.table(DeltaTable(str(out)).get_add_actions(flatten=True)).to_pylist()
        pairs = [(a["path"], a["partition.flag"]) for a in actions]
    else:
        pairs = [(t.file.file_path, t.file.partition[0]) for t in open_table(str(out)).scan().plan_files()]
    for path, value in pairs:
        text = None if value is None else str(value).lower()
        found.setdefault(Path(path).parent.name, set()).add(text)
    assert all(len(v) == 1 for v in found.values()), found
    return {k: next(iter(v)) for k, v in found.items()}


def test_verify_reads_the_table_not_the_directory(tmp_path: Path) -> None:
    """A part file the table does not list is not counted; a file of the table that is gone is a mismatch."""
    out = tmp_path / "table"
    small = [a.replace(f"rows={ROWS}", "rows=20000") for a in GEN]
    result = run(["copy", *small, "--output", str(out), "--table-format", "delta", "--engine", "local",
                  "--max-splits-per-batch", "2", "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted(out.glob("part-*.parquet"))
    stray = out / "part-00009-000000000000-ffffffffffffffffffffffff-0.parquet"
    stray.write_bytes(files[0].read_bytes())  # a copy of a table file that no commit added
    check = run(["verify", *small, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    stray.unlink()
    os.rename(files[0], tmp_path / "aside.parquet")  # a file the table lists, gone
    check = run(["verify", *small, "--output", str(out)])
    assert check.returncode != 0, check.stdout + check.stderr


def test_table_copy_refusals_are_one_line(tmp_path: Path) -> None:
    out = tmp_path / "table"
    for extra, message in ((["--format", "csv"], "format 'csv' cannot go into a table"),
                           (["--bucketer", "datetime"], "bucketer 'datetime' is refused")):
        result = run(["copy", *GEN[:4], "--output", str(out), "--table-format", "delta", *extra])
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert run(["copy", *GEN[:4], "--output", str(out), "--table-format", "delta", "--engine", "local",
                "--quiet"]).returncode == 0
    result = run(["copy", *GEN[:4], "--output", str(out), "--table-format", "delta", "--engine", "local",
                  "--overwrite"])
    assert result.returncode == 2 and "--overwrite does not start a delta table over" in result.stderr
    result = run(["copy", *GEN[:4], "--output", str(out), "--table-format", "iceberg", "--engine", "local"])
    assert result.returncode != 0 and "table_format" in result.stderr, result.stderr


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_table_on_s3_is_copied_exactly_and_read_back_from_the_store(s3: Any, tmp_path: Path, fmt: str) -> None:
    """The table's location is an s3:// URI on the suite's S3 server: the part files, the Delta log or the
    Iceberg metadata all on the store (the Iceberg catalog, a SQLite file, stays local)."""
    uri = s3.uri(f"table-{fmt}")
    small = [a.replace(f"rows={ROWS}", "rows=20000") for a in GEN]
    catalog = ["--sink-option", f"iceberg_catalog=sqlite:///{tmp_path / 'catalog.db'}"] if fmt == "iceberg" else []
    result = run(["copy", *small, "--engine", "local", "--output", uri, "--table-format", fmt, *catalog,
                  "--max-splits-per-batch", "2", "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    if fmt == "delta":
        frame = pl.read_delta(uri, storage_options={k: v for k, v in s3.env.items()})
    else:
        frame = pl.scan_iceberg(open_table(uri, iceberg_catalog=f"sqlite:///{tmp_path / 'catalog.db'}")).collect()
    assert sorted(frame["id"].to_list()) == list(range(20_000))
    last, tagged = logged_and_tagged_at(uri, fmt, catalog=f"sqlite:///{tmp_path / 'catalog.db'}")
    assert tagged == list(range(1, last + 1))
    check = run(["verify", *small, "--output", uri])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


def test_an_iceberg_table_on_s3_without_a_catalog_is_refused_in_one_line(s3: Any) -> None:
    result = run(["copy", *GEN[:4], "--engine", "local", "--output", s3.uri("no-catalog"), "--table-format",
                  "iceberg"])
    assert result.returncode == 2 and "needs option 'iceberg_catalog'" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_an_iceberg_copy_through_a_rest_catalog_killed_ten_times_commits_each_batch_once(
        iceberg_rest: str, tmp_path: Path) -> None:
    """The catalog is a real REST catalog server (Apache Iceberg's): the copy's table commits go through it."""
    out = tmp_path / "table"
    args = ["copy", *GEN, *ENGINES["local"], "--output", str(out), "--table-format", "iceberg",
            "--sink-option", f"iceberg_catalog={iceberg_rest}", "--max-splits-per-batch", "1", "--quiet"]
    stdout = kill_and_rerun(args, out, kills=10, seed=41, coordinator_alone=lambda kill: kill % 3 == 2)
    assert f"copy finished: {ROWS:,} rows" in stdout
    table = open_table(str(out), iceberg_catalog=iceberg_rest)
    assert f"{out}/metadata/" in table.metadata_location  # the server wrote it beside the data (file:/...)
    frame = pl.scan_iceberg(table).collect()
    assert frame.height == ROWS and sorted(frame["id"].to_list()) == list(range(ROWS))
    last, tagged = logged_and_tagged_at(str(out), "iceberg", catalog=iceberg_rest)
    assert tagged == list(range(1, last + 1)), f"table commits by log number: {tagged} (logged 1..{last})"
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
