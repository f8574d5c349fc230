"""Table formats without Spark: each commit of the sink becomes exactly one Delta or Iceberg commit, also when the
process stops between the table commit and the commit's ``done`` mark (the fault injected at that exact point),
read back by the table's own readers (delta-rs and pyiceberg through Polars) against the rows written."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from splitsource import OptionsError, SinkError
from splitsource.sink import BucketingSinkWriter, open_table, parse_sink_options
from splitsource.sink import _committer as committer_module
from splitsource.sink._committer import BucketingGlobalCommitter
from tests.fixtures import polars_table

FORMATS = ("delta", "iceberg")
pytestmark = pytest.mark.usefixtures("pyiceberg_planner")


def batch(start: int, n: int) -> pa.RecordBatch:
    names = [f"n{i}" if i % 7 else None for i in range(start, start + n)]
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()), "name": pa.array(names, pa.string())})


def committer_of(out: Path, fmt: str) -> tuple[Any, BucketingGlobalCommitter]:
    options = parse_sink_options({"path": str(out), "table_format": fmt})
    return options, options.committer()


def write(out: Path, fmt: str, start: int, n: int, seq_task: str) -> tuple[BucketingGlobalCommitter, Any]:
    """One batch of rows [start, start + n) written into pending files, returned with its commit record."""
    options, committer = committer_of(out, fmt)
    writer = BucketingSinkWriter(options, batch(0, 1).schema, committer.fs, committer.base, task=seq_task)
    writer.write(batch(start, n))
    files = writer.prepare_commit(end_of_input=True)
    return committer, committer.combine(files, kind="stream", write_id="q", batch_id=start)


def table_ids(out: Path, fmt: str) -> list[int]:
    """The ids the table's readers see: Polars through delta-rs, or through pyiceberg."""
    frame = polars_table(out, fmt)
    return sorted(frame["id"].to_list())


def tagged(out: Path, fmt: str) -> list[int]:
    """The commit numbers the table's history carries, one per table commit made by the sink."""
    _, committer = committer_of(out, fmt)
    assert committer.table is not None
    return [c.seq for c in committer.table.history(committer) if c.seq is not None]


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_commit_is_one_table_commit_read_back_exactly(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "t"
    for i in range(3):
        committer, record = write(out, fmt, i * 100, 100, f"0000{i}-w")
        committer.commit(record)
    assert table_ids(out, fmt) == list(range(300))
    assert tagged(out, fmt) == [1, 2, 3]
    _, committer = committer_of(out, fmt)
    assert committer.table is not None
    assert len(committer.table.data_files(committer)) == 3
    assert len(committer.finished_files()) == 3  # the table's own files are not part files


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stop_after_the_table_commit_before_done_makes_no_second_commit(tmp_path: Path, fmt: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t"
    committer, record = write(out, fmt, 0, 100, "00000-w")
    committer.commit(record)
    committer, record = write(out, fmt, 100, 100, "00001-w")
    stops = []
    real = committer_module.publish

    def publish_then_stop(c: BucketingGlobalCommitter, r: Any) -> bool:
        made = real(c, r)
        stops.append(made)
        raise KeyboardInterrupt("stopped after the table commit, before the done mark")

    monkeypatch.setattr(committer_module, "publish", publish_then_stop)
    with pytest.raises(KeyboardInterrupt):
        committer.commit(record)
    assert stops == [True], "the fault did not land after a table commit"
    assert not (out.parent / "t.bucketing" / "log" / f"{record.seq:020d}.done").exists()
    monkeypatch.setattr(committer_module, "publish", real)
    _, again = committer_of(out, fmt)
    assert [r.seq for r in again.recover()] == [record.seq]  # the next run finishes the logged commit
    assert tagged(out, fmt) == [1, 2]  # ...without a second table commit
    assert table_ids(out, fmt) == list(range(200))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stop_after_the_log_record_before_the_table_commit_publishes_once_on_recovery(
        tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t"
    committer, record = write(out, fmt, 0, 100, "00000-w")

    def stop(c: BucketingGlobalCommitter, r: Any) -> bool:
        raise KeyboardInterrupt("stopped after the log record, before the table commit")

    monkeypatch.setattr(committer_module, "publish", stop)
    with pytest.raises(KeyboardInterrupt):
        committer.commit(record)
    assert (out.parent / "t.bucketing" / "log" / f"{record.seq:020d}.commit").exists()
    monkeypatch.undo()
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # undone above with the fault
    _, again = committer_of(out, fmt)
    again.recover()
    again.recover()  # a second recovery finds nothing left to do
    assert tagged(out, fmt) == [1]
    assert table_ids(out, fmt) == list(range(100))


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_made_again_from_nothing_are_not_taken_for_the_table_s_earlier_commits(tmp_path: Path,
                                                                                      fmt: str) -> None:
    """The records' place deleted (the log starts again at commit 1): the table already holds a commit 1 of the
    old log; the new log's commit 1 must still be made, not skipped as published."""
    out = tmp_path / "t"
    committer, record = write(out, fmt, 0, 100, "00000-w")
    committer.commit(record)
    catalog = tmp_path / "catalog.db"
    if fmt == "iceberg":  # the default catalog lives in the records' place: keep the table's catalog apart
        shutil.copy(tmp_path / "t.bucketing" / "iceberg.db", catalog)
    shutil.rmtree(tmp_path / "t.bucketing")
    extra = {"iceberg_catalog": f"sqlite:///{catalog}"} if fmt == "iceberg" else {}
    options = parse_sink_options({"path": str(out), "table_format": fmt, **extra})
    committer = options.committer()
    writer = BucketingSinkWriter(options, batch(0, 1).schema, committer.fs, committer.base, task="00001-w")
    writer.write(batch(100, 50))
    record = committer.combine(writer.prepare_commit(end_of_input=True), kind="stream", write_id="q", batch_id=0)
    assert record.seq == 1
    committer.commit(record)
    assert committer.table is not None
    assert [c.seq for c in committer.table.history(committer) if c.seq is not None] == [1, 1]
    frame = (pl.read_delta(str(out)) if fmt == "delta" else
             pl.scan_iceberg(open_table(str(out), iceberg_catalog=f"sqlite:///{catalog}")).collect())
    assert sorted(frame["id"].to_list()) == list(range(150))


def test_records_of_one_table_format_refuse_the_other(tmp_path: Path) -> None:
    out = tmp_path / "t"
    committer, record = write(out, "delta", 0, 10, "00000-w")
    committer.commit(record)
    committer, record = write(out, "iceberg", 10, 10, "00001-w")
    with pytest.raises(SinkError, match="is a delta table's output; this write asks for table_format 'iceberg'"):
        committer.commit(record)


@pytest.mark.parametrize(("options", "message"), [
    ({"format": "csv"}, "format 'csv' cannot go into a table"),
    ({"bucketer": "datetime"}, "bucketer 'datetime' is refused"),
    ({"table_format": "iceberg", "bucketer": "datetime"}, "bucketer 'datetime' is refused"),
    ({"table_format": "hudi"}, "'hudi'"),
    ({"iceberg_catalog": "sqlite:////tmp/c.db"}, "only used with table_format 'iceberg'"),
    ({"table_format": "iceberg", "iceberg_catalog": "thrift://hive:9083"}, "neither sqlite"),
])
def test_what_a_table_cannot_hold_is_refused_in_one_line(tmp_path: Path, options: dict[str, str],
                                                         message: str) -> None:
    raw = {"path": str(tmp_path / "t"), "table_format": "delta", **options}
    if "iceberg_catalog" in options and options.get("table_format") is None:
        raw["table_format"] = "none"
    with pytest.raises(OptionsError, match=message) as caught:
        parse_sink_options(raw)
    assert "\n" not in str(caught.value)


def test_a_missing_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_deltalake(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "deltalake":
            raise ImportError("No module named 'deltalake'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_deltalake)
    with pytest.raises(OptionsError, match=r"pip install 'splitsource\[delta\]'"):
        parse_sink_options({"path": str(tmp_path / "t"), "table_format": "delta"})


def test_the_command_offers_the_table_formats_there_are() -> None:
    from splitsource.cli import TABLE_FORMAT_NAMES
    from splitsource.sink import TABLE_FORMATS

    assert TABLE_FORMAT_NAMES == ("none", *TABLE_FORMATS)


def test_bucket_columns_become_the_delta_table_s_partitions_with_their_types_and_values(tmp_path: Path) -> None:
    """Values that need escaping in a directory name (/, %, =, non-ASCII, a space), a null, and an integer
    partition column keep their type: read back by delta-rs and by Polars against the values written."""
    import deltalake

    out = tmp_path / "t"
    options = parse_sink_options({"path": str(out), "table_format": "delta", "bucketer": "columns",
                                  "bucket_columns": "k,n"})
    committer = options.committer()
    values = ["a", "b/c", None, "%x", "x=y", "é", "sp ace", "__HIVE_DEFAULT_PARTITION__"]
    data = pa.record_batch({"id": pa.array(range(80), pa.int64()),
                            "k": pa.array([values[i % len(values)] for i in range(80)], pa.string()),
                            "n": pa.array([i % 3 for i in range(80)], pa.int32())})
    writer = BucketingSinkWriter(options, data.schema, committer.fs, committer.base, task="00000-w")
    writer.write(data)
    committer.commit(committer.combine(writer.prepare_commit(end_of_input=True), kind="append", write_id="w"))
    table = deltalake.DeltaTable(str(out))
    assert table.metadata().partition_columns == ["k", "n"]
    want = {i: (values[i % len(values)], i % 3) for i in range(80)}
    read = table.to_pyarrow_table()
    assert read.schema.field("n").type == pa.int32()
    assert dict(zip(read["id"].to_pylist(), zip(read["k"].to_pylist(), read["n"].to_pylist(), strict=True),
                    strict=True)) == want
    frame = pl.read_delta(str(out))
    got = dict(zip(frame["id"].to_list(), zip(frame["k"].to_list(), frame["n"].to_list(), strict=True), strict=True))
    # Polars' Delta reader takes the text __HIVE_DEFAULT_PARTITION__ in a partition value for a null (the log holds
    # the text, and delta-rs reads it back as such): the one value it does not read exactly
    assert {i for i in want if got[i] != want[i]} == {i for i in want if want[i][0] == "__HIVE_DEFAULT_PARTITION__"}


def test_a_partition_column_a_table_cannot_hold_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    options = parse_sink_options({"path": str(tmp_path / "t"), "table_format": "delta", "bucketer": "columns",
                                  "bucket_columns": "x"})
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64())])
    with pytest.raises(OptionsError, match=r"column 'x' \(double\) cannot partition a delta table"):
        BucketingSinkWriter(options, schema, options.committer().fs, str(tmp_path / "t"), task="00000-w")
    assert not (tmp_path / "t").exists()


def test_bucket_columns_become_the_iceberg_table_s_partitions_with_their_types_and_values(tmp_path: Path) -> None:
    """Iceberg's files hold their partition columns, and each file's partition in the manifests is its one value:
    text that needs escaping in a directory name, longer than the 16 characters Iceberg's default bounds keep, a
    null, integers and dates; read back by pyiceberg and Polars against the values written, and a filter on a
    partition plans only that partition's files."""
    import datetime

    from pyiceberg.expressions import EqualTo, IsNull

    out = tmp_path / "t"
    options = parse_sink_options({"path": str(out), "table_format": "iceberg", "bucketer": "columns",
                                  "bucket_columns": "k,n,d"})
    committer = options.committer()
    values = ["a", "b/c", None, "%x", "x=y", "é", "a text longer than sixteen characters"]
    days = [datetime.date(1, 1, 1), datetime.date(2026, 11, 25), datetime.date(9999, 12, 31)]
    want = {i: (values[i % len(values)], i % 3, days[i % 2 * 2] if i % 5 else days[1]) for i in range(84)}
    data = pa.record_batch({"id": pa.array(range(84), pa.int64()),
                            "k": pa.array([want[i][0] for i in range(84)], pa.string()),
                            "n": pa.array([want[i][1] for i in range(84)], pa.int32()),
                            "d": pa.array([want[i][2] for i in range(84)], pa.date32())})
    writer = BucketingSinkWriter(options, data.schema, committer.fs, committer.base, task="00000-w")
    writer.write(data)
    committer.commit(committer.combine(writer.prepare_commit(end_of_input=True), kind="append", write_id="w"))
    table = open_table(str(out))
    assert [(table.schema().find_column_name(f.source_id), str(f.transform)) for f in table.spec().fields] == [
        ("k", "identity"), ("n", "identity"), ("d", "identity")]
    read = table.scan().to_arrow()
    assert read.schema.field("n").type == pa.int32() and read.schema.field("d").type == pa.date32()
    columns = [read[c].to_pylist() for c in ("id", "k", "n", "d")]
    assert {i: (k, n, d) for i, k, n, d in zip(*columns, strict=True)} == want
    frame = pl.scan_iceberg(table).collect()
    assert {r["id"]: (r["k"], r["n"], r["d"]) for r in frame.iter_rows(named=True)} == want
    epoch = datetime.date(1970, 1, 1)
    for task in table.scan().plan_files():  # each file's partition: the one value its rows hold (dates as days)
        rows = {(k, n, (d - epoch).days) for k, n, d in (want[i] for i in pq_ids(task.file.file_path))}
        assert rows == {tuple(task.file.partition[j] for j in range(3))}
    long_text = values[-1]
    planned = list(table.scan(row_filter=EqualTo("k", long_text)).plan_files())
    assert planned and sum(t.file.record_count for t in planned) == sum(1 for v in want.values() if v[0] == long_text)
    nulls = list(table.scan(row_filter=IsNull("k")).plan_files())
    assert sum(t.file.record_count for t in nulls) == sum(1 for v in want.values() if v[0] is None)


def pq_ids(path: str) -> list[int]:
    import pyarrow.parquet as pq

    return [int(i) for i in pq.read_table(path.removeprefix("file://"), columns=["id"])["id"].to_pylist()]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_date_a_partition_cannot_hold_fails_the_task_before_anything_is_pending(tmp_path: Path, fmt: str) -> None:
    import datetime

    out = tmp_path / "t"
    options = parse_sink_options({"path": str(out), "table_format": fmt, "bucketer": "columns",
                                  "bucket_columns": "d"})
    committer = options.committer()
    epoch = datetime.date(1970, 1, 1)
    far = (datetime.date(9999, 12, 31) - epoch).days + 1
    data = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "d": pa.array([0, far], pa.int32()).cast(pa.date32())})
    writer = BucketingSinkWriter(options, data.schema, committer.fs, committer.base, task="00000-w")
    with pytest.raises(SinkError, match=rf"column 'd': the date {far} days from 1970-01-01 cannot partition a "
                                        rf"{fmt} table") as caught:
        writer.write(data)
    assert "\n" not in str(caught.value)
    assert not list(out.rglob("*.pending")) and not list(out.rglob("*.parquet"))
    last = pa.record_batch({"id": pa.array([3], pa.int64()), "d": pa.array([far - 1], pa.int32()).cast(pa.date32())})
    writer.write(last)  # 9999-12-31 is held
