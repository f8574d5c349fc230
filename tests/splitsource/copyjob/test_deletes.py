"""An incremental run's deletes: found by listing the source's keys, or, where the source counts its keys, known
to be none without listing them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from splitsource import SplitEnumerator
from splitsource._fs import locate
from splitsource.copyjob._deletes import RunDeletes
from splitsource.copyjob._protocol import CHANGE_COLUMN, RUN_COLUMN
from splitsource.sink import BucketingGlobalCommitter, parse_sink_options

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


class Counting:
    """An enumerator's key hooks over ``present`` (the source's keys now) and ``changed`` (the keys of its rows
    changed since the last run); it notes whether ``keys()`` was read."""

    def __init__(self, present: list[int], changed: list[int]) -> None:
        self.present, self.changed, self.listed = present, changed, False

    def keys(self) -> Iterator[pa.RecordBatch]:
        def listing() -> Iterator[pa.RecordBatch]:
            self.listed = True
            yield pa.record_batch([pa.array(self.present, pa.int64())], names=["id"])
        return listing()

    def changed_keys(self) -> tuple[int, Iterator[pa.RecordBatch]]:
        return len(self.present), iter([pa.record_batch([pa.array(self.changed, pa.int64())], names=["id"])])


def _deletes(tmp_path: Path) -> RunDeletes:
    """Run 2's deletes, over a Parquet output whose run 1 wrote keys 1 to 10."""
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    out.mkdir()
    checkpoint.mkdir()
    pq.write_table(pa.table({"id": pa.array(range(1, 11), pa.int64()), "name": ["a"] * 10,
                             RUN_COLUMN: pa.array([1] * 10, pa.int64()), CHANGE_COLUMN: ["upsert"] * 10}),
                   out / "part-0.parquet")
    sink = parse_sink_options({"path": str(out), "bucketer": "none", "format": "parquet"})
    committer = BucketingGlobalCommitter(cast(Any, pafs.LocalFileSystem()), str(out), sink.names)
    committer.upsert_keys = ("id",)
    return RunDeletes(2, SCHEMA, committer, sink, locate(str(checkpoint)))


@pytest.mark.parametrize(("present", "changed", "listed", "deleted"), [
    (list(range(1, 11)), [2, 3, 4], False, []),  # updates alone: the count says none is gone
    ([*range(1, 5), *range(6, 12)], [11], True, [5]),  # one deleted, one inserted: the count differs by the new
    (list(range(1, 11)), [5], False, []),  # a key deleted and inserted again: a changed row, not gone
    (list(range(1, 10)), [], True, [10]),  # a delete alone
])
def test_deletes_are_listed_only_when_the_count_says_a_key_is_gone(tmp_path: Path, present: list[int],
                                                                   changed: list[int], listed: bool,
                                                                   deleted: list[int]) -> None:
    deletes, enumerator = _deletes(tmp_path), Counting(present, changed)
    deletes.find(cast(SplitEnumerator[Any, Any], enumerator))
    assert enumerator.listed is listed
    changes = deletes.applied("run-2")
    assert changes is not None
    assert changes.deleted.column("id").to_pylist() == deleted


def test_the_keys_held_are_the_first_runs_less_later_deletes_with_later_inserts(tmp_path: Path) -> None:
    """Run 3 over files of run 1 (keys 1 to 10, read without their change column), run 2's upsert of key 11 and
    its delete of key 5 (files of their own): the output holds 1 to 4 and 6 to 11. A source that holds those, with
    11 changed since, has none gone, and its count says so without a listing; one that lost 11 has 11 gone."""
    for source, listed, deleted in (([*range(1, 5), *range(6, 12)], False, []), ([*range(1, 5), *range(6, 11)],
                                                                                  True, [11])):
        case = tmp_path / str(listed)
        case.mkdir()
        deletes = _deletes(case)
        for name, key, change in (("part-1.parquet", 11, "upsert"), ("part-2.parquet", 5, "delete")):
            pq.write_table(pa.table({"id": pa.array([key], pa.int64()), "name": pa.array([None], pa.string()),
                                     RUN_COLUMN: pa.array([2], pa.int64()), CHANGE_COLUMN: [change]}),
                           case / "out" / name)
        deletes = RunDeletes(3, SCHEMA, deletes.committer, deletes.sink, locate(str(case / "checkpoint")))
        enumerator = Counting(source, [11] if 11 in source else [])
        deletes.find(cast(SplitEnumerator[Any, Any], enumerator))
        assert enumerator.listed is listed
        changes = deletes.applied("run-3")
        assert changes is not None
        assert changes.deleted.column("id").to_pylist() == deleted


@pytest.mark.parametrize("damage", ["none", "gone", "torn"])
def test_a_run_reads_the_keys_the_last_kept_or_the_output_where_that_file_is_gone_or_torn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """Run 2 changes no key of the output (1 to 10) and keeps them in the checkpoint; run 3 (an update) reads that
    file, not the output, and names it again, or, where the file is gone or cut short, reads the output and keeps a
    new one; run 4 finds key 10 gone from what run 3 named."""
    checkpoint = locate(str(tmp_path / "checkpoint"))
    deletes = _deletes(tmp_path)
    deletes.find(cast(SplitEnumerator[Any, Any], Counting(list(range(1, 11)), [2, 3])))
    changes = deletes.applied("run-2")
    assert changes is not None
    held = deletes.keep_held("run-2", changes)
    kept = tmp_path / "checkpoint" / held["keys"]
    assert held == {"keys": "keys-run2.arrow", "files": [str(tmp_path / "out" / "part-0.parquet")]}
    if damage == "gone":
        kept.unlink()
    elif damage == "torn":
        kept.write_bytes(kept.read_bytes()[:100])
    read_output: list[int] = []
    read_files = RunDeletes._held_in_files

    def held_in_files(self: RunDeletes, *args: Any) -> Any:
        read_output.append(self.run)
        return read_files(self, *args)

    monkeypatch.setattr(RunDeletes, "_held_in_files", held_in_files)
    for run, present, changed, deleted in ((3, range(1, 11), [4], []), (4, range(1, 10), [], [10])):
        deletes = RunDeletes(run, SCHEMA, deletes.committer, deletes.sink, checkpoint, held)
        deletes.find(cast(SplitEnumerator[Any, Any], Counting(list(present), changed)))
        changes = deletes.applied(f"run-{run}")
        assert changes is not None and changes.deleted.column("id").to_pylist() == deleted
        held = deletes.keep_held(f"run-{run}", changes)
        if run == 3:
            assert read_output == ([] if damage == "none" else [3])
            assert held["keys"] == ("keys-run2.arrow" if damage == "none" else "keys-run3.arrow")
    assert read_output == ([] if damage == "none" else [3]) and held["keys"] == "keys-run4.arrow"
