"""A PostgreSQL split: a key range or a block range of one relation, the plan, their serializers."""

from __future__ import annotations

from dataclasses import dataclass, replace

from serializers import dataclass_serializer
from splitsource import Split

__all__ = ["POSITIONS", "SPLITS", "PostgresPosition", "PostgresSplit"]

Key = tuple[str, ...]  # a key's values as the server prints them (cast back with the key columns' types)


@dataclass(frozen=True)
class PostgresSplit(Split):
    """Rows of ``relation`` in a key range (``lo`` to ``hi``, ``hi`` excluded; None: open) or, when
    ``first_block`` >= 0, in the blocks from ``first_block`` to ``end_block`` (excluded; -1: to the end).
    ``done``: nothing left (a state's remaining split after the last page)."""

    index: int
    relation: str
    lo: Key | None = None
    lo_inclusive: bool = True
    hi: Key | None = None
    first_block: int = -1
    end_block: int = -1
    size: int = 0  # estimated bytes on disk
    row_bytes: int = 100  # estimated bytes per row on disk (sizes a key range's pages)
    done: bool = False

    @property
    def split_id(self) -> str:
        return f"postgres-{self.index}"

    @property
    def estimated_size_bytes(self) -> int:
        return 0 if self.done else self.size

    @property
    def by_blocks(self) -> bool:
        return self.first_block >= 0


@dataclass(frozen=True)
class PostgresPosition:
    """The plan, cut once at the start of a run (at its snapshot): every split, the next one to hand out, and
    ``guard``, what the relations' change counters were (block ranges resume only on an unchanged table)."""

    splits: tuple[PostgresSplit, ...]
    next_index: int
    guard: str


# a position's splits each as their own field list; the bytes are those of the hand-written serializers before
# (tests/golden)
SPLITS = dataclass_serializer(PostgresSplit)
POSITIONS = dataclass_serializer(PostgresPosition)


def narrowed(split: PostgresSplit, *, after_key: Key | None = None, next_block: int | None = None,
             done: bool = False) -> PostgresSplit:
    """What is left of ``split`` after a page: keys after ``after_key``, blocks from ``next_block``, or nothing."""
    if done:
        return replace(split, done=True)
    if after_key is not None:
        return replace(split, lo=after_key, lo_inclusive=False)
    assert next_block is not None
    return replace(split, first_block=next_block)
