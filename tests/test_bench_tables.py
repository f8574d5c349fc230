"""docs/benchmarks.md's recorded results are the files under bench/results/ (scripts/bench_tables.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import bench_tables
from tests.fixtures import ROOT


def test_the_page_holds_every_result_file_as_written() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_tables.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"{len(list((ROOT / 'bench' / 'results').glob('*.json')))} result files checked" in result.stdout


def test_a_changed_figure_and_a_missing_commit_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    monkeypatch.setattr(bench_tables, "RESULTS", results)
    before = bench_tables.render()
    data = json.loads((results / "cluster_copy.json").read_text())
    data["results"]["copy --master local[2]"]["wall_s"] = 99.5
    data.pop("commit", None)
    (results / "cluster_copy.json").write_text(json.dumps(data))
    after = bench_tables.render()
    assert "| copy --master local[2] | 99.50 |" in after and after != before
    assert "Status: **stale**: recorded without its commit" in after
    data["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip()
    (results / "cluster_copy.json").write_text(json.dumps(data))
    assert "Status: current: nothing it measures changed since" in bench_tables.render()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.py")
                                           if p.name.startswith(("bench_", "profile_"))))
def test_every_benchmark_parses_its_command_line(script: str) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-2000:]
