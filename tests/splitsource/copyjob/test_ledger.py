"""The split ledger (rows per split of each committed batch, in the checkpoint) and what verify makes of it.

The Cassandra test that verify names the changed token ranges, on both engines, is in
``tests/connectors/cassandra/test_cassandra_copy.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from splitsource import copy
from splitsource._fs import locate
from splitsource.copyjob._ledger import read_ledger
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PartNames
from tests.splitsource.copyjob.test_copy import GEN, run

SOURCE = {"rows": "60000", "split_rows": "4000", "batch_rows": "500"}


def _ledger(out: Path) -> dict[str, Any] | None:
    import pyarrow.fs as pafs

    committer = BucketingGlobalCommitter(pafs.LocalFileSystem(), str(out), PartNames("part", ""))
    return read_ledger(locate(f"{out}.checkpoint"), committer.last_stream_batch)


def test_the_ledger_holds_every_split_with_its_true_rows(tmp_path: Path) -> None:
    out = tmp_path / "out"
    copy("generator", SOURCE, str(out), engine="local", workers=2, max_splits_per_batch=4)
    ledger = _ledger(out)
    assert ledger is not None
    # the generator's truth: split i holds rows [4000 i, 4000 (i + 1))
    assert {k: v.rows for k, v in ledger.items()} == {f"range-{i}": 4000 for i in range(15)}
    assert len(list((Path(f"{out}.checkpoint") / "splits").iterdir())) == 4  # one file per batch


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_commit_that_fails_after_the_ledger_write_leaves_nothing_counted_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, request: pytest.FixtureRequest) -> None:
    """The ledger file of batch 1 is written, then its commit record fails: the file is not counted (its batch did
    not commit); the re-run replays batch 1, rewrites its file and commits it. Both engines commit in this process
    (the Spark engine in its foreachBatch function, on the driver), so the fault is injected here."""
    out = tmp_path / "out"
    settings: dict[str, Any] = {"workers": 2} if engine == "local" else {"spark": request.getfixturevalue("spark")}
    real_commit = BucketingGlobalCommitter.commit
    failed: list[int] = []

    def commit(self: BucketingGlobalCommitter, record: Any) -> bool:
        if record.batch_id == 1 and not failed:
            failed.append(record.batch_id)
            assert (Path(f"{out}.checkpoint") / "splits" / f"{1:020d}.json").exists(), "no ledger before the commit"
            raise OSError("injected: the commit record cannot be written")
        return real_commit(self, record)

    monkeypatch.setattr(BucketingGlobalCommitter, "commit", commit)
    with pytest.raises(Exception, match="injected"):
        copy("generator", SOURCE, str(out), engine=engine, max_splits_per_batch=4, **settings)
    assert failed == [1], "the fault was not injected"
    ledger = _ledger(out)
    assert ledger is not None and sorted(ledger) == [f"range-{i}" for i in range(4)]  # batch 0 only
    copy("generator", SOURCE, str(out), engine=engine, max_splits_per_batch=4, **settings)
    ledger = _ledger(out)
    assert ledger is not None and sum(c.rows for c in ledger.values()) == 60_000 and len(ledger) == 15


def test_verify_tells_a_removed_file_from_a_changed_source(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run(["copy", *GEN, "--engine", "local", "--output", str(out), "--max-splits-per-batch", "5",
                "--quiet"]).returncode == 0
    victim = sorted(out.glob("part-*.parquet"))[0]
    import pyarrow.parquet as pq

    lost = pq.read_metadata(victim).num_rows
    victim.unlink()
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 1 and check.stdout.startswith("MISMATCH"), check.stdout + check.stderr
    assert f"the copy committed 60,000 rows, the output holds {60_000 - lost:,}" in check.stdout
    # without its ledger verify still answers, and says why it names no split
    moved = tmp_path / "elsewhere"
    check = run(["verify", *GEN, "--output", str(out), "--checkpoint", str(moved)])
    assert check.returncode == 1 and "no per-split counts: checkpoint" in check.stdout, check.stdout
