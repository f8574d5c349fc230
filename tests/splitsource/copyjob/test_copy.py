"""``splitsource copy`` and ``verify`` as a user runs them: a subprocess, killed with SIGKILL and run again."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from splitsource._fs import Location

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CLI = [sys.executable, "-m", "splitsource.cli"]
GEN = ["--connector", "generator", "-o", "rows=60000", "-o", "split_rows=4000", "-o", "batch_rows=500",
       "-o", "fetch_delay_ms=40", "-o", "columns=id:bigint,name:string?,score:double,at:timestamp"]


def run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


DATA_SUFFIXES = (".parquet", ".jsonl", ".csv")


def only_data_files(out: Path) -> bool:
    """Whether every file under ``out`` is a finished part file: DuckDB's ``'out/**'`` and Polars'
    ``read_parquet(out)`` read every file there, whatever its name."""
    return all(p.name.startswith("part-") and p.name.endswith(DATA_SUFFIXES) for p in out.rglob("*") if p.is_file())


def committed_rows(out: Path | str) -> int:
    """The rows the copy's commits hold so far (``out``: a local path or an ``s3://`` URI), over all its runs (an
    incremental copy commits each run as a query of its own)."""
    from splitsource.sink import BucketingGlobalCommitter, PartNames
    from splitsource.sink._committer import metadata_location

    store, base, meta = metadata_location(str(out))
    if not store.exists(f"{meta}/log"):
        return 0
    committer = BucketingGlobalCommitter(store, base, PartNames(), meta=meta)
    newest = {r.write_id: r.total_rows for r, _ in committer.records() if r.kind == "stream"}
    return sum(newest.values())


def _polled_rows(out: Path | str) -> int:
    """:func:`committed_rows` as a poll while a copy runs: a read the store fails (an S3 server under load cut a
    response short, once in ten runs) is a poll that saw nothing new, and the next poll reads again."""
    try:
        return committed_rows(out)
    except OSError:
        return -1


def generated_ids(out: Path) -> list[int]:
    """The ids in the output, sorted, read by pyarrow: the generator's ids are its row numbers 0..rows-1."""
    import pyarrow.dataset as ds

    return sorted(ds.dataset(out, format="parquet", exclude_invalid_files=False).to_table(columns=["id"])["id"]
                  .to_pylist())


def finished(out: Path) -> dict[str, float]:
    return {str(p.relative_to(out)): p.stat().st_mtime for p in out.rglob("*")
            if p.is_file() and not any(s.startswith(("_", ".")) for s in p.relative_to(out).parts)}


KILL_POINTS = Path(__file__).with_name("kill_points.py")


def kill_and_rerun(args: list[str], out: Path | str, kills: int, seed: int, deadline_s: float = 240.0,
                   watch: Callable[[], object] | None = None,
                   coordinator_alone: Callable[[int], bool] = lambda kill: False,
                   points: Sequence[str] | None = None) -> str:
    """Run the copy ``kills`` times, each SIGKILLed at a named point of the second batch that run handles (its
    first commits: :mod:`tests.splitsource.copyjob.kill_points`), the points (all, or ``points``) taken in turn
    from a shuffle seeded by ``seed``; then run it to the end. The kills for which ``coordinator_alone`` says so
    hit the copy's own process only, leaving its workers (and a Spark engine's JVM) to notice by themselves; the
    next run waits until no process of the killed group is left. A copy held at a point cannot finish, so every
    kill lands in a running copy however fast or slow the machine; a plan with too few batches for the kills fails
    the test by name. Returns the final run's stdout after checking it read exactly what was not committed before
    it, and that every kill left rows uncommitted."""
    from tests.splitsource.copyjob.kill_points import POINTS

    rng = random.Random(seed)
    named = tuple(points or POINTS)
    order = [p for _ in range(kills // len(named) + 1) for p in rng.sample(named, len(named))][:kills]
    left_at_kill = []  # rows committed right after each kill: each must leave work for a later run
    for kill, point in enumerate(order):
        kill_at(args, point, deadline_s=deadline_s, watch=watch, alone=coordinator_alone(kill),
                label=f"kill {kill + 1}")
        left_at_kill.append(committed_rows(out))
    before = committed_rows(out)
    final = run(args)
    assert final.returncode == 0, final.stderr[-3000:]
    this_run = int(re.search(r"this run: ([\d,]+) rows", final.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    total = int(re.search(r"copy finished: ([\d,]+) rows", final.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert this_run == total - before, "the re-run read committed splits again (or skipped some)"
    assert 0 < before, "the kills left nothing committed: they did not land mid-copy"
    late = [k + 1 for k, rows in enumerate(left_at_kill) if rows >= total]
    assert not late, f"kill(s) {late} landed after the last commit (in the copy's shutdown): they proved nothing"
    return final.stdout


def kill_at(args: list[str], point: str, *, env: dict[str, str] | None = None, deadline_s: float = 240.0,
            watch: Callable[[], object] | None = None, alone: bool = False, label: str = "the kill") -> None:
    """Run ``splitsource args`` held at ``point`` of the second batch it handles (its first commits:
    :mod:`tests.splitsource.copyjob.kill_points`) and SIGKILL it there: its process group, or with ``alone`` its
    own process only, waiting until the processes it left (workers, a JVM) end by themselves. ``watch`` is called
    while it waits and at the instant of the kill."""
    with tempfile.TemporaryDirectory() as gate:
        proc = subprocess.Popen([sys.executable, str(KILL_POINTS), gate, point, *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, env=env)
        deadline = time.monotonic() + deadline_s
        while not (Path(gate) / "reached").exists():
            if watch is not None:
                watch()
            if proc.poll() is not None:
                raise AssertionError(
                    f"{label}: the copy exited ({proc.returncode}) before reaching {point!r} of its second batch: "
                    f"{proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
            assert time.monotonic() < deadline, f"{label}: {point!r} not reached within {deadline_s}s"
            time.sleep(0.02)
        if watch is not None:
            watch()  # what the test looks for at the instant of the kill
        if alone:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            _wait_for_group_to_end(proc.pid, label)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def _wait_for_group_to_end(group: int, label: str, timeout: float = 120.0) -> None:
    """The processes the killed coordinator left (workers, a JVM) must end by themselves."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            os.killpg(group, signal.SIGKILL)
            raise AssertionError(f"{label}: the copy's processes outlived its coordinator by {timeout:.0f}s")
        time.sleep(0.1)


def test_generator_copy_killed_many_times_ends_exact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", *GEN, "--output", str(out), "--max-splits-per-batch", "2", "--quiet"]
    stdout = kill_and_rerun(args, out, kills=4, seed=7)
    assert "copy finished: 60,000 rows" in stdout
    assert generated_ids(out) == list(range(60_000)), "not every row the generator made is in the output once"
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    assert (out.with_name(out.name + ".bucketing") / "_SUCCESS").exists()
    assert only_data_files(out), "the output holds files that are not data: DuckDB and Polars would read them"
    assert not list(out.rglob("*.in-progress")) and not list(out.rglob("*.pending"))


def test_a_quiet_spark_copy_prints_nothing_to_stderr_and_the_jvm_s_own_lines_still_pass(tmp_path: Path) -> None:
    """The driver JVM prints Java's incubator-module warning at every start, whatever its logging says; the copy
    leaves that one line out and passes on every other line the JVM prints (here Spark's logging banner, which a
    user's own driver options bring back: they replace the copy's quiet logging settings)."""
    small = ["--connector", "generator", "-o", "rows=2000", "--quiet"]
    quiet = run(["copy", *small, "--output", str(tmp_path / "quiet")])
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--driver-java-options -Dsplitsource.test=1 pyspark-shell"}
    loud = subprocess.run([*CLI, "copy", *small, "--output", str(tmp_path / "loud")], capture_output=True, text=True,
                          timeout=300, env=env)
    assert loud.returncode == 0, loud.stderr
    assert "Using Spark's default log4j profile" in loud.stderr and "incubator" not in loud.stderr, loud.stderr


def test_copy_to_json_lines_verifies_and_a_tampered_output_does_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # the local engine: the Spark engine's JSON lines are tested with Cassandra (test_cassandra_copy.py)
    result = run(["copy", *GEN, "--engine", "local", "--output", str(out), "--format", "jsonl",
                  "--max-splits-per-batch", "5"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "copy finished: 60,000 rows" in result.stdout and str(out) in result.stdout
    assert "splits" in result.stderr  # progress lines when not on a terminal
    assert run(["verify", *GEN, "--output", str(out)]).returncode == 0
    victim = sorted(out.glob("part-*.jsonl"))[0]
    lines = victim.read_text().splitlines()
    victim.write_text("\n".join(lines[:-1] + [lines[0]]) + "\n")  # one row lost, one duplicated
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 1 and check.stdout.startswith("MISMATCH")
    assert "different rows" in check.stdout


def test_a_finished_copy_rerun_reads_nothing_and_bad_checkpoints_never_touch_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = ["copy", *GEN[:4], "--output", str(out), "--quiet"]
    assert run(base).returncode == 0
    files = finished(out)
    again = run(base)
    assert again.returncode == 0 and "this run: 0 rows" in again.stdout, again.stdout + again.stderr
    assert finished(out) == files
    checkpoint = Path(f"{out}.checkpoint")
    identity = checkpoint / "splitsource-copy.json"

    def refused(result: subprocess.CompletedProcess[str], expected: str) -> None:
        assert result.returncode == 1, result.stdout + result.stderr
        message = result.stderr.strip().splitlines()[-1]
        assert message.startswith("splitsource copy:") and expected in message, message
        assert "Traceback" not in result.stderr
        assert finished(out) == files

    # another copy (other rows) into the same checkpoint
    refused(run(["copy", "--connector", "generator", "-o", "rows=5", "--output", str(out), "--quiet"]),
            "belongs to another copy (it differs in: identity, source;")
    # the checkpoint's identity file damaged
    original = identity.read_bytes()
    identity.write_text("{not json")
    refused(run(base), "is corrupt")
    identity.write_bytes(original)
    # the newest offset damaged; a finished copy's re-run does not start the engine (finished.json), so the marker
    # goes too: the engine must then refuse the checkpoint
    (checkpoint / "finished.json").unlink()
    offsets = checkpoint / "spark" / "offsets"
    newest = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    newest.write_text('{"version": 99}')
    refused(run(base), "checkpoint")


def test_a_finished_copy_rerun_starts_no_engine_until_the_output_changes(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from splitsource import copy
    from splitsource._names import FINISHED_FILE

    out = str(tmp_path / "out")
    options = {"rows": "3000", "split_rows": "1000"}
    first = copy("generator", options, out, engine="local", workers=1)
    assert first.rows == 3000 and first.splits == 3
    from splitsource.copyjob._local import LocalEngine

    started: list[str] = []
    real_run = LocalEngine.run

    def run(self: LocalEngine, run: object) -> object:
        started.append(self.name)
        return real_run(self, run)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalEngine, "run", run)
    again = copy("generator", options, out, engine="local", workers=1)
    assert started == [], "a finished copy's re-run must not start an engine (for Spark: a JVM)"
    assert (again.rows, again.total_rows, again.splits, again.batches) == (0, 3000, 3, 0)
    # a marker that no longer matches the output's newest commit (here: another token) is not trusted
    marker = Path(f"{out}.checkpoint") / FINISHED_FILE
    marker.write_text(marker.read_text().replace('"token": "', '"token": "x'))
    third = copy("generator", options, out, engine="local", workers=1)
    assert started == ["local"] and (third.rows, third.total_rows) == (0, 3000)


@pytest.mark.parametrize("args, expected", [
    (["--connector", "generator", "-o", "rowz=5"], "unknown option 'rowz'"),
    (["--connector", "nosuch"], "nosuch"),
    (["--connector", "generator", "--format", "xml"], "option 'format'"),
    (["--connector", "generator", "--bucketer", "columns"], "bucket_columns"),
])
def test_invalid_options_exit_2_with_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = run(["copy", *args, "--output", str(tmp_path / "out")])
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() or finished(tmp_path / "out") == {}


def test_splitsource_debug_adds_the_stack_above_the_one_line(tmp_path: Path) -> None:
    args = ["copy", "--connector", "generator", "-o", "rowz=5", "--output", str(tmp_path / "out")]
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "SPLITSOURCE_DEBUG": "1"})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and lines[0].startswith("Traceback") and "_typed_options.py" in result.stderr
    assert lines[-1].startswith("splitsource copy: ") and "unknown option 'rowz'" in lines[-1], result.stderr


def test_help_shows_an_example_and_the_installed_connectors() -> None:
    result = run(["copy", "--help"])
    assert result.returncode == 0 and "splitsource copy --connector cassandra" in result.stdout
    flat = " ".join(result.stdout.split())
    assert "an installed connector (cassandra, generator, postgres, sqlite) or module:Class" in flat, flat


def test_copy_from_python_returns_the_summary(tmp_path: Path, spark: Any) -> None:
    import splitsource

    summary = splitsource.copy("generator", {"rows": "3000", "split_rows": "1000"}, str(tmp_path / "out"),
                               format="parquet", spark=spark)
    assert summary.total_rows == 3000 and summary.rows == 3000 and summary.splits == 3 and summary.files >= 1
    assert summary.checkpoint == f"{tmp_path / 'out'}.checkpoint"
    assert spark.read.parquet(str(tmp_path / "out")).count() == 3000


def test_a_spark_copy_s_tasks_fill_every_core_of_each_wave(tmp_path: Path, spark: Any) -> None:
    """Five splits whose by-size packing makes three tasks (2 + 2 + 1 splits) run as four on two cores: the third
    task would run alone in a second wave, with a core idle."""
    import pyarrow.parquet as pq

    import splitsource
    from connectors.generator import GeneratorSource

    options = {"rows": "5000", "split_rows": "1000"}
    size = GeneratorSource(options).create_enumerator(None).next_split().estimated_size_bytes  # type: ignore
    assert spark.sparkContext.defaultParallelism == 2
    summary = splitsource.copy("generator", {**options, "partition_size_mb": str(size * 2.5 / 2**20)},
                               str(tmp_path / "out"), spark=spark)
    files = sorted((tmp_path / "out").glob("*.parquet"))
    assert summary.splits == 5 and summary.files == len(files) == 4  # one file per task; by size: three
    assert sorted(pq.ParquetFile(f).metadata.num_rows for f in files) == [1000, 1000, 1000, 2000]


def test_root_cause_is_the_line_a_user_needs() -> None:
    from splitsource.copyjob._failures import root_cause

    ours = "[STREAM_FAILED] Query terminated\nTraceback (most recent call last):\n  File \"x.py\", line 1\n" \
           "connectors.cassandra._errors.CassandraConnectionError: cannot reach Cassandra at 10.0.0.1:9042\n"
    assert root_cause(Exception(ours)) == "cannot reach Cassandra at 10.0.0.1:9042"
    worker = "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_EXCEPTION] An exception was " \
             "thrown from the Python worker: Traceback (most recent call last):\n  File \"w.py\", line 9, in write\n" \
             "    self._writer.write_batch(batch)\npyarrow.lib.ArrowInvalid: Invalid UTF8 payload\n SQLSTATE: 38000"
    assert root_cause(Exception(worker)) == "ArrowInvalid: Invalid UTF8 payload"
    assert root_cause(Exception("[CANNOT_OPEN] cannot open /x\n\tat org.apache.Foo")) == "[CANNOT_OPEN] cannot open /x"


def test_a_failure_is_told_in_its_first_line_and_logged_whole(tmp_path: Path) -> None:
    """A driver's message carries the query and a caret line after its first: the error is the first line, with
    where the whole text went."""
    from splitsource._fs import locate
    from splitsource.copyjob._failures import failure

    driver = ("reading split(s) range-0 failed: ERROR:  syntax error at or near \"=\"\nLINE 1: ...WHERE (a = = 1)\n"
              "                  ^\n\nQuery was: SELECT a FROM t WHERE (a = = 1)")
    error = failure(driver, "the stacks\n" + driver, locate(str(tmp_path)))
    log = tmp_path / "splitsource-copy-error.log"
    assert str(error) == f'reading split(s) range-0 failed: ERROR:  syntax error at or near "=" (details: {log})'
    assert log.read_text() == "the stacks\n" + driver


def test_copy_is_handed_an_engine_object_and_closes_it(tmp_path: Path) -> None:
    """An engine is an object with one small interface (name, check_storage, run, close): copy() runs the one it
    is handed, as it runs the one it names, and closes it at the end, failed or not."""
    from splitsource import SplitSourceError, copy
    from splitsource.copyjob import Engine, LocalEngine

    calls: list[str] = []

    class Watched(LocalEngine):
        def check_storage(self, places: list[tuple[str, Location]]) -> None:
            calls.append("check " + ",".join(what.split()[0] for what, _ in places))

        def close(self) -> None:
            calls.append("close")

    engine: Engine = Watched(workers=1)
    summary = copy("generator", {"rows": "2000", "split_rows": "500"}, str(tmp_path / "out"), engine=engine)
    assert (summary.rows, summary.splits) == (2000, 4) and calls == ["check output,checkpoint", "close"]
    calls.clear()
    with pytest.raises(SplitSourceError):
        copy("generator", {"rows": "10", "fail_at_row": "5", "fail_kind": "fatal"}, str(tmp_path / "other"),
             engine=engine)
    assert calls == ["check output,checkpoint", "close"]
