"""The conformance kit catches the connector bugs it exists for: each kind planted into a small connector (the
generator's rows on the full API, tests/splitsource/full_api.py) by overriding one piece; ``check_all`` must fail
on every one, by the check meant for it (its message starts with the check's name) and with a message naming what
differed, and pass on the unmodified connector (and on the generator itself, on the short path). The truth is what
the test knows the generator makes (ids 0..1,999), never a read through the runtime under test."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pytest

from connectors.generator import GeneratorSource
from serializers import MsgpackRecordSerializer
from splitsource import KeyRange, KeyRangeSource, ResumeEmitter, ResumeState, Secret, option, testing
from splitsource._api import RecordsBySplits
from tests.splitsource.full_api import GeneratorEnumerator, GeneratorSplit, GeneratorSplitReader, RowsSource

OPTIONS = {"rows": "2000", "split_rows": "200", "batch_rows": "50", "fetch_delay_ms": "2", "columns": "id:bigint"}
TRUTH = pa.table({"id": pa.array(range(2000), pa.int64())}, schema=pa.schema([pa.field("id", pa.int64(), False)]))


class LostAddBack(RowsSource):
    """restore_enumerator drops the add-back list (the state FLIP-27 checkpoints so that no split is lost)."""

    def restore_enumerator(self, context: Any, state: Any) -> GeneratorEnumerator:
        return GeneratorEnumerator(self.options, context, state.position)


class ReplanOnRestore(RowsSource):
    """restore_enumerator plans again from the start (flink-connector-cassandra's bug)."""

    def restore_enumerator(self, context: Any, state: Any) -> GeneratorEnumerator:
        return GeneratorEnumerator(self.options, context, pending=state.pending)


class _SkippingState(ResumeState[GeneratorSplit]):
    def to_split(self) -> GeneratorSplit:
        left = self.remaining
        return replace(left, start=min(left.start + 1, left.end))


class SkipOnResume(RowsSource):
    """A resumed split starts one row past where its state says."""

    def create_split_state(self, split: GeneratorSplit) -> ResumeState[GeneratorSplit]:
        return _SkippingState(split)


class _KeepsFirst(ResumeState[GeneratorSplit]):
    def __init__(self, split: GeneratorSplit) -> None:
        super().__init__(split)
        self.first = split


class _RestartingState(_KeepsFirst):
    def to_split(self) -> GeneratorSplit:
        return self.first


class RepeatOnResume(RowsSource):
    """A resumed split starts over from its first row (the Spark Cassandra Connector's restart-from-zero)."""

    def create_split_state(self, split: GeneratorSplit) -> ResumeState[GeneratorSplit]:
        return _RestartingState(split)


class _StillEmitter(ResumeEmitter[GeneratorSplit]):
    def emit(self, raw: Any, state: Any) -> pa.RecordBatch:
        return raw[0]


class EmitterLeavesState(RowsSource):
    """The emitter never moves the split state."""

    def create_record_emitter(self) -> ResumeEmitter[GeneratorSplit]:
        return _StillEmitter()


class _EarlyReader(GeneratorSplitReader):
    def fetch(self) -> RecordsBySplits[Any]:
        split = self._queue.head
        result = super().fetch()
        if split is not None and result.batches and split.split_id not in result.finished:
            self._queue.pop()  # its remaining rows are dropped
            return RecordsBySplits(result.batches, frozenset({split.split_id}))
        return result


class FinishedEarly(RowsSource):
    """A split is reported finished after its first batch."""

    def create_split_reader(self) -> GeneratorSplitReader:
        return _EarlyReader(self)


class _OffByOneEnumerator(GeneratorEnumerator):
    def generate_split(self) -> GeneratorSplit | None:
        split = super().generate_split()
        if split is not None and split.end == self._options.rows:
            return GeneratorSplit(split.index, split.start, split.end - 1, split.row_bytes)  # exclusive bound - 1
        return split


class LastRowLost(RowsSource):
    """The last split's exclusive upper bound skips the final row (flink-connector-cassandra's maximum token)."""

    def create_enumerator(self, context: Any) -> GeneratorEnumerator:
        return _OffByOneEnumerator(self.options, context)


_LOSSY = MsgpackRecordSerializer(
    "GeneratorSplitSerializer", 1,
    to_fields=lambda s: [s.index, s.end, s.row_bytes],  # drops ``start``: a narrowed split comes back whole
    from_fields=lambda f: GeneratorSplit(int(f[0]), int(f[0]) * 200, int(f[1]), int(f[2])),
)


class SerializerDropsField(RowsSource):
    """The split serializer drops a field."""

    def split_serializer(self) -> Any:
        return _LOSSY


_SHORTENING = MsgpackRecordSerializer(
    "GeneratorSplitSerializer", 1,
    to_fields=lambda s: [s.index, s.start, s.end, s.row_bytes],
    # from the sixth split on, a split comes back one row short: only later splits are ever stored
    from_fields=lambda f: GeneratorSplit(int(f[0]), int(f[1]), int(f[2]) - (int(f[0]) >= 5), int(f[3])),
)


class SerializerShortensLaterSplits(RowsSource):
    """The split serializer loses a row of every split after the fifth (the kit's round-trip once never ran)."""

    def split_serializer(self) -> Any:
        return _SHORTENING


class _RenamingState(_KeepsFirst):
    def to_split(self) -> GeneratorSplit:
        left = self.remaining
        return replace(left, index=left.index + 1000 * (left.start > self.first.start))


class NarrowedSplitRenamed(RowsSource):
    """A narrowed split gets another id (the runtimes follow a split by its id)."""

    def create_split_state(self, split: GeneratorSplit) -> ResumeState[GeneratorSplit]:
        return _RenamingState(split)


class _DeafReader(GeneratorSplitReader):
    def wake_up(self) -> None:
        pass  # a fetch that waits runs to its end


class IgnoresWakeUp(RowsSource):
    """wake_up() is ignored, so a long fetch cannot be cut short (a fetch here waits 5 s)."""

    def create_split_reader(self) -> GeneratorSplitReader:
        return _DeafReader(self)


class _RebuildingEnumerator(GeneratorEnumerator):
    def add_splits_back(self, splits: Any) -> None:
        per = self._options.rows_per_split
        super().add_splits_back([GeneratorSplit(s.index, s.index * per, s.end, s.row_bytes) for s in splits])


class AddBackRestartsSplits(RowsSource):
    """A running enumerator rebuilds each split a failed reader gives back from its id, as a fresh plan would, so
    a split read in part starts over (the restored enumerator, written apart, takes splits back as they are)."""

    def create_enumerator(self, context: Any) -> GeneratorEnumerator:
        return _RebuildingEnumerator(self.options, context)


class _NarrowingEmitter(ResumeEmitter[GeneratorSplit]):
    def emit(self, raw: Any, state: Any) -> pa.RecordBatch:
        batch = super().emit(raw, state)
        return pa.RecordBatch.from_arrays([batch.column(0).cast(pa.int32())], names=["id"])


class WrongBatchSchema(RowsSource):
    """The emitter gives ids as int32 where the schema says int64 (Spark needs each batch in the declared schema)."""

    def create_record_emitter(self) -> ResumeEmitter[GeneratorSplit]:
        return _NarrowingEmitter()


class ReferenceDropsARow(RowsSource):
    """reference_rows (verify's independent path) leaves out the first row of its first part."""

    def reference_rows(self, part: int = 0, parts: int = 1) -> Any:
        rows = super().reference_rows(part, parts)
        if part == 0:
            next(rows)
        return rows


# each mutant, the check meant to catch it, and words its message must hold besides the check's name: the counts
# of rows missing and extra the bug makes, never words every mismatch prints
MUTANTS: dict[type[RowsSource], tuple[str, str]] = {
    LostAddBack: ("check_add_back_snapshot", "add-back list was lost"),
    ReplanOnRestore: ("check_snapshot_restore", "0 row(s) missing, 400 row(s) extra or duplicated"),
    SkipOnResume: ("check_snapshot_restore", "2 row(s) missing, 0 row(s) extra"),
    RepeatOnResume: ("check_snapshot_restore", "0 row(s) missing, 100 row(s) extra or duplicated"),
    EmitterLeavesState: ("check_snapshot_restore", "0 row(s) missing, 100 row(s) extra or duplicated"),
    FinishedEarly: ("check_parallel_read", "1500 row(s) missing, 0 row(s) extra"),
    LastRowLost: ("check_parallel_read", "1 row(s) missing, 0 row(s) extra or duplicated; e.g. missing [(1999,)]"),
    WrongBatchSchema: ("check_parallel_read", "a batch's schema id: int32"),
    AddBackRestartsSplits: ("check_add_back", "0 row(s) missing, 50 row(s) extra or duplicated"),
    SerializerDropsField: ("check_serializers", "start 0 instead of 50"),
    SerializerShortensLaterSplits: ("check_serializers", "split generator-5 does not round-trip"),
    NarrowedSplitRenamed: ("check_serializers", "a narrowed split keeps its id"),
    IgnoresWakeUp: ("check_wake_up_resume", "did not return within 2.0s after wake_up()"),
    ReferenceDropsARow: ("check_reference_rows", "1 row(s) missing, 0 row(s) extra or duplicated; e.g. missing [(0,)]"),
}
CHECKS = ["check_serializers", "check_parallel_read", "check_snapshot_restore", "check_add_back",
          "check_add_back_snapshot", "check_wake_up_resume", "check_reference_rows"]


@pytest.mark.parametrize("source", [GeneratorSource, RowsSource], ids=["generator", "full-API"])
def test_the_kit_passes_the_connector_without_a_planted_bug(source: type[RowsSource | GeneratorSource]) -> None:
    testing.check_all(source(OPTIONS), TRUTH)


def _run(check: str, source: RowsSource, truth: pa.Table) -> None:
    if check == "check_wake_up_resume":
        testing.check_wake_up_resume(source)  # with the timeout check_all gives it
    elif check in ("check_serializers", "check_reference_rows"):
        getattr(testing, check)(source)
    else:
        getattr(testing, check)(source, truth)


@pytest.mark.parametrize("mutant", list(MUTANTS), ids=[m.__name__ for m in MUTANTS])
def test_the_kit_catches_a_planted_bug_with_the_check_meant_for_it(mutant: type[RowsSource]) -> None:
    truth = TRUTH
    check, words = MUTANTS[mutant]
    options = {**OPTIONS, "fetch_delay_ms": "5000", "batch_rows": "100"} if mutant is IgnoresWakeUp else OPTIONS
    for earlier in CHECKS[:CHECKS.index(check)]:  # the checks before it let the mutant through...
        if mutant is not IgnoresWakeUp:
            _run(earlier, mutant(options), truth)
    with pytest.raises(AssertionError) as caught:  # ...and the one meant for it names what differed
        _run(check, mutant(options), truth)
    message = str(caught.value)
    assert message.startswith(f"{check}:") or message.startswith(f"{check} "), message
    assert words in message, message
    if mutant is not IgnoresWakeUp:  # its fetches wait 5 s each: the whole kit would take minutes
        with pytest.raises(AssertionError):
            testing.check_all(mutant(options), truth)


@dataclass(frozen=True)
class _NumbersOptions:
    count: int = option(2000, doc="the numbers below this")


class CappedPages(KeyRangeSource[_NumbersOptions]):
    """A short-path source whose server caps its pages at 7 rows, and whose read takes a page shorter than the
    limit for the end of its range (the guess the explicit ``done`` replaces): every range ends after 7 rows."""

    name = "capped"
    options_class = _NumbersOptions

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field("n", pa.int64(), False)])

    def boundaries(self) -> Any:
        return ((upto, 800) for upto in range(99, self.options.count - 1, 100))

    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        start = 0 if split.after is None else split.after + 1
        stop = self.options.count if split.upto is None else split.upto + 1
        keys = list(range(start, min(stop, start + limit, start + 7)))  # the server's cap
        page = pa.record_batch([pa.array(keys, pa.int64())], schema=self.schema())
        return page, (keys[-1] if keys else None), len(keys) < limit


def test_the_kit_run_without_a_reference_catches_a_short_path_source_whose_pages_stop_at_7_rows() -> None:
    with pytest.raises(AssertionError) as caught:
        testing.check_all(CappedPages({}))
    message = str(caught.value)
    assert message.startswith("check_page_sizes: range-0 read in pages of 3 rows, against pages of 10000"), message
    assert "93 row(s) extra or duplicated" in message, message  # 100 rows in 3-row pages, 7 in capped ones
    testing.check_page_sizes(RowsSource(OPTIONS))  # a source of the full API: nothing to check


class _Capped(CappedPages):
    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        page, last, _ = super().read(connection, split, limit)
        stop = self.options.count - 1 if split.upto is None else split.upto
        return page, last, last is None or last >= stop  # the end said, not guessed


def test_a_short_path_source_that_says_its_end_passes_the_kit_with_capped_pages() -> None:
    testing.check_all(_Capped({}), pa.table({"n": pa.array(range(2000), pa.int64())},
                                            schema=pa.schema([pa.field("n", pa.int64(), False)])))


class _LongPages(_Capped):
    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        page, last, done = super().read(connection, split, limit + 7)
        return page, last, done


def test_a_page_longer_than_the_limit_is_refused() -> None:
    from splitsource import ProtocolError

    reader = _LongPages({}).create_split_reader()
    reader.add_splits([KeyRange(0, None, 99, 800)])
    with pytest.raises(ProtocolError, match=r"read\(\) of range-0 returned 7 rows for a limit of 3"):
        reader._limit = 3  # type: ignore[attr-defined]
        reader.fetch()


class _Unordered(_Capped):
    """Boundaries in an order Python's comparison does not follow (a case-insensitive collation's 'a' < 'B')."""

    def boundaries(self) -> Any:
        return iter([(99, 800), (299, 800), (199, 800), (399, 800)])


def test_a_boundary_out_of_order_is_refused_never_dropped() -> None:
    from splitsource import FixedEnumeratorContext, ProtocolError

    enumerator = _Unordered({}).create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    assert [enumerator.next_split().split_id for _ in range(2)] == ["range-0", "range-1"]  # type: ignore[union-attr]
    with pytest.raises(ProtocolError, match=r"boundaries\(\) gave 199 after 299: boundaries must ascend"):
        enumerator.next_split()


# -- check_incremental: a run after the generator grew from 2,000 rows to 2,600 reads ids 2,000..2,599, once ------


def _grown(source: Any) -> Any:
    return type(source)({**OPTIONS, "appended": "600"})


NEW = pa.table({"id": pa.array(range(2000, 2600), pa.int64())}, schema=TRUTH.schema)


@pytest.mark.parametrize("source", [GeneratorSource, RowsSource], ids=["generator", "full-API"])
def test_check_incremental_passes_the_generator(source: type[RowsSource | GeneratorSource]) -> None:
    testing.check_incremental(source(OPTIONS), lambda: _grown(source(OPTIONS)), NEW)


class _SinceIgnored(RowsSource):
    """A run since an instant reads every row again."""

    def _first_row(self) -> int:
        return 0


class _InstantBehind(RowsSource):
    """The instant says one row fewer than the run read: the next run reads that row again."""

    def create_enumerator(self, context: Any) -> GeneratorEnumerator:
        enumerator = super().create_enumerator(context)
        enumerator.instant = lambda: {"rows": self.options.total - 1}  # type: ignore[method-assign]
        return enumerator


@pytest.mark.parametrize(("mutant", "words"), [
    (_SinceIgnored, "the run after the change: 0 row(s) missing, 2000 row(s) extra or duplicated"),
    (_InstantBehind, "the run after the change: 0 row(s) missing, 1 row(s) extra or duplicated; e.g. missing [], "
                     "extra [(1999,)]"),
], ids=["SinceIgnored", "InstantBehind"])
def test_check_incremental_catches_a_run_that_reads_more_than_what_changed(mutant: type[RowsSource],
                                                                          words: str) -> None:
    with pytest.raises(AssertionError) as caught:
        testing.check_incremental(mutant(OPTIONS), lambda: _grown(mutant(OPTIONS)), NEW)
    assert str(caught.value).startswith(f"check_incremental: {words}"), caught.value


@dataclass(frozen=True)
class _LoginOptions:
    rows: int = option(10, doc="rows")
    password: Secret = option(Secret(""), doc="a secret")


class _ShowsItsPassword(KeyRangeSource[_LoginOptions]):
    """identity() lists every option, the password's value included."""

    name = "shows-its-password"
    options_class = _LoginOptions

    def schema(self) -> pa.Schema:
        return pa.schema([("n", pa.int64())])

    def boundaries(self) -> Any:
        return iter(())

    def read(self, connection: Any, split: KeyRange, limit: int) -> Any:
        return pa.record_batch([pa.array([], pa.int64())], names=["n"]), None, True

    def identity(self) -> Any:
        return {"rows": self.options.rows, "password": self.options.password.reveal()}


class _ChangingIdentity(_ShowsItsPassword):
    """identity() holds the moment the source was built."""

    def identity(self) -> Any:
        import time

        return {"rows": self.options.rows, "built": time.perf_counter_ns()}


def test_check_identity_passes_every_connector_and_catches_a_secret_or_a_moving_identity() -> None:
    testing.check_identity(GeneratorSource(OPTIONS))
    testing.check_identity(_ShowsItsPassword({"rows": "3"}))  # no password given: nothing to show
    with pytest.raises(AssertionError, match=r"^check_identity: identity\(\) shows a secret option's value"):
        testing.check_identity(_ShowsItsPassword({"rows": "3", "password": "hunter2"}))
    with pytest.raises(AssertionError, match=r"^check_identity: identity\(\) differs for a source built again"):
        testing.check_identity(_ChangingIdentity({"rows": "3"}))
