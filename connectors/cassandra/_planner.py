"""Ring planning: token ranges with their replicas, sized from every node's ``system.size_estimates``."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from connectors.cassandra._options import CassandraOptions
from connectors.cassandra._tokens import PARTITIONERS, PlanEntry, TokenRange, build_plan, ring_ranges
from splitsource import SplitSourceError

__all__ = ["gather_estimates", "plan_ring"]

log = logging.getLogger("splitsource.cassandra")


_warned_empty_estimates = False
ESTIMATE_REQUESTS_IN_FLIGHT = 32  # size estimate queries sent at once while planning (one per node)


def plan_ring(tokens: Iterable[int], replicas: Callable[[int], tuple[str, ...]], estimate_rows: Iterable[Any],
              bounds: tuple[int, int], o: CassandraOptions) -> tuple[PlanEntry, ...]:
    """The sized plan of a ring: its ranges (``tokens``), each range's replica set (``replicas(range end)``) and the
    nodes' ``system.size_estimates`` rows (range_start, range_end, mean_partition_size, partitions_count).
    Linear in the ring's size: a 1,000-node ring of 256 vnodes each plans in seconds (bench/bench_ring.py)."""
    with _no_gc():  # hundreds of thousands of small objects and no cycle: the collector's passes cost 30-40 %
        return _plan_ring(tokens, replicas, estimate_rows, bounds, o)


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan_ring(tokens: Iterable[int], replicas: Callable[[int], tuple[str, ...]], estimate_rows: Iterable[Any],
               bounds: tuple[int, int], o: CassandraOptions) -> tuple[PlanEntry, ...]:
    lo, hi = bounds
    ranges = ring_ranges(tokens, lo, hi)
    with_replicas = [(r, replicas(r.end)) for r in ranges]
    estimates: dict[TokenRange, int] = {}
    for range_start, range_end, mean_size, count in estimate_rows:
        size = int(mean_size) * int(count)
        for piece in _cut_at_bounds(int(range_start), int(range_end), lo, hi):
            estimates[piece] = estimates.get(piece, 0) + size
    if o.token_range:  # only the ring's parts inside token_range, their estimates in proportion
        with_replicas, estimates = _clip(with_replicas, estimates, o.token_intervals(lo, hi))
    global _warned_empty_estimates
    if not any(v > 0 for v in estimates.values()) and not o.splits and not _warned_empty_estimates:
        _warned_empty_estimates = True  # once a process
        log.warning(
            "no size estimates for %s.%s yet (a fresh table, or estimates not refreshed): splitting by token "
            "width instead; run 'nodetool refreshsizeestimates' or set the 'splits' option",
            o.keyspace, o.table,
        )
    return build_plan(
        with_replicas, estimates, split_bytes=int(o.split_size_mb * 1024 * 1024),
        total_splits=o.splits, fallback_splits=max(32, len(with_replicas)),
    )


def gather_estimates(session: Any, hosts: Sequence[Any], options: CassandraOptions,
                     in_flight: int = ESTIMATE_REQUESTS_IN_FLIGHT) -> list[Any]:
    """Every node's own size estimates, asked of all nodes concurrently, at most ``in_flight`` at once (a
    thousand-node ring asked one by one waits a thousand round trips)."""
    from concurrent.futures import ThreadPoolExecutor

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(in_flight, len(hosts))),
                            thread_name_prefix="size-estimates") as pool:
        return [row for rows in pool.map(lambda host: _estimates_of(session, host, options), hosts) for row in rows]


def _estimates_of(session: Any, host: Any, options: CassandraOptions) -> list[Any]:
    """One node's own size estimates. Right after connecting, the driver may not have opened its pool to every
    node yet (it reports the node as down): retry within the connect timeout, then plan without that node's
    estimates (splits stay correct, only less balanced) rather than fail the read."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import ErrorMessage

    deadline = time.monotonic() + options.connect_timeout_s
    while True:
        try:
            return list(session.execute(
                "SELECT range_start, range_end, mean_partition_size, partitions_count FROM system.size_estimates "
                "WHERE keyspace_name = %s AND table_name = %s",
                (options.keyspace, options.table),
                host=host,
            ))
        except (NoHostAvailable, ErrorMessage) as exc:
            if time.monotonic() >= deadline:
                log.warning("no size estimates from %s (%s): planning without them", host.endpoint, exc)
                return []
            time.sleep(0.2)


def _bounds(cluster: Any) -> tuple[int, int]:
    partitioner = str(cluster.metadata.partitioner).rsplit(".", 1)[-1]
    if partitioner not in PARTITIONERS:
        raise SplitSourceError(f"partitioner {partitioner} is not supported (Murmur3 and Random are)")
    return PARTITIONERS[partitioner]


def _clip(ranges: Sequence[tuple[TokenRange, tuple[str, ...]]], estimates: Mapping[TokenRange, int],
          wanted: Sequence[TokenRange]) -> tuple[list[tuple[TokenRange, tuple[str, ...]]], dict[TokenRange, int]]:
    """The parts of the ring's ``ranges`` inside ``wanted``, each with its replicas and the share of its range's
    estimate that its width is."""
    clipped: list[tuple[TokenRange, tuple[str, ...]]] = []
    sizes: dict[TokenRange, int] = {}
    for r, replicas in ranges:
        for w in wanted:
            part = TokenRange(max(r.start, w.start), min(r.end, w.end))
            if part.width > 0:
                clipped.append((part, replicas))
                if estimates.get(r, 0) > 0:
                    sizes[part] = estimates[r] * part.width // r.width
    return clipped, sizes


def _cut_at_bounds(start: int, end: int, lo: int, hi: int) -> list[TokenRange]:
    """An estimate's range as ring pieces: a wrapping range ``(start, end]`` with end <= start is cut in two."""
    if end > start:
        return [TokenRange(start, end)]
    pieces = []
    if start < hi:
        pieces.append(TokenRange(start, hi))
    if end > lo:
        pieces.append(TokenRange(lo, end))
    return pieces
