"""CQL text and checks: quoting, WRITETIME()/TTL() columns, the read permission, pushed predicates, WHERE checks."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from connectors.cassandra._options import CassandraOptions
from connectors.cassandra._session import CassandraAuthorizationError
from splitsource import OptionsError


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_WRITETIME_TYPE = pa.timestamp("us", tz="UTC")


def _cell_converter(arrow: pa.DataType) -> Any:
    """WRITETIME() (bigint microseconds) or TTL() (int seconds) values as an Arrow array."""
    if arrow == _WRITETIME_TYPE:
        return lambda values: pa.array(values, pa.int64()).cast(arrow)
    return lambda values: pa.array(values, arrow)


def _cell_metadata(cluster: Any, table: Any, options: CassandraOptions) -> list[tuple[str, str, str]]:
    """(``WRITETIME`` or ``TTL``, column, output name) for the ``writetime_columns`` and ``ttl_columns`` options;
    a clear error for a column Cassandra keeps no single write time or TTL for."""
    keys = {c.name for c in table.primary_key}
    udts = set(cluster.metadata.keyspaces[options.keyspace].user_types)

    def single_cell(column: str) -> bool:
        cql = str(table.columns[column].cql_type)
        return not cql.startswith(("list<", "set<", "map<")) and cql not in udts and cql != "counter"

    out: list[tuple[str, str, str]] = []
    for option_name, function, suffix in (("writetime_columns", "WRITETIME", "_writetime"),
                                          ("ttl_columns", "TTL", "_ttl")):
        text = getattr(options, option_name)
        if not text:
            continue
        if text == "*":
            columns = [c for c in table.columns if c not in keys and single_cell(c)]
        else:
            columns = [c.strip() for c in text.split(",") if c.strip()]
        for column in columns:
            if column not in table.columns:
                raise OptionsError(f"option '{option_name}': no column {column} in {options.keyspace}."
                                   f"{options.table}; columns: {', '.join(table.columns)}")
            if column in keys:
                raise OptionsError(f"option '{option_name}': {column} is a primary-key column; Cassandra keeps a "
                                   "write time and a TTL only for regular columns")
            if not single_cell(column):
                raise OptionsError(f"option '{option_name}': {column} is a {table.columns[column].cql_type} (not "
                                   "frozen), which has a write time and TTL per element, not one; Cassandra "
                                   f"refuses {function}() on it (freeze it, or leave it out)")
            name = f"{column}{suffix}"
            if name in table.columns:
                raise OptionsError(f"option '{option_name}': the table already has a column {name}")
            out.append((function, column, name))
    return out


def _prepare_metadata(session: Any, query: str, with_cells: bool) -> Any:
    """Prepare the metadata query; a server refusal of WRITETIME()/TTL() names the options."""
    from cassandra import InvalidRequest

    try:
        return session.prepare(query)
    except InvalidRequest as exc:
        if not with_cells:
            raise
        message = getattr(exc, "message", "") or str(exc)
        raise OptionsError(f"options 'writetime_columns'/'ttl_columns': Cassandra refuses them: {message}") from None


def _check_can_read(session: Any, options: CassandraOptions, pk: Sequence[str]) -> None:
    """Read one token of the table: a role that may not read it is refused here, before a copy claims its output,
    not in the middle of reading (preparing a query checks no permission). Only the token is read: no value the
    driver's default decoders could not hold."""
    from cassandra import Unauthorized

    try:
        session.execute(f"SELECT token({', '.join(_quote(c) for c in pk)}) FROM {_quote(options.keyspace)}."
                        f"{_quote(options.table)} LIMIT 1")
    except Unauthorized as exc:
        text = str(exc)
        found = re.search(r'message="(.*)"', text)
        message = found.group(1) if found else text.splitlines()[0]
        raise CassandraAuthorizationError(
            f"user '{options.username or '(none)'}' may not read {options.keyspace}.{options.table}: {message}; "
            f"GRANT SELECT ON TABLE {options.keyspace}.{options.table} (or its keyspace) TO that role") from None


_INTEGERS = frozenset({"int", "bigint", "smallint", "tinyint", "varint", "counter"})
_TEXTS = frozenset({"text", "varchar", "ascii"})


def _cql_literal(value: Any, cql_kind: str, op: str) -> str | None:
    """``value`` as a CQL literal for a column of ``cql_kind`` (``(a, b)`` for IN); None when it is not one this
    connector writes exactly (Spark keeps the filter)."""
    if op == "in":
        items = [_cql_literal(v, cql_kind, "=") for v in value]
        return None if not items or None in items else f"({', '.join(str(i) for i in items)})"
    if cql_kind in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if cql_kind in _TEXTS and isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if cql_kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    if cql_kind == "double" and isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


def _check_where(session: Any, select: str, where: str) -> None:
    """Prepare the split query with ``where``: a restriction the server refuses (a column that needs ALLOW
    FILTERING, a typo) fails here, at planning, naming the option and quoting the server."""
    from cassandra import InvalidRequest
    from cassandra.protocol import SyntaxException

    try:
        prepared = session.prepare(select)
    except (InvalidRequest, SyntaxException) as exc:
        message = getattr(exc, "message", "") or str(exc)
        raise OptionsError(f"option 'where': Cassandra refuses {where!r}: {message}") from None
    if len(prepared.column_metadata) != 2:
        raise OptionsError(f"option 'where': {where!r} has bind markers (?); write the values into it")
