"""format('splitsource') in a real local[2] Spark: counts, values, types, nulls, empty source, faults."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pyarrow as pa
import pytest

from connectors.generator import GeneratorSource, generate_batch
from splitsource._planning import pack_splits
from splitsource.testing import rows_of

pytestmark = pytest.mark.spark
COLUMNS = "id:bigint,v:double?,s:string?,b:boolean?,t:timestamp?,bin:binary?,i:int"


def read(spark: Any, **options: str) -> Any:
    return spark.read.format("splitsource").option("connector", "generator").options(**options).load()


def test_count_and_every_value_with_types_and_nulls(spark: Any) -> None:
    options = {"rows": "30000", "columns": COLUMNS, "split_rows": "4000", "batch_rows": "1500"}
    df = read(spark, **options)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"), ("v", "double"), ("s", "string"), ("b", "boolean"), ("t", "timestamp"),
        ("bin", "binary"), ("i", "int"),
    ]
    assert df.count() == 30000
    actual = df.toArrow()
    source = GeneratorSource(options)
    expected = pa.Table.from_batches([generate_batch(source.options, source.schema(), 0, 30000)])
    assert rows_of(actual.cast(expected.schema)) == rows_of(expected)
    assert actual.column("s").null_count > 0  # nulls survive the trip through Spark


def test_partitions_follow_split_size(spark: Any) -> None:
    df = read(spark, rows="100000", split_rows="10000", partitions="3")
    assert df.rdd.getNumPartitions() == 3
    assert df.count() == 100000


def test_a_read_rate_limit_holds_the_whole_read_to_it(spark: Any) -> None:
    """max_rows_per_second is shared by the tasks that run at once (reader_slots: local[2] runs two): 4 partitions
    of 10,000 rows at 8,000 rows/s for the whole read take at least 5 s (unthrottled, well under one), and every
    row is read once."""
    import time

    df = read(spark, rows="40000", split_rows="10000", batch_rows="1000", partitions="4", max_rows_per_second="8000",
              reader_slots="2")
    started = time.monotonic()
    ids = [r.id for r in df.select("id").collect()]
    assert time.monotonic() - started >= 40000 / 8000
    assert sorted(ids) == list(range(40000))


def test_empty_source_gives_an_empty_dataframe(spark: Any) -> None:
    df = read(spark, rows="0")
    assert df.count() == 0 and df.collect() == []
    assert df.columns == ["id", "value", "name"]


def test_transient_fault_is_retried_and_every_row_appears_once(spark: Any) -> None:
    df = read(spark, rows="20000", split_rows="5000", batch_rows="1000", fail_at_row="12345", fail_times="2",
              initial_backoff_ms="1")
    ids = [r.id for r in df.select("id").collect()]
    assert sorted(ids) == list(range(20000))


def test_fatal_fault_fails_the_query_naming_the_split(spark: Any) -> None:
    df = read(spark, rows="2000", split_rows="500", fail_at_row="1200", fail_kind="fatal")
    with pytest.raises(Exception, match=r"reading split\(s\) range-2 failed: injected failure at row 1200"):
        df.count()


def test_bad_option_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match=r"unknown option 'rowz' for connector 'generator' \(did you mean 'rows'\?\)"):
        read(spark, rowz="10").schema  # noqa: B018


def test_unknown_connector_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match=r"option 'connector': 'nosuch' is neither an installed connector"):
        spark.read.format("splitsource").option("connector", "nosuch").load()


def test_user_connector_by_module_path(spark: Any) -> None:
    df = (spark.read.format("splitsource").option("connector", "tests.splitsource.custom_connector:SquaresSource")
          .option("rows", "500").load())
    assert df.columns == ["id"] and df.count() == 500


def test_pack_splits_by_size_and_by_count() -> None:
    source = GeneratorSource({"rows": "1000", "split_rows": "100"})
    e = source.create_enumerator(None)  # type: ignore[arg-type]
    splits = [e.next_split() for _ in range(10)]
    by_size = pack_splits(splits, target_bytes=splits[0].estimated_size_bytes * 3)  # type: ignore[arg-type]
    assert [len(g) for g in by_size] == [3, 3, 3, 1]
    by_count = pack_splits(splits, target_bytes=1, partitions=4)  # type: ignore[arg-type]
    assert sorted(len(g) for g in by_count) == [2, 2, 3, 3]
    assert [s for g in by_size for s in g] == splits


def test_pack_splits_for_slots_fills_every_wave_of_tasks() -> None:
    source = GeneratorSource({"rows": "1000", "split_rows": "100"})
    e = source.create_enumerator(None)  # type: ignore[arg-type]
    splits = [e.next_split() for _ in range(10)]
    size = splits[0].estimated_size_bytes  # type: ignore[union-attr]
    # by size: 3 + 3 + 3 + 1 splits, a last wave with one core idle on two cores; three groups on two cores
    for target, slots, expected in ((size * 3, 2, [2, 2, 3, 3]), (size * 4, 2, [2, 2, 3, 3]),
                                    (size * 3, 3, [1, 1, 2, 2, 2, 2]), (size * 5, 2, [5, 5]),
                                    (size, 4, [1] * 10), (size * 100, 2, [5, 5])):
        groups = pack_splits(splits, target_bytes=target, slots=slots)  # type: ignore[arg-type]
        assert sorted(len(g) for g in groups) == expected, (target // size, slots)
        assert sorted(s.split_id for g in groups for s in g) == sorted(s.split_id for s in splits)  # type: ignore
        assert all(list(g) == sorted(g, key=splits.index) for g in groups)  # order kept inside a group
    assert [len(g) for g in pack_splits(splits, target_bytes=size * 3, slots=2, partitions=3)] == [4, 3, 3]


def test_auto_registration_in_a_fresh_process() -> None:
    script = textwrap.dedent(
        """
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate())
        print("COUNT", spark.read.format("splitsource").option("connector", "generator")
              .option("rows", "1234").load().count())
        spark.stop()
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what is installed counts
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd="/",
                         env=env)
    assert "COUNT 1234" in out.stdout, out.stderr[-3000:]


def test_explicit_register(spark: Any) -> None:
    import splitsource

    splitsource.register(spark)
    assert read(spark, rows="10").count() == 10


@pytest.mark.parametrize(("connector", "carried"), [("MetadataCountingSource", True),
                                                     ("UnpicklableCountingSource", False)])
def test_the_schema_steps_source_travels_to_planning_and_tasks(spark: Any, connector: str, carried: bool) -> None:
    """format("splitsource") reads a source's metadata once, in the schema step: the planning worker and every
    task get the source as that step left it (pickled with the data source), unless it does not pickle."""
    from pathlib import Path

    from tests.splitsource.custom_connector import metadata_log

    seed = 4242 if carried else 4343
    log = Path(metadata_log(seed))
    log.unlink(missing_ok=True)
    df = (spark.read.format("splitsource").option("connector", f"tests.splitsource.custom_connector:{connector}")
          .option("rows", "5000").option("split_rows", "1000").option("seed", str(seed))
          .option("partitions", "3").load())
    assert df.count() == 5000
    reads = log.read_text().split()
    if carried:
        assert len(reads) == 1, f"the metadata was read {len(reads)} times"
    else:  # the control: each task builds the source again and reads it again
        assert len(reads) >= 1 + 3, f"the metadata was read {len(reads)} times"


def test_a_stopped_stream_closes_the_enumerator_it_kept_for_its_next_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream's reader keeps its enumerator between batches (in Spark's planning process, for the process's
    life): ``stop()`` (the query ended) closes it, and what it holds (a PostgreSQL session in a transaction)."""
    from splitsource import _offsets
    from splitsource.spark._source import SplitSourceDataSource

    data_source = SplitSourceDataSource({"connector": "generator", "rows": "100", "split_rows": "10"})
    reader = data_source.streamReader(data_source.schema())
    start = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) != start
    kept = _offsets._LIVE._enumerator
    assert kept is not None
    closed: list[bool] = []
    monkeypatch.setattr(kept, "close", lambda: closed.append(True))
    reader.stop()
    assert closed == [True] and _offsets._LIVE._enumerator is None
