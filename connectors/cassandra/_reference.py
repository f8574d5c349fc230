"""The rows of a table as ``splitsource verify`` compares them: a plain scan, the driver's own values.

Deliberately apart from the read path: one ``SELECT`` of the plain columns over the whole table (the driver pages
through it), no splits, no ``toUnixTimestamp``, no record emitter, no Arrow conversion. The driver's values are
turned into verify's plain form (see ``Source.reference_rows``) by :func:`plain`, a separate walk of the CQL type,
so a converter bug in ``_types.column_converter`` is not repeated here. The only piece shared with the read path
is :func:`~connectors.cassandra._types.exact_protocol_handler`, which makes the driver hand over a timestamp as
its integer milliseconds instead of a float-derived ``datetime``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from connectors.cassandra._types import exact_protocol_handler, kind

__all__ = ["plain", "reference_rows"]


def plain(value: Any, cql_type: Any) -> Any:
    """One driver value of ``cql_type`` in verify's plain form."""
    if value is None:
        return None
    k = kind(cql_type)
    if k == "frozen":
        return plain(value, cql_type.subtypes[0])
    if k == "timestamp":
        return value * 1000  # integer epoch milliseconds (exact protocol handler) to microseconds
    if k == "date":
        return value.days_from_epoch
    if k == "time":
        return value.nanosecond_time
    if k == "duration":
        return {"months": value.months, "days": value.days, "nanoseconds": value.nanoseconds}
    if k in ("varint", "decimal", "uuid", "timeuuid", "inet"):
        return str(value)
    if k == "vector":
        return [plain(x, cql_type.subtype) for x in value]
    if k in ("list", "set"):
        return [plain(x, cql_type.subtypes[0]) for x in value]
    if k == "map":
        key_type, item_type = cql_type.subtypes
        return [(plain(key, key_type), plain(item, item_type)) for key, item in value.items()]
    if k in ("tuple", "udt"):
        names = cql_type.fieldnames if k == "udt" else [f"f{i}" for i in range(len(cql_type.subtypes))]
        padded = list(value) + [None] * (len(cql_type.subtypes) - len(value))
        return {str(name): plain(padded[i], t) for i, (name, t) in enumerate(zip(names, cql_type.subtypes,
                                                                                 strict=True))}
    return value


def reference_rows(session: Any, keyspace: str, table: str, selectors: list[str], fetch_size: int,
                   restrictions: Sequence[str] = ()) -> Iterator[tuple[Any, ...]]:
    """Every row of ``keyspace.table`` (``selectors``: quoted columns, ``WRITETIME(..)``, ``TTL(..)``), in verify's
    plain form: one scan of the whole table, or one per WHERE clause in ``restrictions`` (a partial export: token
    ranges, the ``where`` option). A write time is a bigint of microseconds: already the plain form of a
    timestamp."""
    from cassandra.query import SimpleStatement

    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    session.client_protocol_handler = exact_protocol_handler()  # rows come as tuples: connect() sets tuple_factory
    select = f"SELECT {', '.join(selectors)} FROM {quote(keyspace)}.{quote(table)}"
    for where in restrictions or [""]:
        statement = SimpleStatement(f"{select} WHERE {where}" if where else select, fetch_size=fetch_size)
        result = session.execute(statement)
        types: list[Any] | None = None
        for row in result:
            if types is None:
                types = list(result.column_types)
            yield tuple(plain(v, t) for v, t in zip(row, types, strict=True))
