"""Misuse, round two: an ``--overwrite`` that deletes only what a copy wrote, a stray writer that ``verify`` names,
bad input refused at parse time, credentials kept out of everything a copy prints or persists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from splitsource import copy
from tests.fixtures import ROOT
from tests.splitsource.copyjob.test_copy import run
from tests.splitsource.copyjob.test_copy_misuse import GEN, LOCAL, one_line, verify_ok

pytestmark = [pytest.mark.slow]


def test_overwrite_refuses_an_output_holding_a_users_own_files_and_deletes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / ".ssh").mkdir(parents=True)
    (out / ".ssh" / "id_rsa").write_text("KEY")
    (out / "docs").mkdir()
    (out / "docs" / "thesis.tex").write_text("TEX")
    line = one_line(run(["copy", *GEN, *LOCAL, "--output", str(out), "--overwrite", "--quiet"]), 2,
                    "--overwrite: output", "2 file(s) splitsource copy does not write", ".ssh/id_rsa", "thesis.tex")
    assert "move them away" in line
    assert (out / ".ssh" / "id_rsa").read_text() == "KEY" and (out / "docs" / "thesis.tex").read_text() == "TEX"


def test_overwrite_of_a_copys_output_deletes_exactly_what_copies_write(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run(["copy", *GEN, *LOCAL, "--output", str(out), "--bucketer", "columns", "--sink-option",
                 "bucket_columns=id", "-o", "rows=30", "--quiet"])
    assert first.returncode == 0, first.stderr
    assert len([p for p in out.iterdir() if p.name.startswith("id=")]) == 30
    again = run(["copy", *GEN, *LOCAL, "--output", str(out), "--overwrite", "--quiet"])
    assert again.returncode == 0, again.stderr
    assert not [p for p in out.iterdir() if p.name.startswith("id=")], "bucket directories of the old copy stay"
    verify_ok(out)


def test_overwrite_refuses_a_checkpoint_holding_foreign_files(tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "chk"
    checkpoint.mkdir()
    (checkpoint / "notes.txt").write_text("mine")
    one_line(run(["copy", *GEN, *LOCAL, "--output", str(out), "--checkpoint", str(checkpoint), "--overwrite"]), 2,
             "--overwrite: checkpoint", "notes.txt")
    assert (checkpoint / "notes.txt").read_text() == "mine"


def test_verify_names_data_files_no_commit_of_the_copy_made(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run(["copy", *GEN, *LOCAL, "--output", str(out), "--quiet"])
    assert result.returncode == 0, result.stderr
    stray = next(out.glob("part-*.parquet"))
    (out / "part-00000-ffffffffffff-0123456789abcdef01234567-0.parquet").write_bytes(stray.read_bytes())
    check = run(["verify", *GEN, "--output", str(out)])
    assert check.returncode == 1 and check.stdout.startswith("MISMATCH"), check.stdout
    assert "1 data file(s) in the output were not written by this copy" in check.stdout
    assert "part-00000-ffffffffffff-0123456789abcdef01234567-0.parquet" in check.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (["--sink-option", "part_size_mb=nan"], "option 'part_size_mb': invalid value 'nan': a number must be finite"),
    (["--sink-option", "inactivity_s=inf"], "option 'inactivity_s': invalid value 'inf'"),
    (["-o", "max_rows_per_second=nan"], "option 'max_rows_per_second': invalid value 'nan'"),
    (["-o", "plan_location=/tmp/plans"], "option 'plan_location' is for streaming reads"),
], ids=["part-size-nan", "inactivity-inf", "rate-nan", "plan-location"])
def test_bad_options_are_refused_before_the_output_is_claimed(tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "out"
    one_line(run(["copy", *GEN, *LOCAL, "--output", str(out), *args]), 2, needle)
    assert not out.exists() and not (tmp_path / "out.checkpoint").exists()


def test_a_non_utf8_output_and_too_many_workers_are_usage_errors(tmp_path: Path) -> None:
    bad = (str(tmp_path).encode() + b"/out\xff")
    code = ("import sys, os; from splitsource.cli import main; "
            f"sys.exit(main(['copy', '--connector', 'generator', '--output', os.fsdecode({bad!r})]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2 and "is not valid UTF-8" in result.stderr and "Traceback" not in result.stderr
    result = run(["copy", *GEN, "--engine", "local", "--workers", "100000", "--output", str(tmp_path / "o")])
    assert result.returncode == 2 and "--workers: '100000' is not a number of processes" in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_uri_with_a_query_string_gets_its_checkpoint_beside_it_and_no_secret_is_persisted(tmp_path: Path) -> None:
    """pyarrow's file:// takes no credentials; the secret rides in user info, which redact() strips everywhere."""
    output = f"file://{tmp_path}/out"
    summary = copy("generator", {"rows": "200", "split_rows": "100"}, output, engine="local", workers=1)
    assert summary.checkpoint == f"file://{tmp_path}/out.checkpoint"
    assert (tmp_path / "out.checkpoint" / "splitsource-copy.json").exists()
    owner = json.loads((tmp_path / "out.bucketing" / "owner.json").read_text())
    assert owner["checkpoint"] == f"file://{tmp_path}/out.checkpoint"
    from splitsource._fs import redact

    secret = "s3://AKIA:hunter2@lake/out?secret_key=hunter2"
    assert "hunter2" not in redact(secret) and "hunter2" not in redact(secret + ".checkpoint")


def test_version_and_help_in_plain_words() -> None:
    from splitsource._version import __version__

    version = run(["--version"])
    assert version.returncode == 0 and version.stdout.strip() == f"splitsource {__version__}", version.stderr
    for args in (["--help"], ["copy", "--help"], ["verify", "--help"]):
        shown = run(args)
        assert shown.returncode == 0 and "``" not in shown.stdout, shown.stdout[:500]
