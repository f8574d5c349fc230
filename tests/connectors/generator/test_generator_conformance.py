"""The conformance kit on the generator connector, with hypothesis choosing sizes and cut points."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.generator import GeneratorSource, generate_batch
from splitsource import testing

COLUMNS = "id:bigint,v:double?,s:string?,b:boolean?,t:timestamp?,bin:binary?,i:int"


def source(rows: int, split_rows: int, batch_rows: int, **extra: str) -> GeneratorSource:
    return GeneratorSource(
        {"rows": str(rows), "split_rows": str(split_rows), "batch_rows": str(batch_rows), "columns": COLUMNS, **extra}
    )


def expected(s: GeneratorSource) -> pa.Table:
    """The whole source computed directly, not through splits."""
    return pa.Table.from_batches([generate_batch(s.options, s.schema(), 0, s.options.rows)], schema=s.schema())


sizes = st.tuples(st.integers(0, 3000), st.integers(1, 700), st.integers(20, 300))
fast = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(sizes, st.integers(1, 4))
def test_parallel_read_equals_whole_source(size: tuple[int, int, int], parallelism: int) -> None:
    s = source(*size)
    testing.check_parallel_read(s, expected(s), parallelism=parallelism)


@fast
@given(sizes, st.integers(1, 12))
def test_snapshot_restore_at_any_point(size: tuple[int, int, int], cut: int) -> None:
    s = source(*size)
    testing.check_snapshot_restore(s, expected(s), stop_after_batches=cut)


@fast
@given(sizes, st.integers(1, 12))
def test_add_back_after_reader_failure(size: tuple[int, int, int], cut: int) -> None:
    s = source(*size)
    testing.check_add_back(s, expected(s), fail_after_batches=cut)


@fast
@given(sizes)
def test_serializers_round_trip(size: tuple[int, int, int]) -> None:
    testing.check_serializers(source(*size))


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 2000), st.integers(100, 400))
def test_wake_up_resumes(rows: int, batch_rows: int) -> None:
    testing.check_wake_up_resume(source(rows, rows, batch_rows, fetch_delay_ms="5"))


@fast
@given(sizes, st.integers(0, 2999))
def test_transient_fault_is_retried_and_every_row_read_once(size: tuple[int, int, int], at: int) -> None:
    s = source(*size, fail_at_row=str(at), fail_times="2")
    testing.check_parallel_read(s, expected(s))


def test_nulls_appear_at_about_the_configured_fraction() -> None:
    s = source(20000, 5000, 5000, null_fraction="0.25")
    table = expected(s)
    assert table.column("id").null_count == 0 and table.column("i").null_count == 0
    share = table.column("s").null_count / table.num_rows
    assert 0.22 < share < 0.28


def test_values_are_deterministic_across_split_layouts() -> None:
    a = testing.rows_of(testing.LocalRuntime(source(5000, 100, 33), 3).run().batches, source(1, 1, 1).schema())
    b = testing.rows_of(expected(source(5000, 5000, 5000)))
    assert a == b
