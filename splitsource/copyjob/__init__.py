"""The user's API for bounded copies: :func:`copy` a source into bucketed files exactly once, :func:`verify` the
copy against the source, independently of the copy's own code path.

The package is ``copyjob``, not ``copy``: a subpackage ``splitsource.copy`` would replace the function
``splitsource.copy`` once imported. No pyspark here: the local engine and ``verify`` run without it; the Spark
engine is looked up by name (``splitsource.spark.SparkEngine``) only when ``engine="spark"``.

``copy(..., engine=...)`` takes an engine's name or an :class:`Engine`: :class:`LocalEngine` (worker processes on
this machine) or ``splitsource.spark.SparkEngine`` (Spark's executors).
"""

from splitsource._errors import CopyError
from splitsource.copyjob._job import CopySummary, Progress, copy
from splitsource.copyjob._local import LocalEngine
from splitsource.copyjob._protocol import Engine
from splitsource.copyjob._verify import VerifyResult, verify

__all__ = ["CopyError", "CopySummary", "Engine", "LocalEngine", "Progress", "VerifyResult", "copy", "verify"]
