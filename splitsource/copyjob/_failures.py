"""How a failed copy is told: the one line a user needs from a worker's or the JVM's failure (:func:`root_cause`),
and the error that carries it while the whole text goes to a log in the checkpoint (:func:`failure`). Both engines
and the copy job use them; this module depends on none of them."""

from __future__ import annotations

import re

from splitsource._errors import CopyError
from splitsource._fs import Location
from splitsource._names import ERROR_LOG

__all__ = ["ERROR_LOG", "failure", "root_cause"]


_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Invalid|Timeout|Unavailable)\w*): (.+)$")


def root_cause(exc: BaseException) -> str:
    """The line a user needs from a Spark exception: our own error's message if there is one, else the last
    Python exception of a worker's traceback (``ArrowInvalid: ...``), else the first line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines()]
    for stripped in reversed(lines):
        for marker in ("Error: ", "Exception: "):
            head, _, message = stripped.partition(marker)
            if message and head.split(".")[0] in ("splitsource", "connectors", "serializers", "cassandra"):
                return message
    if "Traceback (most recent call last)" in text:
        for stripped in reversed(lines):
            match = _EXCEPTION_LINE.match(stripped)
            if match:
                return _clip(f"{match.group(1)}: {match.group(2)}")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return _clip(first)


def _clip(text: str, limit: int = 1000) -> str:
    """One line of at most ``limit`` characters, cut between words (the whole text is in the error log)."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def failure(cause: str, full: str, checkpoint: Location) -> CopyError:
    """The one-line error, of ``cause``'s first line (a driver's message may carry the query and a caret line
    after it); the full text (worker, JVM and Python stacks) goes to a log file in the checkpoint."""
    lines = [line.strip() for line in cause.splitlines() if line.strip()]
    cause = _clip(lines[0]) if lines else cause
    log = checkpoint.child(ERROR_LOG)
    try:
        log.store.write(log.path, full.encode("utf-8", "replace"), durable=False)
    except OSError:
        return CopyError(cause, detail=full)
    path = log.shown
    return CopyError(f"{cause} (details: {path})", detail=full, log_path=path)
