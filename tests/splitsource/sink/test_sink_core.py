"""The sink core without Spark: rolling, recovery after a crash at every stage, idempotent commits, sweeping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from serializers import read_envelope, write_envelope
from splitsource import SinkError
from splitsource.sink import (
    COMMIT_RECORD_SERIALIZER,
    WRITER_STATE_SERIALIZER,
    BucketingGlobalCommitter,
    BucketingSinkWriter,
    parse_sink_options,
)
from splitsource.sink._files import PENDING_FILE_SERIALIZER


def batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()),
                            "k": [f"k{i % 3}" for i in range(start, start + n)]})


def sink(tmp_path: Path, **options: str) -> tuple[Any, BucketingGlobalCommitter]:
    opts = parse_sink_options({"path": str(tmp_path), "bucketer": "none", **options})
    return opts, BucketingGlobalCommitter(pafs.LocalFileSystem(), str(tmp_path), opts.names)


def finished_ids(tmp_path: Path, fmt: str = "jsonl") -> list[int]:
    """What a reader of the output sees: only files whose names do not start with _ or ."""
    ids: list[int] = []
    for path in sorted(tmp_path.rglob("*")):
        if path.is_dir() or any(part.startswith(("_", ".")) for part in path.relative_to(tmp_path).parts):
            continue
        if fmt == "jsonl":
            ids.extend(json.loads(line)["id"] for line in path.read_text().splitlines())
        else:
            ids.extend(pq.read_table(path).column("id").to_pylist())
    return sorted(ids)


def transient(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.rglob("_part-*"))


def test_rolls_by_size_and_every_finished_file_is_readable(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet", part_size_mb="0.01")
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    for i in range(20):
        writer.write(batch(i * 1000, 1000))
    files = writer.prepare_commit(end_of_input=True)
    assert len(files) > 3  # rolled on size
    committer.commit(committer.combine(files, kind="append", write_id="w"))
    assert finished_ids(tmp_path, "parquet") == list(range(20_000))
    assert transient(tmp_path) == []
    assert len({f.counter for f in files}) == len(files)  # one counter per file, never reused


def _dictionary_encoded(path: Path) -> dict[str, bool]:
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(0)
    return {group.column(i).path_in_schema: "RLE_DICTIONARY" in group.column(i).encodings
            for i in range(meta.num_columns)}


@pytest.mark.parametrize("rows", [50_000, 100])
def test_parquet_keeps_a_dictionary_only_where_it_pays(tmp_path: Path, rows: int) -> None:
    """A column of distinct values is written plainly, one of few values, a nested one and a small file's every
    column with a dictionary; DuckDB reads back every inserted value."""
    import duckdb

    cities = [None if i % 11 == 0 else f"city {i % 300}" for i in range(rows)]
    data = pa.record_batch({"id": pa.array(range(rows), pa.int64()), "name": [f"customer {i}" for i in range(rows)],
                            "city": cities, "tags": [[f"t{i % 5}"] for i in range(rows)]})
    opts, committer = sink(tmp_path, format="parquet")
    writer = BucketingSinkWriter(opts, data.schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    writer.write(data)
    committer.commit(committer.combine(writer.prepare_commit(end_of_input=True), kind="append", write_id="w"))
    [path] = [p for p in tmp_path.glob("*.parquet")]
    large = rows >= 20_000
    assert _dictionary_encoded(path) == {"id": not large, "name": not large, "city": True, "tags.list.element": True}
    read = duckdb.sql(f"SELECT id, name, city, tags FROM '{path}' ORDER BY id").fetchall()
    assert read == [(i, f"customer {i}", cities[i], [f"t{i % 5}"]) for i in range(rows)]


def test_rolls_a_bucket_after_inactivity(tmp_path: Path) -> None:
    opts, _ = sink(tmp_path, format="jsonl", bucketer="columns", bucket_columns="k", inactivity_s="10")
    now = {"t": 0.0}
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, pafs.LocalFileSystem(), str(tmp_path), task="t",
                                 ticker=lambda: now["t"])
    writer.write(batch(0, 1))  # bucket k=k0
    now["t"] = 5.0
    writer.write(batch(1, 1))  # k=k1
    assert writer.prepare_commit() == []  # row format, nothing inactive yet
    now["t"] = 12.0
    writer.write(batch(4, 1))  # k=k1 again: k=k0 idle 12 s > 10 s
    rolled = writer.prepare_commit()
    assert [f.bucket for f in rolled] == ["k=k0"]
    assert {p.name for p in (tmp_path / "k=k1").iterdir()} == {"_part-t-1.in-progress"}


@pytest.mark.parametrize("truncating", [True, False], ids=["truncate", "valid-length-file"])
def test_crash_after_a_checkpoint_keeps_its_data_and_drops_what_came_after(tmp_path: Path, truncating: bool) -> None:
    """BucketingSink recovery: the in-progress file is cut back to the checkpoint's valid length."""
    fs: pafs.FileSystem = pafs.LocalFileSystem() if truncating else pafs.SubTreeFileSystem("/", pafs.LocalFileSystem())
    base = str(tmp_path)
    opts, _ = sink(tmp_path, format="jsonl")
    committer = BucketingGlobalCommitter(fs, base, opts.names)
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task="t")
    writer.write(batch(0, 100))
    state = write_envelope(WRITER_STATE_SERIALIZER, writer.snapshot_state())  # checkpoint 1: rows 0..99
    committer.commit(committer.combine(writer.prepare_commit(), kind="append", write_id="w"))
    writer.write(batch(100, 50))  # after the checkpoint: must be dropped
    writer.snapshot_state()  # flushed to disk, but this checkpoint never completes
    del writer  # crash: no close, no commit

    restored = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base,
                                   state=read_envelope(WRITER_STATE_SERIALIZER, state))
    restored.write(batch(1000, 10))
    files = restored.prepare_commit(end_of_input=True)
    committer.commit(committer.combine(files, kind="append", write_id="w"))
    names = {p.name for p in tmp_path.iterdir()}
    assert "part-t-0.jsonl" in names and "part-t-1.jsonl" in names
    if truncating:
        assert finished_ids(tmp_path) == list(range(100)) + list(range(1000, 1010))
    else:
        marker = tmp_path / "_part-t-0.jsonl.valid-length"
        valid = int(marker.read_text())
        kept = (tmp_path / "part-t-0.jsonl").read_bytes()[:valid].decode().splitlines()
        assert [json.loads(line)["id"] for line in kept] == list(range(100))


def test_restoring_twice_is_idempotent_and_never_reuses_a_name(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="jsonl")
    fs, base = pafs.LocalFileSystem(), str(tmp_path)
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task="t")
    writer.write(batch(0, 10))
    state = writer.snapshot_state()
    del writer
    first = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, state=state)
    first.write(batch(10, 5))
    first.prepare_commit(end_of_input=True)  # crash again before the commit
    second = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, state=state)
    second.write(batch(20, 5))
    files = second.prepare_commit(end_of_input=True)
    committer.commit(committer.combine(files, kind="append", write_id="w"))
    committer.sweep()
    assert finished_ids(tmp_path) == list(range(10)) + list(range(20, 25))
    assert len({f.counter for f in files}) == len(files) and transient(tmp_path) == []


def test_crash_between_commit_record_and_renames_is_finished_by_recovery(tmp_path: Path, monkeypatch: Any) -> None:
    opts, committer = sink(tmp_path, format="parquet")
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, pafs.LocalFileSystem(), str(tmp_path), task="t",)
    writer.write(batch(0, 30))
    files = writer.prepare_commit()
    record = committer.combine(files, kind="append", write_id="w")

    def crash(record: Any) -> None:
        raise KeyboardInterrupt("killed after the commit point")

    monkeypatch.setattr(committer, "_finish", crash)
    with pytest.raises(KeyboardInterrupt):
        committer.commit(record)
    assert finished_ids(tmp_path, "parquet") == []  # nothing visible yet
    monkeypatch.undo()
    fresh = BucketingGlobalCommitter(pafs.LocalFileSystem(), str(tmp_path), opts.names)
    assert [r.seq for r in fresh.recover()] == [record.seq]
    assert finished_ids(tmp_path, "parquet") == list(range(30))
    assert fresh.recover() == []  # done is done
    fresh.sweep()
    assert finished_ids(tmp_path, "parquet") == list(range(30))  # the sweep never removes committed files


def test_a_commit_retried_after_partial_renames_finishes_the_rest(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet", part_size_mb="0.001")
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    for i in range(5):
        writer.write(batch(i * 100, 100))
    files = writer.prepare_commit()
    record = committer.combine(files, kind="append", write_id="w")
    # a crash after the commit record and the first rename: the next run finishes the rest
    log = tmp_path.with_name(tmp_path.name + ".bucketing") / "log"
    log.mkdir(parents=True)
    (log / f"{record.seq:020d}.commit").write_bytes(write_envelope(COMMIT_RECORD_SERIALIZER, record))
    fs = pafs.LocalFileSystem()
    fs.move(files[0].pending_path(str(tmp_path), opts.names), files[0].finished_path(str(tmp_path), opts.names))
    assert committer.recover() == [record]
    committer.commit(record)  # the same record again: idempotent
    assert committer.recover() == []
    assert finished_ids(tmp_path, "parquet") == list(range(500))


def test_sweep_removes_orphans_of_failed_attempts_only(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet")
    fs, base = pafs.LocalFileSystem(), str(tmp_path)
    good = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task="00000-aaaa")
    good.write(batch(0, 10))
    failed = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task="00000-bbbb")
    failed.write(batch(0, 10))
    failed.prepare_commit()  # its pending file is never committed
    crashed = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task="00001-cccc")
    crashed.write(batch(10, 5))  # left in progress
    files = good.prepare_commit()
    committer.commit(committer.combine(files, kind="append", write_id="w"))
    removed = committer.sweep()
    assert len(removed) == 2 and transient(tmp_path) == []
    assert finished_ids(tmp_path, "parquet") == list(range(10))


def test_overwrite_replaces_everything_committed_before(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet")
    fs, base = pafs.LocalFileSystem(), str(tmp_path)
    for task, start, kind in (("a", 0, "append"), ("b", 100, "overwrite")):
        writer = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task=task)
        writer.write(batch(start, 10))
        committer.commit(committer.combine(writer.prepare_commit(), kind=kind, write_id=task))
    assert finished_ids(tmp_path, "parquet") == list(range(100, 110))


def test_commit_log_stays_bounded(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet", log_retention="3")
    committer.retention = 3
    fs, base = pafs.LocalFileSystem(), str(tmp_path)
    for i in range(8):
        writer = BucketingSinkWriter(opts, batch(0, 1).schema, fs, base, task=f"t{i}")
        writer.write(batch(i, 1))
        committer.commit(committer.combine(writer.prepare_commit(), kind="stream", write_id="q", batch_id=i))
    assert len(list((tmp_path.with_name(tmp_path.name + ".bucketing") / "log").glob("*.commit"))) == 3
    assert committer.last_stream_batch("q") == 7
    assert finished_ids(tmp_path, "parquet") == list(range(8))


def test_a_corrupt_commit_record_is_named_not_ignored(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet")
    log = tmp_path.with_name(tmp_path.name + ".bucketing") / "log"
    log.mkdir(parents=True)
    (log / f"{1:020d}.commit").write_bytes(b"garbage")
    with pytest.raises(SinkError, match=r"00000000000000000001\.commit is unreadable"):
        committer.recover()


def test_committables_and_records_round_trip_through_their_serializers(tmp_path: Path) -> None:
    opts, committer = sink(tmp_path, format="parquet")
    writer = BucketingSinkWriter(opts, batch(0, 1).schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    writer.write(batch(0, 3))
    files = writer.prepare_commit()
    assert [read_envelope(PENDING_FILE_SERIALIZER, write_envelope(PENDING_FILE_SERIALIZER, f)) for f in files] == files
    record = committer.combine(files, kind="append", write_id="w")
    assert read_envelope(COMMIT_RECORD_SERIALIZER, write_envelope(COMMIT_RECORD_SERIALIZER, record)) == record


def test_csv_holds_nested_columns_as_json_text(tmp_path: Path) -> None:
    import csv
    import io

    opts, committer = sink(tmp_path, format="csv")
    data = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "tags": pa.array([["a", 'b"c'], None],
                                                                                 pa.list_(pa.string()))})
    writer = BucketingSinkWriter(opts, data.schema, pafs.LocalFileSystem(), str(tmp_path), task="t")
    writer.write(data)
    committer.commit(committer.combine(writer.prepare_commit(end_of_input=True), kind="append", write_id="w"))
    [part] = [p for p in tmp_path.glob("part-*")]
    rows = list(csv.reader(io.StringIO(part.read_bytes().decode(), newline="")))
    assert rows == [["id", "tags"], ["1", '["a","b\\"c"]'], ["2", ""]]
    assert json.loads(rows[1][1]) == ["a", 'b"c']


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "+00:00", "Europe/Paris", "+05:30"])
def test_csv_text_of_zoned_timestamps_is_the_utc_instant_and_binary_is_base64(unit: str, zone: str) -> None:
    """Whatever the zone, CSV holds the instant in UTC as ISO 8601 with ``Z`` (one fraction digit per unit digit),
    the same text Python prints for it; binary becomes base64."""
    import base64
    from datetime import datetime, timezone

    from splitsource.sink.formats.csv import csv_ready

    values = [0, None, 1_700_000_000, -86_401, 253_402_300_799 if unit != "ns" else 9_000_000_000]  # epoch, null,
    # 2023, 1969, the last second of 9999 (2255 in nanoseconds)
    digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]
    scale = 10**digits
    raw = [None if v is None else v * scale + (scale // 3 if unit != "s" and v else 0) for v in values]
    stamps = pa.array(raw, pa.int64()).cast(pa.timestamp(unit, tz=zone))
    blobs = pa.array([b"", None, b"\x00\xff", b"a,b\n", b"x" * 70], pa.binary())
    batch = pa.RecordBatch.from_arrays([stamps, blobs], names=["t", "b"])

    def python_text(value: int) -> str:
        seconds, fraction = divmod(value, scale)
        text = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        return text + (f".{fraction:0{digits}d}" if digits else "") + "Z"

    ready = csv_ready(batch)
    assert ready.column("t").to_pylist() == [None if v is None else python_text(v) for v in raw]
    assert ready.column("b").to_pylist() == [None if v is None else base64.b64encode(v).decode() for v in
                                             blobs.to_pylist()]
