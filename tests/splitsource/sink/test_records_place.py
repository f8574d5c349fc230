"""Where the sink keeps its records: beside the output by default, so that the output holds data files only and
DuckDB and Polars (which read every file under a directory) read it with their plainest call."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from splitsource import OptionsError
from splitsource.sink import BucketingSinkWriter, parse_sink_options


def _write(out: Path, **options: str) -> None:
    opts = parse_sink_options({"path": str(out), "bucketer": "none", **options})
    committer = opts.committer()
    rows = pa.record_batch({"id": pa.array(range(100), pa.int64())})
    writer = BucketingSinkWriter(opts, rows.schema, pafs.LocalFileSystem(), str(out), task="00000-a")
    writer.write(rows)
    committer.commit(committer.combine(writer.prepare_commit(end_of_input=True), kind="append", write_id="w"))
    committer.end_of_input(b"{}")


def test_by_default_the_records_are_beside_the_output_and_the_output_holds_part_files_only(tmp_path: Path) -> None:
    import duckdb
    import polars as pl

    out = tmp_path / "out"
    _write(out)
    assert [p.name for p in out.iterdir()] == [next(out.iterdir()).name] and next(out.iterdir()).suffix == ".parquet"
    records = tmp_path / "out.bucketing"
    assert (records / "_SUCCESS").exists() and list((records / "log").glob("*.commit"))
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/**')").fetchall() == [(100,)]
    assert pl.read_parquet(out).height == 100


def test_success_file_adds_hadoops_marker_to_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out, success_file="true")
    assert (out / "_SUCCESS").read_bytes() == b"" and (tmp_path / "out.bucketing" / "_SUCCESS").exists()


def test_the_metadata_option_names_the_records_place(tmp_path: Path) -> None:
    out = tmp_path / "data" / "out"
    _write(out, metadata=str(tmp_path / "records" / "out"))
    assert list((tmp_path / "records" / "out" / "log").glob("*.commit"))
    assert not (tmp_path / "data" / "out.bucketing").exists()


@pytest.mark.parametrize(("path", "metadata", "message"), [
    ("s3://lake", "", r"path='s3://lake' is a root \(of a disk or of a bucket\).*metadata option"),
    ("/", "", r"path='/' is a root"),
    ("s3://lake/out", "s3://other/records", r"metadata='s3://other/records' is on another store"),
    ("/data/out", "/data/out/_meta", r"metadata='/data/out/_meta' is inside the output"),
])
def test_a_records_place_the_sink_cannot_use_is_refused_at_parse_time(path: str, metadata: str, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        parse_sink_options({"path": path, "metadata": metadata})
