"""Bucketers: every row lands in exactly one bucket, and no value can name a path outside the base."""

from __future__ import annotations

from urllib.parse import unquote

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splitsource import OptionsError
from splitsource.sink import ColumnBucketer, DateTimeBucketer, encode_segment

HOSTILE = ["..", ".", "../../etc", "/abs/path", "a/b", "a\x00b", "_SUCCESS", "__HIVE_DEFAULT_PARTITION__", "%2F",
           ".hidden", "c:\\x", "é", " "]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_become_one_plain_directory_name(value: str) -> None:
    segment = encode_segment(value)
    assert "/" not in segment and "\x00" not in segment and "\\" not in segment
    assert segment not in (".", "..") and not segment.startswith((".", "_"))
    assert unquote(segment) == value  # Spark's partition discovery decodes it back


@given(st.text())
def test_any_text_round_trips_through_one_safe_segment(value: str) -> None:
    segment = encode_segment(value)
    assert segment and "/" not in segment and not segment.startswith((".", "_")) or value == ""
    if value:
        assert unquote(segment) == value


def test_null_and_empty_have_reserved_names_no_value_can_forge() -> None:
    assert encode_segment(None) == "__HIVE_DEFAULT_PARTITION__"
    assert encode_segment("") == "__EMPTY__"
    assert encode_segment("__EMPTY__") != "__EMPTY__"


def test_column_bucketer_puts_each_row_in_one_bucket_and_drops_the_columns() -> None:
    batch = pa.record_batch({"id": list(range(9)), "k": ["a", "b", None, "a", "../x", "b", "a", None, ""],
                             "n": [1, 1, 2, 2, 1, 1, 2, 2, 1]})
    parts = dict(ColumnBucketer(["k"]).split(batch, 0.0))
    assert set(parts) == {"k=a", "k=b", "k=__HIVE_DEFAULT_PARTITION__", "k=%2E.%2Fx", "k=__EMPTY__"}
    assert sorted(i for rows in parts.values() for i in rows.column("id").to_pylist()) == list(range(9))
    assert parts["k=a"].column("id").to_pylist() == [0, 3, 6]
    assert parts["k=a"].schema.names == ["id", "n"]

    two = dict(ColumnBucketer(["k", "n"]).split(batch, 0.0))
    assert two["k=a/n=2"].column("id").to_pylist() == [3, 6]
    assert two["k=__HIVE_DEFAULT_PARTITION__/n=2"].column("id").to_pylist() == [2, 7]
    assert sum(rows.num_rows for rows in two.values()) == 9


def test_column_bucketer_names_a_missing_column() -> None:
    with pytest.raises(OptionsError, match="no column 'nope'"):
        ColumnBucketer(["nope"]).check(pa.schema([("id", pa.int64())]))


def test_datetime_bucketer_formats_processing_time_in_its_zone() -> None:
    moment = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
    assert DateTimeBucketer().bucket_at(moment) == "2023-11-14--22"
    assert DateTimeBucketer("yyyy/MM/dd/HH", "Asia/Tokyo").bucket_at(moment) == "2023/11/15/07"


@pytest.mark.parametrize("pattern, message", [("yyyy-MM-dd--hh", "letter 'h'"), ("yyyy//dd", "empty path segment")])
def test_datetime_bucketer_refuses_patterns_it_would_misread(pattern: str, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        DateTimeBucketer(pattern)


def test_datetime_bucketer_names_an_unknown_zone() -> None:
    with pytest.raises(OptionsError, match="option 'timezone'.*Mars/Olympus"):
        DateTimeBucketer(zone="Mars/Olympus")
