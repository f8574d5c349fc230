"""The rows of a table as ``splitsource verify`` compares them: a plain scan, the driver's own values.

Deliberately apart from the read path: a ``SELECT`` of the plain columns over the whole table, or over one of
verify's parts (a token range of its own arithmetic, never the enumerator's splits; the driver pages through it), no
``toUnixTimestamp``, no record emitter, no Arrow conversion; a top-level uuid or timeuuid comes as the server's text
of it (:func:`reference_selector`). The driver's values are turned into verify's plain
form (see ``Source.reference_rows``) by :func:`plainer`, a separate walk of the CQL type made once per column, so a
converter bug in ``_types.column_converter`` is not repeated here. The only piece shared with the read path is
:func:`~connectors.cassandra._types.exact_protocol_handler` (without its raw uuids), which makes the driver hand
over a timestamp as its integer milliseconds instead of a float-derived ``datetime``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from connectors.cassandra._types import exact_protocol_handler, kind

__all__ = ["plain", "plainer", "reference_rows", "reference_selector"]


def plain(value: Any, cql_type: Any) -> Any:
    """One driver value of ``cql_type`` in verify's plain form."""
    if value is None:
        return None
    convert = plainer(cql_type)
    return value if convert is None else convert(value)


def _nullable(convert: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    if convert is None:
        return lambda v: v
    return lambda v: None if v is None else convert(v)


def plainer(cql_type: Any, unit: str = "us") -> Callable[[Any], Any] | None:
    """The function from a driver value (not null) of ``cql_type`` to verify's plain form; None where the driver's
    value is already plain. Made once per column, so a row costs a call only for the columns that change."""
    k = kind(cql_type)
    if k == "frozen":
        return plainer(cql_type.subtypes[0], unit)
    if k == "timestamp":  # integer epoch milliseconds (exact protocol handler), the plain form of timestamp[ms]
        return None if unit == "ms" else (lambda v: v * 1000)  # ...or microseconds
    if k == "date":
        return lambda v: v.days_from_epoch
    if k == "time":
        return lambda v: v.nanosecond_time
    if k == "duration":
        return lambda v: {"months": v.months, "days": v.days, "nanoseconds": v.nanoseconds}
    if k in ("varint", "decimal", "uuid", "timeuuid", "inet"):
        return str
    if k in ("vector", "list", "set"):
        element = _nullable(plainer(cql_type.subtype if k == "vector" else cql_type.subtypes[0], unit))
        return lambda v: [element(x) for x in v]
    if k == "map":
        key, item = (_nullable(plainer(t, unit)) for t in cql_type.subtypes)
        return lambda v: [(key(a), item(b)) for a, b in v.items()]
    if k in ("tuple", "udt"):
        names = [str(n) for n in cql_type.fieldnames] if k == "udt" else [f"f{i}" for i in
                                                                          range(len(cql_type.subtypes))]
        fields = list(zip(names, [_nullable(plainer(t, unit)) for t in cql_type.subtypes], strict=True))

        def record(v: Any) -> dict[str, Any]:
            values = list(v)
            values += [None] * (len(fields) - len(values))
            return {name: convert(x) for (name, convert), x in zip(fields, values, strict=True)}

        return record
    return None


def reference_selector(quoted: str, column_kind: str | None) -> str:
    """How verify selects a column of ``column_kind``: a top-level ``uuid`` or ``timeuuid`` as the server's own
    text of it (``CAST(c AS text)``, Java's ``UUID.toString``: the canonical lower-case form, as Python's ``str``
    writes it), which builds no ``uuid.UUID`` per value in this process (a quarter of verify's CPU on the benchmark
    table) and shares nothing with the read path's raw uuids; every other column as itself."""
    return f"CAST({quoted} AS text)" if column_kind in ("uuid", "timeuuid") else quoted


def reference_rows(session: Any, keyspace: str, table: str, selectors: list[str], fetch_size: int,
                   restrictions: Sequence[str] = (), unit: str = "us") -> Iterator[tuple[Any, ...]]:
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
        converters: list[tuple[int, Callable[[Any], Any]]] | None = None
        for row in result:
            if converters is None:  # the columns whose driver values are not plain already
                converters = [(i, f) for i, t in enumerate(result.column_types) if (f := plainer(t, unit)) is not None]
            if converters:
                values = list(row)
                for i, convert in converters:
                    if values[i] is not None:
                        values[i] = convert(values[i])
                yield tuple(values)
            else:
                yield tuple(row)
