"""The conformance kit: checks every connector's tests call (like Beam's ``source_test_utils``).

Each check runs the connector on the in-process runtime (no Spark) and raises ``AssertionError`` with a readable
message when a contract of :mod:`splitsource` is broken::

    from splitsource import testing

    def test_my_connector_conforms():
        source = MySource({...})
        testing.check_all(source, expected=my_reference_table)

``expected`` is the whole source read some other way (the generator computes it, the Cassandra tests read it
with the driver). Without it, a single-reader read is the reference, which still catches gaps and overlaps
between parallel readers, restores and add-backs.

A check that could not have failed raises too (``too trivial to test``, as Beam's kit says): an empty source, a
snapshot that came after the last batch, a reader that ended before its planned failure, a split read in one
fetch so that ``wake_up`` interrupted nothing. Make the source larger or its batches smaller.

:func:`check_golden` keeps a serializer's old bytes readable, from golden files in the author's repository.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import pyarrow as pa

from serializers import read_envelope, write_envelope
from splitsource._api import Changes, FixedEnumeratorContext, Source, Split
from splitsource._planning import check_options_class
from splitsource._state import enumerator_state_from_bytes, enumerator_state_to_bytes
from splitsource._typed_options import Secret
from splitsource.runtime._local import Checkpoint, InProcessRuntime
from splitsource.testing._golden import check_golden

__all__ = [
    "InProcessRuntime",
    "check_add_back",
    "check_add_back_snapshot",
    "check_all",
    "check_golden",
    "check_identity",
    "check_incremental",
    "check_page_sizes",
    "check_parallel_read",
    "check_reference_rows",
    "check_serializers",
    "check_snapshot_restore",
    "check_wake_up_resume",
    "rows_of",
]

AnySource = Source[Any, Any, Any, Any]


class _Exact:
    """A value compared by its type and its value: Python holds ``1 == 1.0 == True``, a connector must not."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Exact) and type(self.value) is type(other.value) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))

    def __repr__(self) -> str:
        return repr(self.value)


def _hashable(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return _Exact(value)


def rows_of(data: pa.Table | list[pa.RecordBatch], schema: pa.Schema | None = None) -> Counter[Hashable]:
    """The multiset of rows of ``data``, for order-independent comparison; values compare by type and value."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches(data, schema=schema)
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return Counter(_hashable(row) for row in zip(*columns, strict=True))


def _assert_same(actual: Counter[Hashable], expected: Counter[Hashable], what: str) -> None:
    if actual == expected:
        return
    missing = expected - actual
    extra = actual - expected
    raise AssertionError(
        f"{what}: {sum(missing.values())} row(s) missing, {sum(extra.values())} row(s) extra or duplicated; "
        f"e.g. missing {list(missing)[:3]}, extra {list(extra)[:3]}"
    )


def _trivial(check: str, why: str) -> AssertionError:
    return AssertionError(f"{check}: too trivial to test: {why}; use a larger source or smaller batches")


def _reference(source: AnySource, expected: pa.Table | None) -> Counter[Hashable]:
    rows = rows_of(expected) if expected is not None else rows_of(InProcessRuntime(source, 1).run().batches,
                                                                  source.schema())
    if not rows:
        raise _trivial("the reference", "the source has no rows, so any read would equal it")
    return rows


def check_parallel_read(source: AnySource, expected: pa.Table | None = None, parallelism: int = 3) -> None:
    """Reading every split with ``parallelism`` readers equals the whole source: no gap, no overlap."""
    result = InProcessRuntime(source, parallelism).run()
    for batch in result.batches:
        assert batch.schema.equals(source.schema()), \
            f"check_parallel_read: a batch's schema {batch.schema} is not the source's {source.schema()}"
    _assert_same(rows_of(result.batches, source.schema()), _reference(source, expected),
                 f"check_parallel_read with {parallelism} readers")


def _round_trip_checkpoint(source: AnySource, checkpoint: Checkpoint[Any]) -> Checkpoint[Any]:
    state = enumerator_state_from_bytes(source, enumerator_state_to_bytes(source, checkpoint.enumerator))
    splits = tuple(
        read_envelope(source.split_serializer(), write_envelope(source.split_serializer(), s))
        for s in checkpoint.reader_splits
    )
    return Checkpoint(state, splits)


def check_snapshot_restore(
    source: AnySource, expected: pa.Table | None = None, *, stop_after_batches: int = 1, parallelism: int = 2
) -> None:
    """Stop after ``stop_after_batches`` batches, round-trip the checkpoint through its serializers, restore
    into a fresh runtime and finish: what was read before plus after equals the whole source exactly."""
    first = InProcessRuntime(source, parallelism).run(stop_after_batches=stop_after_batches)
    if first.checkpoint is None:
        raise _trivial("check_snapshot_restore", f"the source ended before {stop_after_batches} batch(es)")
    restored = _round_trip_checkpoint(source, first.checkpoint)
    batches = list(first.batches) + InProcessRuntime(source, parallelism, restore=restored).run().batches
    _assert_same(
        rows_of(batches, source.schema()),
        _reference(source, expected),
        f"check_snapshot_restore: a snapshot after {stop_after_batches} batch(es), restored",
    )


def check_add_back(
    source: AnySource, expected: pa.Table | None = None, *, fail_after_batches: int = 1, parallelism: int = 2
) -> None:
    """Reader 0 fails after ``fail_after_batches`` batches; its unfinished splits go back to the enumerator and
    another reader finishes them: every record exactly once."""
    result = InProcessRuntime(source, parallelism).run(fail_readers={0: fail_after_batches})
    if result.reader_failures == 0:  # the other readers took the work: one reader then has all of it
        result = InProcessRuntime(source, 1).run(fail_readers={0: fail_after_batches})
    if result.reader_failures == 0:
        raise _trivial("check_add_back",
                       f"the source has fewer than {fail_after_batches} batch(es), so no reader failed")
    _assert_same(
        rows_of(result.batches, source.schema()),
        _reference(source, expected),
        f"check_add_back: a reader failed at batch {fail_after_batches}, its splits added back",
    )


def check_add_back_snapshot(source: AnySource, expected: pa.Table | None = None, *, handed_out: int = 3) -> None:
    """Snapshot while splits are added back (FLIP-27 checkpoints the add-back list so that no split is lost): take
    ``handed_out`` splits, finish the first, add the others back, snapshot, round-trip the state through its
    serializers and restore a new enumerator from it. The restored enumerator serves the added-back splits first,
    and the finished split plus everything it serves is the whole source exactly once."""
    context = FixedEnumeratorContext(2)
    enumerator = source.create_enumerator(context)
    enumerator.start()
    taken = [s for s in (enumerator.next_split() for _ in range(handed_out)) if s is not None]
    if len(taken) < 2:
        raise _trivial("check_add_back_snapshot", "the enumerator generated fewer than two splits, so none was added "
                                            "back beside a finished one")
    finished, back = taken[0], taken[1:]
    enumerator.add_splits_back(back)
    state = enumerator_state_from_bytes(source, enumerator_state_to_bytes(source, enumerator.snapshot_state()))
    enumerator.close()
    restored = source.restore_enumerator(context, state)
    restored.start()
    served: list[Split] = []
    while (split := restored.next_split()) is not None:
        served.append(split)
        if len(served) > 1_000_000:
            raise AssertionError("check_add_back_snapshot: the restored enumerator never runs out of splits")
    restored.close()
    ids = [s.split_id for s in back]
    assert [s.split_id for s in served[: len(back)]] == ids, (
        "check_add_back_snapshot: the restored enumerator served "
        f"{[s.split_id for s in served[:len(back)]]} first, not "
        f"the added-back splits {ids}: the add-back list was lost or reordered by snapshot and restore")
    batches = [b for split in (finished, *served) for b in _read_one_split(source, split)]
    _assert_same(rows_of(batches, source.schema()), _reference(source, expected),
                 "check_add_back_snapshot: the finished split and every split the restored enumerator served")


def _differences(actual: Any, expected: Any) -> str:
    """What differs between two splits (or states): the dataclass fields that do, else both values."""
    if dataclasses.is_dataclass(actual) and type(actual) is type(expected):
        fields = [f.name for f in dataclasses.fields(actual)
                  if getattr(actual, f.name) != getattr(expected, f.name)]
        if fields:
            return ", ".join(f"{name} {getattr(actual, name)!r} instead of {getattr(expected, name)!r}"
                             for name in fields)
    return f"{actual!r} instead of {expected!r}"


def check_serializers(source: AnySource, max_splits: int = 1000) -> None:
    """Every generated split, and the enumerator state after each split, round-trips through its serializer; so
    does what remains of each split after its first fetch, which keeps the split's id."""
    enumerator = source.create_enumerator(InProcessRuntime(source, 1).enumerator.context)
    enumerator.start()
    serializer = source.split_serializer()
    taken: list[Split] = []
    try:
        for _ in range(max_splits):
            state = enumerator.snapshot_state()
            again_state = enumerator_state_from_bytes(source, enumerator_state_to_bytes(source, state))
            if again_state != state:
                raise AssertionError(f"check_serializers: the enumerator state after {len(taken)} split(s) does not "
                                     f"round-trip: {_differences(again_state, state)}")
            split = enumerator.next_split()
            if split is None:
                break
            taken.append(split)
        if not taken:
            raise _trivial("check_serializers", "the enumerator generated no split")
        for split in taken:
            for what, value in (("split", split), ("its remaining split", _narrowed(source, split))):
                again = read_envelope(serializer, write_envelope(serializer, value))
                if again != value:
                    raise AssertionError(f"check_serializers: {what} {split.split_id} does not round-trip through "
                                         f"{type(serializer).__name__}: {_differences(again, value)}")
        ids = [s.split_id for s in taken]
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        if duplicated:
            raise AssertionError(f"check_serializers: split ids are not unique: {duplicated[:5]} each name several "
                                 "splits")
        enumerator.add_splits_back(taken[:2])
        state = enumerator.snapshot_state()
        again_state = enumerator_state_from_bytes(source, enumerator_state_to_bytes(source, state))
        if again_state != state:
            raise AssertionError("check_serializers: the enumerator state with splits added back does not round-trip: "
                                 f"{_differences(again_state, state)}")
        served = enumerator.next_split()
        if served != taken[0]:
            raise AssertionError(f"check_serializers: split {taken[0].split_id} was added back but "
                                 f"{served.split_id if served else None} was served first")
    finally:
        enumerator.close()


def _narrowed(source: AnySource, split: Split) -> Split:
    """What remains of ``split`` after its first fetch (a split as a restore or an add-back stores it)."""
    reader = source.create_split_reader()
    emitter = source.create_record_emitter()
    state = source.create_split_state(split)
    reader.add_splits([split])
    try:
        result = reader.fetch()
        while not result.batches and split.split_id not in result.finished:
            result = reader.fetch()
        for _, raw in result.batches:
            emitter.emit(raw, state)
            _check_narrowed_id(split, state, "check_serializers")
    finally:
        reader.close()
    remaining: Split = state.to_split()
    return remaining


def check_wake_up_resume(source: AnySource, timeout: float = 2.0, max_splits: int = 8) -> None:
    """A fetch interrupted by ``wake_up`` returns within ``timeout`` seconds, and fetching on yields every record
    once. Tried on the first of the first ``max_splits`` splits that takes more than one fetch (a source's first
    split may be small). A reader that cannot cut a fetch short fails here once a fetch takes longer than
    ``timeout``: a copy's stop and a fetch's timeout would wait for it."""
    splits = _first_splits(source, max_splits, "check_wake_up_resume")
    for split in splits:
        out = _read_woken(source, split, timeout)
        if out is not None:
            reference = _read_one_split(source, split)  # the same split, read without interruption
            _assert_same(rows_of(out, source.schema()), rows_of(reference, source.schema()),
                         f"check_wake_up_resume: split {split.split_id} read with wake-ups")
            return
    raise _trivial("check_wake_up_resume", f"each of the first {len(splits)} split(s) was read in one fetch, so "
                                           "wake_up interrupted nothing")


def _read_woken(source: AnySource, split: Split, timeout: float) -> list[pa.RecordBatch] | None:
    """Read ``split``, calling ``wake_up`` during its first fetch and during the first fetch after a batch (the
    middle of the split); each woken fetch must return within ``timeout``. None if one fetch read it all."""
    reader = source.create_split_reader()
    emitter = source.create_record_emitter()
    state = source.create_split_state(split)
    reader.add_splits([split])
    out: list[pa.RecordBatch] = []
    woken_at: list[str] = []  # where a wake-up landed: "start", then "middle"

    def fetch(wake: bool) -> Any:
        box: list[Any] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                box.append(reader.fetch())
            except BaseException as exc:  # noqa: B036 - handed to the caller's thread
                failed.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        if wake:
            reader.wake_up()
        worker.join(timeout if wake else None)
        if worker.is_alive():
            raise AssertionError(f"check_wake_up_resume: split {split.split_id}: fetch did not return within "
                                 f"{timeout}s after wake_up() (a reader must cut a long fetch short)")
        if failed:
            raise failed[0]
        return box[0]

    try:
        finished = False
        while not finished:
            wake = not woken_at or (len(woken_at) == 1 and bool(out))
            result = fetch(wake)
            if wake:
                woken_at.append("middle" if out else "start")
            for _, raw in result.batches:
                batch = emitter.emit(raw, state)
                if batch is not None:
                    out.append(batch)
                _check_narrowed_id(split, state, "check_wake_up_resume")
            finished = split.split_id in result.finished
    finally:
        reader.close()
    return out if "middle" in woken_at else None


def _check_narrowed_id(split: Split, state: Any, check: str) -> None:
    """The runtimes follow a split by its id (its finished report, the copy's rows per split): the remaining split
    a state gives must keep the id."""
    narrowed = state.to_split()
    if narrowed.split_id != split.split_id:
        raise AssertionError(f"{check}: split {split.split_id}, narrowed by its state, came back as "
                             f"{narrowed.split_id}: a narrowed split keeps its id")


def check_reference_rows(source: AnySource, parts: int = 3) -> None:
    """``reference_rows`` (verify's independent path), where the source has one: its ``parts`` parts together give
    each row a read gives, once, in the plain form (``Source.reference_rows``: integers for timestamps and dates,
    dicts for structs); a column of ``volatile_columns()`` is compared by whether it is null, as verify does."""
    from splitsource.sink._text import plain_storage

    probe = source.reference_rows()
    if probe is None:
        return
    getattr(probe, "close", lambda: None)()  # a generator, not started
    schema = source.schema()
    types = [plain_storage(f.type) for f in schema]
    rows = [tuple(row) for part in range(parts) for row in source.reference_rows(part, parts) or ()]
    columns = list(zip(*rows, strict=True)) or [()] * len(types)
    try:
        arrays = [pa.array(list(c), t) for c, t in zip(columns, types, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise AssertionError(f"check_reference_rows: reference_rows does not give the plain form of the schema "
                             f"{schema.types} (integers for timestamps and dates, dicts for structs): {exc}") from None
    read = pa.Table.from_batches(InProcessRuntime(source, 1).run().batches, schema)
    volatile = set(source.volatile_columns())

    def plain(table: pa.Table) -> pa.Table:
        cast = [table.column(i).cast(t) for i, t in enumerate(types)]
        return pa.Table.from_arrays([c.is_null() if f.name in volatile else c for f, c in zip(schema, cast,
                                                                                                strict=True)],
                                    names=schema.names)

    _assert_same(rows_of(plain(pa.Table.from_arrays(arrays, names=schema.names))), rows_of(plain(read)),
                 f"check_reference_rows: reference_rows in {parts} parts, against a read (missing: in the read, "
                 "not the reference)")


def check_page_sizes(source: AnySource, small: int = 3, max_splits: int = 2) -> None:
    """A source on the key-range short path (:class:`~splitsource.KeyRangeSource`): each of its first
    ``max_splits`` ranges read in pages of ``small`` rows gives the rows it gives in the source's own pages
    (``page_rows``). A source that takes a short page for the end of its range (a server capping pages below the
    limit) loses rows at one page size or the other. Other sources: nothing to check."""
    from splitsource._keyrange import KeyRangeSource, _Reader

    if not isinstance(source, KeyRangeSource):
        return
    for split in _first_splits(source, max_splits, "check_page_sizes"):
        pages = _read_one_split(source, split, _Reader(source))
        little = _read_one_split(source, split, _Reader(source, limit=small))
        _assert_same(rows_of(little, source.schema()), rows_of(pages, source.schema()),
                     f"check_page_sizes: {split.split_id} read in pages of {small} rows, against pages of "
                     f"{source.page_rows}")


def _first_splits(source: AnySource, count: int, check: str) -> list[Split]:
    """The first ``count`` splits a fresh enumerator generates (at least one, or ``check`` is too trivial)."""
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    splits = [s for s in (enumerator.next_split() for _ in range(count)) if s is not None]
    enumerator.close()
    if not splits:
        raise _trivial(check, "the enumerator generated no split")
    return splits


def _read_one_split(source: AnySource, split: Split, reader: Any = None) -> list[pa.RecordBatch]:
    reader = reader or source.create_split_reader()
    emitter = source.create_record_emitter()
    state = source.create_split_state(split)
    reader.add_splits([split])
    out = []
    try:
        while True:
            result = reader.fetch()
            for _, raw in result.batches:
                batch = emitter.emit(raw, state)
                if batch is not None:
                    out.append(batch)
                _check_narrowed_id(split, state, "split read")
            if split.split_id in result.finished:
                return out
    finally:
        reader.close()


def check_incremental(source: AnySource, change: Callable[[], AnySource], expected: pa.Table,
                      deleted: pa.Table | None = None) -> None:
    """An incremental run reads exactly what changed, once, and nothing else (for a source whose
    :meth:`~splitsource.Source.incremental` accepts).

    ``source`` is read whole, and its enumerator's instant kept (through JSON, as a copy keeps it). ``change()``
    then changes the source's data (inserts; updates for a source of ``Changes.UPSERTS``) and returns the source
    to read after it: the same one, or one with the options the change needs (a generator's larger ``rows``). Read
    with ``since`` set to the instant, it must yield exactly ``expected``, the rows the change added or changed;
    for ``Changes.APPENDS``, the two reads together must also be the whole source after the change (nothing lost
    where the first run ended). A third read, since the second's instant with nothing changed, must be empty.
    ``deleted`` (the key columns of the rows the change deleted, for a ``Changes.UPSERTS`` source): the keys an
    enumerator of the run after the change lists (:meth:`~splitsource.SplitEnumerator.keys`) must be the first
    read's less exactly these, and hold every key the run read; where it counts them
    (:meth:`~splitsource.SplitEnumerator.changed_keys`), its count must be theirs, and its changed keys among them,
    with every key the first run did not read."""
    check = "check_incremental"
    changes = source.incremental()
    first = InProcessRuntime(source, 2)
    before = first.run().batches
    instant = json.loads(json.dumps(first.enumerator.instant()))  # now: a source may answer from its newest plan
    after = change()
    second = InProcessRuntime(_since(after, instant), 2)
    changed = second.run().batches
    third = InProcessRuntime(_since(after, second.enumerator.instant()), 2)
    again = third.run().batches
    if not expected.num_rows:
        raise _trivial(check, "the change changed no row")
    schema = source.schema()
    if deleted is not None:
        _check_deleted(_since(after, instant), pa.Table.from_batches(before, schema=schema),
                       pa.Table.from_batches(changed, schema=schema), deleted)
    _assert_same(rows_of(changed, schema), rows_of(expected), f"{check}: the run after the change")
    _assert_same(rows_of(again, schema), Counter(), f"{check}: a run with nothing changed")
    if changes is Changes.APPENDS:
        whole = InProcessRuntime(_since(after, None), 2).run().batches
        _assert_same(rows_of(before + changed, schema), rows_of(whole, schema),
                     f"{check}: the two runs together, against the source read whole")
    _since(after, None)


def _check_deleted(source: AnySource, first: pa.Table, read: pa.Table, deleted: pa.Table) -> None:
    check = "check_incremental"
    keys = list(source.key_columns())
    assert source.incremental() is Changes.UPSERTS and keys, \
        f"{check}: deleted is given, but the source is not one of upserts by key (Changes.UPSERTS, key_columns())"
    lister = source.create_enumerator(FixedEnumeratorContext(1))
    lister.start()
    key_schema = pa.schema([source.schema().field(k) for k in keys])
    try:
        found = lister.keys()
        assert found is not None, f"{check}: deleted is given, but the enumerator's keys() is None: no delete is seen"
        listed = pa.Table.from_batches(list(found), schema=key_schema)
        counted = lister.changed_keys()
        changed = None if counted is None else pa.Table.from_batches(list(counted[1]), schema=key_schema)
    finally:
        lister.close()

    def key_set(table: pa.Table) -> set[Hashable]:
        return set(rows_of(table.select(keys)))

    present = key_set(listed)
    _assert_same(Counter(key_set(first) - present), Counter(key_set(deleted)),
                 f"{check}: the keys the first run read that keys() lists no more, against the deleted ones")
    unlisted = key_set(read) - present
    assert not unlisted, f"{check}: keys() does not list {len(unlisted)} key(s) the run after the change read, " \
                         f"e.g. {sorted(unlisted, key=repr)[:3]}"
    if counted is not None and changed is not None:
        assert counted[0] == len(present), f"{check}: changed_keys() counts {counted[0]} key(s), keys() lists " \
                                           f"{len(present)}"
        new = present - key_set(first) - key_set(changed)
        assert not new, f"{check}: changed_keys() leaves out {len(new)} key(s) the first run did not read, e.g. " \
                        f"{sorted(new, key=repr)[:3]}"
        strays = key_set(changed) - present
        assert not strays, f"{check}: changed_keys() gives {len(strays)} key(s) keys() does not list, e.g. " \
                           f"{sorted(strays, key=repr)[:3]}"


def _since(source: AnySource, instant: Mapping[str, Any] | None) -> AnySource:
    """``source`` as the framework hands it to a run since ``instant`` (kept as JSON)."""
    if instant is not None and not instant:
        raise AssertionError("check_incremental: the enumerator's instant() is empty, so a next run would read "
                             "everything")
    source.since = None if instant is None else json.loads(json.dumps(instant))
    return source


def check_identity(source: AnySource) -> None:
    """``identity()``, by which a copy refuses another's checkpoint, is the same for a source built again from the
    same options, can be kept as JSON, and shows no secret option's value."""
    check = "check_identity"
    first = json.dumps(source.identity(), sort_keys=True, default=str)
    again = json.dumps(type(source)(source.options).identity(), sort_keys=True, default=str)
    assert first == again, f"{check}: identity() differs for a source built again from the same options: {first} " \
                           f"then {again}"
    options = source.options
    secrets = [getattr(options, f.name).reveal() for f in dataclasses.fields(options)
               if isinstance(getattr(options, f.name), Secret) and getattr(options, f.name)]
    shown = [s for s in secrets if s in first]
    assert not shown, f"{check}: identity() shows a secret option's value: {first}"


def check_all(source: AnySource, expected: pa.Table | None = None) -> None:
    """Every check above with default parameters, after the connector's options are checked for reserved names."""
    check_options_class(type(source))
    check_identity(source)
    check_serializers(source)
    check_page_sizes(source)
    check_parallel_read(source, expected)
    check_snapshot_restore(source, expected)
    check_add_back(source, expected)
    check_add_back_snapshot(source, expected)
    check_wake_up_resume(source)
    check_reference_rows(source)
