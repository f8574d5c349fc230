"""The Cassandra tests' shared driver sessions end with each module, whose nodes end with it: a session left open
goes on reconnecting to a stopped node in a thread of its own, and each failure it logs formats a traceback, which
in Python 3.11 runs ``ast.parse`` (caret anchors), which can race another thread's: ``SystemError: AST
constructor recursion depth mismatch`` (the ast state is shared between threads; reported as CPython gh-106905
and pytest #10763). The layout test met it once in a full run, while a versions test's session reconnected."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _shared_sessions_end_with_the_module() -> Iterator[None]:
    yield
    from connectors.cassandra._session import _shut_down_shared

    _shut_down_shared()
