"""``splitsource copy --engine local``: worker processes, no JVM; the same exactly-once protocol as the Spark engine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.splitsource.copyjob.test_copy import (
    CLI,
    committed_rows,
    finished,
    generated_ids,
    kill_and_rerun,
    only_data_files,
    run,
)

pytestmark = [pytest.mark.slow]
# about 5 s a run: 120 fetches of 80 ms over 2 workers, in batches of 2 splits
GEN = ["--connector", "generator", "-o", "rows=60000", "-o", "split_rows=4000", "-o", "batch_rows=500",
       "-o", "fetch_delay_ms=80", "-o", "columns=id:bigint,name:string?,score:double,at:timestamp"]
LOCAL = ["--engine", "local", "--workers", "2"]


def rows_this_run(stdout: str) -> int:
    return int(re.search(r"this run: ([\d,]+) rows", stdout).group(1).replace(",", ""))  # type: ignore[union-attr]


def test_local_copy_killed_many_times_ends_exact_and_never_rereads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", *GEN, *LOCAL, "--output", str(out), "--max-splits-per-batch", "2", "--quiet"]
    stdout = kill_and_rerun(args, out, kills=5, seed=3)
    assert "copy finished: 60,000 rows" in stdout
    assert generated_ids(out) == list(range(60_000)), "not every row the generator made is in the output once"
    assert 0 < rows_this_run(stdout) < 60_000, "the kills should have left part of the copy to the last run"
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    assert (out.with_name(out.name + ".bucketing") / "_SUCCESS").exists()
    assert only_data_files(out), "the output holds files that are not data: DuckDB and Polars would read them"
    assert not list(out.rglob("*.in-progress")) and not list(out.rglob("*.pending"))
    offsets = sorted((tmp_path / "out.checkpoint" / "local" / "offsets").iterdir())
    assert len(offsets) == 2, "offsets are pruned down to the last two (a rolled-back commit replays from the first)"


def test_the_summary_counts_one_of_a_thing_in_the_singular(tmp_path: Path) -> None:
    one = ["--connector", "generator", "-o", "rows=1", "-o", "split_rows=1", "-o", "columns=id:bigint"]
    done = run(["copy", *one, *LOCAL, "--output", str(tmp_path / "out"), "--quiet"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "copy finished: 1 row in 1 file (" in done.stdout and "), 1 split\n" in done.stdout, done.stdout
    assert "this run: 1 row in 1 batch, " in done.stdout, done.stdout


def test_a_killed_worker_fails_the_copy_and_the_rerun_finishes_exact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", *GEN, *LOCAL, "--output", str(out), "--max-splits-per-batch", "4", "--quiet"]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    worker = None
    deadline = time.monotonic() + 60
    while worker is None or not list(out.rglob("*.in-progress")):  # a worker exists and is writing: mid-batch
        assert time.monotonic() < deadline and proc.poll() is None, "no worker started writing"
        found = subprocess.run(["pgrep", "-f", "-P", str(proc.pid), "splitsource.copyjob._worker"],
                               capture_output=True, text=True).stdout.split()
        worker = int(found[0]) if found else worker
        time.sleep(0.02)
    os.kill(worker, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "a worker process died (exit code -9)" in stderr.strip().splitlines()[-1], stderr[-2000:]
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-f", "-P", str(proc.pid), "splitsource.copyjob._worker"]).returncode != 1:
        assert time.monotonic() < deadline, "worker processes outlived the copy"
        time.sleep(0.05)
    before = committed_rows(out)
    final = run(args)
    assert final.returncode == 0, final.stderr[-2000:]
    assert rows_this_run(final.stdout) == 60_000 - before
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


def test_a_failing_split_is_one_line_and_commits_nothing_of_its_batch(tmp_path: Path) -> None:
    out = tmp_path / "out"
    gen = ["--connector", "generator", "-o", "rows=8000", "-o", "split_rows=1000", "-o", "fail_at_row=5500",
           "-o", "fail_kind=fatal"]
    result = run(["copy", *gen, *LOCAL, "--output", str(out), "--max-splits-per-batch", "2"])
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert re.search(r"reading split\(s\) range-5 failed: injected failure at row 5500 .*\(details: .*"
                     r"splitsource-copy-error.log\)$", line), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert committed_rows(out) == 4000  # batches 0 and 1 committed; batch 2 (splits 4, 5) not at all
    assert all(not f.startswith("_") for f in finished(out))
    assert "Traceback" in (tmp_path / "out.checkpoint" / "splitsource-copy-error.log").read_text()


def test_a_checkpoint_of_one_engine_is_refused_by_the_other(tmp_path: Path) -> None:
    out = tmp_path / "out"
    gen = ["--connector", "generator", "-o", "rows=2000"]
    assert run(["copy", *gen, *LOCAL, "--output", str(out), "--quiet"]).returncode == 0
    result = run(["copy", *gen, "--output", str(out), "--quiet"])
    assert result.returncode == 1
    assert "belongs to another copy (it differs in: engine" in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args, expected", [
    (["--engine", "local", "--master", "local[4]"], "--master is for --engine spark"),  # copy()'s refusal, in flags
    (["--workers", "3"], "--workers is for --engine local"),
    (["--engine", "local", "--workers", "-1"], "argument --workers: '-1' is not a number of processes from 0"),
    (["--engine", "local", "--workers", "257"], "argument --workers: '257' is not a number of processes from 0"),
])
def test_engine_flags_that_do_not_fit_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    result = run(["copy", "--connector", "generator", *args, "--output", str(tmp_path / "out")])
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("settings, named", [
    ({"engine": "local", "master": "local[4]"}, "option 'master' is for option 'engine' spark"),
    ({"engine": "local", "spark": object()}, "'local' runs without Spark"),
    ({"engine": "spark", "workers": 3}, "option 'workers' is for option 'engine' local"),
    ({"engine": "made", "workers": 3}, "option 'workers' is for an engine copy() makes by name"),
    ({"engine": "made", "master": "local[1]"}, "option 'master' is for an engine copy() makes by name"),
])
def test_copy_refuses_a_setting_its_engine_does_not_take(tmp_path: Path, settings: dict[str, Any],
                                                         named: str) -> None:
    import splitsource
    from splitsource import OptionsError
    from splitsource.copyjob import LocalEngine

    if settings["engine"] == "made":
        settings = {**settings, "engine": LocalEngine(workers=1)}
    with pytest.raises(OptionsError, match=re.escape(named)):
        splitsource.copy("generator", {"rows": "10"}, str(tmp_path / "out"), **settings)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("settings, named", [
    ({"workers": "2"}, "option 'workers': '2' is not a number of processes from 0 (one per core) to 256"),
    ({"workers": True}, "option 'workers': True is not a number of processes"),
    ({"lease_s": 0}, "option 'lease_s': 0 is not a number of seconds of at least 1"),
    ({"lease_s": "60"}, "option 'lease_s': '60' is not a number of seconds of at least 1"),
    ({"output": None}, "option 'output' None is not a path"),
])
def test_copy_refuses_a_setting_of_the_wrong_kind_in_one_line(tmp_path: Path, settings: dict[str, Any],
                                                              named: str) -> None:
    """As the command line refuses them: a TypeError from deep inside (workers="2"), an AttributeError (output=None)
    or a lease of 0 s, which any other copy could take over at once, were let through."""
    import splitsource
    from splitsource import OptionsError

    arguments: dict[str, Any] = {"output": str(tmp_path / "out"), "engine": "local", **settings}
    with pytest.raises(OptionsError, match=re.escape(named)):
        splitsource.copy("generator", {"rows": "10"}, **arguments)
    assert not (tmp_path / "out").exists()


def test_copy_takes_a_pathlib_path_for_its_output_and_checkpoint(tmp_path: Path) -> None:
    import splitsource

    summary = splitsource.copy("generator", {"rows": "10"}, tmp_path / "out", checkpoint=tmp_path / "cp",
                               engine="local")
    assert summary.rows == 10 and summary.checkpoint == str(tmp_path / "cp")
    assert sum(pq.read_metadata(p).num_rows for p in (tmp_path / "out").glob("*.parquet")) == 10


def test_workers_request_splits_one_at_a_time_and_write_one_file_each(tmp_path: Path) -> None:
    """Dynamic split assignment: both workers stay busy, progress moves split by split, and each worker writes
    one part file per batch (not one per split)."""
    import splitsource

    seen: list[tuple[int, int]] = []

    class Recorder:
        def update(self, splits: int, total: int, rows: int, final: bool = False) -> None:
            seen.append((splits, rows))

    summary = splitsource.copy(
        "generator", {"rows": "16000", "split_rows": "1000", "batch_rows": "250", "fetch_delay_ms": "20"},
        str(tmp_path / "out"), engine="local", workers=2, progress=Recorder(),  # type: ignore[arg-type]
    )
    assert (summary.total_rows, summary.splits, summary.batches, summary.files) == (16_000, 16, 1, 2)
    splits_seen = sorted({s for s, _ in seen})
    assert splits_seen[-1] == 16 and len(splits_seen) >= 12, seen  # progress after (nearly) every split
    assert [r for _, r in seen] == sorted(r for _, r in seen)


@pytest.mark.parametrize(("rows", "started"), [(1000, 1), (3000, 2)])
def test_workers_start_as_the_splits_need_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int,
                                              started: int) -> None:
    """One worker starts with the engine (its imports overlap the planning), the others when a batch has splits
    for them: a copy of one split starts one Python, whose second took the first one's CPU on 2 cores."""
    import splitsource
    from splitsource.copyjob import _worker

    workers: list[object] = []
    popen = subprocess.Popen

    def counted(args: list[str], **kwargs: object) -> object:
        workers.extend(["worker"] if "splitsource.copyjob._worker" in args else [])
        return popen(args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(_worker.subprocess, "Popen", counted)
    summary = splitsource.copy("generator", {"rows": str(rows), "split_rows": "1000"}, str(tmp_path / "out"),
                               engine="local", workers=2)
    assert (summary.total_rows, summary.splits) == (rows, rows // 1000)
    assert len(workers) == started


def test_the_command_line_starts_the_first_worker_early_and_ends_it_if_no_engine_takes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``splitsource copy --engine local`` starts a worker before it imports the copy, which the engine takes
    (one process for a one-split copy, not two); when the copy fails before it makes an engine, that worker is
    ended, not left to find its parent gone."""
    from splitsource import cli
    from splitsource.copyjob import _worker

    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def counted(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        proc = popen(args, **kwargs)  # type: ignore[call-overload]
        started.extend([proc] if "splitsource.copyjob._worker" in args else [])
        return proc  # type: ignore[no-any-return]

    monkeypatch.setattr(_worker.subprocess, "Popen", counted)
    assert cli.main(["copy", "--connector", "generator", "-o", "rows=1000", "-o", "split_rows=1000", "--output",
                     str(tmp_path / "out"), "--engine", "local", "--workers", "2", "--quiet"]) == 0
    assert len(started) == 1 and started[0].poll() is not None
    assert generated_ids(tmp_path / "out") == list(range(1000))
    started.clear()
    assert cli.main(["copy", "--connector", "generator", "-o", "plan_location=x", "--output", str(tmp_path / "other"),
                     "--engine", "local"]) == 2  # refused before an engine is made
    assert len(started) == 1 and started[0].returncode is not None, "the early worker outlived a failed copy"


@pytest.mark.parametrize(("rows", "code"), [("1000", 0), ("x", 2)], ids=["copied", "refused"])
def test_the_command_ends_as_an_exit_does_without_the_interpreters_teardown(tmp_path: Path, rows: str,
                                                                           code: int) -> None:
    """``splitsource`` (:func:`splitsource.cli.run`) skips the teardown of the modules, not what an exit does: a
    thread still working when the command returns is joined, an idle pool's thread is ended (as pyiceberg's are,
    after an Iceberg commit), the exit handlers run, what was printed is flushed, and the exit code is the
    command's."""
    script = (
        "import atexit, sys, threading, time\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from splitsource import cli\n"
        "idle = ThreadPoolExecutor(1)\n"
        "idle.submit(int).result()  # its thread waits for more work, never shut down\n"
        "returned, command = threading.Event(), cli.main\n"
        "def main(argv=None):\n"
        "    try:\n"
        "        return command(argv)\n"
        "    finally:\n"
        "        returned.set()\n"
        "cli.main = main\n"
        "def outlasts():\n"
        "    returned.wait()\n"
        "    time.sleep(0.3)  # still working when run() would end the process\n"
        "    print('thread done')\n"
        "threading.Thread(target=outlasts).start()\n"
        "atexit.register(lambda: print('exit handler ran'))\n"
        f"sys.argv = ['splitsource', 'copy', '--connector', 'generator', '-o', 'rows={rows}', '--output', "
        f"{str(tmp_path / 'out')!r}, '--engine', 'local', '--quiet']\n"
        "cli.run()\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    assert result.stdout.splitlines()[-2:] == ["thread done", "exit handler ran"], result.stdout
    assert (generated_ids(tmp_path / "out") == list(range(1000))) if code == 0 else not (tmp_path / "out").exists()


def test_a_checkpoint_cut_with_other_split_sizes_is_refused(tmp_path: Path) -> None:
    """Bug: the generator's identity left out its split sizing, so a resume with another split_rows passed the
    fingerprint check and read the remaining split indices as rows of another size (shifted rows)."""
    out = tmp_path / "out"
    first = ["--connector", "generator", "-o", "rows=20000", "-o", "split_rows=1000"]
    assert run(["copy", *first, *LOCAL, "--output", str(out), "--max-splits-per-batch", "1", "--quiet"]
               ).returncode == 0
    other = ["--connector", "generator", "-o", "rows=20000", "-o", "split_rows=3000"]
    again = run(["copy", *other, *LOCAL, "--output", str(out), "--quiet"])
    assert again.returncode == 1 and "belongs to another copy" in again.stderr, again.stdout + again.stderr
    assert "identity" in again.stderr or "source" in again.stderr


@pytest.mark.parametrize("field, value", [("plan", "not a digest"), ("plan", 7), ("taken", "many")])
def test_a_corrupt_local_offset_is_one_line_with_safe_advice(tmp_path: Path, field: str, value: str) -> None:
    import json

    out = tmp_path / "out"
    args = ["copy", "--connector", "generator", "-o", "rows=3000", "-o", "split_rows=1000", *LOCAL,
            "--output", str(out), "--quiet"]
    assert run(args).returncode == 0
    offsets = sorted((tmp_path / "out.checkpoint" / "local" / "offsets").iterdir())
    offset = json.loads(offsets[-1].read_text())
    offset[field] = value
    offsets[-1].write_text(json.dumps(offset))
    (tmp_path / "out.checkpoint" / "finished.json").unlink()  # else a finished copy's re-run reads no offset
    again = run(args)
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "offset cannot be read" in lines[0], lines
    assert "to start over, run the same copy with --overwrite" in lines[0]


def test_summary_json_tells_a_scheduler_what_happened(tmp_path: Path) -> None:
    import json

    out, report = tmp_path / "out", tmp_path / "summary.json"
    # two transient failures at row 2,500: each resumed from the split state
    done = run(["copy", "--engine", "local", "--quiet", "--connector", "generator", "-o", "rows=5000",
                "-o", "split_rows=1500", "-o", "fail_at_row=2500", "-o", "fail_times=2", "-o", "initial_backoff_ms=10",
                "--output", str(out), "--summary-json", str(report)])
    assert done.returncode == 0, done.stderr
    outcome = json.loads(report.read_text())
    assert outcome["status"] == "finished" and outcome["exit_code"] == 0 and outcome["engine"] == "local"
    assert outcome["total_rows"] == 5000 and outcome["splits"] == 4 and outcome["files"] >= 1
    assert outcome["bytes"] == sum(p.stat().st_size for p in out.rglob("*.parquet"))
    assert outcome["split_rows"] == {"range-0": 1500, "range-1": 1500, "range-2": 1500, "range-3": 500}
    assert outcome["retries"] == 2 and outcome["throttled_s"] == 0
    bad = run(["copy", "--engine", "local", "--connector", "generator", "-o", "rowz=5", "--output",
               str(tmp_path / "other"), "--summary-json", str(report)])
    assert bad.returncode == 2
    failed = json.loads(report.read_text())
    assert failed["status"] == "failed" and failed["exit_code"] == 2 and "rowz" in failed["error"]
    assert bad.stderr.count("\n") == 1 and "rowz" in bad.stderr


def test_a_copy_past_max_open_files_under_a_small_budget_killed_and_rerun_is_exact(tmp_path: Path) -> None:
    """9 buckets, 2 open files and a 0.2 MB budget per worker: most rows are sorted out and written as runs, which
    the kills leave behind mid-batch; the re-runs sweep them, and the copy ends with every row once and one file
    per bucket, worker and batch."""
    source = [*GEN[:-1], "columns=id:bigint,name:string?,f1:boolean?,f2:boolean?"]
    out = tmp_path / "out"
    args = ["copy", *source, *LOCAL, "--output", str(out), "--max-splits-per-batch", "4", "--bucketer", "columns",
            "--sink-option", "bucket_columns=f1,f2", "--sink-option", "max_open_files=2", "--sink-option",
            "buffer_mb=0.2", "--quiet"]
    runs_seen = []

    def runs_on_disk() -> bool:
        runs_seen.extend(p for p in out.glob("_part-*.in-progress"))  # runs live in the base directory
        return bool(runs_seen)

    stdout = kill_and_rerun(args, out, kills=3, seed=9, watch=runs_on_disk)
    assert runs_seen, "no sorted run was ever on disk: the cap and the budget were never passed"
    assert "copy finished: 60,000 rows" in stdout
    assert generated_ids(out) == list(range(60_000)), "not every row the generator made is in the output once"
    check = run(["verify", *source, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    assert not [p for p in out.rglob("*") if p.name.endswith((".in-progress", ".pending"))]
    buckets = {p.parent for p in out.rglob("*.parquet")}
    assert len(buckets) == 9
    # 15 splits in batches of 4: 4 batches, 2 workers
    assert max(len(list(b.glob("*.parquet"))) for b in buckets) <= 4 * 2, "more than one file per bucket, worker "\
        "and batch"


@pytest.mark.parametrize(("sink_option", "max_groups"), [([], None), (["--sink-option", "buffer_mb=256"], 1)])
def test_local_workers_default_to_a_small_buffer_unless_the_user_sets_one(tmp_path: Path, sink_option: list[str],
                                                                          max_groups: int | None) -> None:
    # 1,000,000 rows of 24 Arrow bytes (about 23 MiB) in one split: past the workers' default 16 MiB budget, and
    # within a 256 MiB one and within one row group's 1 Mi rows
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    gen = ["--connector", "generator", "-o", "rows=1000000", "-o", "split_rows=1000000",
           "-o", "columns=id:bigint,a:double,b:bigint"]
    done = run(["copy", *gen, *LOCAL, "--output", str(out), "--quiet", *sink_option])
    assert done.returncode == 0, done.stderr
    files = list(out.glob("*.parquet"))
    assert len(files) == 1 and pq.ParquetFile(files[0]).metadata.num_rows == 1_000_000
    groups = pq.ParquetFile(files[0]).metadata.num_row_groups
    if max_groups is None:
        assert groups > 1, "the workers' 16 MiB default should have written row groups before the end"
    else:
        assert groups == max_groups, "a user's buffer_mb must win over the local engine's default"
