"""Every error splitsource raises on purpose, in one tree.

::

    SplitSourceError                      anything splitsource raises on purpose
    ├── OptionsError                      an unknown, missing or invalid option (names it, lists valid ones)
    │   └── ConnectorNotFoundError        the ``connector`` option names nothing importable
    ├── ProtocolError                     a contract of the framework was broken by its caller or a connector
    ├── SplitReadError                    reading a split failed for good (.split_ids, .attempts, .waited_s)
    │   ├── TransientSplitReadError       a connector's declaration that a retry from the split state may work
    │   └── ValueRangeError               a value the source holds that its column's Arrow type cannot (.row)
    ├── ExecutorEnvironmentError          an executor cannot run what the driver planned (interpreter, package)
    ├── CheckpointError                   a checkpoint that is corrupt or belongs to another job
    │   ├── LockedError                   another copy is running on the output or checkpoint (.path)
    │   │   └── LeaseLostError            this copy's lease expired and another copy took its place over
    │   └── OutputOwnedError              the output belongs to another copy (.path)
    ├── SinkError                         the bucketing sink cannot write or commit
    └── CopyError                         a copy job failed (.detail: the full text, .log_path: where it is kept)
        └── LocalCopyFailed               a task of the local engine failed or its worker process died

Connectors add their own errors under this tree (``connectors.cassandra.CassandraConnectionError`` is a
``SplitSourceError``). ``serializers.SerializationError`` (a ``ValueError``) is raised for bytes that cannot be read
back; it lives in ``serializers`` because that package does not depend on this one.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CheckpointError",
    "ConnectorNotFoundError",
    "CopyError",
    "ExecutorEnvironmentError",
    "LeaseLostError",
    "LocalCopyFailed",
    "LockedError",
    "OptionsError",
    "OutputOwnedError",
    "ProtocolError",
    "SinkError",
    "SplitReadError",
    "SplitSourceError",
    "TransientSplitReadError",
    "ValueRangeError",
]


class SplitSourceError(Exception):
    """Base of every error splitsource raises on purpose.

    Structured fields survive pickling (a Spark task's error reaches the driver pickled): the message is the one
    positional argument, and the fields travel as the instance's state."""


class OptionsError(SplitSourceError, ValueError):
    """An option is unknown, missing or invalid. The message names it and lists what is accepted."""


class ConnectorNotFoundError(OptionsError):
    """The ``connector`` option is neither a built-in name nor an importable ``module:Class``."""


class ProtocolError(SplitSourceError, RuntimeError):
    """A framework contract was broken, for example a split assigned twice or a reader used after close."""


class SplitReadError(SplitSourceError, RuntimeError):
    """Reading a split failed and will not be retried. The message names the split ids; so do the fields:
    ``split_ids`` (the splits the reader held), ``attempts`` and ``waited_s`` (0 when it was not retried)."""

    def __init__(self, message: str, *, split_ids: Sequence[str] = (), attempts: int = 0,
                 waited_s: float = 0.0) -> None:
        super().__init__(message)
        self.split_ids = tuple(split_ids)
        self.attempts = attempts
        self.waited_s = waited_s


class TransientSplitReadError(SplitReadError):
    """Raised (or mapped to) by a connector for an error that a retry from the split state may cure."""


class ValueRangeError(SplitReadError):
    """A value the source holds that its column's Arrow type cannot hold (a date at infinity, a timestamp past
    Arrow's microseconds, text in an integer column). The message names the column, the value, its row's key where
    known, and the option that reads the column another way (``text_columns`` for the SQL sources); ``row`` is the
    value's index in its batch, where known. Never retried; a copy exits 1 with that one line, as for any data the
    copy cannot hold, and writes nothing of the batch."""

    def __init__(self, message: str, row: int | None = None, *, split_ids: Sequence[str] = ()) -> None:
        super().__init__(message, split_ids=split_ids)
        self.row = row


class ExecutorEnvironmentError(SplitSourceError, RuntimeError):
    """An executor's interpreter or installed package does not match what the driver planned with."""


class CheckpointError(SplitSourceError, RuntimeError):
    """A checkpoint is corrupt, unreadable, or was written by a different job."""


class _PathError(CheckpointError):
    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class LockedError(_PathError):
    """Another copy is running on the same output or checkpoint; ``path`` is the lock file."""


class LeaseLostError(LockedError):
    """This copy's lease on its output or checkpoint expired and another copy took it over: this one must commit
    nothing more (the fence of :class:`~splitsource.copyjob._ownership.CopyLock`)."""


class OutputOwnedError(_PathError):
    """The output belongs to another copy (or the checkpoint to another output); ``path`` is what is owned."""


class SinkError(SplitSourceError, RuntimeError):
    """The bucketing sink could not write, commit or recover its files."""


class CopyError(SplitSourceError):
    """The copy job failed. The message is the root cause in one line; ``detail`` the full text (worker and JVM
    stacks), kept in the file ``log_path`` (empty when it could not be written)."""

    def __init__(self, message: str, *, detail: str = "", log_path: str = "") -> None:
        super().__init__(message)
        self.detail = detail
        self.log_path = log_path


class LocalCopyFailed(CopyError):
    """A task of the local engine failed in its worker (``detail``: the worker's traceback), or a worker died."""
