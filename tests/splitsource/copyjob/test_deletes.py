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
    return RunDeletes(2, ["id"], SCHEMA, committer, sink, locate(str(checkpoint)))


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
