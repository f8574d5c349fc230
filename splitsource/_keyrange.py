"""KeyRangeSource: the short path for a source whose rows are ordered by a key, cut into ranges, and resumed after
the last key read (SQLite's rowids, a table's primary key).

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
import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from serializers import SimpleVersionedSerializer, dataclass_serializer
from splitsource._api import (
    Changes,
    EnumeratorState,
    RecordsBySplits,
    Source,
    Split,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitReader,
)
from splitsource._errors import OptionsError, ProtocolError
from splitsource._splits import SplitQueue
from splitsource._typed_options import Secret
from splitsource._wakeup import WakeUp

__all__ = ["KeyRange", "KeyRangePosition", "KeyRangeSource"]

OptionsT = TypeVar("OptionsT")
Page = tuple[pa.RecordBatch, "KeyRange"]  # what the emitter gets: a page's rows, and the range left after them


@dataclasses.dataclass(frozen=True)
class KeyRange(Split):
    """The rows whose key is greater than ``after`` and at most ``upto`` (``None``: unbounded on that side), in
    key order. Keys are plain values: integers, strings, bytes, or tuples of them (a composite key). Reading
    narrows it by moving ``after`` to the last key read; its id stays."""

    index: int
    after: Any = None
    upto: Any = None
    size: int = 0

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
    began (a source with :meth:`KeyRangeSource.last_key`), else its last range is open-ended."""

    index: int = 0
    after: Any = None
    done: bool = False
    last: Any = None
    bounded: bool = False


class KeyRangeSource(Source[KeyRange, KeyRangePosition, Page, OptionsT], Generic[OptionsT]):
    """A source read in key ranges. Implement :meth:`schema`, :meth:`boundaries` and :meth:`read`; override
    :meth:`connect` when reading needs a connection, and ``page_rows`` for another page size."""

    page_rows: ClassVar[int] = 10_000
    resumes_from_state: ClassVar[bool] = True  # a resumed copy skips the ranges it handed out, by key

    @abc.abstractmethod
    def boundaries(self) -> Iterable[tuple[Any, int]]:
        """The plan, lazily: ``(upto, estimated_bytes)`` for each range, ``upto`` strictly ascending as Python
        compares keys (one that is not is a :class:`~splitsource.ProtocolError`, never dropped). The ranges are
        ``(None, upto_0]``, ``(upto_0, upto_1]``, ... and a last one after the last ``upto`` to the end (estimated as
        the one before it). Called again when a copy resumes: ranges already handed out are skipped by key, so the
        boundaries may differ from the first run's (a table that changed)."""

    @abc.abstractmethod
    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        """One page of ``split``: at most ``limit`` rows with ``split.after < key <= split.upto``, in key order, as
        an Arrow batch of :meth:`schema`; the key of its last row (``None`` when there is no row); and whether the
        range is done (no row after this page's in it). The end is said, never inferred from a short page: a
        server may cap its pages below ``limit``. A page of more than ``limit`` rows, or of none that does not end
        the range, is a :class:`~splitsource.ProtocolError`."""

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

    def _appends(self) -> bool:
        return type(self).last_key is not KeyRangeSource.last_key

    def incremental(self) -> Changes:
        """``Changes.APPENDS`` for a source with :meth:`last_key`; refused without it."""
        if not self._appends():
            raise OptionsError(f"connector {self.name!r} cannot copy only what changed (--incremental): it does not "
                               "give the greatest key it holds (KeyRangeSource.last_key), after which a next run "
                               "would read; copy it whole")
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
        return _Enumerator(self, context, EnumeratorState((), KeyRangePosition(0, after)))

    def restore_enumerator(
        self, context: SplitEnumeratorContext, state: EnumeratorState[KeyRange, KeyRangePosition]
    ) -> SplitEnumerator[KeyRange, KeyRangePosition]:
        return _Enumerator(self, context, state)

    def create_split_reader(self) -> SplitReader[KeyRange, Page]:
        return _Reader(self)

    def split_serializer(self) -> SimpleVersionedSerializer[KeyRange]:
        return dataclass_serializer(KeyRange)

    def position_serializer(self) -> SimpleVersionedSerializer[KeyRangePosition]:
        return dataclass_serializer(KeyRangePosition, 2, {1: lambda fields: [*fields, None, False]})


def _key(value: Any) -> Any:
    """A key from its JSON form (an instant's): a list is a composite key's tuple."""
    return tuple(_key(v) for v in value) if isinstance(value, list) else value


class _Enumerator(SplitEnumerator[KeyRange, KeyRangePosition]):
    def __init__(
        self, source: KeyRangeSource[Any], context: SplitEnumeratorContext,
        state: EnumeratorState[KeyRange, KeyRangePosition],
    ) -> None:
        super().__init__(context, state.pending)
        self._source = source
        self._at = state.position
        self._bounds: Iterator[tuple[Any, int]] | None = None
        self._size = 0
        # a range was cut from this enumerator's boundaries: from here on they must ascend (before it, those not
        # above the resumed position are the ranges handed out before, skipped by key)
        self._planning = False

    def start(self) -> None:
        """A plan of a source with ``last_key`` ends at the greatest key at its start (kept in its position)."""
        if not self._at.bounded and self._source._appends():
            self._at = dataclasses.replace(self._at, last=self._source.last_key(), bounded=True)

    def instant(self) -> Mapping[str, Any]:
        return {"key": self._at.last} if self._at.bounded else {}

    def generate_split(self) -> KeyRange | None:
        at = self._at
        if at.done:
            return None
        end = at.last if at.bounded else None
        if at.bounded and (end is None or (at.after is not None and end <= at.after)):  # no key after the last run's
            self._at = dataclasses.replace(at, done=True)
            return None
        if self._bounds is None:
            self._bounds = iter(self._source.boundaries())
        for upto, size in self._bounds:
            self._size = size
            if end is not None and upto >= end:
                break  # the plan ends at its last key: rows added since are the next run's
            if at.after is None or upto > at.after:
                self._at = dataclasses.replace(at, index=at.index + 1, after=upto)
                self._planning = True
                return KeyRange(at.index, at.after, upto, self._size)
            if self._planning:  # past the ranges a resumed copy skips: a boundary out of order would lose keys
                raise ProtocolError(
                    f"connector {self._source.name!r}: boundaries() gave {upto!r} after {at.after!r}: boundaries "
                    "must ascend as Python compares them; give keys that sort as the source sorts them (a "
                    "collation's sort key), or cut the ranges by a key that does")
        self._at = dataclasses.replace(at, index=at.index + 1, done=True)
        return KeyRange(at.index, at.after, end, self._size)

    def position(self) -> KeyRangePosition:
        return self._at


class _Reader(SplitReader[KeyRange, Page]):
    """Reads the head range page by page; ``limit``: rows a page (the source's ``page_rows``; the kit reads with
    others)."""

    def __init__(self, source: KeyRangeSource[Any], limit: int = 0) -> None:
        self._source = source
        self._limit = limit or source.page_rows
        self._queue: SplitQueue[KeyRange, Any] = SplitQueue(lambda split: split.after)
        self._connection: Any = None
        self._wake = WakeUp(lambda: self._source.interrupt(self._connection))

    def add_splits(self, splits: Sequence[KeyRange]) -> None:
        self._queue.add(splits)

    def fetch(self) -> RecordsBySplits[Page]:
        split = self._queue.head
        if split is None:
            return RecordsBySplits()
        if self._connection is None:
            self._connection = self._source.connect()
        limit = self._limit
        try:
            at = dataclasses.replace(split, after=self._queue.position)
            with self._wake.call():
                batch, last, done = self._source.read(self._connection, at, limit)
        except Exception:
            if self._wake.woken():  # the read was interrupted, or not begun: ask again from the same key
                return RecordsBySplits()
            raise
        if batch.num_rows > limit or not (batch.num_rows or done):
            ended = "" if batch.num_rows else " and did not end the range"
            raise ProtocolError(f"connector {self._source.name!r}: read() of {split.split_id} returned "
                                f"{batch.num_rows} rows for a limit of {limit}{ended}")
        batches = [(split.split_id, (batch, dataclasses.replace(split, after=last)))] if batch.num_rows else []
        if done:
            self._queue.pop()
            return RecordsBySplits(batches, frozenset({split.split_id}))
        self._queue.position = last
        return RecordsBySplits(batches)

    def wake_up(self) -> None:
        self._wake.wake_up()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if hasattr(connection, "close"):
            connection.close()

