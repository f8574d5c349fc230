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


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                             *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def test_a_wheel_install_is_found_by_spark(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
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
