"""Connectors by name: entry points (the built-ins' and an installed plugin's), two claims of one name refused,
and reserved option names refused when a connector is loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connectors.generator import GeneratorSource
from splitsource import ConnectorNotFoundError, OptionsError, _registry, option, testing
from splitsource._planning import build_source, load_connector
from splitsource._registry import installed_connectors

PLUGIN = '''
from connectors.generator import GeneratorSource

class TinySource(GeneratorSource):
    name = "tiny"
'''


def _install_plugin(site: Path, dist: str, name: str, module: str) -> None:
    """A distribution as pip leaves it on sys.path: its module and a dist-info with the entry point."""
    (site / f"{module}.py").write_text(PLUGIN)
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[splitsource.connectors]\n{name} = {module}:TinySource\n")


def test_the_built_ins_and_an_installed_plugin_are_found_by_name(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, "splitsource-tiny", "tiny", "tiny_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = installed_connectors()
    assert {"generator", "cassandra", "postgres", "tiny"} <= set(found)
    assert [(c.distribution, c.version) for c in found["tiny"]] == [("splitsource-tiny", "1.0")]
    assert load_connector("tiny").__name__ == "TinySource"
    assert load_connector("Generator") is GeneratorSource
    listing = subprocess.run([sys.executable, "-m", "splitsource", "options"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": f"{tmp_path}:{Path.cwd()}"})
    assert listing.returncode == 0, listing.stderr
    assert "tiny" in listing.stdout and "splitsource-tiny 1.0" in listing.stdout


@pytest.mark.parametrize("command", [["options", "--connector", "postgres"],
                                     ["copy", "--connector", "generator", "-o", "rows=10", "--engine", "local",
                                      "--quiet"]])
def test_a_command_whose_output_s_reader_went_away_ends_quietly(tmp_path: Path, command: list[str]) -> None:
    """``splitsource options | head -1``: standard output's pipe has no reader (closed before the command writes,
    so no write can succeed first). The command ends with 141, as a tool killed by SIGPIPE does, and prints
    nothing (it said "splitsource options: Broken pipe", exit 1). A copy's rows are committed before it says so."""
    read, write = os.pipe()
    os.close(read)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "splitsource", *command, *(["--output", str(out)] if
                          command[0] == "copy" else [])], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr
    if command[0] == "copy":
        assert sum(pq.read_metadata(p).num_rows for p in out.glob("*.parquet")) == 10


def test_two_plugins_claiming_one_name_are_refused_naming_both(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, "first-dist", "twice", "first_mod")
    _install_plugin(tmp_path, "second-dist", "twice", "second_mod")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConnectorNotFoundError) as caught:
        load_connector("twice")
    message = str(caught.value)
    assert "first_mod:TinySource (first-dist 1.0)" in message and "second_mod:TinySource (second-dist 1.0)" in message
    with pytest.raises(ConnectorNotFoundError, match="neither an installed connector"):
        load_connector("nothing-by-this-name")


def test_a_process_reads_the_installed_names_once_per_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read of the names opens every installed distribution's metadata: a process does it once for its path,
    not on every connector it loads, and again when its path changes."""
    scans: list[str] = []
    real = _registry.entry_points
    monkeypatch.setattr(_registry, "entry_points", lambda group: scans.append(group) or real(group=group))
    monkeypatch.syspath_prepend(str(tmp_path / "empty"))  # a path this process has not read yet
    assert load_connector("generator") is GeneratorSource
    assert load_connector("postgres").__name__ == "PostgresSource"
    assert scans == [_registry.ENTRY_POINT_GROUP]
    (tmp_path / "site").mkdir()
    _install_plugin(tmp_path / "site", "splitsource-later", "later", "later_plugin")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert load_connector("later").__name__ == "TinySource"
    assert len(scans) == 2


@dataclass(frozen=True)
class PathOptions:
    path: str = option(doc="the file to read")


class PathSource(GeneratorSource):
    name = "pathy"
    options_class = PathOptions  # type: ignore[assignment]


def test_a_connector_declaring_a_reserved_name_is_refused_where_it_is_loaded() -> None:
    with pytest.raises(OptionsError) as caught:
        build_source({"connector": f"{__name__}:PathSource", "path": "/data/x.db"})
    assert "declares option 'path', a reserved name" in str(caught.value)
    assert "load(path)" in str(caught.value)
    with pytest.raises(OptionsError, match="declares option 'path'"):
        testing.check_all(PathSource.__new__(PathSource))


def test_splits_that_estimate_no_size_are_batched_by_count_and_the_summary_says_so(tmp_path: Path) -> None:
    """Left at 0, every split estimated nothing, so the whole copy was one batch and no kill could land between
    two commits; now batches take 16 splits and the summary says why, once, on stdout (stderr stays for errors)."""
    import re

    from splitsource._offsets import UNSIZED_SPLITS_PER_BATCH
    from tests.fixtures import ROOT

    args = [sys.executable, "-m", "splitsource", "copy", "--connector", "tests.splitsource.custom_connector:"
            "UnsizedSource", "-o", "rows=4000", "--output", str(tmp_path / "out"), "--engine", "local", "--quiet"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    batches = int(re.search(r"in (\d+) batches", done.stdout).group(1))  # type: ignore[union-attr]
    assert batches == -(-40 // UNSIZED_SPLITS_PER_BATCH), done.stdout  # 40 splits of 100 rows
    assert done.stdout.count("since the connector's splits estimate no size") == 1, done.stdout
