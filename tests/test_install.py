"""Spark finds both data sources with no register() call after the installs users type: a wheel, and a plain
``pip install -e .`` (hatchling's editable install is a path entry, which Spark's scan of sys.path for
``pyspark_*`` modules sees; setuptools' import hook would hide it). Each into a virtualenv of its own, whose
dependencies come from the suite's virtualenv (its site-packages as a plain path, so the suite's own editable
install of splitsource is not among them)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.fixtures import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = """
from pyspark.sql import SparkSession
import splitsource
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
df = spark.read.format("splitsource").option("connector", "generator").option("rows", "1000").load()
df.write.format("bucketing").option("bucketer", "none").mode("append").save("out")
print("from", splitsource.__file__)
print("rows", spark.read.parquet("out").count())
spark.stop()
"""


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(where), "platbase": str(where)})["purelib"])
    # the suite's dependencies, as a path entry: .pth files there (the suite's editable splitsource) are not read
    (site / "suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin" / "python"


def _run(python: Path, cwd: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                            "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"  # Spark's workers run python3 from PATH
    result = subprocess.run([str(python), "-c", SCRIPT], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-2:]


# the package index is never reached during a test: the build backend (hatchling) is the suite's own (the dev extra
# installs it), and every install is of what the test built or of the checkout
OFFLINE = ["--no-index", "--no-build-isolation"]


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                             *OFFLINE, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def test_a_wheel_install_is_found_by_spark(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *OFFLINE, "-w", str(wheels),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-4000:]
    python = _venv(tmp_path / "venv")
    _pip(python, *map(str, wheels.glob("splitsource-*.whl")))
    where, rows = _run(python, tmp_path)
    assert where.startswith(f"from {tmp_path / 'venv'}") and rows == "rows 1000"


def test_a_plain_editable_install_is_found_by_spark(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    _pip(python, "-e", str(ROOT))
    where, rows = _run(python, tmp_path)
    assert where == f"from {ROOT / 'splitsource' / '__init__.py'}" and rows == "rows 1000"


PLUGIN_SCRIPT = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
df = spark.read.format("splitsource").option("connector", "evens").option("count", "10000").load()
print("read", df.count(), df.agg({"n": "sum"}).first()[0])
spark.sql("CREATE TEMPORARY VIEW evens USING splitsource OPTIONS (connector 'evens', count '10000')")
print("sql", *spark.sql("SELECT count(*), max(n) FROM evens").first())
spark.stop()
"""


def _guide_package(where: Path) -> Path:
    """The guide's published connector, built from the guide's own blocks: the short path's EvensSource as the
    module and the "Publishing a connector" pyproject.toml."""
    import re

    guide = (ROOT / "docs" / "connector-guide.md").read_text()
    short_path = guide[guide.index("## The short path"):guide.index("## 1. Options")]
    module = re.search(r"```python\n(.*?)```", short_path, re.S)
    publishing = guide[guide.index("## 9. Publishing a connector"):]
    toml = re.search(r"```toml\n(.*?)```", publishing, re.S)
    assert module and "class EvensSource" in module.group(1) and toml, "the guide's blocks moved"
    (where / "splitsource_evens").mkdir(parents=True)
    (where / "splitsource_evens" / "__init__.py").write_text(module.group(1))
    (where / "pyproject.toml").write_text(toml.group(1))
    return where


def test_the_guides_published_connector_is_found_by_name_everywhere(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for project in (ROOT, _guide_package(tmp_path / "evens")):
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *OFFLINE, "-w",
                                str(wheels), str(project)], capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr[-4000:]
    python = _venv(tmp_path / "venv")
    _pip(python, *map(str, wheels.glob("*.whl")))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                            "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"

    def run(*args: str) -> str:
        result = subprocess.run([str(python), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        return result.stdout

    listed = run("-m", "splitsource", "options")
    assert any(line.split()[:2] == ["evens", "splitsource_evens:EvensSource"] and "[splitsource-evens 0.1.0]" in line
               for line in listed.splitlines()), listed
    assert "copy finished: 5,000 rows" in run("-m", "splitsource", "copy", "--connector", "evens", "-o",
                                              "count=10000", "--output", "out", "--engine", "local", "--quiet")
    assert "count  " in run("-m", "splitsource", "options", "--connector", "evens")
    lines = run("-c", PLUGIN_SCRIPT).strip().splitlines()
    assert lines[-2:] == [f"read 5000 {sum(range(0, 10_000, 2))}", "sql 5000 9998"], lines
