"""The conformance kit on the generator connector, with hypothesis choosing sizes and cut points."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, assume, given, settings
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


sizes = st.tuples(st.integers(1, 3000), st.integers(1, 700), st.integers(20, 300))


def batches(rows: int, split_rows: int, batch_rows: int) -> int:
    """How many batches the source emits: the kit refuses cuts past the end (a check that cannot fail)."""
    full, last = divmod(rows, split_rows)
    return full * -(-split_rows // batch_rows) + -(-last // batch_rows)
fast = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(sizes, st.integers(1, 4))
def test_parallel_read_equals_whole_source(size: tuple[int, int, int], parallelism: int) -> None:
    s = source(*size)
    testing.check_parallel_read(s, expected(s), parallelism=parallelism)


@fast
@given(sizes, st.integers(1, 12))
def test_snapshot_restore_at_any_point(size: tuple[int, int, int], cut: int) -> None:
    assume(cut <= batches(*size))
    s = source(*size)
    testing.check_snapshot_restore(s, expected(s), stop_after_batches=cut)


@fast
@given(sizes, st.integers(1, 12))
def test_add_back_after_reader_failure(size: tuple[int, int, int], cut: int) -> None:
    assume(cut <= batches(*size))
    s = source(*size)
    testing.check_add_back(s, expected(s), fail_after_batches=cut)


@fast
@given(sizes)
def test_serializers_round_trip(size: tuple[int, int, int]) -> None:
    testing.check_serializers(source(*size))


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 2000), st.integers(100, 400))
def test_wake_up_resumes(rows: int, batch_rows: int) -> None:
    assume(rows > batch_rows)
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


def test_the_kit_refuses_checks_that_cannot_fail() -> None:
    import pytest

    empty = source(0, 10, 10)
    with pytest.raises(AssertionError, match="too trivial to test: the source has no rows"):
        testing.check_parallel_read(empty, expected(empty))
    with pytest.raises(AssertionError, match="too trivial to test: the source ended before 5 batch"):
        testing.check_snapshot_restore(source(100, 50, 50), stop_after_batches=5)
    with pytest.raises(AssertionError, match="too trivial to test: the source has fewer than 9 batch"):
        testing.check_add_back(source(100, 50, 50), fail_after_batches=9)
    with pytest.raises(AssertionError, match=r"too trivial to test: each of the first 1 split\(s\) was read in one"):
        testing.check_wake_up_resume(source(100, 100, 100))
    with pytest.raises(AssertionError, match=r"too trivial to test: each of the first 4 split\(s\) was read in one"):
        testing.check_wake_up_resume(source(100, 25, 25))
    with pytest.raises(AssertionError, match="too trivial to test: the enumerator generated no split"):
        testing.check_serializers(empty)


def test_values_are_deterministic_across_split_layouts() -> None:
    a = testing.rows_of(testing.InProcessRuntime(source(5000, 100, 33), 3).run().batches, source(1, 1, 1).schema())
    b = testing.rows_of(expected(source(5000, 5000, 5000)))
    assert a == b
