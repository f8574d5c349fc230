"""Bounded copies: the job a copy runs (:func:`splitsource.copy` builds it), its engines' one interface
(:class:`Engine`) and the local engine, and :func:`verify`, a copy checked against the source independently of
the copy's own code path.

The package is ``copyjob``, not ``copy``: a subpackage ``splitsource.copy`` would replace the function
``splitsource.copy`` once imported. No pyspark here: the local engine and ``verify`` run without it; the Spark
engine (``splitsource.spark.SparkEngine``) sits above this package and uses it.

``splitsource.copy(..., engine=...)`` takes an engine's name or an :class:`Engine`: :class:`LocalEngine` (worker
processes on this machine) or ``splitsource.spark.SparkEngine`` (Spark's executors).
"""

from importlib import import_module
from typing import TYPE_CHECKING

from splitsource._errors import CopyError

if TYPE_CHECKING:
    from splitsource.copyjob._job import CopySummary, Progress
    from splitsource.copyjob._local import LocalEngine
    from splitsource.copyjob._protocol import Engine
    from splitsource.copyjob._verify import VerifyResult, verify

__all__ = ["CopyError", "CopySummary", "Engine", "LocalEngine", "Progress", "VerifyResult", "verify"]

# each name's module, imported on first use: a worker process (splitsource.copyjob._worker) imports this package
# but needs none of them, and importing the job and verify took it 0.2 s before its first split
_HOME = {"CopySummary": "_job", "Progress": "_job", "LocalEngine": "_local", "Engine": "_protocol",
         "VerifyResult": "_verify", "verify": "_verify"}


def __getattr__(name: str) -> object:
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
