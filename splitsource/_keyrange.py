"""KeyRangeSource: the short path for a source whose rows are ordered by a key, cut into ranges, and resumed after
the last key read (SQLite's rowids, a table's primary key); an incremental run reads the keys added since the last
run (:meth:`KeyRangeSource.last_key`) or the rows a cursor says changed (:meth:`KeyRangeSource.last_cursor`).

An author writes the options, ``schema``, ``boundaries`` (where the ranges end) and ``read`` (one page of a range,
and whether the range is done), and gets the split, its state, the enumerator, the reader, versioned
serializers and every factory of :class:`~splitsource.Source`; ``connectors/sqlite`` is the worked example
(docs/connector-guide.md)::

    class Numbers(KeyRangeSource[NumbersOptions]):
        name = "numbers"
        options_class = NumbersOptions

        def schema(self):
            return pa.schema([("n", pa.int64())])

        def boundaries(self):  # the ranges (..., 99], (99, 199], ... and an open last one; ~800 bytes each
            return ((upto, 800) for upto in range(99, self.options.count - 1, 100))

        def read(self, connection, split, limit):  # keys after split.after, up to split.upto, at most limit
            low = -1 if split.after is None else split.after
            high = self.options.count - 1 if split.upto is None else split.upto
            keys = list(range(low + 1, min(high, low + limit) + 1))
            done = not keys or keys[-1] == high  # said, never guessed from a short page
            return pa.record_batch([pa.array(keys, pa.int64())], names=["n"]), (keys[-1] if keys else None), done
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from serializers import SimpleVersionedSerializer, dataclass_serializer
from splitsource._api import (
    Changes,
    EnumeratorState,
    ReadEvent,
    RecordsBySplits,
    Source,
    Split,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitReader,
)
from splitsource._errors import CheckpointError, OptionsError, ProtocolError
from splitsource._splits import SplitQueue
from splitsource._typed_options import Secret
from splitsource._wakeup import WakeUp

__all__ = ["CursorRange", "KeyRange", "KeyRangePosition", "KeyRangeSource"]

OptionsT = TypeVar("OptionsT")
Page = tuple[pa.RecordBatch, "KeyRange"]  # what the emitter gets: a page's rows, and the range left after them


@dataclasses.dataclass(frozen=True)
class CursorRange:
    """The cursor values whose rows an incremental run of a source of updates reads
    (:meth:`KeyRangeSource.last_cursor`): above ``after``, and equal to it too where ``at_after`` (``after`` None:
    from the lowest), and at most ``upto``, the greatest when the run planned (None: no row held one)."""

    after: Any = None
    upto: Any = None
    at_after: bool = False


@dataclasses.dataclass(frozen=True)
class KeyRange(Split):
    """The rows whose key is greater than ``after`` and at most ``upto`` (``None``: unbounded on that side), in
    key order. Keys are plain values: integers, strings, bytes, or tuples of them (a composite key). Reading
    narrows it by moving ``after`` to the last key read; its id stays. ``cursor``: of those rows, only the ones
    whose cursor value is in it (a source of updates, :meth:`KeyRangeSource.last_cursor`; None: every row)."""

    index: int
    after: Any = None
    upto: Any = None
    size: int = 0
    cursor: CursorRange | None = None

    @property
    def split_id(self) -> str:
        return f"range-{self.index}"

    @property
    def estimated_size_bytes(self) -> int:
        return self.size


@dataclasses.dataclass(frozen=True)
class KeyRangePosition:
    """Where a key-range plan stands: the next range's index, the upper key of the last range handed out, and
    whether the last range was handed out; ``bounded``: the plan ends at key ``last``, the greatest key when it
    began (a source with :meth:`KeyRangeSource.last_key`), else its last range is open-ended; ``guard``: what the
    plan was cut from, for a source whose ranges must not move (:meth:`KeyRangeSource.plan_guard`); ``cursor``: the
    cursor values every range reads, and ``held``, a digest of the rows holding the greatest when it planned (a
    source of updates, :meth:`KeyRangeSource.last_cursor`)."""

    index: int = 0
    after: Any = None
    done: bool = False
    last: Any = None
    bounded: bool = False
    guard: str = ""
    cursor: CursorRange | None = None
    held: str = ""


class KeyRangeSource(Source[KeyRange, KeyRangePosition, Page, OptionsT], Generic[OptionsT]):
    """A source read in key ranges. Implement :meth:`schema`, :meth:`boundaries` and :meth:`read`; override
    :meth:`connect` when reading needs a connection, and ``page_rows`` for another page size.

    Hooks, each with a default that does nothing: where the plan is cut, :meth:`start` and :meth:`stop` (take and
    hold what every reader shares, a snapshot), :meth:`reader_options` (hand it to them), :meth:`instant`,
    :meth:`changed`, :meth:`keys` and :meth:`changed_keys` (incremental runs), :meth:`before` (a key order that is
    not Python's), :meth:`plan_guard` (a plan that must not move); where rows are read, :meth:`connect`,
    :meth:`interrupt`, :meth:`page_limit` and :meth:`report`. An incremental source gives :meth:`last_key` (rows
    only added, under growing keys) or :meth:`last_cursor` and :meth:`cursor_rows` (rows changed, by a cursor)."""

    page_rows: ClassVar[int] = 10_000
    resumes_from_state: ClassVar[bool] = True  # a resumed copy skips the ranges it handed out, by key

    def __init__(self, options: Mapping[str, str] | OptionsT) -> None:
        super().__init__(options)
        self._reports: collections.deque[tuple[str, str]] = collections.deque()

    @abc.abstractmethod
    def boundaries(self) -> Iterable[tuple[Any, int]]:
        """The plan, lazily: ``(upto, estimated_bytes)`` for each range, ``upto`` strictly ascending in the source's
        key order (:meth:`before`; one that is not is a :class:`~splitsource.ProtocolError`, never dropped). The
        ranges are ``(None, upto_0]``, ``(upto_0, upto_1]``, ... and a last one after the last ``upto`` to the end
        (estimated as the one before it). Called again when a copy resumes: ranges already handed out are skipped
        by key, so the boundaries may differ from the first run's (a table that changed)."""

    @abc.abstractmethod
    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        """One page of ``split``: at most ``limit`` rows with ``split.after < key <= split.upto``, in key order (but
        for a page that ends the range, which no page reads after), as an Arrow batch of :meth:`schema`; the key
        the next page reads after (its last row's; ``None`` when there is no row); and whether the range is done
        (no row after this page's in it). The end is said, never inferred from a short page: a server may cap its
        pages below ``limit``. A page of more than ``limit`` rows, or of none that neither ends the range nor
        reads past a key (a run of keys holding no row), is a :class:`~splitsource.ProtocolError`."""

    def start(self) -> None:
        """Called once where the plan is cut (the driver), before :meth:`boundaries`, :meth:`last_key` and the
        other planning hooks, in a fresh run and in a resumed one: connect, take what every reader of the run shares
        (PostgreSQL exports a snapshot here) and hold it until :meth:`stop`."""

    def stop(self) -> None:
        """Called once when the plan is done (the run's readers have finished): release what :meth:`start` took."""

    def reader_options(self) -> Mapping[str, str]:
        """Options every reader of this run gets on top of the user's (after :meth:`start`): what it took for them,
        as a snapshot's id (:meth:`SplitEnumerator.reader_options`). A reader must work without them too: a
        ``spark.read`` plans and ends before its readers start."""
        return {}

    def instant(self) -> Mapping[str, Any]:
        """Where the source stands for this run, as a small JSON object (after :meth:`start`), handed to the next
        incremental run as :attr:`Source.since` (:meth:`SplitEnumerator.instant`). A source with :meth:`last_key`
        gets ``{"key": last}`` without it, and one with :meth:`last_cursor` its cursor's."""
        return {}

    def changed(self) -> bool:
        """Whether an incremental run has anything to read (after :meth:`start`): False plans no range at all, and
        :meth:`instant` should then give the last run's instant back. The default: True."""
        return True

    def keys(self) -> Iterator[pa.RecordBatch] | None:
        """Every key the source holds at this run's instant, for an incremental run to find deletes
        (:meth:`SplitEnumerator.keys`). The default: None (deletes are not seen)."""
        return None

    def changed_keys(self) -> tuple[int, Iterator[pa.RecordBatch]] | None:
        """How many keys the source holds at this run's instant, and the keys changed since the last run: a
        shortcut past :meth:`keys` when nothing was deleted (:meth:`SplitEnumerator.changed_keys`). The default:
        None."""
        return None

    def before(self, a: Any, b: Any) -> bool:
        """Whether key ``a`` sorts before key ``b`` as the source sorts them. The default is Python's ``a < b``;
        override it where the source's order is another (a collation, keys held as text): the plan compares
        boundaries with it, and a boundary that is not after the one before it is refused, never dropped."""
        return bool(a < b)

    def plan_guard(self) -> str:
        """What the plan's ranges are cut from, for a source whose ranges must not move between the runs of one
        copy (rows read by their place, not by a key): a resumed copy whose guard differs from the first run's is
        refused in one line. The default, "": the ranges may move, and a resumed copy skips, by key, those it
        handed out."""
        return ""

    def page_limit(self, split: KeyRange) -> int:
        """The most rows one :meth:`read` of ``split`` returns: ``page_rows``, unless overridden (rows sized from
        the split's bytes)."""
        return self.page_rows

    def report(self, kind: str, detail: str) -> None:
        """Note an event of a reader (``kind``: one word, as ``snapshot_lost``; ``detail``: one line), reported
        with the next page a reader of this source returns and counted in a copy's summary."""
        self._reports.append((kind, detail))

    def interrupt(self, connection: Any) -> None:
        """Make a :meth:`read` running on ``connection`` in another thread return soon, by raising: the reader's
        ``wake_up``. The read is then asked again from the same key. The default calls the connection's
        ``interrupt()`` where it has one (``sqlite3``'s); override it for another (libpq's cancel)."""
        interrupt = getattr(connection, "interrupt", None)
        if callable(interrupt):
            interrupt()

    def last_key(self) -> Any:
        """The greatest key the source holds now (``None``: no row), for a source whose rows are only ever added,
        each with a key above every key before it (rowids, a sequence): a run reads the keys up to it, and an
        incremental copy's next run the keys after it. Implement it to make the source incremental; the default
        raises NotImplementedError (a run reads to the end, as it finds it)."""
        raise NotImplementedError

    def last_cursor(self) -> Any:
        """For a source of updates, whose rows carry a cursor that every insert and update sets to a value at least
        the greatest any earlier commit left (an ``updated_at`` the writing statement sets, in a source that
        commits one writer at a time), and whose :meth:`incremental` returns ``Changes.UPSERTS``: the greatest
        cursor value the rows hold now (None: no row; a number or a text). A run reads the rows whose cursor is in
        its ranges' :attr:`KeyRange.cursor` (:meth:`read` keeps only those); the next one those changed since, and
        the ones sharing the last run's greatest value again where :meth:`cursor_rows` says they changed; one where
        neither this nor those moved reads nothing. The default raises NotImplementedError (no cursor)."""
        raise NotImplementedError

    def cursor_rows(self, value: Any) -> Iterable[Sequence[Any]]:
        """The rows whose cursor value is ``value`` now, as plain values in any order (a source with
        :meth:`last_cursor`): a run keeps a digest of them, so that the next one reads them again only where one
        changed without moving the cursor past them (two commits in one tick of a clock)."""
        raise NotImplementedError

    def _updates(self) -> bool:
        """Whether runs read by a cursor: a source with :meth:`last_cursor` whose :meth:`incremental` accepts
        upserts."""
        if type(self).last_cursor is KeyRangeSource.last_cursor:
            return False
        try:
            return self.incremental() is Changes.UPSERTS
        except OptionsError:  # no cursor for this table: a copy reads it whole
            return False

    def incremental(self) -> Changes:
        """``Changes.APPENDS`` for a source with :meth:`last_key`; refused without it. A source of updates
        (:meth:`last_cursor`) overrides it to return ``Changes.UPSERTS``."""
        if type(self).last_key is KeyRangeSource.last_key:
            raise OptionsError(f"connector {self.name!r} cannot copy only what changed (--incremental): it does not "
                               "give the greatest key it holds (KeyRangeSource.last_key), after which a next run "
                               "would read, nor a cursor (KeyRangeSource.last_cursor); copy it whole")
        return Changes.APPENDS

    def identity(self) -> Mapping[str, Any]:
        """The connector's name and every option but secrets (override to leave out options that do not change
        what is read)."""
        return {"connector": self.name, **{field.name: str(getattr(self.options, field.name))
                                           for field in dataclasses.fields(self.options)  # type: ignore[arg-type]
                                           if not isinstance(getattr(self.options, field.name), Secret)}}

    def connect(self) -> Any:
        """What :meth:`read` reads through (a database connection), opened once per reader, closed with it where it
        has ``close()`` and interrupted by ``wake_up`` where it has ``interrupt()`` (:meth:`interrupt`). The
        default: ``None``."""
        return None

    def create_enumerator(self, context: SplitEnumeratorContext) -> SplitEnumerator[KeyRange, KeyRangePosition]:
        after = None if self.since is None else _key(self.since.get("key"))  # the ranges after the last run's
        return _Enumerator(self, context, EnumeratorState((), KeyRangePosition(0, after)), fresh=True)

    def restore_enumerator(
        self, context: SplitEnumeratorContext, state: EnumeratorState[KeyRange, KeyRangePosition]
    ) -> SplitEnumerator[KeyRange, KeyRangePosition]:
        return _Enumerator(self, context, state)

    def create_split_reader(self) -> SplitReader[KeyRange, Page]:
        return _Reader(self)

    def split_serializer(self) -> SimpleVersionedSerializer[KeyRange]:
        return dataclass_serializer(KeyRange, 2, {1: lambda fields: [*fields, None]})  # 1: before cursors

    def position_serializer(self) -> SimpleVersionedSerializer[KeyRangePosition]:
        return dataclass_serializer(KeyRangePosition, 4, {1: lambda fields: [*fields, None, False],
                                                          2: lambda fields: [*fields, ""],
                                                          3: lambda fields: [*fields, None, ""]})


def _digest(rows: Iterable[Sequence[Any]]) -> str:
    """A digest of rows in any order (of plain values)."""
    return hashlib.sha256(repr(sorted(repr(tuple(row)) for row in rows)).encode()).hexdigest()[:16]


def _by_cursor(source: KeyRangeSource[Any], at: KeyRangePosition) -> KeyRangePosition:
    """A fresh plan of a source of updates (:meth:`KeyRangeSource.last_cursor`): the cursor values it reads, after
    the last run's greatest (and that value too, where the rows holding it changed) up to the greatest now, kept
    with a digest of the rows at the greatest; a plan where neither moved is done before it starts (a delete moves
    neither: the run's keys find it, :meth:`KeyRangeSource.keys`)."""
    upto = source.last_cursor()
    if not isinstance(upto, int | float | str | None) or isinstance(upto, bool):
        raise ProtocolError(f"connector {source.name!r}: last_cursor() gave {upto!r}: a cursor value is a number "
                            "or a text (kept in JSON for the next run)")
    held = "" if upto is None else _digest(source.cursor_rows(upto))
    since = source.since or {}
    after = since.get("cursor")
    if after is None:  # the first run, or a last run that found no row: every row up to the greatest
        return dataclasses.replace(at, cursor=CursorRange(None, upto), held=held)
    again = (held if after == upto else _digest(source.cursor_rows(after))) != since.get("held")
    return dataclasses.replace(at, cursor=CursorRange(after, upto, again), held=held,
                               done=at.done or not (again or upto != after))


def _key(value: Any) -> Any:
    """A key from its JSON form (an instant's): a list is a composite key's tuple."""
    return tuple(_key(v) for v in value) if isinstance(value, list) else value


class _Enumerator(SplitEnumerator[KeyRange, KeyRangePosition]):
    def __init__(
        self, source: KeyRangeSource[Any], context: SplitEnumeratorContext,
        state: EnumeratorState[KeyRange, KeyRangePosition], fresh: bool = False,
    ) -> None:
        super().__init__(context, state.pending)
        self._source = source
        self._at = state.position
        self._fresh = fresh  # a new plan (not a restored one)
        self._bounds: Iterator[tuple[Any, int]] | None = None
        self._size = 0
        # a range was cut from this enumerator's boundaries: from here on they must ascend (before it, those not
        # above the resumed position are the ranges handed out before, skipped by key)
        self._planning = False

    def start(self) -> None:
        """The source's :meth:`~KeyRangeSource.start`; then a fresh plan keeps the source's guard, a restored one
        is refused if the guard moved; a plan of a source with ``last_key`` ends at the greatest key at its start
        (kept in its position)."""
        source = self._source
        source.start()
        guard, updates = source.plan_guard(), source._updates()
        if self._fresh:
            self._at = dataclasses.replace(self._at, guard=guard, done=not source.changed())
            if updates:
                self._at = _by_cursor(source, self._at)
        elif guard != self._at.guard:
            raise CheckpointError(
                f"connector {source.name!r}: the source changed since this copy began ({self._at.guard!r}, now "
                f"{guard!r}), and its ranges cannot move without losing or repeating rows; run the copy again with "
                "a new checkpoint and output (or --overwrite)")
        # a source of appends: runs end at the greatest key when they planned, and a next one starts after it
        if not self._at.bounded and not updates and type(source).last_key is not KeyRangeSource.last_key:
            self._at = dataclasses.replace(self._at, last=source.last_key(), bounded=True)

    def instant(self) -> Mapping[str, Any]:
        at = self._at
        if at.cursor is not None:
            return {"cursor": at.cursor.upto, "held": at.held}
        return {"key": at.last} if at.bounded else self._source.instant()

    def reader_options(self) -> Mapping[str, str]:
        return self._source.reader_options()

    def keys(self) -> Iterator[pa.RecordBatch] | None:
        return self._source.keys()

    def changed_keys(self) -> tuple[int, Iterator[pa.RecordBatch]] | None:
        return self._source.changed_keys()

    def generate_split(self) -> KeyRange | None:
        at, before = self._at, self._source.before
        if at.done:
            return None
        end = at.last if at.bounded else None
        if at.bounded and (end is None or (at.after is not None and not before(at.after, end))):
            self._at = dataclasses.replace(at, done=True)  # no key after the last run's
            return None
        if self._bounds is None:
            self._bounds = iter(self._source.boundaries())
        for upto, size in self._bounds:
            self._size = size
            if end is not None and not before(upto, end):
                break  # the plan ends at its last key: rows added since are the next run's
            if at.after is None or before(at.after, upto):
                self._at = dataclasses.replace(at, index=at.index + 1, after=upto)
                self._planning = True
                return KeyRange(at.index, at.after, upto, self._size, at.cursor)
            if self._planning:  # past the ranges a resumed copy skips: a boundary out of order would lose keys
                raise ProtocolError(
                    f"connector {self._source.name!r}: boundaries() gave {upto!r} after {at.after!r}: boundaries "
                    "must ascend in the source's key order (KeyRangeSource.before, Python's by default); give keys "
                    "that sort as the source sorts them, or override before()")
        self._at = dataclasses.replace(at, index=at.index + 1, done=True)
        return KeyRange(at.index, at.after, end, self._size, at.cursor)

    def position(self) -> KeyRangePosition:
        return self._at

    def close(self) -> None:
        self._source.stop()
        super().close()


class _Reader(SplitReader[KeyRange, Page]):
    """Reads the head range page by page; ``limit``: rows a page (the source's :meth:`~KeyRangeSource.page_limit`;
    the kit reads with others)."""

    def __init__(self, source: KeyRangeSource[Any], limit: int = 0) -> None:
        self._source = source
        self._limit = limit
        self._queue: SplitQueue[KeyRange, Any] = SplitQueue(lambda split: split.after)
        self._connection: Any = None
        self._wake = WakeUp(lambda: self._source.interrupt(self._connection))

    def add_splits(self, splits: Sequence[KeyRange]) -> None:
        self._queue.add(splits)

    def fetch(self) -> RecordsBySplits[Page]:
        split = self._queue.head
        if split is None:
            return RecordsBySplits()
        source = self._source
        at = dataclasses.replace(split, after=self._queue.position)
        limit = self._limit or source.page_limit(at)
        if self._connection is None:
            self._connection = source.connect()
        try:
            with self._wake.call():
                batch, last, done = source.read(self._connection, at, limit)
        except Exception:
            self.close()  # the next fetch connects again, and reads from the same key
            if self._wake.woken():  # the read was interrupted, or not begun: ask it again
                return RecordsBySplits()
            raise
        if batch.num_rows > limit or not (batch.num_rows or done or (last is not None and last != at.after)):
            ended = "" if batch.num_rows else ", did not end the range and read no key further"
            raise ProtocolError(f"connector {source.name!r}: read() of {split.split_id} returned "
                                f"{batch.num_rows} rows for a limit of {limit}{ended}")
        events = tuple(ReadEvent(kind, split.split_id, detail) for kind, detail in _drain(source._reports))
        batches = [(split.split_id, (batch, dataclasses.replace(split, after=last)))] if batch.num_rows else []
        if done:
            self._queue.pop()
            return RecordsBySplits(batches, frozenset({split.split_id}), events)
        self._queue.position = last
        return RecordsBySplits(batches, events=events)

    def wake_up(self) -> None:
        self._wake.wake_up()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if hasattr(connection, "close"):
            connection.close()


def _drain(reports: collections.deque[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    while reports:
        try:
            yield reports.popleft()
        except IndexError:  # another reader of the same source took the last one
            return
