"""A copy resolves each of its places once (output, checkpoint, and the records when named apart), then passes the
resolved :class:`~splitsource._fs.Location` on: one store per place, not a new one at every step."""

from __future__ import annotations

import collections
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

import splitsource
import splitsource._fs as fs_module
from splitsource import copy
from splitsource.copyjob import LocalEngine

OPTIONS = {"rows": "2000", "split_rows": "500", "columns": "id:bigint"}


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Every text this process resolves into a store, counted (every module that holds the function is patched)."""
    for found in pkgutil.walk_packages(splitsource.__path__, "splitsource."):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
    calls: collections.Counter[str] = collections.Counter()
    real = fs_module.resolve_filesystem

    def counting(path: str) -> Any:
        calls[path] += 1
        return real(path)

    patched = [m for name, m in sys.modules.items()
               if name.startswith("splitsource") and getattr(m, "resolve_filesystem", None) is real]
    assert fs_module in patched and len(patched) > 1, "the count would miss the modules that resolve"
    for module in patched:
        monkeypatch.setattr(module, "resolve_filesystem", counting)
    return calls


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_copy_and_its_rerun_resolve_the_output_and_the_checkpoint_once_each(
        tmp_path: Path, resolved: collections.Counter[str], engine: str, request: pytest.FixtureRequest) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    # the Spark engine by name, in a process whose session (the suite's) is running: the copy runs its jobs there
    session = request.getfixturevalue("spark") if engine == "spark" else None
    for run in ("first", "re-run"):
        summary = copy("generator", OPTIONS, str(out), checkpoint=str(checkpoint), engine=engine,
                       **({"workers": 1} if engine == "local" else {}))
        assert summary.total_rows == 2000
        assert dict(resolved) == {str(out): 1, str(checkpoint): 1}, f"{run}: {dict(resolved)}"
        resolved.clear()
    assert sorted(ds.dataset(str(out)).to_table()["id"].to_pylist()) == list(range(2000))
    if session is not None:  # a session of the copy's own would have been this one (getOrCreate), then stopped
        assert session.range(3).count() == 3, "the copy stopped the session it found running"


def test_records_named_apart_are_a_third_place_resolved_once(tmp_path: Path,
                                                             resolved: collections.Counter[str]) -> None:
    out, records = tmp_path / "out", tmp_path / "records"
    copy("generator", OPTIONS, str(out), engine=LocalEngine(1), sink_options={"metadata": str(records)})
    assert dict(resolved) == {str(out): 1, f"{out}.checkpoint": 1, str(records): 1}
    assert (records / "owner.json").exists()
