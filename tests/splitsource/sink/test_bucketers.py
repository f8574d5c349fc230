"""Bucketers: every row lands in exactly one bucket, and no value can name a path outside the base."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splitsource import OptionsError, SinkError
from splitsource.sink import ColumnBucketer, DateTimeBucketer, encode_value

HOSTILE = ["..", ".", "../../etc", "/abs/path", "a/b", "a\x00b", "_SUCCESS", "%2F", ".hidden", "c:\\x", "é", " ",
           "=", "a=b", "ü%C3%BC", "'\"", "{[]}^*:?#", "\x7f", "line\nbreak"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_become_one_plain_directory_name(value: str) -> None:
    segment = "v=" + encode_value(value)
    assert "/" not in segment and "\x00" not in segment and "\\" not in segment and segment.count("=") == 1
    assert unquote(segment) == "v=" + value  # the %XX a reader decodes, and nothing else, gives the value back


@given(st.text())
def test_any_text_round_trips_through_one_safe_segment(value: str) -> None:
    encoded = encode_value(value)
    assert encoded and "/" not in encoded and "\x00" not in encoded
    assert all(ord(c) > 0x7F or c not in "\"#%'*/:=?\\{[]^" and ord(c) >= 0x20 for c in unquote_plus_safe(encoded))
    if value not in ("", "__HIVE_DEFAULT_PARTITION__"):
        assert unquote(encoded) == value


def unquote_plus_safe(encoded: str) -> str:
    """The encoded text with its %XX escapes removed: what is left must be free of characters Spark escapes."""
    return re.sub("%[0-9A-F]{2}", "", encoded)


def test_non_ascii_is_kept_as_it_is_so_spark_does_not_garble_it() -> None:
    assert encode_value("ü日本") == "ü日本"  # Spark unescapes %XX byte by byte: %C3%BC would read back as Ã¼
    assert encode_value("100%") == "100%25"


def test_null_and_empty_are_the_hive_default_partition_and_the_literal_is_escaped() -> None:
    assert encode_value(None) == encode_value("") == "__HIVE_DEFAULT_PARTITION__"
    assert encode_value("__HIVE_DEFAULT_PARTITION__") == "%5F_HIVE_DEFAULT_PARTITION__"


def test_a_segment_longer_than_a_file_name_is_refused_naming_the_column() -> None:
    batch = pa.record_batch({"id": [1], "k": ["x" * 300]})
    with pytest.raises(SinkError, match="bucket column 'k'.*over the 255 bytes"):
        ColumnBucketer(["k"]).split(batch, 0.0)


def test_column_bucketer_puts_each_row_in_one_bucket_and_drops_the_columns() -> None:
    batch = pa.record_batch({"id": list(range(9)), "k": ["a", "b", None, "a", "../x", "b", "a", None, ""],
                             "n": [1, 1, 2, 2, 1, 1, 2, 2, 1]})
    parts = dict(ColumnBucketer(["k"]).split(batch, 0.0))
    assert set(parts) == {"k=a", "k=b", "k=__HIVE_DEFAULT_PARTITION__", "k=..%2Fx"}  # '' and null: one bucket
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
    assert DateTimeBucketer().bucket_at(moment) == "dt=2023-11-14/hour=22"  # Hive style: every reader's columns
    assert DateTimeBucketer("yyyy-MM-dd--HH").bucket_at(moment) == "2023-11-14--22"  # Flink's default
    assert DateTimeBucketer("yyyy/MM/dd/HH", "Asia/Tokyo").bucket_at(moment) == "2023/11/15/07"


def test_datetime_bucketer_quotes_text_and_escapes_each_side_of_a_hive_segment() -> None:
    moment = 1_700_000_000.0
    assert DateTimeBucketer("'year='yyyy/'it''s' MM").bucket_at(moment) == "year=2023/it%27s 11"
    assert DateTimeBucketer("'a/b='yyyy/'=x'").bucket_at(moment) == "a%2Fb=2023/%3Dx"  # '/' inside quotes is text
    assert DateTimeBucketer("'_d='dd").bucket_at(moment) == "%5Fd=14"  # readers skip names starting with '_'
    assert DateTimeBucketer("'%'HH").bucket_at(moment) == "%2522"
    early = 1_700_000_000.0 - 22 * 3600 - 13 * 60  # 2023-11-14 00:00:20 UTC
    assert DateTimeBucketer().bucket_at(early) == "dt=2023-11-14/hour=0"  # an integer, as Spark writes one
    assert DateTimeBucketer("yyyy-M-d H:mm:ss").bucket_at(early) == "2023-11-14 0%3A00%3A20"


@pytest.mark.parametrize("pattern, message", [("yyyy-MM-dd--hh", "letter 'h'"), ("yyyy//dd", "empty path segment"),
                                              ("dt=yyyy", "letter 't'.*single quotes"),
                                              ("'dt=yyyy", "quote that is not closed")])
def test_datetime_bucketer_refuses_patterns_it_would_misread(pattern: str, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        DateTimeBucketer(pattern)


def test_datetime_bucketer_names_an_unknown_zone() -> None:
    with pytest.raises(OptionsError, match="option 'timezone'.*Mars/Olympus"):
        DateTimeBucketer(zone="Mars/Olympus")
