"""The Spark adapters: the only package of splitsource that imports pyspark.

- ``format("splitsource")`` (:class:`SplitSourceDataSource`): batch and streaming reads of any connector;
- ``format("bucketing")`` (:class:`BucketingDataSource`): the exactly-once bucketing sink for ``df.write`` and
  ``writeStream``;
- the Spark engine of the copy job (:class:`SparkEngine`, ``splitsource.spark._copy``);
- :func:`register`: both formats on a session (Spark also finds them by itself through the ``pyspark_splitsource``
  and ``pyspark_bucketing`` modules).
"""

import os
import shutil
import subprocess
import sys

from splitsource._errors import ExecutorEnvironmentError
from splitsource.spark._sink import BucketingDataSource
from splitsource.spark._source import SplitSourceDataSource

__all__ = ["BucketingDataSource", "SparkEngine", "SplitSourceDataSource", "register"]


def __getattr__(name: str) -> object:  # SparkEngine, imported when asked for: registering the formats needs none of it
    if name == "SparkEngine":
        from splitsource.spark._copy import SparkEngine

        return SparkEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: object) -> None:
    """Register ``format("splitsource")`` and ``format("bucketing")`` on ``spark`` explicitly (auto-registration
    makes this optional), after checking that Spark's Python workers can import splitsource: Spark looks Python data
    sources up, and runs them, in workers that start ``PYSPARK_PYTHON`` (``python3`` from ``PATH`` when unset),
    and one without the package fails with a bare ``DATA_SOURCE_NOT_FOUND`` or an import error deep in a task.
    Raises :class:`ExecutorEnvironmentError` naming the interpreter and the fix."""
    problem = workers_python_problem(spark)
    if problem:
        raise ExecutorEnvironmentError(problem)
    spark.dataSource.register(SplitSourceDataSource)  # type: ignore[attr-defined]
    spark.dataSource.register(BucketingDataSource)  # type: ignore[attr-defined]


def workers_python_problem(spark: object) -> str:
    """Why the local Python workers of ``spark`` cannot run splitsource (empty if they can, or if this process cannot
    tell: a Spark Connect session, or a cluster whose workers are not this machine's)."""
    context = getattr(spark, "sparkContext", None)
    try:
        executable = str(getattr(context, "pythonExec", None) or "")
        master = str(context.master) if context is not None else ""
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext: nothing to check here
        return ""
    if not executable or not master.startswith("local"):
        return ""
    found = shutil.which(executable) or executable
    # by path, not resolved: a virtualenv's python is a link to the base interpreter, whose packages differ
    if os.path.abspath(found) == os.path.abspath(sys.executable):
        return ""
    try:
        probe = subprocess.run([found, "-c", "import pyspark_splitsource"], capture_output=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    except OSError as exc:
        return f"Spark's Python workers run {executable!r}, which cannot start ({exc.strerror})" + _FIX
    if probe.returncode == 0:
        return ""
    return f"Spark's Python workers run {executable} ({found}), which cannot import splitsource" + _FIX


_FIX = (f"; set PYSPARK_PYTHON={sys.executable} (the interpreter that has it) before the session starts, or install "
        "splitsource for that one")
