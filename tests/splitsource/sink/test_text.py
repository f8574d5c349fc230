"""The text rules of JSON lines and CSV: exact at every year, reversible, and the same as Python's where Python
can represent the value at all."""

from __future__ import annotations

import json
import math
import struct
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from splitsource.sink._text import (
    civil_from_days,
    days_from_civil,
    float_text,
    iso_date,
    iso_duration,
    iso_timestamp,
    parse_iso_date,
    parse_iso_duration,
    parse_iso_timestamp,
)
from splitsource.sink.formats.csv import csv_ready
from splitsource.sink.formats.jsonl import encode_json_lines

INT32 = st.integers(-(2**31), 2**31 - 1)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@given(INT32)
def test_every_date32_day_round_trips_through_its_iso_text(days: int) -> None:
    assert days_from_civil(*civil_from_days(days)) == days
    assert parse_iso_date(iso_date(days)) == days


@given(st.integers(date(1, 1, 1).toordinal(), date(9999, 12, 31).toordinal()))
def test_dates_python_can_hold_print_as_python_prints_them(ordinal: int) -> None:
    day = date.fromordinal(ordinal)
    assert iso_date((day - date(1970, 1, 1)).days) == day.isoformat()


def test_expanded_years_are_printed_as_java_and_dsbulk_print_them() -> None:
    assert iso_date(-(2**31)) == "-5877641-06-23"
    assert iso_date(2**31 - 1) == "+5881580-07-11"
    assert iso_date(days_from_civil(10000, 1, 1)) == "+10000-01-01"
    assert iso_date(days_from_civil(0, 12, 31)) == "0000-12-31"
    assert iso_date(days_from_civil(-1, 1, 1)) == "-0001-01-01"
    assert iso_timestamp(-9_223_372_036_854_775 * 1000, "us") == "-290308-12-21T19:59:05.225000Z"


@given(st.integers(-(2**63), 2**63 - 1), st.sampled_from(["s", "ms", "us", "ns"]), st.booleans())
def test_every_timestamp_round_trips_through_its_iso_text(value: int, unit: str, zoned: bool) -> None:
    assert parse_iso_timestamp(iso_timestamp(value, unit, zoned), unit) == value


@given(st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999))
def test_timestamps_python_can_hold_print_as_python_prints_them(micros: int) -> None:
    moment = EPOCH + timedelta(microseconds=micros)
    assert iso_timestamp(micros, "us") == moment.strftime("%Y-%m-%dT%H:%M:%S.%f").rjust(26, "0") + "Z" \
        or moment.year < 1000


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.booleans())
def test_every_duration_round_trips_through_its_iso_text(months: int, days: int, nanos: int, negative: bool) -> None:
    sign = -1 if negative else 1
    parts = {"months": sign * months, "days": sign * days, "nanoseconds": sign * nanos}
    assert parse_iso_duration(iso_duration(months * sign, days * sign, nanos * sign)) == {
        k: v if v else 0 for k, v in parts.items()}


def test_durations_read_as_iso_8601() -> None:
    assert iso_duration(1, 2, 3) == "P1M2DT0.000000003S"
    assert iso_duration(-14, -3, -3_723_000_000_004) == "-P1Y2M3DT1H2M3.000000004S"
    assert iso_duration(0, 0, 0) == "PT0S"


@given(st.floats(width=64))
def test_double_text_reads_back_as_the_same_value(value: float) -> None:
    assert_same(float(float_text(value, single=False)), value)
    assert any(c in float_text(value, single=False) for c in ".eyN")  # never an integer-looking -0 or 5


@given(st.floats(width=32))
def test_float32_text_reads_back_as_the_same_float32(value: float) -> None:
    back = float(float_text(value, single=True))
    assert_same(struct.unpack("<f", struct.pack("<f", back))[0] if math.isfinite(back) else back, value)


def assert_same(back: float, value: float) -> None:
    assert (math.isnan(back) and math.isnan(value)) or (back == value and math.copysign(1, back) == math.copysign(
        1, value))


def test_float32_prints_its_shortest_text() -> None:
    assert float_text(struct.unpack("<f", struct.pack("<f", 0.1))[0], single=True) == "0.1"


def test_json_lines_are_strict_json_split_on_newline_only() -> None:
    batch = pa.record_batch({
        "text": ["a\u2028b\u2029c\x85d\ne", None],
        "x": pa.array([math.nan, -math.inf], pa.float64()),
        "z": pa.array([-0.0, 5.0], pa.float32()),
        "day": pa.array([2**31 - 1, None], pa.date32()),
        "m": pa.array([[(1, "a")], None], pa.map_(pa.int32(), pa.string())),
    })
    data = encode_json_lines(batch)
    lines = data.split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""

    def strict(constant: str) -> None:
        raise AssertionError(constant)

    rows = [json.loads(line, parse_constant=strict) for line in lines[:2]]
    assert rows[0] == {"text": "a\u2028b\u2029c\x85d\ne", "x": "NaN", "z": -0.0, "day": "+5881580-07-11",
                       "m": {"1": "a"}}
    assert math.copysign(1, rows[0]["z"]) == -1 and rows[1]["x"] == "-Infinity" and rows[1]["z"] == 5.0


def test_csv_text_is_exact_for_far_timestamps_and_nested_values() -> None:
    batch = pa.record_batch({
        "at": pa.array([253_402_300_800_000_000, None], pa.timestamp("us", tz="UTC")),
        "near": pa.array([0, 1], pa.timestamp("us", tz="UTC")),
        "l": pa.array([[1, 2], None], pa.list_(pa.int64())),
        "f": pa.array([math.inf, 1.5], pa.float64()),
    })
    ready = csv_ready(batch)
    assert ready.column("at").to_pylist() == ["+10000-01-01T00:00:00.000000Z", None]
    assert ready.column("near").to_pylist() == ["1970-01-01T00:00:00.000000Z", "1970-01-01T00:00:00.000001Z"]
    assert ready.column("l").to_pylist() == ["[1,2]", None]
    assert ready.column("f").to_pylist() == ["Infinity", "1.5"]
