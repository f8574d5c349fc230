"""``splitsource verify`` computes both sides apart from the copy: a planted conversion bug is caught in any format."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitsource import copy
from splitsource._planning import build_source
from splitsource.copyjob._verify import csv_records, verify

OPTIONS = {"rows": "3000", "split_rows": "700", "columns": "id:bigint,name:string?,score:double?,at:timestamp?,"
                                                           "flag:boolean?,n:int?,raw:binary?"}
BUGGY = "tests.splitsource.custom_connector:OneUlpOffGenerator"


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_verify_matches_an_honest_copy_and_catches_a_one_ulp_conversion_bug(tmp_path: Path, fmt: str) -> None:
    honest = tmp_path / "honest"
    copy("generator", OPTIONS, str(honest), format=fmt, engine="local", workers=1)
    _, source = build_source({"connector": "generator", **OPTIONS})
    result = verify(source, str(honest))
    assert result.match and result.independent and result.source.rows == 3000, result.text()

    buggy = tmp_path / "buggy"
    copy(BUGGY, OPTIONS, str(buggy), format=fmt, engine="local", workers=1)
    _, source = build_source({"connector": BUGGY, **OPTIONS})
    result = verify(source, str(buggy))
    assert not result.match and result.source.rows == result.output.rows == 3000, result.text()
    assert "same row count, different rows" in result.text()


def test_verify_is_not_fooled_when_both_sides_would_share_the_bug(tmp_path: Path) -> None:
    """The check that verify once failed: reading the source through the copy's own emitter repeats its bug."""
    out = tmp_path / "out"
    copy(BUGGY, OPTIONS, str(out), format="parquet", engine="local", workers=1)
    _, source = build_source({"connector": BUGGY, **OPTIONS})
    source.reference_rows = lambda: None  # type: ignore[method-assign]  # a connector without a reference path
    circular = verify(source, str(out))
    assert circular.match and not circular.independent  # what the old verify said: MATCH
    assert "read through the same emitter as the copy" in circular.text()


def test_csv_records_tell_null_from_the_empty_string_and_keep_line_breaks_in_quotes() -> None:
    text = 'a,"",,"x\r\ny","q""q"\r\n"\u2028",1\n'
    assert list(csv_records(text)) == [["a", "", None, "x\r\ny", 'q"q'], ["\u2028", "1"]]
