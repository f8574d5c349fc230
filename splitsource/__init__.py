"""splitsource: Flink's FLIP-27 split-based sources for PySpark, for bounded data.

The public API comes in three tiers, each in its own place:

1. **The connector author's API** (this module): the contracts to subclass (:class:`Source`, :class:`Split`,
   :class:`SplitState`, :class:`SplitEnumerator`, :class:`SplitReader`, :class:`RecordEmitter`), the split state
   every connector here uses (:class:`ResumeState`, the default) and its emitter (:class:`ResumeEmitter`), the
   helpers they use (:class:`SplitQueue`, :class:`FixedEnumeratorContext`, :func:`option` and :class:`Secret`),
   the short path for sources read in key ranges (:class:`KeyRangeSource`), the error tree, and
   :mod:`splitsource.testing`, the conformance kit. See ``docs/connector-guide.md``.
2. **The runtime API** (:mod:`splitsource.runtime`): what drives a connector without Spark: :class:`SourceReader`,
   :class:`~splitsource.runtime.InProcessRuntime`, :func:`read_local`, :class:`RetryPolicy`.
3. **The user's API**: :func:`copy` (here), :mod:`splitsource.copyjob` (:func:`verify`, the engines),
   :mod:`splitsource.spark` (``format("splitsource")``, ``format("bucketing")``, :func:`register`),
   :mod:`splitsource.sink` (the bucketing sink's parts), and the ``splitsource`` command. :func:`verify`,
   :func:`read_local` and :func:`register` are also here, for short scripts.

Importing splitsource imports no pyspark; only :mod:`splitsource.spark` does. Each name imports its module
(pyarrow with the connector API) when first used.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from splitsource._errors import (
    CheckpointError,
    ConnectorNotFoundError,
    CopyError,
    ExecutorEnvironmentError,
    LeaseLostError,
    LocalCopyFailed,
    LockedError,
    OptionsError,
    OutputOwnedError,
    ProtocolError,
    SinkError,
    SplitReadError,
    SplitSourceError,
    TransientSplitReadError,
    ValueRangeError,
)
from splitsource._version import __version__

if TYPE_CHECKING:
    from splitsource._api import (
        Boundedness,
        Changes,
        EnumeratorState,
        FixedEnumeratorContext,
        Predicate,
        ReadEvent,
        RecordEmitter,
        RecordsBySplits,
        ResumeEmitter,
        ResumeState,
        Source,
        Split,
        SplitEnumerator,
        SplitEnumeratorContext,
        SplitReader,
        SplitState,
    )
    from splitsource._copy_call import copy
    from splitsource._keyrange import CursorRange, KeyRange, KeyRangePosition, KeyRangeSource
    from splitsource._registry import BUILTIN_CONNECTORS, resolve_connector
    from splitsource._splits import SplitQueue
    from splitsource._state import (
        EnumeratorStateSerializer,
        enumerator_state_from_bytes,
        enumerator_state_to_bytes,
    )
    from splitsource._typed_options import (
        REQUIRED,
        Secret,
        describe_options,
        name_list,
        option,
        options_table,
        parse_options,
    )
    from splitsource._wakeup import WakeUp, Woken
    from splitsource.copyjob import verify
    from splitsource.runtime import read_local

# every other name's module, imported on first use: ``python -m splitsource.cli`` imports this package before its
# first line runs, and a local copy starts its first worker there, before pyarrow and the rest are imported
# (0.3 s sooner); a connector's ``from splitsource import Source`` imports them as before
_HOME = {
    **dict.fromkeys(("Boundedness", "Changes", "EnumeratorState", "FixedEnumeratorContext", "Predicate", "ReadEvent",
                     "RecordEmitter", "RecordsBySplits", "ResumeEmitter", "ResumeState", "Source", "Split",
                     "SplitEnumerator", "SplitEnumeratorContext", "SplitReader", "SplitState"), "splitsource._api"),
    "copy": "splitsource._copy_call",
    **dict.fromkeys(("CursorRange", "KeyRange", "KeyRangePosition", "KeyRangeSource"), "splitsource._keyrange"),
    **dict.fromkeys(("BUILTIN_CONNECTORS", "resolve_connector"), "splitsource._registry"),
    "SplitQueue": "splitsource._splits",
    **dict.fromkeys(("EnumeratorStateSerializer", "enumerator_state_from_bytes", "enumerator_state_to_bytes"),
                    "splitsource._state"),
    **dict.fromkeys(("REQUIRED", "Secret", "describe_options", "name_list", "option", "options_table",
                     "parse_options"),
                    "splitsource._typed_options"),
    **dict.fromkeys(("WakeUp", "Woken"), "splitsource._wakeup"),
    "verify": "splitsource.copyjob",
    "read_local": "splitsource.runtime",
}

__all__ = [
    "BUILTIN_CONNECTORS",
    "REQUIRED",
    "Boundedness",
    "Changes",
    "CheckpointError",
    "ConnectorNotFoundError",
    "CopyError",
    "CursorRange",
    "EnumeratorState",
    "EnumeratorStateSerializer",
    "ExecutorEnvironmentError",
    "FixedEnumeratorContext",
    "KeyRange",
    "KeyRangePosition",
    "KeyRangeSource",
    "LeaseLostError",
    "LocalCopyFailed",
    "LockedError",
    "OptionsError",
    "OutputOwnedError",
    "Predicate",
    "ProtocolError",
    "ReadEvent",
    "RecordEmitter",
    "RecordsBySplits",
    "ResumeEmitter",
    "ResumeState",
    "Secret",
    "SinkError",
    "Source",
    "Split",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitQueue",
    "SplitReadError",
    "SplitReader",
    "SplitSourceError",
    "SplitState",
    "TransientSplitReadError",
    "ValueRangeError",
    "WakeUp",
    "Woken",
    "__version__",
    "copy",
    "describe_options",
    "enumerator_state_from_bytes",
    "enumerator_state_to_bytes",
    "name_list",
    "option",
    "options_table",
    "parse_options",
    "read_local",
    "register",
    "resolve_connector",
    "verify",
]


def register(spark: object) -> None:
    """Register ``format("splitsource")`` and ``format("bucketing")`` on ``spark`` (see
    :func:`splitsource.spark.register`; auto-registration makes this optional)."""
    from splitsource.spark import register as register_formats

    register_formats(spark)


def __getattr__(name: str) -> object:
    if name in _HOME:
        value = getattr(import_module(_HOME[name]), name)
        globals()[name] = value  # once: the next lookup finds it here
        return value
    raise AttributeError(f"module 'splitsource' has no attribute {name!r}")
