"""The suite's session fixtures (tests/fixtures.py) for tests/ and for the docs, whose fenced blocks run as tests
(tests/docs_runner.py: ``python -m pytest README.md docs``)."""

from collections import defaultdict
from typing import Any

import pytest

from tests.docs_runner import summary, sybil_collector

pytest_plugins = ("tests.fixtures",)

pytest_collect_file = sybil_collector()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summary(terminalreporter)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the tests' ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist's ``--dist loadgroup`` (``bash scripts/test.sh`` runs two workers), a module runs whole on
    one worker, so a module's own servers (a Cassandra ring, a locked-down node) start once; and every module on the
    session's Cassandra (the docs' pages too) runs on the same worker, so the suite starts one such node, not one per
    worker. A group is named by the module's path in the project (a test's id in reports ends ``@<group>``)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    modules: dict[Any, list[pytest.Item]] = defaultdict(list)
    for item in items:
        modules[item.path].append(item)
    for path, module in modules.items():
        group = "cassandra" if any("cassandra" in item.fixturenames for item in module) \
            else str(path.relative_to(config.rootpath))
        for item in module:
            item.add_marker(pytest.mark.xdist_group(group))
