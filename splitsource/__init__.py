"""splitsource: Flink's FLIP-27 split-based sources for PySpark, for bounded data.

Read with ``spark.read.format("splitsource")``; write connectors by subclassing :class:`Source`,
:class:`SplitEnumerator`, :class:`SplitReader` and :class:`RecordEmitter`; test them with
:mod:`splitsource.testing`. See ``docs/`` for the architecture and the connector author's guide.
"""

from splitsource._api import (
    Boundedness,
    EnumeratorState,
    RecordEmitter,
    RecordsBySplits,
    Source,
    Split,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitReader,
    SplitState,
)
from splitsource._errors import (
    CheckpointError,
    ConnectorNotFoundError,
    ExecutorEnvironmentError,
    OptionsError,
    ProtocolError,
    SinkError,
    SplitReadError,
    SplitSourceError,
    TransientSplitReadError,
)
from splitsource._options import REQUIRED, Secret, describe_options, option, parse_options
from splitsource._registry import BUILTIN_CONNECTORS, resolve_connector
from splitsource._runtime import Checkpoint, LocalRuntime, RunResult, read_local
from splitsource._source_reader import ReaderMetrics, RetryPolicy, SourceReader
from splitsource._state import EnumeratorStateSerializer, enumerator_state_from_bytes, enumerator_state_to_bytes
from splitsource._version import __version__

__all__ = [
    "BUILTIN_CONNECTORS",
    "REQUIRED",
    "Boundedness",
    "Checkpoint",
    "CheckpointError",
    "ConnectorNotFoundError",
    "CopyError",
    "CopySummary",
    "EnumeratorState",
    "EnumeratorStateSerializer",
    "ExecutorEnvironmentError",
    "LocalRuntime",
    "OptionsError",
    "ProtocolError",
    "ReaderMetrics",
    "RecordEmitter",
    "RecordsBySplits",
    "RetryPolicy",
    "RunResult",
    "Secret",
    "SinkError",
    "Source",
    "SourceReader",
    "Split",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitReadError",
    "SplitReader",
    "SplitSourceError",
    "SplitState",
    "TransientSplitReadError",
    "__version__",
    "copy",
    "describe_options",
    "enumerator_state_from_bytes",
    "enumerator_state_to_bytes",
    "option",
    "parse_options",
    "read_local",
    "register",
    "resolve_connector",
    "verify",
]


def register(spark: object) -> None:
    """Register ``format("splitsource")`` and ``format("bucketing")`` on ``spark`` explicitly (auto-registration
    makes this optional)."""
    from splitsource._spark_reader import SplitSourceDataSource
    from splitsource.sink._spark import BucketingDataSource

    spark.dataSource.register(SplitSourceDataSource)  # type: ignore[attr-defined]
    spark.dataSource.register(BucketingDataSource)  # type: ignore[attr-defined]


_LAZY = {"copy": "splitsource._copy", "CopyError": "splitsource._copy", "CopySummary": "splitsource._copy",
         "verify": "splitsource._verify"}


def __getattr__(name: str) -> object:
    # the copy job and verify need pyspark; importing splitsource alone must not
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'splitsource' has no attribute {name!r}")
