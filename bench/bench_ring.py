#!/usr/bin/env python3
"""Planning a read of a simulated thousand-node Cassandra ring: time, memory and offset size, no server.

A fake ring of ``--nodes`` nodes with ``--vnodes`` random tokens each (replication factor 3, the next distinct
nodes clockwise) and skewed size estimates (partition counts drawn log-normally, one node in twenty ten times
denser); each node answers its size estimate query after ``--latency-ms``. Measured, with the connector's own
code (``gather_estimates``, ``plan_ring``, the offsets of :mod:`splitsource._offsets`):

- gathering the estimates one node at a time (as before) and concurrently, at most 32 in flight;
- planning the ring (ranges, replica sets, estimates, sizes, order) and storing the plan;
- taking every split in batches of the default limit, the offsets' size (largest), and a restart in the middle
  (the enumerator restored from the stored plan);
- peak Python memory (tracemalloc, in a second pass) of planning and of an enumerator restored from the plan.

    python bench/bench_ring.py                      # 1,000 nodes x 256 vnodes = 256,000 ranges
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402
from connectors.cassandra import CassandraSource  # noqa: E402
from connectors.cassandra._options import CassandraOptions  # noqa: E402
from connectors.cassandra._planner import gather_estimates, plan_ring  # noqa: E402
from connectors.cassandra._tokens import PARTITIONERS, PlanEntry  # noqa: E402
from splitsource._offsets import _LIVE, PlanStore, initial_offset, next_offset, source_fingerprint  # noqa: E402
from splitsource._planning import FrameworkOptions, batch_limit  # noqa: E402
from splitsource._typed_options import parse_options  # noqa: E402

LO, HI = PARTITIONERS["Murmur3Partitioner"]


class FakeRing:
    """Tokens, owners, replica sets (RF 3) and per-node size estimate rows of a simulated ring."""

    def __init__(self, nodes: int, vnodes: int, seed: int) -> None:
        rng = random.Random(seed)
        owned = sorted((rng.randint(LO + 1, HI), n) for n in range(nodes) for _ in range(vnodes))
        self.tokens = [t for t, _ in owned]
        owners = [n for _, n in owned]
        self.replicas: dict[int, tuple[str, ...]] = {}
        for i, token in enumerate(self.tokens):  # the range ending at token: its owner and the next distinct ones
            found: list[int] = []
            j = i
            while len(found) < 3:
                if owners[j % len(owners)] not in found:
                    found.append(owners[j % len(owners)])
                j += 1
            self.replicas[token] = tuple(sorted(f"10.0.{n // 256}.{n % 256}:9042" for n in found))
        hot = {n for n in range(nodes) if n % 20 == 0}
        self.rows: dict[int, list[tuple[int, int, int, int]]] = {n: [] for n in range(nodes)}
        previous = self.tokens[-1]
        for token, owner in zip(self.tokens, owners, strict=True):  # each node reports its primary ranges
            partitions = int(rng.lognormvariate(8, 1)) * (10 if owner in hot else 1)
            self.rows[owner].append((previous, token, 400, partitions))
            previous = token

    def replicas_of(self, end: int) -> tuple[str, ...]:
        return self.replicas.get(end) or self.replicas[self.tokens[0]]  # the wrap-around's (.., MAX] piece


class FakeSession:
    def __init__(self, ring: FakeRing, latency_s: float) -> None:
        self.ring, self.latency_s = ring, latency_s

    def execute(self, query: str, params: Any, host: int) -> list[tuple[int, int, int, int]]:
        time.sleep(self.latency_s)
        return self.ring.rows[host]


class SimulatedSource(CassandraSource):
    planned: tuple[PlanEntry, ...] = ()

    def plan(self) -> tuple[PlanEntry, ...]:
        return self.planned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--vnodes", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=2.0, help="a node's answer time to one query")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, Any] = {"nodes": args.nodes, "vnodes": args.vnodes, "latency_ms": args.latency_ms}

    started = time.perf_counter()
    ring = FakeRing(args.nodes, args.vnodes, args.seed)
    print(f"simulated ring: {len(ring.tokens):,} ranges over {args.nodes:,} nodes "
          f"({time.perf_counter() - started:.1f} s to build, not counted)", flush=True)
    options = parse_options(CassandraOptions, {"hosts": "10.0.0.0", "keyspace": "ks", "table": "t"})
    session = FakeSession(ring, args.latency_ms / 1000)
    hosts = list(range(args.nodes))

    started = time.perf_counter()
    rows = gather_estimates(session, hosts[:100], options, in_flight=1)
    one_by_one = (time.perf_counter() - started) * args.nodes / 100  # 100 of them, scaled: the old way
    started = time.perf_counter()
    rows = gather_estimates(session, hosts, options)
    results["estimates_one_by_one_s"] = round(one_by_one, 2)
    results["estimates_concurrent_s"] = round(time.perf_counter() - started, 2)

    started = time.perf_counter()
    plan = plan_ring(ring.tokens, ring.replicas_of, rows, (LO, HI), options)
    results["plan_s"] = round(time.perf_counter() - started, 2)
    tracemalloc.start()  # memory in a second pass: tracing slows Python down several times
    plan_ring(ring.tokens, ring.replicas_of, rows, (LO, HI), options)
    results["plan_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
    tracemalloc.stop()
    results["ranges"] = len(plan)
    results["splits"] = sum(e.parts for e in plan)

    source = SimulatedSource({"hosts": "10.0.0.0", "keyspace": "ks", "table": "t"})
    SimulatedSource.planned = plan
    fingerprint = source_fingerprint(source)
    limit = batch_limit(FrameworkOptions(connector="cassandra"))  # the defaults: 256 MiB a batch
    with tempfile.TemporaryDirectory() as tmp:
        store = PlanStore(f"{tmp}/plans")
        started = time.perf_counter()
        offset = initial_offset(source, fingerprint, 2, store)
        results["store_plan_s"] = round(time.perf_counter() - started, 2)
        results["plan_file_mb"] = round(sum(p.stat().st_size for p in Path(tmp, "plans").iterdir()) / 2**20, 1)
        largest = len(json.dumps(offset))
        batches, middle = 0, None
        started = time.perf_counter()
        while (end := next_offset(source, fingerprint, offset, 2, limit, store)) is not None:
            largest = max(largest, len(json.dumps(end)))
            batches += 1
            offset = end
            if batches == 200:
                middle = end
        results["take_all_s"] = round(time.perf_counter() - started, 2)
        results["batches"] = batches
        results["largest_offset_bytes"] = largest
        tracemalloc.start()  # the enumerator's memory: restored from the plan, one batch taken
        _LIVE.keep(("restart", "", 0), source.create_enumerator(None))
        next_offset(source, fingerprint, middle or offset, 2, limit, store)
        results["enumerator_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
        if middle is not None:  # a restart: nothing kept in this process, the enumerator restored from the plan
            _LIVE.keep(("restart", "", 0), source.create_enumerator(None))
            started = time.perf_counter()
            next_offset(source, fingerprint, middle, 2, limit, store)
            results["restart_at_batch_200_s"] = round(time.perf_counter() - started, 2)
    results["limit"] = {"max_splits": limit.max_splits, "max_bytes": limit.max_bytes}

    print(f"size estimates of {args.nodes:,} nodes ({args.latency_ms:g} ms each): one by one "
          f"{results['estimates_one_by_one_s']} s (extrapolated from 100), concurrently "
          f"{results['estimates_concurrent_s']} s")
    print(f"planning {results['ranges']:,} ranges into {results['splits']:,} splits: {results['plan_s']} s, "
          f"peak {results['plan_peak_mb']} MB; plan stored once: {results['plan_file_mb']} MiB in "
          f"{results['store_plan_s']} s")
    print(f"taking every split: {results['batches']:,} batches in {results['take_all_s']} s; largest offset "
          f"{results['largest_offset_bytes']:,} bytes (target < 65,536); enumerator peak "
          f"{results['enumerator_peak_mb']} MB; a restart at batch 200: {results.get('restart_at_batch_200_s')} s")
    record_run("ring", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
