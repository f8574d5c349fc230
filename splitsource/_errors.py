"""The exception hierarchy of splitsource.

::

    SplitSourceError                      anything splitsource raises on purpose
    ├── OptionsError                      an unknown, missing or invalid option (names it, lists valid ones)
    ├── ConnectorNotFoundError            the ``connector`` option names nothing importable
    ├── ProtocolError                     a contract of the framework was broken by its caller or a connector
    ├── SplitReadError                    reading a split failed for good (names the split and the attempts)
    │   └── TransientSplitReadError       a connector's declaration that a retry from the split state may work
    ├── ExecutorEnvironmentError          an executor cannot run what the driver planned (interpreter, package)
    ├── CheckpointError                   a checkpoint that is corrupt or belongs to another job
    └── SinkError                         the bucketing sink cannot write or commit

``serializers.SerializationError`` (a ``ValueError``) is raised for bytes that cannot be read back; it lives in
``serializers`` because that package does not depend on this one.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConnectorNotFoundError",
    "ExecutorEnvironmentError",
    "OptionsError",
    "ProtocolError",
    "SinkError",
    "SplitReadError",
    "SplitSourceError",
    "TransientSplitReadError",
]


class SplitSourceError(Exception):
    """Base of every error splitsource raises on purpose."""


class OptionsError(SplitSourceError, ValueError):
    """An option is unknown, missing or invalid. The message names it and lists what is accepted."""


class ConnectorNotFoundError(OptionsError):
    """The ``connector`` option is neither a built-in name nor an importable ``module:Class``."""


class ProtocolError(SplitSourceError, RuntimeError):
    """A framework contract was broken, for example a split assigned twice or a reader used after close."""


class SplitReadError(SplitSourceError, RuntimeError):
    """Reading a split failed and will not be retried. The message names the split id."""


class TransientSplitReadError(SplitReadError):
    """Raised (or mapped to) by a connector for an error that a retry from the split state may cure."""


class ExecutorEnvironmentError(SplitSourceError, RuntimeError):
    """An executor's interpreter or installed package does not match what the driver planned with."""


class CheckpointError(SplitSourceError, RuntimeError):
    """A checkpoint is corrupt, unreadable, or was written by a different job."""


class SinkError(SplitSourceError, RuntimeError):
    """The bucketing sink could not write, commit or recover its files."""
