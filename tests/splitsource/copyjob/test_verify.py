"""``splitsource verify`` computes both sides apart from the copy: a planted conversion bug is caught in any format."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from splitsource import copy
from splitsource._planning import build_source
from splitsource.copyjob._verify import verify
from splitsource.sink.formats.csv import csv_records
from tests.splitsource.copyjob.test_copy import CLI

OPTIONS = {"rows": "3000", "split_rows": "700", "columns": "id:bigint,name:string?,score:double?,at:timestamp?,"
                                                           "flag:boolean?,n:int?,raw:binary?"}
BUGGY = "tests.splitsource.custom_connector:OneUlpOffGenerator"


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_verify_matches_an_honest_copy_and_catches_a_one_ulp_conversion_bug(tmp_path: Path, fmt: str) -> None:
    honest = tmp_path / "honest"
    copy("generator", OPTIONS, str(honest), format=fmt, engine="local", workers=1)
    _, source = build_source({"connector": "generator", **OPTIONS})
    result = verify(source, honest)  # a pathlib.Path, as copy() takes one (a TypeError from inside, before)
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
    source.reference_rows = lambda part=0, parts=1: None  # type: ignore[method-assign]  # a connector without a reference path
    circular = verify(source, str(out))
    assert circular.match and not circular.independent  # what the old verify said: MATCH
    assert "read through the same emitter as the copy" in circular.text()


def test_csv_records_tell_null_from_the_empty_string_and_keep_line_breaks_in_quotes() -> None:
    text = 'a,"",,"x\r\ny","q""q"\r\n"\u2028",1\n'
    assert list(csv_records(text)) == [["a", "", None, "x\r\ny", 'q"q'], ["\u2028", "1"]]


def test_verify_names_a_changed_value_a_lost_row_and_a_duplicated_row_by_key(tmp_path: Path) -> None:
    """Part files edited by hand: one value changed, one row dropped, one row repeated in another file. Verify
    names each by its key (the truth: the rows the test edited), the changed one with its column and both values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keyed = "tests.splitsource.custom_connector:KeyedGenerator"
    out = tmp_path / "out"
    copy(keyed, OPTIONS, str(out), format="parquet", engine="local", workers=1, max_splits_per_batch=1)
    first, second = sorted(out.glob("part-*.parquet"))[:2]
    a, b = pq.read_table(first), pq.read_table(second)
    changed_id, lost_id, repeated_id = (a.column("id")[3].as_py(), a.column("id")[5].as_py(),
                                        b.column("id")[0].as_py())
    names = a.column("name").to_pylist()
    old_name, names[3] = names[3], "changed by hand"
    a = a.set_column(a.schema.get_field_index("name"), "name", pa.array(names, pa.string()))
    pq.write_table(pa.concat_tables([a.slice(0, 5), a.slice(6)]), first)  # row 5 dropped
    pq.write_table(pa.concat_tables([b, b.slice(0, 1)]), second)  # row 0 twice

    _, source = build_source({"connector": keyed, **OPTIONS})
    result = verify(source, str(out))
    assert not result.match and result.lost == 2 and result.extra == 2, result.text()  # the changed row both ways
    by_kind = {r.kind: r for r in result.rows}
    assert set(by_kind) == {"changed", "missing", "duplicated"}, result.text()
    assert by_kind["changed"].key == f"key id={changed_id}"
    assert by_kind["changed"].columns == (("name", f'"{old_name}"', '"changed by hand"'),), result.text()
    assert by_kind["changed"].output_at == f"{first.name}, row 4"
    assert by_kind["missing"].key == f"key id={lost_id}" and by_kind["missing"].output_at == ""
    assert by_kind["duplicated"].key == f"key id={repeated_id}"
    assert by_kind["duplicated"].output_at == f"{second.name}, row {b.num_rows + 1:,}"
    # the same from one process (in other parts of the source: their number follows the workers')
    def named(rows: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [(r.kind, r.key, r.columns, r.output_at) for r in rows]

    assert named(verify(source, str(out), workers=1).rows) == named(result.rows)


def warn_twice() -> int:
    """Called in a verify worker: a library's warning and one of splitsource's own."""
    import logging

    logging.getLogger("cassandra.cluster").warning("the driver's own chatter")
    logging.getLogger("splitsource.verify").warning("a warning of ours")
    return 7


def test_a_verify_worker_prints_only_splitsources_own_warnings(capfd: pytest.CaptureFixture[str]) -> None:
    from splitsource.copyjob._calls import CallPool

    with CallPool(1) as pool:
        assert pool.map([(warn_twice, ())]) == [7]
    err = capfd.readouterr().err
    assert "a warning of ours" in err and "chatter" not in err, err


def test_an_output_no_copy_wrote_is_a_usage_error_not_a_mismatch(tmp_path: Path) -> None:
    """A path that does not exist, or was not written by a copy, is exit 2 naming --output: a script that reads
    exit 1 as "the copy is wrong" (it was exit 1) must not take a typo for a mismatch."""
    (tmp_path / "a-file").write_text("x")
    for output in (tmp_path / "nothere", tmp_path / "a-file"):
        done = subprocess.run([*CLI, "verify", "--connector", "generator", "-o", "rows=10", "--output", str(output)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr == (
            f"splitsource verify: --output {output} has no records of a copy ({output}.bucketing/copy.json is "
            "missing): it was not written by splitsource copy\n"), done.stderr
