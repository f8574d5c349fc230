"""register() tells a user whose Spark workers run an interpreter without splitsource what to set, in one line,
instead of Spark's bare DATA_SOURCE_NOT_FOUND."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.fixtures import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = """
import sys
from pyspark.sql import SparkSession
from splitsource import SplitSourceError
from splitsource.spark import register
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    register(spark)
    print("registered")
except SplitSourceError as exc:
    print(type(exc).__name__, exc)
finally:
    spark.stop()
"""


def _run(workers_python: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON")}
    env["PYSPARK_PYTHON"] = workers_python
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def test_workers_without_splitsource_are_named_with_the_fix() -> None:
    base = getattr(sys, "_base_executable", "")  # the interpreter the virtualenv was made from: no splitsource
    if not base or os.path.abspath(base) == os.path.abspath(sys.executable):
        pytest.fail("the tests run outside a virtualenv: no interpreter without splitsource to point Spark at")
    line = _run(base)
    assert line == (f"ExecutorEnvironmentError Spark's Python workers run {base} ({base}), which cannot import "
                    f"splitsource; set PYSPARK_PYTHON={sys.executable} (the interpreter that has it) before the "
                    "session starts, or install splitsource for that one")


def test_workers_that_have_splitsource_register() -> None:
    assert _run(sys.executable) == "registered"
