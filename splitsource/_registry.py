"""Connectors by name: the entry-point group ``splitsource.connectors``, or a ``package.module:ClassName`` path.

A distribution declares its connectors as pytest's plugins are declared, in its ``pyproject.toml``::

    [project.entry-points."splitsource.connectors"]
    sqlite = "mypackage.sqlite:SqliteSource"

The built-in connectors register the same way (this project's own ``pyproject.toml``); a source tree that was not
installed still finds them by the same names. Two distributions that claim one name are refused in one line that
names both.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from splitsource._api import Source
from splitsource._errors import ConnectorNotFoundError

__all__ = ["BUILTIN_CONNECTORS", "ENTRY_POINT_GROUP", "InstalledConnector", "installed_connectors",
           "resolve_connector"]

ENTRY_POINT_GROUP = "splitsource.connectors"
# Names, not imports: the framework never imports a connector until a user asks for it. The same entries as the
# project's entry points, for a source tree on sys.path that pip never installed.
BUILTIN_CONNECTORS: Mapping[str, str] = {
    "generator": "connectors.generator:GeneratorSource",
    "cassandra": "connectors.cassandra:CassandraSource",
    "postgres": "connectors.postgres:PostgresSource",
    "sqlite": "connectors.sqlite:SQLiteSource",
}


@dataclass(frozen=True)
class InstalledConnector:
    """A connector found by name: where its Source class is, and which distribution declared it."""

    name: str
    target: str  # package.module:ClassName
    distribution: str
    version: str


def installed_connectors() -> dict[str, list[InstalledConnector]]:
    """Every connector name declared in this Python, with each declaration of it (two or more: a conflict).

    Scanned once per ``sys.path`` in a process: a scan reads every installed distribution's metadata (about 30 ms,
    which each split's load would pay again); a distribution installed into a folder already on the path while the
    process runs is found by the next process."""
    key = tuple(sys.path)
    if key not in _SCANS:
        _SCANS[key] = _scan()
    return {name: list(claims) for name, claims in _SCANS[key].items()}


_SCANS: dict[tuple[str, ...], dict[str, list[InstalledConnector]]] = {}


def _scan() -> dict[str, list[InstalledConnector]]:
    found: dict[str, list[InstalledConnector]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        entry = InstalledConnector(ep.name.lower(), ep.value, dist.name if dist else "?", dist.version if dist else "?")
        if entry not in found.setdefault(entry.name, []):
            found[entry.name].append(entry)
    for name, target in BUILTIN_CONNECTORS.items():
        if not any(e.target == target for e in found.get(name, [])):
            found.setdefault(name, []).append(InstalledConnector(name, target, "splitsource", _version()))
    return found


def _version() -> str:
    from splitsource._version import __version__

    return __version__


def resolve_connector(name: str) -> type[Source[Any, Any, Any, Any]]:
    """The Source class for ``name`` (an installed connector's name, or ``package.module:ClassName``); raises
    :class:`ConnectorNotFoundError` in one line with what was tried."""
    name = name.strip()
    if ":" in name:
        path = name
    else:
        installed = installed_connectors()
        claims = installed.get(name.lower(), [])
        if len(claims) > 1:
            raise ConnectorNotFoundError(
                f"option 'connector': '{name}' is claimed by two connectors: "
                + " and ".join(f"{c.target} ({c.distribution} {c.version})" for c in claims)
                + "; uninstall one, or name the class as package.module:ClassName")
        if not claims:
            raise ConnectorNotFoundError(
                f"option 'connector': '{name}' is neither an installed connector "
                f"({', '.join(sorted(installed))}) nor a 'package.module:ClassName' path")
        path = claims[0].target
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise ConnectorNotFoundError(f"option 'connector': '{name}' is not a 'package.module:ClassName' path")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConnectorNotFoundError(
            f"option 'connector': cannot import module '{module_name}' for connector '{name}': {exc}. "
            "Is the package (and its extra) installed in this Python, and on every executor?"
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise ConnectorNotFoundError(f"option 'connector': '{path}' is not a splitsource.Source subclass")
    return cls
