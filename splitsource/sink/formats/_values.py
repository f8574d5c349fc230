"""Values as the text formats hold them, back to plain values (:func:`splitsource.sink._text.plain_storage`): what
a reader of JSON lines or CSV makes of a field, by the column's type (ISO 8601 dates and timestamps with expanded
years, ``NaN``/``Infinity``, base64 binary, nested values as JSON). Written apart from ``splitsource.sink._text``,
which encodes them: ``verify`` reads the files with these, and must not agree with the writer by construction."""

from __future__ import annotations

import base64
import decimal
import json
import math
from typing import Any

import pyarrow as pa

from splitsource.sink._text import (
    is_duration,
    parse_iso_date,
    parse_iso_duration,
    parse_iso_time,
    parse_iso_timestamp,
)

__all__ = ["from_json", "from_text"]


_STRING_RENDERED = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
                    pa.types.is_timestamp, pa.types.is_date, pa.types.is_time, pa.types.is_decimal, is_duration)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def from_json(value: Any, t: pa.DataType) -> Any:
    """A value as JSON lines (and CSV's nested fields) hold it, back to the plain value of type ``t``."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        return _NON_FINITE[value] if isinstance(value, str) else float(value)
    if pa.types.is_timestamp(t):
        return parse_iso_timestamp(value, t.unit)
    if pa.types.is_date32(t):
        return parse_iso_date(value)
    if pa.types.is_time(t):
        return parse_iso_time(value, t.unit)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return base64.b64decode(value, validate=True)
    if is_duration(t):
        return parse_iso_duration(value)
    if pa.types.is_decimal(t):  # its exact text, as the writer renders it
        return decimal.Decimal(value)
    if pa.types.is_map(t):
        def key(text: str) -> Any:
            if any(check(t.key_type) for check in _STRING_RENDERED):
                return from_json(text, t.key_type)
            try:
                return from_json(json.loads(text), t.key_type)
            except ValueError:
                return from_json(text, t.key_type)

        return [(key(k), from_json(v, t.item_type)) for k, v in value.items()]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [from_json(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: from_json(value.get(f.name), f.type) for f in t}
    return value


def from_text(text: str | None, t: pa.DataType) -> Any:
    """One CSV field back to the plain value of type ``t`` (None: an unquoted empty field, null)."""
    if text is None:
        return None
    if pa.types.is_integer(t):
        return int(text)
    if pa.types.is_floating(t):
        return float(text)
    if pa.types.is_boolean(t):
        return {"true": True, "false": False}[text]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return text
    if pa.types.is_nested(t) and not is_duration(t):
        return from_json(json.loads(text), t)
    return from_json(text, t)
