"""Exact text for Arrow values: what JSON lines and CSV part files hold, and how verify reads them back.

Every rule is integer arithmetic on Arrow's stored values, so nothing overflows where Python's ``datetime`` would
(years outside 1..9999) and nothing goes through a float where it should not:

- ``date``: ISO 8601, ``YYYY-MM-DD``; years past 9999 with a ``+`` and years before 0 with a ``-`` (expanded
  years, as DataStax Bulk Loader and ``java.time`` print them): ``+10000-01-01``, ``-0001-12-31``;
- ``timestamp`` with a zone: the instant in UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (as many fraction digits as the
  unit has); without a zone, the same without ``Z``;
- ``time``: ``HH:MM:SS.ffffff`` (as many fraction digits as the unit has), the time of day;
- a ``struct<months: int32, days: int32, nanoseconds: int64>`` (a CQL ``duration``): ISO 8601 duration text,
  ``P1Y2M3DT4H5M6.000000007S``, ``-P1M``, ``PT0S``;
- floating point: the shortest text that reads back as the same value (``0.1`` for a float32 0.1), always with a
  ``.`` or an exponent, ``NaN``, ``Infinity`` and ``-Infinity`` (as Java and DataStax Bulk Loader print them);
  JSON has no NaN or infinity, so JSON lines holds these three as strings;
- binary: base64; nested values in CSV: their JSON text; a map in JSON: an object whose keys are the keys' text.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "days_from_civil",
    "is_duration",
    "iso_date",
    "iso_duration",
    "iso_time",
    "iso_timestamp",
    "json_fragments",
    "parse_iso_date",
    "parse_iso_duration",
    "parse_iso_time",
    "parse_iso_timestamp",
    "plain_storage",
    "text_column",
]

_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_UNITS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
DURATION_FIELDS = (("months", pa.int32()), ("days", pa.int32()), ("nanoseconds", pa.int64()))


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian calendar, ``days`` after 1970-01-01 (H. Hinnant's algorithm,
    exact for every integer)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def days_from_civil(year: int, month: int, day: int) -> int:
    """The inverse of :func:`civil_from_days`."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def _year(year: int) -> str:
    if 0 <= year <= 9999:
        return f"{year:04d}"
    return f"+{year}" if year > 0 else f"-{-year:04d}"


def iso_date(days: int) -> str:
    year, month, day = civil_from_days(days)
    return f"{_year(year)}-{month:02d}-{day:02d}"


def iso_timestamp(value: int, unit: str = "us", zoned: bool = True) -> str:
    days, rest = divmod(value, _UNITS_PER_DAY[unit])
    return f"{iso_date(days)}T{iso_time(rest, unit)}" + ("Z" if zoned else "")


def iso_time(value: int, unit: str = "us") -> str:
    """``HH:MM:SS.ffffff``: ``value`` units after midnight (as many fraction digits as ``unit`` has)."""
    digits = _UNIT_DIGITS[unit]
    seconds, fraction = divmod(value, 10**digits)
    hh, rem = divmod(seconds, 3600)
    mm, ss = divmod(rem, 60)
    return f"{hh:02d}:{mm:02d}:{ss:02d}" + (f".{fraction:0{digits}d}" if digits else "")


_DATE_RE = re.compile(r"([+-]?\d{4,})-(\d{2})-(\d{2})")
_TIME_RE = re.compile(r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_TS_RE = re.compile(r"([+-]?\d{4,})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?")


def parse_iso_date(text: str) -> int:
    m = _DATE_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not an ISO 8601 date: {text!r}")
    return days_from_civil(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def parse_iso_time(text: str, unit: str = "us") -> int:
    """An ISO 8601 time of day (optional fraction) in ``unit`` after midnight."""
    m = _TIME_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    hh, mi, ss, frac = m.groups()
    return _in_unit(int(hh) * 3600 + int(mi) * 60 + int(ss), frac, unit, text)


def parse_iso_timestamp(text: str, unit: str = "us") -> int:
    """An ISO 8601 date-time (``T`` or space, optional fraction, ``Z`` or an offset) in ``unit`` since the epoch."""
    m = _TS_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not an ISO 8601 timestamp: {text!r}")
    year, month, day, hh, mi, ss, frac, zone = m.groups()
    seconds = days_from_civil(int(year), int(month), int(day)) * 86_400 + int(hh) * 3600 + int(mi) * 60 + int(ss)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        seconds -= sign * (hours * 3600 + minutes * 60)
    return _in_unit(seconds, frac, unit, text)


def _in_unit(seconds: int, frac: str | None, unit: str, text: str) -> int:
    """``seconds`` and a decimal fraction ``frac`` of a second in ``unit``, refusing precision ``unit`` lacks."""
    digits = _UNIT_DIGITS[unit]
    fraction = (frac or "").ljust(9, "0")
    if frac and int(fraction[digits:] or "0"):
        raise ValueError(f"{text!r} has more precision than unit {unit}")
    return int(seconds * 10**digits + int(fraction[:digits] or "0"))


def is_duration(t: pa.DataType) -> bool:
    """A struct of exactly (months int32, days int32, nanoseconds int64): how a CQL ``duration`` is held."""
    return bool(pa.types.is_struct(t) and [(f.name, f.type) for f in t] == list(DURATION_FIELDS))


def iso_duration(months: int, days: int, nanoseconds: int) -> str:
    """ISO 8601 text of a CQL duration (its three parts share one sign)."""
    negative = months < 0 or days < 0 or nanoseconds < 0
    months, days, nanoseconds = abs(months), abs(days), abs(nanoseconds)
    years, months = divmod(months, 12)
    seconds, nanos = divmod(nanoseconds, 1_000_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    date = "".join(f"{n}{u}" for n, u in ((years, "Y"), (months, "M"), (days, "D")) if n)
    time = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M")) if n)
    if seconds or nanos:
        time += f"{seconds}.{nanos:09d}S" if nanos else f"{seconds}S"
    text = "P" + date + ("T" + time if time else "")
    return ("-" if negative else "") + (text if text != "P" else "PT0S")


_DURATION_RE = re.compile(r"(-)?P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?"
                          r"(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d{1,9}))?S)?)?")


def parse_iso_duration(text: str) -> dict[str, int]:
    m = _DURATION_RE.fullmatch(text.strip())
    if not m or text.strip() in ("P", "-P"):
        raise ValueError(f"not an ISO 8601 duration: {text!r}")
    sign, y, mo, d, h, mi, s, frac = m.groups()
    k = -1 if sign else 1
    nanos = ((int(h or 0) * 60 + int(mi or 0)) * 60 + int(s or 0)) * 1_000_000_000 + int((frac or "").ljust(9, "0"))
    return {"months": k * (int(y or 0) * 12 + int(mo or 0)), "days": k * int(d or 0), "nanoseconds": k * nanos}


def float_text(value: float, single: bool) -> str:
    """Shortest text that reads back as ``value`` (as float32 when ``single``), with a ``.`` or an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    text = str(np.float32(value)) if single else repr(value)
    return text if any(c in text for c in ".eEn") else text + ".0"


def plain_storage(t: pa.DataType) -> pa.DataType:
    """``t`` with every temporal type, at any depth, replaced by its integer storage, so ``to_pylist`` yields
    integers where it would build ``datetime`` objects (which overflow outside years 1..9999)."""
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return pa.int64()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    if pa.types.is_map(t):
        return pa.map_(plain_storage(t.key_type), pa.field(t.item_field.name, plain_storage(t.item_type),
                                                           t.item_field.nullable))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = pa.field(t.value_field.name, plain_storage(t.value_type), t.value_field.nullable)
        return pa.list_(inner) if pa.types.is_list(t) else pa.large_list(inner)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(plain_storage(t.value_type), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, plain_storage(f.type), f.nullable) for f in t])
    return t


def _render_json(t: pa.DataType) -> Callable[[Any], str]:
    """A function from one plain-storage Python value of type ``t`` (not null) to its JSON text."""
    if pa.types.is_boolean(t):
        return lambda v: "true" if v else "false"
    if pa.types.is_integer(t):
        return str
    if pa.types.is_floating(t):
        single = pa.types.is_float32(t) or pa.types.is_float16(t)

        def number(v: float) -> str:
            text = float_text(v, single)
            return f'"{text}"' if text[-1] in "yN" else text  # NaN, Infinity, -Infinity are strings in JSON

        return number
    if pa.types.is_timestamp(t):
        unit, zoned = t.unit, t.tz is not None
        return lambda v: f'"{iso_timestamp(v, unit, zoned)}"'
    if pa.types.is_date32(t):
        return lambda v: f'"{iso_date(v)}"'
    if pa.types.is_time(t):
        time_unit = t.unit
        return lambda v: f'"{iso_time(v, time_unit)}"'
    if pa.types.is_date64(t):
        return lambda v: f'"{iso_date(v // 86_400_000)}"'
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return lambda v: '"' + base64.b64encode(v).decode("ascii") + '"'
    if pa.types.is_decimal(t) or pa.types.is_duration(t):
        return lambda v: json.dumps(str(v))
    if is_duration(t):
        return lambda v: f'"{iso_duration(v["months"], v["days"], v["nanoseconds"])}"'
    if pa.types.is_map(t):
        key, item = _render_json(t.key_type), _nullable(_render_json(t.item_type))

        def key_text(k: Any) -> str:
            text = key(k)
            return text if text.startswith('"') else json.dumps(text)

        return lambda v: "{" + ",".join(f"{key_text(k)}:{item(x)}" for k, x in v) + "}"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _nullable(_render_json(t.value_type))
        return lambda v: "[" + ",".join(inner(x) for x in v) + "]"
    if pa.types.is_struct(t):
        fields = [(json.dumps(f.name, ensure_ascii=False), f.name, _nullable(_render_json(f.type))) for f in t]
        return lambda v: "{" + ",".join(f"{q}:{render(v[n])}" for q, n, render in fields) + "}"
    return lambda v: json.dumps(v, ensure_ascii=False)


def _nullable(render: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "null" if v is None else render(v)


def json_fragments(column: pa.Array) -> list[str]:
    """The JSON text of every value of ``column`` (``null`` for nulls)."""
    render = _nullable(_render_json(column.type))
    values = column.cast(plain_storage(column.type)).to_pylist()
    return [render(v) for v in values]


def _vector_timestamp_text(column: pa.Array) -> pa.Array | None:
    """Timestamps all within years 1..9999, as text in one vectorized pass; None when any value is outside."""
    import pyarrow.compute as pc
    unit = column.type.unit
    lo, hi = -62_135_596_800 * 10**_UNIT_DIGITS[unit], 253_402_300_800 * 10**_UNIT_DIGITS[unit]
    ints = column.cast(pa.int64())
    bounds = pc.min_max(ints)
    if bounds["min"].is_valid and (bounds["min"].as_py() < lo or bounds["max"].as_py() >= hi):
        return None
    naive = ints.cast(pa.timestamp(unit)).cast(pa.string())  # "YYYY-MM-DD HH:MM:SS.ffffff"
    text = pc.replace_substring(naive, " ", "T", max_replacements=1)
    if _UNIT_DIGITS[unit] and len(text) and not pc.all(pc.match_substring(text, ".")).as_py():
        return None  # pyarrow leaves out an all-zero fraction in some versions: take the exact path instead
    return pc.binary_join_element_wise(text, pa.scalar("Z" if column.type.tz is not None else ""), "")


def text_column(column: pa.Array) -> pa.Array | None:
    """``column`` as CSV text (see the module docstring), or None where pyarrow's CSV writer already writes the
    exact text (integers, booleans, strings, finite floats)."""
    import pyarrow.compute as pc
    t = column.type
    if pa.types.is_floating(t):
        finite = pc.is_finite(column)
        if pc.all(pc.or_kleene(finite, pc.is_null(column))).as_py() is not False:
            return None
        single = pa.types.is_float32(t) or pa.types.is_float16(t)
        return pa.array([None if v is None else float_text(v, single) for v in column.to_pylist()], pa.string())
    if pa.types.is_timestamp(t):
        fast = _vector_timestamp_text(column)
        if fast is not None:
            return fast
        unit, zoned = t.unit, t.tz is not None
        return pa.array([None if v is None else iso_timestamp(v, unit, zoned)
                         for v in column.cast(pa.int64()).to_pylist()], pa.string())
    if pa.types.is_date32(t):
        return pa.array([None if v is None else iso_date(v) for v in column.cast(pa.int32()).to_pylist()],
                        pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.array([None if v is None else base64.b64encode(v).decode("ascii") for v in column.to_pylist()],
                        pa.string())
    if is_duration(t):
        return pa.array([None if v is None else iso_duration(v["months"], v["days"], v["nanoseconds"])
                         for v in column.to_pylist()], pa.string())
    if pa.types.is_nested(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t):
        render = _render_json(t)
        return pa.array([None if v is None else _unquote(render(v))
                         for v in column.cast(plain_storage(t)).to_pylist()], pa.string())
    return None


def _unquote(text: str) -> str:
    """A scalar's JSON string as its plain text (a CSV field holds ``2024-01-01``, not ``"2024-01-01"``)."""
    return str(json.loads(text)) if text.startswith('"') else text
