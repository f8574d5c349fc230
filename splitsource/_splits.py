"""SplitQueue: the bookkeeping every :class:`~splitsource.SplitReader` needs, written once.

A split reader reads its assigned splits in order, one bounded fetch at a time, and must resume the first of them
where the last successful fetch stopped. That is a queue of splits plus the read position in its head::

    class MyReader(SplitReader[MySplit, Raw]):
        def __init__(self, source):
            self._queue = SplitQueue(lambda split: split.start)  # where a split begins (its resume position)

        def add_splits(self, splits):
            self._queue.add(splits)

        def fetch(self):
            split = self._queue.head
            if split is None:
                return RecordsBySplits()
            rows, after = read_page(split, self._queue.position)
            if after is None:  # the split is done
                self._queue.pop()
                return RecordsBySplits([(split.split_id, rows)], frozenset({split.split_id}))
            self._queue.position = after
            return RecordsBySplits([(split.split_id, rows)])

A split handed back by the runtime after an interruption already carries its resume position (it comes from
``SplitState.to_split()``), so ``start`` reading it from the split is all the resume logic a reader needs.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from splitsource._api import Split

__all__ = ["SplitQueue"]

SplitT = TypeVar("SplitT", bound=Split)
PositionT = TypeVar("PositionT")


class SplitQueue(Generic[SplitT, PositionT]):
    """Assigned splits in order and the read position in the first (``None`` when nothing is assigned)."""

    def __init__(self, start: Callable[[SplitT], PositionT]) -> None:
        self._start = start
        self._splits: collections.deque[SplitT] = collections.deque()
        self.position: PositionT | None = None

    def add(self, splits: Iterable[SplitT]) -> None:
        """Assign more splits, read after the ones already assigned."""
        was_empty = not self._splits
        self._splits.extend(splits)
        if was_empty and self._splits:
            self.position = self._start(self._splits[0])

    @property
    def head(self) -> SplitT | None:
        """The split being read, or ``None``."""
        return self._splits[0] if self._splits else None

    def pop(self) -> SplitT:
        """Drop the finished head split and move the position to the start of the next one."""
        done = self._splits.popleft()
        self.position = self._start(self._splits[0]) if self._splits else None
        return done

    def __len__(self) -> int:
        return len(self._splits)

    def __bool__(self) -> bool:
        return bool(self._splits)

    def __repr__(self) -> str:
        return f"SplitQueue({len(self._splits)} splits, position={self.position!r})"
