"""What a splitsource process prints of log records: its own, never a library's."""

from __future__ import annotations

import logging
import sys

__all__ = ["quiet_logging"]


class _OwnRecords(logging.Filter):
    """Only splitsource's own log records reach the terminal: py4j logs a stack trace on the root logger for
    every call a Ctrl-C interrupts, and the Cassandra driver warns about its own configuration."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.startswith("splitsource")


def quiet_logging() -> None:
    """Send splitsource's warnings (and worse) to stderr as ``splitsource: <message>``, and nothing else's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("splitsource: %(message)s"))
    handler.addFilter(_OwnRecords())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
