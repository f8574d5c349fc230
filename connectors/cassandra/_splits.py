"""A token-range split, the enumerator's position, and their versioned serializers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectors.cassandra._tokens import PlanEntry
from serializers import MsgpackRecordSerializer
from splitsource import Split

__all__ = [
    "CASSANDRA_POSITION_SERIALIZER",
    "CASSANDRA_SPLIT_SERIALIZER",
    "CassandraPosition",
    "CassandraSplit",
]


@dataclass(frozen=True)
class CassandraSplit(Split):
    """Keys with ``start < token <= end``; ``paging_state`` is where a resumed read continues (None: start), and
    ``page_size`` the page a resumed read asks for (a wide partition that timed out keeps its smaller pages).

    ``done`` marks a split whose last page was emitted: without it, a split read to the end (paging state None
    again) could not be told from one never started, and a restore would read it twice.
    """

    start: int
    end: int
    estimated_bytes: int = 0
    paging_state: bytes | None = None
    done: bool = False
    page_size: int = 0  # rows per page from here on, after read timeouts shrank it (0: option fetch_size)

    @property
    def split_id(self) -> str:
        return f"token({self.start},{self.end}]"

    @property
    def estimated_size_bytes(self) -> int:
        return self.estimated_bytes


@dataclass(frozen=True)
class CassandraPosition:
    """The plan (one entry per ring range, already sized) and a cursor: round ``round`` at entry ``entry``."""

    plan: tuple[PlanEntry, ...]
    round: int = 0
    entry: int = 0


def _entry_fields(e: PlanEntry) -> list[Any]:
    return [str(e.start), str(e.end), e.parts, e.estimated_bytes]


CASSANDRA_SPLIT_SERIALIZER: MsgpackRecordSerializer[CassandraSplit] = MsgpackRecordSerializer(
    "CassandraSplitSerializer",
    3,
    # tokens as text: RandomPartitioner tokens do not fit msgpack's 64-bit integers
    to_fields=lambda s: [str(s.start), str(s.end), s.estimated_bytes, s.paging_state, s.done, s.page_size],
    from_fields=lambda f: CassandraSplit(int(f[0]), int(f[1]), int(f[2]), f[3], bool(f[4]), int(f[5])),
    # version 2 added page_size; version 3 dropped the count of rows read before (kept by nothing)
    upgrades={1: lambda f: [*f, 0], 2: lambda f: [*f[:4], *f[5:]]},
)
CASSANDRA_POSITION_SERIALIZER: MsgpackRecordSerializer[CassandraPosition] = MsgpackRecordSerializer(
    "CassandraPositionSerializer",
    1,
    to_fields=lambda p: [[_entry_fields(e) for e in p.plan], p.round, p.entry],
    from_fields=lambda f: CassandraPosition(
        tuple(PlanEntry(int(e[0]), int(e[1]), int(e[2]), int(e[3])) for e in f[0]), int(f[1]), int(f[2])
    ),
)
