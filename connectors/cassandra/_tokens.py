"""Token ranges of the Cassandra ring, and the lazy plan that cuts them into size-bounded splits.

Cassandra's ranges are half-open on the left: ``(start, end]`` holds the keys with ``start < token <= end``.
The ring of sorted tokens ``t0 < ... < tn`` gives ranges ``(t_i, t_{i+1}]`` and the wrapping ``(tn, t0]``, which
is cut at the partitioner's bounds into ``(tn, MAX]`` and ``(MIN, t0]``. ``MIN`` itself is never a key's token
(Murmur3 maps it to MAX), so ``(MIN, MAX]`` covers every key, the maximum token included: the upper bound is
always inclusive (the Flink source's exclusive last bound skipped it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["PARTITIONERS", "PlanEntry", "TokenRange", "build_plan", "ring_ranges", "split_range"]

# partitioner class suffix -> (MIN, MAX) of its token space
PARTITIONERS: Mapping[str, tuple[int, int]] = {
    "Murmur3Partitioner": (-(2**63), 2**63 - 1),
    "RandomPartitioner": (-1, 2**127),
}


class TokenRange(NamedTuple):
    """Keys with ``start < token(key) <= end``. A named tuple: a ring has up to hundreds of thousands of them as
    dict keys while planning, and a tuple hashes and compares in C."""

    start: int
    end: int

    @property
    def width(self) -> int:
        return self.end - self.start


def ring_ranges(tokens: Iterable[int], min_token: int, max_token: int) -> list[TokenRange]:
    """Every range of the ring, the wrap-around cut at the bounds; together they cover ``(MIN, MAX]`` once."""
    ring = sorted(set(tokens))
    if not ring:
        return [TokenRange(min_token, max_token)]
    ranges = [TokenRange(a, b) for a, b in zip(ring, ring[1:], strict=False)]
    if ring[-1] < max_token:
        ranges.append(TokenRange(ring[-1], max_token))
    if ring[0] > min_token:
        ranges.append(TokenRange(min_token, ring[0]))
    return ranges


def split_range(rng: TokenRange, parts: int) -> list[TokenRange]:
    """Cut ``rng`` into ``parts`` contiguous sub-ranges of (nearly) equal width, covering it exactly."""
    parts = max(1, min(parts, rng.width))
    bounds = [rng.start + (rng.width * i) // parts for i in range(parts + 1)]
    return [TokenRange(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


@dataclass(frozen=True)
class PlanEntry:
    """One ring range, how many splits it is cut into, and its estimated size in bytes (0: unknown)."""

    start: int
    end: int
    parts: int
    estimated_bytes: int

    def sub_range(self, index: int) -> TokenRange:
        return split_range(TokenRange(self.start, self.end), self.parts)[index]


def build_plan(
    ranges: Sequence[tuple[TokenRange, tuple[str, ...]]],
    estimates: Mapping[TokenRange, int],
    *,
    split_bytes: int,
    total_splits: int,
    fallback_splits: int,
) -> tuple[PlanEntry, ...]:
    """Decide how many splits each ring range gets, and order ranges so neighbours have other replicas.

    - ``total_splits > 0``: that many splits in all, shared out in proportion to estimated size (to width
      when nothing is estimated);
    - else each range gets ``ceil(estimate / split_bytes)`` splits, so dense ranges get more (not equal width);
    - ranges without an estimate get the mean density of those with one, or, when no range has one (a fresh
      table), ``fallback_splits`` shared by width.
    """
    known = {r: b for r, b in estimates.items() if b > 0}
    widths = {r: r.width for r, _ in ranges}
    total_width = sum(widths.values()) or 1
    if known:
        density = sum(known.values()) / sum(r.width for r in known)
        sizes = {r: known.get(r, int(density * r.width)) for r, _ in ranges}
    else:
        sizes = {r: 0 for r, _ in ranges}

    total_size = sum(sizes.values()) or 1  # once: per range it made planning quadratic in the ring's size

    def parts_for(r: TokenRange) -> int:
        if total_splits > 0:
            weight = sizes[r] / total_size if known else widths[r] / total_width
            return max(1, round(total_splits * weight))
        if not known:
            return max(1, round(fallback_splits * widths[r] / total_width))
        return max(1, -(-sizes[r] // split_bytes))

    # Interleave by replica set: round-robin over groups, so consecutive splits go to different nodes.
    groups: dict[tuple[str, ...], list[TokenRange]] = {}
    for r, replicas in ranges:
        groups.setdefault(replicas, []).append(r)
    ordered: list[TokenRange] = []
    queues = [deque(g if len(g) == 1 else sorted(g)) for _, g in sorted(groups.items(), key=lambda kv: kv[0])]
    while queues:
        for q in queues:
            ordered.append(q.popleft())
        queues = [q for q in queues if q]
    return tuple(PlanEntry(r.start, r.end, parts_for(r), sizes[r]) for r in ordered)
