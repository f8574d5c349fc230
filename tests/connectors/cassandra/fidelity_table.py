"""A table holding every CQL type with its edge values, and what each value must become: the ground truth.

Each column lists the values the test inserts (``INSERTED``) and, written out by hand, what JSON lines must hold for
them (``JSON``); ``plain`` derives what Parquet, Arrow and Spark must hold by plain arithmetic on the inserted
values. Nothing here goes through splitsource's own converters.
"""

from __future__ import annotations

import math
import struct
import uuid
from decimal import Decimal
from typing import Any

KS = "fidelity"
TABLE = "all_types"
ROW_IDS = [1, 2, 3, 4]
UDT_DDL = f'CREATE TYPE IF NOT EXISTS {KS}."odd-type" ("class" text, "my field" int, plain timestamp, "Mixed" date)'
UU = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
TU = uuid.UUID("e4a0c6a0-5e1b-11ef-8000-000000000001")
DAY_MIN, DAY_MAX = -(2**31), 2**31 - 1
Y10000_MS = 253_402_300_800_000  # +10000-01-01T00:00:00Z
Y9999_LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
BEFORE_YEAR_1_MS = -62_135_596_800_001  # 0000-12-31T23:59:59.999Z
FAR_MS = -9_223_372_036_854_775  # the earliest millisecond timestamp[us] holds: -290308-12-21T19:59:05.225Z
NAN = "NaN"


class Udt(dict[str, Any]):
    """A UDT value (written as a CQL literal, since the driver cannot bind quoted field names by attribute)."""


class Days(int):
    """A date inside a UDT literal: CQL reads an integer date literal as days since the epoch plus 2**31."""


def duration(months: int, days: int, nanos: int) -> Any:
    from cassandra.util import Duration

    return Duration(months, days, nanos)


# name, CQL type, inserted values per row (ids 1..4), JSON lines values per row
COLUMNS: list[tuple[str, str, list[Any], list[Any]]] = [
    ("asci", "ascii", ["plain", "", "\x00\x7f", None], ["plain", "", "\x00\x7f", None]),
    ("txt", "text", ['ü日本 "q", \n\r', "line\u2028sep\u2029para\x85", "", None],
     ['ü日本 "q", \n\r', "line\u2028sep\u2029para\x85", "", None]),
    ("ti", "tinyint", [-128, 127, 0, None], [-128, 127, 0, None]),
    ("si", "smallint", [-32768, 32767, 0, None], [-32768, 32767, 0, None]),
    ("i", "int", [-(2**31), 2**31 - 1, 0, None], [-(2**31), 2**31 - 1, 0, None]),
    ("bi", "bigint", [-(2**63), 2**63 - 1, 0, None], [-(2**63), 2**63 - 1, 0, None]),
    ("vi", "varint", [-(10**40), 10**40 + 1, 0, None], [str(-(10**40)), str(10**40 + 1), "0", None]),
    ("dc", "decimal", [Decimal("-1.5E+3"), Decimal("1E-7"), Decimal("123456789012345678901234567890.123456789"), None],
     ["-1.5E+3", "1E-7", "123456789012345678901234567890.123456789", None]),
    ("f", "float", [math.nan, math.inf, -0.0, None], [NAN, "Infinity", -0.0, None]),
    ("db", "double", [-math.inf, 5e-324, 0.1, None], ["-Infinity", 5e-324, 0.1, None]),
    ("bo", "boolean", [True, False, False, None], [True, False, False, None]),
    ("bl", "blob", [b"\x00\xff", b"", b"abc", None], ["AP8=", "", "YWJj", None]),
    ("uu", "uuid", [UU, UU, UU, None], [str(UU), str(UU), str(UU), None]),
    ("tu", "timeuuid", [TU, TU, TU, None], [str(TU), str(TU), str(TU), None]),
    ("ip", "inet", ["::ffff:1.2.3.4", "2001:db8::1", "127.0.0.1", None],
     ["::ffff:1.2.3.4", "2001:db8::1", "127.0.0.1", None]),
    ("ts", "timestamp", [Y10000_MS, BEFORE_YEAR_1_MS, FAR_MS, None],
     ["+10000-01-01T00:00:00.000000Z", "0000-12-31T23:59:59.999000Z", "-290308-12-21T19:59:05.225000Z", None]),
    ("dt", "date", [DAY_MIN, DAY_MAX, 0, None], ["-5877641-06-23", "+5881580-07-11", "1970-01-01", None]),
    ("tm", "time", [0, 86_399_999_999_999, 45_296_123_456_789, None],
     [0, 86_399_999_999_999, 45_296_123_456_789, None]),
    ("du", "duration", [duration(1, 2, 3), duration(-14, -3, -3_723_000_000_004), duration(0, 0, 0), None],
     ["P1M2DT0.000000003S", "-P1Y2M3DT1H2M3.000000004S", "PT0S", None]),
    ("l", "list<text>", [["a", 'b,"c"'], ["\u2028"], None, None], [["a", 'b,"c"'], ["\u2028"], None, None]),
    ("st", "set<int>", [{3, 1, 2}, {-5}, None, None], [[1, 2, 3], [-5], None, None]),
    ("mp", "map<text, int>", [{"é": 2, "k": 1}, {"": 0}, None, None], [{"k": 1, "é": 2}, {"": 0}, None, None]),
    ("lts", "list<timestamp>", [[Y9999_LAST_MS, 1], [Y10000_MS], None, None],
     [["9999-12-31T23:59:59.999000Z", "1970-01-01T00:00:00.001000Z"], ["+10000-01-01T00:00:00.000000Z"], None, None]),
    ("mdl", "map<int, frozen<list<date>>>", [{1: [DAY_MIN, 0]}, {-1: []}, None, None],
     [{"1": ["-5877641-06-23", "1970-01-01"]}, {"-1": []}, None, None]),
    ("tp", "tuple<timestamp, date, text>", [(Y10000_MS, DAY_MAX, "x"), (BEFORE_YEAR_1_MS, None, None), None, None],
     [{"f0": "+10000-01-01T00:00:00.000000Z", "f1": "+5881580-07-11", "f2": "x"},
      {"f0": "0000-12-31T23:59:59.999000Z", "f1": None, "f2": None}, None, None]),
    ("ud", 'frozen<"odd-type">',
     [Udt({"class": "c", "my field": 5, "plain": Y9999_LAST_MS, "Mixed": Days(DAY_MAX)}),
      Udt({"class": None, "my field": -1, "plain": Y10000_MS, "Mixed": None}), None, None],
     [{"class": "c", "my field": 5, "plain": "9999-12-31T23:59:59.999000Z", "Mixed": "+5881580-07-11"},
      {"class": None, "my field": -1, "plain": "+10000-01-01T00:00:00.000000Z", "Mixed": None}, None, None]),
    ("lud", 'list<frozen<"odd-type">>',
     [[Udt({"class": "in list", "my field": 0, "plain": 1, "Mixed": Days(1)})], None, None, None],
     [[{"class": "in list", "my field": 0, "plain": "1970-01-01T00:00:00.001000Z", "Mixed": "1970-01-02"}], None, None,
      None]),
    ("deep", "list<frozen<map<text, frozen<tuple<timestamp, date>>>>>",
     [[{"k": (Y10000_MS, DAY_MIN)}], None, None, None],
     [[{"k": {"f0": "+10000-01-01T00:00:00.000000Z", "f1": "-5877641-06-23"}}], None, None, None]),
    ("fl", "frozen<list<int>>", [[], [1], None, None], [[], [1], None, None]),
    ("fs", "frozen<set<text>>", [set(), {"b", "a"}, None, None], [[], ["a", "b"], None, None]),
]
# vectors live in a keyspace of their own: DataStax Bulk Loader 1.10's driver cannot parse a vector type, and then
# drops the metadata of the whole keyspace
VECTOR_KS = "fidelity_vectors"
VECTOR_COLUMNS: list[tuple[str, str, list[Any], list[Any]]] = [
    ("vec", "vector<float, 3>", [[1.5, -0.0, math.nan], [0.1, 1e-45, -1.0], None, None],
     [[1.5, -0.0, NAN], [0.1, 1e-45, -1.0], None, None]),
    ("vecd", "vector<double, 2>", [[5e-324, -math.inf], [0.1, 1.0], None, None],
     [[5e-324, "-Infinity"], [0.1, 1.0], None, None]),
]


def cql_literal(value: Any) -> str:
    """A UDT value as a CQL literal (the only value here that is not bound)."""
    if value is None:
        return "null"
    if isinstance(value, Udt):
        return "{" + ", ".join(f'"{k}": {cql_literal(v)}' for k, v in value.items()) + "}"
    if isinstance(value, Days):
        return str(value + 2**31)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list):
        return "[" + ", ".join(cql_literal(v) for v in value) + "]"
    return str(value)


def create_and_load(session: Any, ks: str = KS, columns: list[tuple[str, str, list[Any], list[Any]]] = COLUMNS) -> None:
    from cassandra.util import Date

    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute(f"DROP TABLE IF EXISTS {ks}.{TABLE}")
    if ks == KS:
        session.execute(f"DROP TYPE IF EXISTS {ks}.\"odd-type\"")
        session.execute(UDT_DDL)
    session.execute(f"CREATE TABLE {ks}.{TABLE} (id int PRIMARY KEY, "
                    + ", ".join(f"{n} {t}" for n, t, _, _ in columns) + ")")
    bound = [(n, t) for n, t, _, _ in columns if "odd-type" not in t]
    insert = session.prepare(f"INSERT INTO {ks}.{TABLE} (id, {', '.join(n for n, _ in bound)}) VALUES "
                             f"(?, {', '.join('?' for _ in bound)})")

    def bind(value: Any, cql: str) -> Any:
        if value is None:
            return None
        if cql == "date":
            return Date(value)
        if cql.startswith("map<int, frozen<list<date>>>"):
            return {k: [Date(d) for d in v] for k, v in value.items()}
        if cql.startswith("tuple<timestamp, date"):
            return (value[0], None if value[1] is None else Date(value[1]), value[2])
        if cql.startswith("list<frozen<map<text, frozen<tuple"):
            return [{k: (t[0], Date(t[1])) for k, t in m.items()} for m in value]
        return value

    for row, rid in enumerate(ROW_IDS):
        session.execute(insert, [rid, *[bind(values[row], t) for n, t, values, _ in columns if "odd-type" not in t]])
        for n, t, values, _ in columns:
            if "odd-type" in t and values[row] is not None:
                session.execute(f"UPDATE {ks}.{TABLE} SET {n} = {cql_literal(values[row])} WHERE id = {rid}")


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _plain(value: Any, cql: str) -> Any:
    """What Arrow (Parquet, Spark) must hold for an inserted value, as plain Python values (timestamps in
    microseconds, dates in days, structs as dicts, maps as (key, value) lists, floats as floats)."""
    if value is None:
        return None
    if cql == "timestamp":
        return value * 1000
    if cql == "float":
        return _f32(value)
    if cql.startswith("vector<float"):
        return [_f32(v) for v in value]
    if cql.startswith("vector<double"):
        return list(value)
    if cql == "duration":
        return {"months": value.months, "days": value.days, "nanoseconds": value.nanoseconds}
    if cql in ("varint", "decimal", "uuid", "timeuuid", "inet"):
        return str(value)
    if cql.startswith(("set<", "frozen<set<")):
        return sorted(value)
    if cql.startswith("map<text, int>"):
        return sorted(value.items(), key=lambda kv: kv[0].encode())
    if cql.startswith("map<int, frozen<list<date>>>"):
        return [(k, v) for k, v in value.items()]
    if cql.startswith("tuple<timestamp, date, text>"):
        return {"f0": value[0] * 1000, "f1": value[1], "f2": value[2]}
    if "odd-type" in cql and isinstance(value, list):
        return [_plain(v, 'frozen<"odd-type">') for v in value]
    if "odd-type" in cql:
        return {"class": value["class"], "my field": value["my field"],
                "plain": None if value["plain"] is None else value["plain"] * 1000,
                "Mixed": None if value["Mixed"] is None else int(value["Mixed"])}
    if cql.startswith("list<timestamp>"):
        return [v * 1000 for v in value]
    if cql.startswith("list<frozen<map<text, frozen<tuple"):
        return [[(k, {"f0": t[0] * 1000, "f1": t[1]}) for k, t in m.items()] for m in value]
    return value


def expected_plain(columns: list[tuple[str, str, list[Any], list[Any]]] = COLUMNS) -> dict[int, dict[str, Any]]:
    return {rid: {"id": rid, **{n: _plain(values[row], t) for n, t, values, _ in columns}}
            for row, rid in enumerate(ROW_IDS)}


def expected_json(columns: list[tuple[str, str, list[Any], list[Any]]] = COLUMNS) -> dict[int, dict[str, Any]]:
    return {rid: {"id": rid, **{n: js[row] for n, _, _, js in columns}} for row, rid in enumerate(ROW_IDS)}


def same(got: Any, want: Any) -> bool:
    """Equality where NaN equals NaN and -0.0 differs from 0.0, at any depth; float32 columns compare at float32."""
    if isinstance(want, float) and isinstance(got, float):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    if isinstance(want, dict) and isinstance(got, dict):
        return list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        return len(got) == len(want) and all(same(a, b) for a, b in zip(got, want, strict=True))
    return type(got) is type(want) and got == want
