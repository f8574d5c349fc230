"""CQL types to Arrow (and so Spark) types, and the exact conversion of driver values into Arrow arrays.

=====================  ==============================  ================================================
CQL                    Arrow / Spark                   note
=====================  ==============================  ================================================
ascii, text, varchar   string / string
tinyint                int8 / tinyint
smallint               int16 / smallint
int                    int32 / int
bigint, counter        int64 / bigint
varint                 string / string                 arbitrary precision: exact decimal text
decimal                string / string                 arbitrary scale: exact text (``1.5E+3``, ``1E-7``)
float                  float32 / float                 NaN, ±inf and -0.0 kept
double                 float64 / double                NaN, ±inf and -0.0 kept
boolean                bool / boolean
blob                   binary / binary
uuid, timeuuid         string / string                 canonical 36-character form
inet                   string / string                 textual address (``::ffff:1.2.3.4`` kept as is)
timestamp              timestamp[us, UTC] / timestamp  milliseconds in CQL, exact in microseconds at any
                                                       depth; years -290,308..294,247 (beyond: an error
                                                       naming the column and the value)
date                   date32 / date                   the whole CQL range (±5.8 million years)
time                   int64 / bigint                  nanoseconds since midnight
duration               struct<months: int32, days: int32, nanoseconds: int64>
list<T>, set<T>        list<T> / array<T>              sets in the server's (CQL) order
map<K, V>              map<K, V> / map<K, V>           in the server's order
tuple<A, B, ...>       struct<f0: A, f1: B, ...>
user-defined type      struct<field: T, ...>           field names as declared (quoted ones unquoted)
frozen<T>              as T
vector<T, n>           list<T> / array<T>
=====================  ==============================  ================================================

How values stay exact: the driver decodes a ``timestamp`` through a float (``ms / 1000.0``), so inside
collections, tuples and UDTs it is off by microseconds, and past the year 9999 it fails. Top-level timestamp
columns are therefore selected as ``toUnixTimestamp(c)`` (epoch milliseconds, computed by the server), and every
other column is decoded with :func:`exact_type`: the driver's own type tree with each timestamp replaced by a
type that returns the epoch milliseconds as an integer, and each set by a list (the server's order, not Python's
sort). A ``date`` is the driver's day count, never a ``datetime.date``; a UDT is read by position, so field names
that are not Python identifiers (``"class"``, ``"my field"``) keep their values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from connectors._uuids import uuid_text
from splitsource import ValueRangeError

__all__ = ["arrow_type", "column_converter", "exact_protocol_handler", "exact_type", "kind", "select_expression"]

_SIMPLE: dict[str, pa.DataType] = {
    "ascii": pa.string(), "text": pa.string(), "varchar": pa.string(),
    "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(), "counter": pa.int64(),
    "varint": pa.string(), "decimal": pa.string(), "float": pa.float32(), "double": pa.float64(),
    "boolean": pa.bool_(), "blob": pa.binary(), "uuid": pa.string(), "timeuuid": pa.string(),
    "inet": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32(), "time": pa.int64(),
    "duration": pa.struct([("months", pa.int32()), ("days", pa.int32()), ("nanoseconds", pa.int64())]),
}
_TO_TEXT = {"varint", "decimal", "uuid", "timeuuid", "inet"}
# Top-level timestamps as the server's epoch milliseconds: exact at any year, and no datetime per value (a
# third of a read task's time in bench/bench_tools.py's profile).
_SERVER_SIDE = {"timestamp": "toUnixTimestamp({})"}
_INT64 = 1 << 63


def _exact_timestamp_class() -> type:
    from cassandra import cqltypes
    from cassandra.marshal import int64_unpack

    # The leading underscore keeps the driver's metaclass from registering it as *the* timestamp type, and makes
    # the Cython decoder fall back to this ``deserialize`` (it only has fast paths for classes it knows by name).
    class _ExactTimestamp(cqltypes.DateType):
        @staticmethod
        def deserialize(byts: bytes, protocol_version: int) -> int:
            return int(int64_unpack(byts))

    return _ExactTimestamp


_EXACT_TIMESTAMP: type | None = None
_RAW_UUID: type | None = None


def _raw_uuid() -> type:
    """A uuid (or timeuuid) decoded as its 16 bytes: the reader turns a page's worth into canonical text at once
    (:func:`~connectors._uuids.uuid_text`), where the driver would build a ``UUID`` object per value and ``str``
    would format it (about 1.4 s of CPU per million values here)."""
    global _RAW_UUID
    if _RAW_UUID is None:
        from cassandra import cqltypes

        class _RawUUID(cqltypes.UUIDType):  # unregistered, and no Cython fast path by name
            @staticmethod
            def deserialize(byts: bytes, protocol_version: int) -> bytes:
                return bytes(byts)

        _RAW_UUID = _RawUUID
    return _RAW_UUID


def _exact_timestamp() -> type:
    global _EXACT_TIMESTAMP
    if _EXACT_TIMESTAMP is None:
        _EXACT_TIMESTAMP = _exact_timestamp_class()
    return _EXACT_TIMESTAMP


def kind(cql_type: Any) -> str:
    """What a driver ``cqltypes`` class is: ``udt``, ``tuple``, ``frozen``, ``list``, ``set``, ``map``,
    ``vector``, or the CQL name of a simple type. By class, never by name: a UDT may be called ``"list"``."""
    from cassandra import cqltypes

    if issubclass(cql_type, cqltypes.UserType):
        return "udt"
    for base, name in ((cqltypes.TupleType, "tuple"), (cqltypes.FrozenType, "frozen"), (cqltypes.ListType, "list"),
                       (cqltypes.SetType, "set"), (cqltypes.MapType, "map"), (cqltypes.VectorType, "vector")):
        if issubclass(cql_type, base):
            return name
    if issubclass(cql_type, cqltypes.TimeUUIDType):  # the driver derives it from its timestamp type
        return "timeuuid"
    if issubclass(cql_type, (cqltypes.DateType, cqltypes.TimestampType)):
        return "timestamp"
    return str(cql_type.typename).lower()


def _subtypes(cql_type: Any) -> list[Any]:
    if kind(cql_type) == "vector":
        return [cql_type.subtype]
    return list(getattr(cql_type, "subtypes", ()) or ())


_EXACT_CACHE: dict[Any, Any] = {}


def exact_type(cql_type: Any) -> Any:
    """``cql_type`` with every timestamp decoded as integer epoch milliseconds and every set as a list in the
    server's order; the same class when nothing changes."""
    exact = _EXACT_CACHE.get(cql_type)
    if exact is None:
        exact = _EXACT_CACHE[cql_type] = _make_exact(cql_type)
    return exact


def exact_protocol_handler(raw_uuids: bool = False) -> type:
    """The driver's protocol handler (its Cython one where built), decoding result rows with :func:`exact_type`;
    with ``raw_uuids``, a top-level uuid or timeuuid column as its 16 bytes (the read path formats a page of them
    at once; verify's reference keeps the driver's ``UUID`` objects and its own formatting).

    Set it as a session's ``client_protocol_handler``: the server sends each page's column types with the page
    (the driver never asks it to skip them), so the types must be swapped as the page's metadata is read.
    """
    from cassandra.protocol import ProtocolHandler, ResultMessage

    base: Any = ProtocolHandler.message_types_by_opcode[ResultMessage.opcode]

    class _ExactResultMessage(base):
        def recv_results_metadata(self, f: Any, user_type_map: Any) -> None:
            super().recv_results_metadata(f, user_type_map)
            columns: list[Any] | None = getattr(self, "column_metadata", None)
            if columns:
                self.column_metadata = [(*c[:3], _raw_uuid() if raw_uuids and kind(c[3]) in ("uuid", "timeuuid")
                                         else exact_type(c[3])) for c in columns]

    opcodes = dict(ProtocolHandler.message_types_by_opcode)
    opcodes[ResultMessage.opcode] = _ExactResultMessage
    return type("ExactProtocolHandler", (ProtocolHandler,), {"message_types_by_opcode": opcodes})


def _make_exact(cql_type: Any) -> Any:
    from cassandra import cqltypes

    k = kind(cql_type)
    if k == "timestamp":
        return _exact_timestamp()
    subtypes = _subtypes(cql_type)
    if not subtypes:
        return cql_type
    exact = [exact_type(t) for t in subtypes]
    if k == "set":  # same wire format as a list; a list keeps the server's order
        return cqltypes.ListType.apply_parameters(exact)
    if all(a is b for a, b in zip(exact, subtypes, strict=True)):
        return cql_type
    if k == "vector":
        return type("_ExactVector", (cql_type,), {"subtype": exact[0]})
    # a subclass keeps field names, UDT keyspace and name; the underscore keeps it out of the driver's registry
    return type("_Exact" + k.capitalize(), (cql_type,), {"subtypes": tuple(exact)})


def arrow_type(cql_type: Any, unit: str = "us") -> pa.DataType:
    """Arrow type of a driver ``cqltypes`` class (``ColumnMetadata.cql_type`` parsed by the driver); ``unit``: of
    timestamps (the ``timestamp_unit`` option)."""
    k = kind(cql_type)
    subtypes = _subtypes(cql_type)
    if k == "frozen":
        return arrow_type(subtypes[0], unit)
    if k in ("list", "set", "vector"):
        return pa.list_(arrow_type(subtypes[0], unit))
    if k == "map":
        return pa.map_(arrow_type(subtypes[0], unit), arrow_type(subtypes[1], unit))
    if k == "tuple":
        return pa.struct([(f"f{i}", arrow_type(t, unit)) for i, t in enumerate(subtypes)])
    if k == "udt":
        return pa.struct([(str(f), arrow_type(t, unit)) for f, t in zip(cql_type.fieldnames, subtypes, strict=True)])
    if k == "timestamp":
        return pa.timestamp(unit, tz="UTC")
    if k in _SIMPLE:
        return _SIMPLE[k]
    raise TypeError(f"CQL type {cql_type.cql_parameterized_type()} is not supported")


def select_expression(cql_type: Any, column_sql: str) -> str:
    """The CQL selector that reads a top-level column (quoted ``column_sql``) in the form ``column_converter``
    expects."""
    template = _SERVER_SIDE.get(kind(cql_type))
    return template.format(column_sql) if template else column_sql


_MIN_MS, _MAX_MS = -(_INT64 // 1000), (_INT64 - 1) // 1000  # the epoch milliseconds timestamp[us] can hold


def _ms_to_us(ms: int) -> int:
    us = ms * 1000
    if not -_INT64 <= us < _INT64:
        raise ValueRangeError(f"timestamp {ms} ms since the epoch is outside timestamp[us]'s range (about years "
                              "-290308..294247)")
    return us


def _ms_to_us_array(values: list[Any], target: pa.DataType) -> pa.Array:
    """Epoch milliseconds (or None) as a timestamp[us] array, vectorised with numpy, which pyarrow has loaded
    already (pyarrow.compute would cost every worker 9 MB of memory for this one multiplication)."""
    ms = pa.array(values, pa.int64())  # a fresh array: offset 0, and 0 in the slots of nulls
    data = np.frombuffer(ms.buffers()[1], dtype=np.int64, count=len(ms))
    if len(data) and not (_MIN_MS <= data.min() and data.max() <= _MAX_MS):
        for row, v in enumerate(values):
            if v is not None:
                try:
                    _ms_to_us(v)  # raises, naming the first value out of range
                except ValueRangeError as exc:
                    raise ValueRangeError(str(exc), row) from None
    return pa.Array.from_buffers(target, len(ms), [ms.buffers()[0], pa.py_buffer(data * 1000)],
                                 null_count=ms.null_count)


def _value_converter(cql_type: Any, unit: str = "us") -> Callable[[Any], Any] | None:
    """A function turning one value decoded with :func:`exact_type` into what ``pa.array`` takes for
    :func:`arrow_type`; None: the value is taken as it is."""
    k = kind(cql_type)
    subtypes = _subtypes(cql_type)
    if k == "frozen":
        return _value_converter(subtypes[0], unit)
    if k == "timestamp":
        return None if unit == "ms" else (lambda v: None if v is None else _ms_to_us(v))
    if k in _TO_TEXT:
        return lambda v: None if v is None else str(v)
    if k == "time":
        return lambda v: None if v is None else int(getattr(v, "nanosecond_time", v))
    if k == "date":
        return lambda v: None if v is None else int(getattr(v, "days_from_epoch", v))
    if k == "duration":
        return lambda v: None if v is None else {"months": v.months, "days": v.days, "nanoseconds": v.nanoseconds}
    if k in ("list", "set", "vector"):
        inner = _value_converter(subtypes[0], unit)
        if inner is None:
            return lambda v: None if v is None else list(v)
        return lambda v: None if v is None else [inner(x) for x in v]
    if k == "map":
        kc, vc = _value_converter(subtypes[0], unit), _value_converter(subtypes[1], unit)
        return lambda v: None if v is None else [
            (kc(key) if kc else key, vc(x) if vc else x) for key, x in v.items()
        ]
    if k in ("tuple", "udt"):
        names = [f"f{i}" for i in range(len(subtypes))] if k == "tuple" else [str(f) for f in cql_type.fieldnames]
        convs = [_value_converter(t, unit) for t in subtypes]

        def struct(v: Any) -> Any:
            if v is None:
                return None
            # by position: a UDT's named tuple renames fields that are not identifiers, and may be shorter than
            # the type when fields were added after the value was written
            return {n: (None if i >= len(v) or v[i] is None else c(v[i]) if c else v[i])
                    for i, (n, c) in enumerate(zip(names, convs, strict=True))}

        return struct
    return None


def column_converter(cql_type: Any, name: str, unit: str = "us") -> Callable[[list[Any]], pa.Array]:
    """A function turning one column's driver values, selected with :func:`select_expression` and decoded with
    :func:`exact_type`, into an Arrow array; a value that does not fit fails, naming the column and the value (and
    its row in the batch, where known)."""
    target = arrow_type(cql_type, unit)
    k = kind(cql_type)
    convert = None if k in _SERVER_SIDE else _value_converter(cql_type, unit)
    label = f"column '{name}' ({cql_type.cql_parameterized_type()})"

    def to_array(values: list[Any]) -> pa.Array:
        try:
            if k == "timestamp" and unit == "ms":  # epoch milliseconds: timestamp[ms] holds every one
                return pa.array(values, pa.int64()).view(target)
            if k == "timestamp":  # epoch milliseconds; checked: a value past Arrow's range fails, naming it
                return _ms_to_us_array(values, target)
            if k in ("uuid", "timeuuid") and isinstance(next((v for v in values if v is not None), None), bytes):
                # decoded raw (exact_protocol_handler(raw_uuids=True))
                return uuid_text(pa.array(values, pa.binary(16)))
            if convert is not None:
                try:
                    values = [convert(v) for v in values]
                except ValueRangeError:
                    for row, v in enumerate(values):  # again, to name the row
                        try:
                            convert(v)
                        except ValueRangeError as exc:
                            raise ValueRangeError(str(exc), row) from None
                    raise
            return pa.array(values, type=target)
        except ValueRangeError as exc:
            raise ValueRangeError(f"{label}: {exc}", exc.row) from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            raise ValueRangeError(f"{label}: a value does not fit {target}: {exc}") from exc

    return to_array
