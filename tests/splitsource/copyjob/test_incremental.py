"""Incremental copies without a server: the generator grows between runs, and each run copies the rows added since the
one before, exactly once, on both engines, killed or not; the refusals come in one line."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from splitsource import OptionsError, copy
from tests.splitsource.copyjob.test_copy import committed_rows, kill_and_rerun, run

RUN, CHANGE = "_splitsource_run", "_splitsource_change"


def gen(rows: int, **extra: str) -> list[str]:
    """The generator grown to ``rows``: 100 rows and the rest appended (which a copy's identity leaves out)."""
    options = {"rows": 100, "appended": rows - 100, "split_rows": 500, "batch_rows": 250,
               "columns": "id:bigint,name:string?", **extra}
    return ["--connector", "generator", *[a for k, v in options.items() for a in ("-o", f"{k}={v}")]]


def copy_args(rows: int, out: Path, *engine: str) -> list[str]:
    return ["copy", *gen(rows), "--output", str(out), "--incremental", "--quiet", "--max-splits-per-batch", "2",
            *(engine or ("--engine", "local", "--workers", "2"))]


def marked_rows(out: Path) -> Counter[tuple[int, int, str]]:
    """(id, run, change) of every row in the files, read by pyarrow."""
    table = ds.dataset(out, format="parquet").to_table(columns=["id", RUN, CHANGE])
    return Counter(zip(*(table[c].to_pylist() for c in ("id", RUN, CHANGE)), strict=True))


def test_each_run_copies_the_rows_added_since_the_one_before_and_verify_matches(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run(copy_args(3000, out))
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("run 1 of an incremental copy, at key=2999: a full copy"), first.stdout
    second = run(copy_args(4200, out))
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == ("run 2 of an incremental copy, at key=4199: 1,200 rows added since "
                                            "run 1 (key=2999)"), second.stdout
    assert "copy finished: 4,200 rows" in second.stdout
    assert marked_rows(out) == Counter({**{(i, 1, "upsert"): 1 for i in range(3000)},
                                        **{(i, 2, "upsert"): 1 for i in range(3000, 4200)}})
    nothing = run(copy_args(4200, out))
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.strip() == (f"run 3: nothing changed since run 2 (key=4199): nothing committed; 4,200 rows "
                                      f"in {out}")
    assert committed_rows(out) == 4200
    verified = run(["verify", *gen(4200), "--output", str(out)])
    assert verified.returncode == 0 and verified.stdout.startswith("MATCH: source 4,200 rows"), verified.stdout
    # verify takes each key's newest version: a source that moved on since is a mismatch
    grown = run(["verify", *gen(4300), "--output", str(out)])
    assert grown.returncode == 1 and "100 row(s) of the source are not in the output" in grown.stdout, grown.stdout
    assert json.loads((out.parent / "out.checkpoint" / "finished.json").read_text())["run"] == 3


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_run_killed_at_every_point_resumes_and_copies_each_new_row_once(tmp_path: Path, engine: str) -> None:
    out = tmp_path / "out"
    options = ["--engine", "local", "--workers", "2"] if engine == "local" else ["--engine", "spark"]
    assert run(copy_args(2000, out, *options)).returncode == 0
    # run 2 reads 6,000 new rows in 6 batches of 2 splits: each kill leaves some of them committed
    final = kill_and_rerun(copy_args(8000, out, *options), out, kills=4, seed=54)
    assert final.splitlines()[0].startswith("run 2 of an incremental copy, at key=7999: 6,000 rows added"), final
    assert marked_rows(out) == Counter({**{(i, 1, "upsert"): 1 for i in range(2000)},
                                        **{(i, 2, "upsert"): 1 for i in range(2000, 8000)}})


def test_a_first_run_killed_and_resumed_is_still_run_1_and_the_next_starts_where_it_ended(tmp_path: Path) -> None:
    out = tmp_path / "out"
    kill_and_rerun(copy_args(6000, out), out, kills=2, seed=1)
    second = run(copy_args(6500, out))
    assert second.stdout.splitlines()[0].startswith("run 2 of an incremental copy, at key=6499: 500 rows added "
                                                    "since run 1 (key=5999)"), second.stdout
    assert sorted(i for i, _, _ in marked_rows(out)) == list(range(6500))


def test_incremental_refusals_are_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run(["copy", *gen(1000), "--output", str(out), "--engine", "local", "--quiet"]).returncode == 0
    refused = run(copy_args(1000, out))  # a copy made without --incremental does not become one
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "was made by a copy without --incremental" in refused.stderr
    cassandra = run(["copy", "--connector", "cassandra", "-o", "keyspace=k", "-o", "table=t", "--output",
                     str(tmp_path / "c"), "--incremental"])  # refused before any connection is tried
    assert cassandra.returncode == 2 and "a cell's writetime is not a change record" in cassandra.stderr
    assert cassandra.stderr.count("\n") == 1
    with pytest.raises(OptionsError, match="option 'since' is what an incremental copy sets itself"):
        copy("generator", {"since": '{"rows": 3}'}, str(tmp_path / "s"), engine="local", incremental=True)
    bad = run(["copy", *gen(1000), "-o", "since=[1]", "--output", str(tmp_path / "b"), "--engine", "local"])
    assert bad.returncode == 2 and re.search(r"option 'since'", bad.stderr), bad.stderr
    deletes = run(["copy", *gen(1000), "--no-deletes", "--output", str(tmp_path / "d"), "--engine", "local"])
    assert deletes.returncode == 2 and deletes.stderr.count("\n") == 1, deletes.stderr
    assert "--no-deletes: only an incremental copy's runs delete keys" in deletes.stderr
    assert not (tmp_path / "d").exists()
    shrunk = run(copy_args(500, tmp_path / "g"))
    assert shrunk.returncode == 0
    again = run(copy_args(400, tmp_path / "g"))
    assert again.returncode == 2 and "a generator's rows only grow" in again.stderr, again.stderr
    other = run(["copy", *gen(500, seed="7"), "--output", str(tmp_path / "g"), "--incremental", "--quiet",
                 "--engine", "local"])  # another seed: another source, however many rows it grew by
    assert other.returncode == 1 and "belongs to another copy (it differs in: identity, source" in other.stderr


@pytest.mark.usefixtures("pyiceberg_planner")
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_an_append_only_source_adds_each_runs_rows_to_a_table(tmp_path: Path, fmt: str) -> None:
    """A table output's rows carry no run or change columns: an append-only source's runs add their rows, and a run
    with nothing new makes no table commit."""
    from splitsource.sink import parse_sink_options
    from tests.fixtures import polars_table

    out = tmp_path / "table"
    for rows in (1500, 2600, 2600):
        done = run([*copy_args(rows, out), "--table-format", fmt])
        assert done.returncode == 0, done.stderr
        if rows == 2600 and "nothing committed" not in done.stdout:
            committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
            assert committer.table is not None
            versions = len(committer.table.history(committer))
    frame = polars_table(out, fmt)
    assert frame.columns == ["id", "name"] and sorted(frame["id"].to_list()) == list(range(2600))
    assert len(committer.table.history(committer)) == versions


def test_a_runs_commit_log_reads_do_not_grow_with_the_runs_before_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An hourly copy's runs are thousands: a run asks the commit log of its own run alone (the runs before are
    counted in the last finished run's marker), and its totals stay exact, from an older marker too."""
    from splitsource.sink._committer import BucketingGlobalCommitter

    asked: list[str] = []
    query_rows = BucketingGlobalCommitter.query_rows
    monkeypatch.setattr(BucketingGlobalCommitter, "query_rows",
                        lambda self, query_id: asked.append(query_id) or query_rows(self, query_id))
    out, per_run, previous = tmp_path / "out", [], 0
    for n, rows in enumerate((300, 400, 550, 700, 800), start=1):
        asked.clear()
        done = copy("generator", {"rows": "100", "appended": str(rows - 100), "columns": "id:bigint"}, out,
                    engine="local", workers=1, incremental=True)
        assert (done.run, done.total_rows, done.run_rows) == (n, rows, rows - previous), done
        per_run.append(len(set(asked)))
        previous = rows
        if n == 4:  # a marker written before it counted the rows: the runs are asked once, then counted again
            marker = out.parent / "out.checkpoint" / "finished.json"
            marker.write_text(json.dumps({k: v for k, v in json.loads(marker.read_text()).items() if k != "rows"}))
    assert per_run[1] == per_run[2] == 1, per_run  # run 2 on: its own query id alone
    assert per_run[4] == 5, per_run  # after the old marker: runs 1 to 5
    assert committed_rows(out) == 800
