"""The suite's session fixtures (tests/fixtures.py) for tests/ and for the docs, whose fenced blocks run as tests
(tests/docs_runner.py: ``python -m pytest README.md docs``)."""

from typing import Any

from tests.docs_runner import summary, sybil_collector

pytest_plugins = ("tests.fixtures",)

pytest_collect_file = sybil_collector()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summary(terminalreporter)
