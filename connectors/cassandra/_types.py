"""CQL types to Arrow (and so Spark) types, and the conversion of driver values into Arrow arrays.

=====================  ============================  ===================================================
CQL                    Arrow / Spark                 note
=====================  ============================  ===================================================
ascii, text, varchar   string / string
tinyint                int8 / tinyint
smallint               int16 / smallint
int                    int32 / int
bigint, counter        int64 / bigint
varint                 string / string               arbitrary precision: kept exact as decimal text
decimal                string / string               arbitrary scale: kept exact as decimal text
float                  float32 / float
double                 float64 / double
boolean                bool / boolean
blob                   binary / binary
uuid, timeuuid         string / string               canonical 36-character form (read as CAST(c AS text))
inet                   string / string               textual address
timestamp              timestamp[us, UTC] / timestamp  milliseconds in CQL, exact in microseconds (read as
                                                     toUnixTimestamp(c): any year, not only datetime's 1-9999)
date                   date32 / date                 dates outside Arrow's range raise an error naming the column
time                   int64 / bigint                nanoseconds since midnight
duration               struct<months:int32, days:int32, nanoseconds:int64>
list<T>, set<T>        list<T> / array<T>            sets in CQL order (sorted)
map<K, V>              map<K, V> / map<K, V>
tuple<A, B, ...>       struct<f0: A, f1: B, ...>
user-defined type      struct<field: T, ...>
frozen<T>              as T
vector<T, n>           list<T> / array<T>
=====================  ============================  ===================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["arrow_type", "column_converter", "select_expression"]

_SIMPLE: dict[str, pa.DataType] = {
    "ascii": pa.string(), "text": pa.string(), "varchar": pa.string(),
    "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(), "counter": pa.int64(),
    "varint": pa.string(), "decimal": pa.string(), "float": pa.float32(), "double": pa.float64(),
    "boolean": pa.bool_(), "blob": pa.binary(), "uuid": pa.string(), "timeuuid": pa.string(),
    "inet": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32(), "time": pa.int64(),
    "duration": pa.struct([("months", pa.int32()), ("days", pa.int32()), ("nanoseconds", pa.int64())]),
}
_TO_TEXT = {"varint", "decimal", "uuid", "timeuuid", "inet"}
# Top-level columns the server sends in a form the driver decodes without a Python object per value: a uuid as
# its text (not a uuid.UUID, then str()), a timestamp as epoch milliseconds (not a datetime). Measured in
# bench/bench_tools.py's profile: these two conversions were a third of a read task's time.
_SERVER_SIDE = {"uuid": "CAST({} AS text)", "timeuuid": "CAST({} AS text)", "timestamp": "toUnixTimestamp({})"}


def _name(cql_type: Any) -> str:
    name = getattr(cql_type, "typename", None) or getattr(cql_type, "cassname", None) or type(cql_type).__name__
    return str(name).lower()


def _is_vector(name: str) -> bool:
    return name == "vector" or name.endswith("vectortype")


def arrow_type(cql_type: Any) -> pa.DataType:
    """Arrow type of a driver ``cqltypes`` class (``ColumnMetadata.cql_type`` parsed by the driver)."""
    name = _name(cql_type)
    subtypes = list(getattr(cql_type, "subtypes", ()) or ())
    if name == "frozen":
        return arrow_type(subtypes[0])
    if name in ("list", "set"):
        return pa.list_(arrow_type(subtypes[0]))
    if name == "map":
        return pa.map_(arrow_type(subtypes[0]), arrow_type(subtypes[1]))
    if name == "tuple":
        return pa.struct([(f"f{i}", arrow_type(t)) for i, t in enumerate(subtypes)])
    if _is_vector(name):
        return pa.list_(arrow_type(getattr(cql_type, "subtype", subtypes[0] if subtypes else None)))
    if hasattr(cql_type, "fieldnames") and cql_type.fieldnames:  # a user-defined type
        return pa.struct([(str(f), arrow_type(t)) for f, t in zip(cql_type.fieldnames, subtypes, strict=True)])
    if name in _SIMPLE:
        return _SIMPLE[name]
    raise TypeError(f"CQL type {name} is not supported")


def select_expression(cql_type: Any, column_sql: str) -> str:
    """The CQL selector that reads a top-level column (quoted ``column_sql``) in the form ``column_converter``
    expects."""
    template = _SERVER_SIDE.get(_name(cql_type))
    return template.format(column_sql) if template else column_sql


def _value_converter(cql_type: Any) -> Callable[[Any], Any] | None:
    """A function turning one driver value into what ``pa.array`` accepts for :func:`arrow_type`; None: as is."""
    name = _name(cql_type)
    subtypes = list(getattr(cql_type, "subtypes", ()) or ())
    if name == "frozen":
        return _value_converter(subtypes[0])
    if name in _TO_TEXT:
        return lambda v: None if v is None else str(v)
    if name == "time":
        return lambda v: None if v is None else int(getattr(v, "nanosecond_time", v))
    if name == "date":
        return lambda v: None if v is None else v.date() if hasattr(v, "date") and not hasattr(v, "year") else v
    if name == "duration":
        return lambda v: None if v is None else {"months": v.months, "days": v.days, "nanoseconds": v.nanoseconds}
    if name in ("list", "set") or _is_vector(name):
        inner = _value_converter(getattr(cql_type, "subtype", None) or subtypes[0])
        if inner is None:
            return lambda v: None if v is None else list(v)
        return lambda v: None if v is None else [inner(x) for x in v]
    if name == "map":
        kc, vc = _value_converter(subtypes[0]), _value_converter(subtypes[1])
        return lambda v: None if v is None else [
            (kc(k) if kc else k, vc(x) if vc else x) for k, x in v.items()
        ]
    if name == "tuple":
        convs = [_value_converter(t) for t in subtypes]
        return lambda v: None if v is None else {
            f"f{i}": (c(x) if c else x) for i, (c, x) in enumerate(zip(convs, v, strict=False))
        }
    if hasattr(cql_type, "fieldnames") and cql_type.fieldnames:
        fields = [str(f) for f in cql_type.fieldnames]
        convs = [_value_converter(t) for t in subtypes]

        def udt(v: Any) -> Any:
            if v is None:
                return None
            values = {f: getattr(v, f, None) for f in fields}
            return {f: (c(values[f]) if c else values[f]) for f, c in zip(fields, convs, strict=True)}

        return udt
    return None


def column_converter(cql_type: Any, name: str) -> Callable[[list[Any]], pa.Array]:
    """A function turning one column's driver values, selected with :func:`select_expression`, into an Arrow
    array; errors name the column."""
    target = arrow_type(cql_type)
    kind = _name(cql_type)
    convert = None if kind in _SERVER_SIDE else _value_converter(cql_type)

    def to_array(values: list[Any]) -> pa.Array:
        try:
            if kind == "timestamp":  # epoch milliseconds; checked: a value past Arrow's range fails, naming it
                return pc.multiply_checked(pa.array(values, pa.int64()), 1000).cast(target)
            if convert is not None:
                values = [convert(v) for v in values]
            return pa.array(values, type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            raise ValueError(f"column '{name}' ({_name(cql_type)}): value does not fit {target}: {exc}") from exc

    return to_array
