"""Resolve the ``connector`` option: a built-in name or a ``package.module:ClassName`` path."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from splitsource._api import Source
from splitsource._errors import ConnectorNotFoundError

__all__ = ["BUILTIN_CONNECTORS", "resolve_connector"]

# Names, not imports: the framework never imports a connector until a user asks for it.
BUILTIN_CONNECTORS: Mapping[str, str] = {
    "generator": "connectors.generator:GeneratorSource",
    "cassandra": "connectors.cassandra:CassandraSource",
}


def resolve_connector(name: str) -> type[Source[Any, Any, Any, Any]]:
    """The Source class for ``name``; raises :class:`ConnectorNotFoundError` with what was tried."""
    path = BUILTIN_CONNECTORS.get(name.strip().lower(), name.strip())
    module_name, sep, class_name = path.partition(":")
    if not sep or not module_name or not class_name:
        raise ConnectorNotFoundError(
            f"option 'connector': '{name}' is neither a built-in connector "
            f"({', '.join(sorted(BUILTIN_CONNECTORS))}) nor a 'package.module:ClassName' path"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConnectorNotFoundError(
            f"option 'connector': cannot import module '{module_name}' for connector '{name}': {exc}. "
            "Is the package installed in this Python (and on every executor)?"
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise ConnectorNotFoundError(
            f"option 'connector': '{path}' is not a splitsource.Source subclass"
        )
    return cls
