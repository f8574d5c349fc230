"""``format("bucketing")`` in a real local Spark: batch and streaming writes, failures, kills and replays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from splitsource.sink import parse_sink_options
from splitsource.spark._sink import BucketingBatchWriter, BucketingStreamWriter

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent.parent / "sink" / "sink_job.py"


def visible_files(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*") if p.is_file()
                  and not any(part.startswith(("_", ".")) for part in p.relative_to(base).parts))


def transient(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*") if p.name.endswith((".in-progress", ".pending")))


def ids(spark: Any, base: Path, fmt: str = "parquet") -> list[int]:
    return sorted(r.id for r in getattr(spark.read, fmt)(str(base)).select("id").collect())


def test_batch_append_and_overwrite_are_exact_and_readers_see_only_finished_files(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.functions import input_file_name

    df = spark.range(0, 20_000, 1, 4).selectExpr("id", "id % 3 AS k", "cast(id AS string) AS s")
    out = tmp_path / "out"
    writer = df.write.format("bucketing").option("bucketer", "columns").option("bucket_columns", "k")
    writer.mode("append").save(str(out))
    writer.mode("append").save(str(out))
    read = spark.read.parquet(str(out))
    assert read.count() == 40_000 and sorted(read.columns) == ["id", "k", "s"]
    assert read.groupBy("id").count().where("count != 2").count() == 0
    used = {Path(r[0].replace("file://", "")).name for r in read.select(input_file_name()).distinct().collect()}
    assert used == {p.name for p in visible_files(out)}
    assert all(p.name.startswith("part-") and p.suffix == ".parquet" for p in visible_files(out))
    assert (out.with_name(out.name + ".bucketing") / "_SUCCESS").exists() and transient(out) == []
    assert not (out / "_SUCCESS").exists() and not (out / "_bucketing").exists()  # the output holds data only

    writer.mode("overwrite").save(str(out))
    assert ids(spark, out) == list(range(20_000))


def test_jsonl_and_csv_round_trip_through_sparks_readers(spark: Any, tmp_path: Path) -> None:
    df = spark.range(0, 5000, 1, 2).selectExpr("id", "concat('n,', id, '\"q') AS name")
    binary = spark.createDataFrame([(1, bytearray(b"\xff\x00,\n")), (2, None)], "id long, b binary")
    binary.write.format("bucketing").option("format", "csv").option("bucketer", "none").mode("append") \
        .save(str(tmp_path / "bin"))
    back = spark.read.option("header", "true").option("escape", '"').csv(str(tmp_path / "bin")).collect()
    assert sorted((r.id, r.b) for r in back) == [("1", "/wAsCg=="), ("2", None)]  # CSV holds binary as base64
    for fmt, read in (("jsonl", "json"), ("csv", "csv")):
        out = tmp_path / fmt
        df.write.format("bucketing").option("format", fmt).option("bucketer", "none").mode("append").save(str(out))
        # pyarrow writes RFC 4180 CSV (quotes doubled); Spark's reader needs escape '"' to read that
        reader = (spark.read.option("header", "true").option("inferSchema", "true").option("escape", '"')
                  if read == "csv" else spark.read)
        got = getattr(reader, read)(str(out))
        assert sorted((r.id, r.name) for r in got.collect()) == [(i, f'n,{i}"q') for i in range(5000)]


READBACK_VALUES = ["..", ".", "/", "a/b", "%2F", "_x", ".hidden", "=", "a=b", "ü", "e\u0301", "x" * 200, "é" * 100,
                   "sp ace", "plus+sign", "a&b", "q?#", "tab\tnl\n", "back\\slash", "ü%C3%BC", "日本", "'\"", "{[]}^*:",
                   "\x7f", "~!@$()", ",;", "a\x00b"]
# the values no Hive-style convention carries, and what each reader sees (docs/sink.md)
SPECIAL = {"": {"spark": None, "duckdb": None, "polars": None, "pyarrow": None},
           None: {"spark": None, "duckdb": None, "polars": None, "pyarrow": None},
           "__HIVE_DEFAULT_PARTITION__": {"spark": "__HIVE_DEFAULT_PARTITION__", "duckdb": "__HIVE_DEFAULT_PARTITION__",
                                          "polars": None, "pyarrow": None}}


def test_bucket_values_read_back_exactly_in_spark_duckdb_polars_and_pyarrow(spark: Any, tmp_path: Path) -> None:
    import duckdb
    import polars as pl
    import pyarrow as pa
    import pyarrow.dataset as ds

    values = READBACK_VALUES + list(SPECIAL)
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "id long, v string")
    out = tmp_path / "out"
    df.write.format("bucketing").option("bucketer", "columns").option("bucket_columns", "v").mode("append") \
        .save(str(out))
    seen = {  # the directory itself, typed as text (the values are strings that look like anything)
        "pyarrow": ds.dataset(out, format="parquet", partitioning=ds.HivePartitioning(
            pa.schema([("v", pa.string())]))).to_table().select(["id", "v"]).to_pylist(),
        "polars": pl.scan_parquet(out, hive_schema={"v": pl.String}).collect().select(["id", "v"]).to_dicts(),
        "duckdb": [{"id": i, "v": v} for i, v in duckdb.sql(
            f"SELECT id, v FROM read_parquet('{out}/**', hive_types_autocast=false)").fetchall()],
    }
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    try:
        seen["spark"] = [r.asDict() for r in spark.read.parquet(str(out)).select("id", "v").collect()]
    finally:
        spark.conf.unset("spark.sql.sources.partitionColumnTypeInference.enabled")
    for reader, rows in seen.items():
        got = {r["id"]: r["v"] for r in rows}
        want = {i: SPECIAL[v][reader] if v in SPECIAL else v for i, v in enumerate(values)}
        wrong = {i: (want[i], got.get(i)) for i in want if got.get(i, "missing") != want[i]}
        assert not wrong, f"{reader} read back {len(wrong)} values wrong: {wrong}"


def test_the_default_bucketer_is_read_by_every_readers_plainest_call_with_its_columns(spark: Any,
                                                                                      tmp_path: Path) -> None:
    import datetime as dt

    import duckdb
    import polars as pl
    import pyarrow.dataset as ds

    out = tmp_path / "out"
    before = dt.datetime.now(dt.timezone.utc)
    spark.range(0, 3000, 1, 3).write.format("bucketing").mode("append").save(str(out))
    after = dt.datetime.now(dt.timezone.utc)
    hours = {(t.date(), t.hour) for t in (before, after)}  # the write may straddle an hour
    assert all(p.relative_to(out).parts[:2] in {(f"dt={d}", f"hour={h}") for d, h in hours}
               for p in visible_files(out))
    # each reader's plainest call on the directory: DuckDB and Polars read every file there, whatever its name
    seen = {
        "spark": [(r.id, r.dt, r.hour) for r in spark.read.parquet(str(out)).collect()],
        "pyarrow": [(r["id"], dt.date.fromisoformat(r["dt"]), r["hour"])
                    for r in ds.dataset(out, partitioning="hive").to_table().to_pylist()],
        "duckdb": duckdb.sql(f"SELECT id, dt, hour FROM read_parquet('{out}/**')").fetchall(),
        "polars": list(pl.read_parquet(out).select("id", "dt", "hour").iter_rows()),
    }
    for reader, rows in seen.items():
        assert sorted(r[0] for r in rows) == list(range(3000)), reader
        assert {(r[1], r[2]) for r in rows} <= hours, (reader, rows[:3])


def test_hostile_bucket_values_stay_under_the_base_path(spark: Any, tmp_path: Path) -> None:
    values = ["../../escape", "/abs", "a\x00b", "..", ".", "_SUCCESS", "%2F", "ok", None]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "id long, v string")
    out = tmp_path / "base" / "out"
    df.write.format("bucketing").option("bucketer", "columns").option("bucket_columns", "v").mode("append") \
        .save(str(out))
    records = out.with_name("out.bucketing")  # the sink's records, beside the output
    everything = [p for p in (tmp_path / "base").rglob("*") if p.is_file() and records not in p.parents]
    assert everything and all(out in p.parents for p in everything)
    assert len(visible_files(out)) == len(values)
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    try:
        back = sorted((r.id, r.v) for r in spark.read.parquet(str(out)).collect())
    finally:
        spark.conf.unset("spark.sql.sources.partitionColumnTypeInference.enabled")
    assert back == sorted(enumerate(values))


def test_bad_options_fail_before_any_task_naming_the_option(spark: Any, tmp_path: Path) -> None:
    df = spark.range(3)
    with pytest.raises(Exception, match="option 'bucket_columns'") as info:
        df.write.format("bucketing").option("bucketer", "columns").mode("append").save(str(tmp_path / "a"))
    assert "Traceback" not in str(info.value).split("option 'bucket_columns'")[0][-200:]
    with pytest.raises(Exception, match="unknown option 'part_sise_mb' .*did you mean 'part_size_mb'"):
        df.write.format("bucketing").option("part_sise_mb", "1").mode("append").save(str(tmp_path / "b"))
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("bucketing").mode("error").save(str(tmp_path / "c"))
    assert not (tmp_path / "a").exists() or visible_files(tmp_path / "a") == []


def test_failed_and_speculative_attempts_leave_no_file(tmp_path: Path) -> None:
    """Three attempts of partition 0 (one failed mid-write, one speculative duplicate that lost, one winner) and
    one of partition 1; Spark passes the driver one message per partition and None for failed ones."""
    import pyarrow as pa

    options = parse_sink_options({"path": str(tmp_path), "bucketer": "none"})
    writer = BucketingBatchWriter(options, overwrite=False)

    def rows(start: int, n: int) -> list[pa.RecordBatch]:
        return [pa.record_batch({"id": pa.array(range(start, start + n), pa.int64())})]

    def failing() -> Any:
        yield rows(0, 50)[0]
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError):
        writer.write(failing())
    speculative = writer.write(iter(rows(0, 100)))
    winner = writer.write(iter(rows(0, 100)))
    other = writer.write(iter(rows(100, 100)))
    assert len(transient(tmp_path)) == 4  # in-progress of the failure, three pending files
    writer.commit([winner, other, None])
    assert speculative.files and transient(tmp_path) == []
    import pyarrow.parquet as pq

    got = sorted(i for p in visible_files(tmp_path) for i in pq.read_table(p).column("id").to_pylist())
    assert got == list(range(200))


def test_a_task_failing_mid_write_is_retried_without_extra_files(tmp_path: Path) -> None:
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    result = subprocess.run([sys.executable, str(JOB), str(out), "40000", "--fail-once-dir", str(marks)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (marks / "failed-1").exists()  # the failure did happen
    import pyarrow.dataset as ds

    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(40_000))
    assert transient(out) == []


def test_a_job_killed_mid_write_commits_nothing_and_the_rerun_is_exact(spark: Any, tmp_path: Path) -> None:
    out, gate = tmp_path / "out", tmp_path / "gate"
    gate.mkdir()
    proc = subprocess.Popen([sys.executable, str(JOB), str(out), "40000", "--hold-dir", str(gate)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    # held halfway through partition 0's rows, whose first are with the writer: the job cannot commit
    while not ((gate / "reached").exists() and any(p.name.endswith(".in-progress") for p in out.rglob("*"))):
        assert proc.poll() is None, "the job ended before it was held mid-write"
        assert time.monotonic() < deadline, "the job was not held mid-write, with a file in progress, within 120 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert visible_files(out) == []  # killed before its commit: nothing is visible
    result = subprocess.run([sys.executable, str(JOB), str(out), "40000"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ids(spark, out) == list(range(40_000))
    # the re-run leaves the killed job's files (invisible to readers): it cannot tell a killed writer from one still
    # running beside it; a write sweeps them once they are a day old
    orphans = transient(out)
    assert orphans
    day_ago = time.time() - 25 * 3600
    for path in orphans:
        os.utime(path, (day_ago, day_ago))
    result = subprocess.run([sys.executable, str(JOB), str(out), "10"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert transient(out) == []


def _stream_json(spark: Any, source: Path, out: Path, checkpoint: Path, **options: str) -> None:
    """One ``availableNow`` run of a stream of the JSON files in ``source`` into the bucketing sink at ``out``."""
    writer = (spark.readStream.schema("id long").json(str(source)).writeStream.format("bucketing")
              .options(**options).option("checkpointLocation", str(checkpoint)))
    query = writer.trigger(availableNow=True).start(str(out))
    query.awaitTermination(120)
    assert query.exception() is None


def _three_files_streamed(source: Path, run: Any) -> None:
    """Files of ids 0-99, 100-199 and 200-299 appear in ``source`` one at a time, each followed by ``run()``."""
    for n in range(3):
        (source / f"f{n}.json").write_text("".join(f'{{"id": {n * 100 + i}}}\n' for i in range(100)))
        run()


def test_streaming_replay_of_a_committed_batch_commits_once(spark: Any, tmp_path: Path) -> None:
    """Delete Spark's record of the last batch's commit: the restarted query replays it into the sink."""
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    source.mkdir()

    def run() -> None:
        _stream_json(spark, source, out, checkpoint, bucketer="none")

    _three_files_streamed(source, run)
    assert ids(spark, out) == list(range(300))
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: p.name)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()  # Spark forgets it committed the last batch (its checksum file too, or Spark refuses to write)
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    run()  # ...and replays it
    assert last.exists(), "Spark did not replay the batch: the test proved nothing"
    assert ids(spark, out) == list(range(300))
    assert transient(out) == []


def test_stream_commit_is_idempotent_per_batch_id(tmp_path: Path) -> None:
    import pyarrow as pa

    options = parse_sink_options({"path": str(tmp_path), "bucketer": "none"})
    writer = BucketingStreamWriter(options)
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    first = writer.write(iter([batch]))
    object.__setattr__(first, "query_id", "q1")
    writer.commit([first], 7)
    replay = writer.write(iter([batch]))
    object.__setattr__(replay, "query_id", "q1")
    writer.commit([replay], 7)
    assert len(visible_files(tmp_path)) == 1 and transient(tmp_path) == []
    other_query = writer.write(iter([batch]))
    object.__setattr__(other_query, "query_id", "q2")  # a new checkpoint starts again at batch 0: not a replay
    writer.commit([other_query], 0)
    assert len(visible_files(tmp_path)) == 2


def _table_ids(out: Path, fmt: str) -> list[int]:
    import polars as pl

    from splitsource.sink import open_table

    frame = pl.read_delta(str(out)) if fmt == "delta" else pl.scan_iceberg(open_table(str(out))).collect()
    return sorted(frame["id"].to_list())


def _table_commits(out: Path, fmt: str) -> list[tuple[int | None, int]]:
    committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
    assert committer.table is not None
    return [(c.seq, c.rows) for c in committer.table.history(committer)]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_batch_writes_into_a_table_append_and_overwrite_one_commit_each(spark: Any, tmp_path: Path, fmt: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    out = tmp_path / "table"
    writer = spark.range(0, 3000, 1, 2).write.format("bucketing").option("table_format", fmt)
    writer.mode("append").save(str(out))
    spark.range(3000, 4000, 1, 2).write.format("bucketing").option("table_format", fmt).mode("append").save(str(out))
    assert _table_ids(out, fmt) == list(range(4000))
    spark.range(0, 10, 1, 1).write.format("bucketing").option("table_format", fmt).mode("overwrite").save(str(out))
    assert _table_ids(out, fmt) == list(range(10))
    assert [seq for seq, _ in _table_commits(out, fmt) if seq is not None] == [1, 2, 3]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_stream_into_a_table_replayed_after_a_restart_commits_each_batch_once(spark: Any, tmp_path: Path, fmt: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The state a kill leaves between the sink's commit and Spark's own commit record: the restarted query
    replays the batch, and the table gets no second commit of it."""
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    source, out, checkpoint = tmp_path / "in", tmp_path / "table", tmp_path / "chk"
    source.mkdir()

    def run() -> None:
        _stream_json(spark, source, out, checkpoint, table_format=fmt)

    _three_files_streamed(source, run)
    last = [p for p in sorted((checkpoint / "commits").iterdir(), key=lambda p: p.name) if p.name.isdigit()][-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    run()
    assert last.exists(), "Spark did not replay the batch: the test proved nothing"
    assert _table_ids(out, fmt) == list(range(300))
    assert _table_commits(out, fmt) == [(1, 100), (2, 100), (3, 100)]
