"""``splitsource copy`` misused as users do: two copies at once, a second copy into an owned output, checkpoints
moved or damaged, ordinary mistakes and interruptions. Never a duplicate row, always one line that says what to do,
and following that advice ends in an exact output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.splitsource.copyjob.test_copy import CLI, committed_rows, run

pytestmark = [pytest.mark.slow]
SLOW_GEN = ["--connector", "generator", "-o", "rows=40000", "-o", "split_rows=2000", "-o", "batch_rows=500",
            "-o", "fetch_delay_ms=30"]
GEN = ["--connector", "generator", "-o", "rows=6000", "-o", "split_rows=1000"]
LOCAL = ["--engine", "local", "--workers", "2"]


def our_lines(stderr: str) -> list[str]:
    """The lines a copy printed (the driver JVM's incubator warning included, should it come back: the copy leaves
    it out)."""
    return [line for line in stderr.splitlines() if line.strip()]


def one_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    lines = our_lines(result.stderr)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def verify_ok(out: Path, source: list[str] = GEN) -> None:
    check = run(["verify", *source, "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr


def race(args: list[str]) -> list[subprocess.CompletedProcess[str]]:
    procs = [subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outcomes = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        outcomes.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return outcomes


@pytest.mark.parametrize("engine, trials", [("local", 10), ("spark", 1)])
def test_two_copies_started_together_never_duplicate_a_row(tmp_path: Path, engine: str, trials: int) -> None:
    """Ten trials for the local engine. The lock is taken before either engine starts, so the race is the same for
    both: one trial shows the Spark engine's copy takes it too (a trial starts a JVM, about 30 s under the suite's
    load); SPLITSOURCE_RACE_TRIALS=10 runs ten of each."""
    trials = int(os.environ.get("SPLITSOURCE_RACE_TRIALS", trials))
    engine_args = LOCAL if engine == "local" else []
    for trial in range(trials):
        out = tmp_path / f"out{trial}"
        outcomes = race(["copy", *SLOW_GEN, *engine_args, "--output", str(out), "--quiet"])
        codes = sorted(o.returncode for o in outcomes)
        assert codes == [0, 1], [(o.returncode, o.stderr[-500:]) for o in outcomes]
        loser = next(o for o in outcomes if o.returncode == 1)
        one_line(loser, 1, "is in use by another copy: pid", "wait for it to finish")
        winner = next(o for o in outcomes if o.returncode == 0)
        assert "copy finished: 40,000 rows" in winner.stdout
        verify_ok(out, SLOW_GEN)
        assert not (out.with_name(out.name + ".bucketing") / "lock.json").exists(), "the winner left its lock behind"


def test_an_output_owned_by_another_copy_is_refused_and_each_advice_ends_exact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = ["copy", *GEN, *LOCAL, "--output", str(out), "--quiet"]
    assert run(first).returncode == 0
    before = sorted(p.name for p in out.rglob("part-*"))

    for extra in (["--checkpoint", str(tmp_path / "new.ckpt")],
                  ["--checkpoint", str(tmp_path / "new2.ckpt"), "--format", "jsonl"]):
        line = one_line(run([*first, *extra]), 1, f"output {out} belongs to another copy",
                        f"resume it with --checkpoint {out}.checkpoint", "--overwrite")
        assert "Traceback" not in line
    assert sorted(p.name for p in out.rglob("part-*")) == before, "a refused copy touched the output"
    assert not (tmp_path / "new.ckpt").exists(), "a refused copy left a checkpoint behind"

    # the checkpoint moved aside (as an old message advised): refused, and resuming with it works
    moved = tmp_path / "moved.ckpt"
    shutil.move(str(out) + ".checkpoint", moved)
    one_line(run(first), 1, f"belongs to a copy whose checkpoint {out}.checkpoint is not there any more",
             "resume it with --checkpoint where that checkpoint is now", "--overwrite")
    assert run([*first, "--checkpoint", str(moved)]).returncode == 0
    verify_ok(out)

    # the output deleted, the checkpoint kept: resuming would skip rows; refused
    shutil.rmtree(out)
    one_line(run([*first, "--checkpoint", str(moved)]), 1, "no longer holds that copy", "--overwrite")
    # advice: --overwrite starts over, exact
    result = run([*first, "--checkpoint", str(moved), "--overwrite"])
    assert result.returncode == 0 and "copy finished: 6,000 rows" in result.stdout, result.stderr
    verify_ok(out)

    # another format into the same output, with --overwrite: one format, exact
    result = run([*first, "--checkpoint", str(tmp_path / "jsonl.ckpt"), "--format", "jsonl", "--overwrite"])
    assert result.returncode == 0, result.stderr
    assert {p.suffix for p in out.rglob("part-*")} == {".jsonl"}
    verify_ok(out)


def test_a_checkpoint_that_lost_its_local_state_never_starts_a_second_copy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", *GEN, *LOCAL, "--output", str(out), "--quiet", "--max-splits-per-batch", "2"]
    assert run(args).returncode == 0
    shutil.rmtree(tmp_path / "out.checkpoint" / "local")
    result = run(args)
    assert result.returncode != 0 or "this run: 0 rows" in result.stdout, result.stdout + result.stderr
    assert committed_rows(out) == 6000
    verify_ok(out)


def test_a_corrupt_identity_file_is_refused_and_overwrite_starts_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", *GEN, *LOCAL, "--output", str(out), "--quiet"]
    assert run(args).returncode == 0
    (tmp_path / "out.checkpoint" / "splitsource-copy.json").write_text("{not json")
    one_line(run(args), 1, "is corrupt", "--overwrite")
    assert run([*args, "--overwrite"]).returncode == 0
    verify_ok(out)


def test_a_copy_that_fails_before_its_first_commit_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "out"
    failing = ["--connector", "generator", "-o", "rows=4000", "-o", "split_rows=1000", "-o", "fail_at_row=10",
               "-o", "fail_kind=fatal"]
    one_line(run(["copy", *failing, *LOCAL, "--output", str(out), "--quiet"]), 1, "injected failure",
             "out.checkpoint/splitsource-copy-error.log")
    assert not out.exists()
    assert [p.name for p in (tmp_path / "out.checkpoint").iterdir()] == ["splitsource-copy-error.log"]
    # a retry with the other engine is not blocked by a half-made checkpoint ("differs in: engine")
    result = run(["copy", *GEN, "--output", str(out), "--quiet"])
    assert result.returncode == 0, result.stderr
    verify_ok(out)


@pytest.mark.parametrize("case", ["output-file", "checkpoint-file", "unresolvable-host", "bogus-master",
                                  "abbreviated-flag", "password-file", "verify-on-a-file", "verify-not-a-copy"])
def test_ordinary_mistakes_are_one_line(tmp_path: Path, case: str) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    out = tmp_path / "out"
    if case == "output-file":
        one_line(run(["copy", *GEN, "--output", str(a_file)]), 2, f"--output {a_file} is a file")
    elif case == "checkpoint-file":
        one_line(run(["copy", *GEN, "--output", str(out), "--checkpoint", str(a_file)]), 2,
                 f"--checkpoint {a_file} is a file")
    elif case == "unresolvable-host":
        one_line(run(["copy", "--connector", "cassandra", "-o", "hosts=no-such-host.invalid", "-o", "keyspace=k",
                      "-o", "table=t", "--output", str(out)]), 2, "option 'hosts'", "no-such-host.invalid")
    elif case == "bogus-master":
        one_line(run(["copy", *GEN, "--output", str(out), "--master", "bogus://x"]), 2,
                 "--master: 'bogus://x' is not a Spark master URL")
    elif case == "abbreviated-flag":
        result = run(["copy", *GEN, "--out", str(out)])
        assert result.returncode == 2 and "--output" in result.stderr and "Traceback" not in result.stderr
    elif case == "password-file":
        one_line(run(["copy", "--connector", "cassandra", "-o", "keyspace=k", "-o", "table=t", "-o", "username=u",
                      "-o", f"password_file={tmp_path / 'missing'}", "--output", str(out)]), 2,
                 "option 'password_file'", "missing")
    elif case == "verify-on-a-file":
        one_line(run(["verify", *GEN, "--output", str(a_file)]), 2, "not written by splitsource copy")
    else:  # exit 2, as a usage error: exit 1 is a mismatch's
        out.mkdir()
        (out / "data.parquet").write_text("x")
        one_line(run(["verify", *GEN, "--output", str(out)]), 2, "not written by splitsource copy")
    assert not out.exists() or case == "verify-not-a-copy"


def test_a_long_worker_error_is_cut_between_words_not_mid_word() -> None:
    from splitsource.copyjob._failures import root_cause

    text = "Traceback (most recent call last):\n  File x\nValueError: " + " ".join(f"word{i}" for i in range(400))
    line = root_cause(RuntimeError(text))
    assert line.startswith("ValueError: word0 word1") and line.endswith(" …") and len(line) <= 1002
    assert line[:-2].split(" ")[-1].startswith("word")  # the last word is whole


def test_the_password_comes_from_a_file_or_the_environment_never_the_command_line(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    from connectors.cassandra import CassandraSource

    secret = tmp_path / "secret"
    secret.write_text("from-file\nignored\n")
    base = {"keyspace": "k", "table": "t", "username": "u"}
    monkeypatch.setenv("SPLITSOURCE_CASSANDRA_PASSWORD", "from-env")
    assert CassandraSource(base).options.resolved_password() == "from-env"
    assert CassandraSource({**base, "password_file": str(secret)}).options.resolved_password() == "from-file"
    assert CassandraSource({**base, "password": "given", "password_file": str(secret)}
                           ).options.resolved_password() == "given"
    assert "from-file" not in repr(CassandraSource({**base, "password_file": str(secret)}).options)


def wait_for_commit(proc: subprocess.Popen[str], out: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while committed_rows(out) == 0:
        assert proc.poll() is None, f"the copy ended ({proc.returncode}) before it committed anything"
        assert time.monotonic() < deadline, "no commit in time"
        time.sleep(0.05)


@pytest.mark.parametrize("engine, sig, code, word", [
    ("local", signal.SIGTERM, 143, "terminated (SIGTERM)"),
    ("local", signal.SIGINT, 130, "interrupted"),
    ("spark", signal.SIGTERM, 143, "terminated (SIGTERM)"),
    ("spark", signal.SIGINT, 130, "interrupted"),
])
def test_an_interrupted_copy_says_so_in_one_line_and_resumes_exact(tmp_path: Path, engine: str, sig: int,
                                                                     code: int, word: str) -> None:
    out = tmp_path / "out"
    args = ["copy", *SLOW_GEN, *(LOCAL if engine == "local" else []), "--output", str(out), "--quiet",
            "--max-splits-per-batch", "2"]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_commit(proc, out)
    os.kill(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=120)
    one_line(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), code, word,
             "run the same command again to resume")
    assert not (out.with_name(out.name + ".bucketing") / "lock.json").exists(), "the interrupted copy kept its lock"
    assert run(args).returncode == 0
    verify_ok(out, SLOW_GEN)


def test_a_lock_left_by_a_killed_copy_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", *SLOW_GEN, *LOCAL, "--output", str(out), "--quiet"]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not (out.with_name(out.name + ".bucketing") / "lock.json").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    held = json.loads((out.with_name(out.name + ".bucketing") / "lock.json").read_text())
    assert held["pid"] == proc.pid
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out.with_name(out.name + ".bucketing") / "lock.json").exists()  # SIGKILL: no chance to release it
    result = run(args)
    assert result.returncode == 0, result.stderr
    verify_ok(out, SLOW_GEN)
