"""The split enumerator: plans once (through a plan function it is given), then cuts splits lazily."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from connectors.cassandra._splits import CassandraPosition, CassandraSplit
from connectors.cassandra._tokens import PlanEntry
from splitsource import SplitEnumerator, SplitEnumeratorContext

__all__ = ["CassandraEnumerator"]


class CassandraEnumerator(SplitEnumerator[CassandraSplit, CassandraPosition]):
    """Plans once from the token ring and size estimates of every node; then cuts splits lazily.

    Splits come in rounds over the interleaved plan (sub-range ``r`` of every range that has one), so
    consecutive splits go to different replica sets. The state is the plan itself plus a cursor, so a restored
    enumerator never contacts the cluster to re-plan.
    """

    def __init__(
        self,
        plan: Callable[[], tuple[PlanEntry, ...]],
        context: SplitEnumeratorContext | None,
        position: CassandraPosition | None = None,
        pending: Sequence[CassandraSplit] = (),
    ) -> None:
        super().__init__(context, pending)
        self._plan = plan
        self._position = position
        self._rounds: int | None = None

    def start(self) -> None:
        if self._position is None:
            self._position = CassandraPosition(self._plan())

    def _pos(self) -> CassandraPosition:
        if self._position is None:
            self.start()
        assert self._position is not None
        return self._position

    def generate_split(self) -> CassandraSplit | None:
        pos = self._pos()
        plan, rnd, entry = pos.plan, pos.round, pos.entry
        if self._rounds is None:  # once: a split must cost O(1), not O(ranges) (a 256,000-range ring)
            self._rounds = max((e.parts for e in plan), default=0)
        max_parts = self._rounds
        while rnd < max_parts:
            while entry < len(plan):
                e = plan[entry]
                entry += 1
                if rnd < e.parts:
                    self._position = CassandraPosition(plan, rnd, entry)
                    sub = e.sub_range(rnd)
                    return CassandraSplit(sub.start, sub.end, e.estimated_bytes // e.parts)
            rnd, entry = rnd + 1, 0
        self._position = CassandraPosition(plan, rnd, entry)
        return None

    def position(self) -> CassandraPosition:
        return self._pos()

    def estimated_total_splits(self) -> int:
        return sum(e.parts for e in self._pos().plan)
