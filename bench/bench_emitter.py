#!/usr/bin/env python3
"""Which way from the driver's wire bytes to an Arrow batch is fastest: the measurement behind CassandraEmitter.

One thread reads ``--rows`` rows of the benchmark table (bench/cassandra_table.py) page by page and turns each
page into a ``pyarrow.RecordBatch``, four ways:

1. ``tuple``: the driver's Cython decoder with ``tuple_factory``, rows transposed to columns, ``pa.array`` per
   column (what CassandraEmitter does);
2. ``dict``: the default ``dict_factory`` rows, then the same conversion (what most hand-written code does);
3. ``named_tuple``: the driver's default row factory;
4. ``numpy``: the driver's ``NumpyProtocolHandler`` (columns straight into NumPy arrays), then ``pa.array``.

Prints the wall time for each (fetch + decode + convert) and the ratio to ``tuple``; writes
bench/results/emitter.json.

    python bench/bench_emitter.py --rows 200000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record  # noqa: E402
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE, ensure_cassandra, ensure_loaded  # noqa: E402
from connectors.cassandra import CassandraSource  # noqa: E402
from connectors.cassandra._types import exact_protocol_handler  # noqa: E402


def scan(mode: str, rows: int, fetch_size: int) -> float:
    import pyarrow as pa
    from cassandra.cluster import Cluster
    from cassandra.protocol import NumpyProtocolHandler
    from cassandra.query import dict_factory, named_tuple_factory, tuple_factory

    source = CassandraSource({"hosts": HOSTS, "keyspace": KEYSPACE, "table": TABLE})
    # the source's own select expressions (toUnixTimestamp, CAST AS text) and converters, which expect them
    _, selectors, schema, converters = source._metadata()
    cluster = Cluster(HOSTS.split(","), protocol_version=5)
    session = cluster.connect()
    session.row_factory = {"tuple": tuple_factory, "dict": dict_factory, "named_tuple": named_tuple_factory,
                           "numpy": tuple_factory}[mode]
    # the exact decoders of the read path (timestamps as integers, sets as lists); numpy has its own handler
    session.client_protocol_handler = NumpyProtocolHandler if mode == "numpy" else exact_protocol_handler()
    statement = session.prepare(f"SELECT {', '.join(selectors)} FROM {KEYSPACE}.{TABLE}")
    statement.fetch_size = fetch_size
    seen = 0
    paging = None
    started = time.perf_counter()
    while seen < rows:
        result = session.execute(statement, paging_state=paging)
        page = result.current_rows
        if mode == "numpy":
            if not isinstance(page, dict):
                # measured with driver 3.30.1 on Cassandra 5.0 (protocol v4 and v5, prepared or not)
                raise RuntimeError(f"NumpyProtocolHandler returned {type(page).__name__} of {len(page)} rows for "
                                   "a non-empty page: this path is unusable with this driver")
            arrays = [pa.array(page[key], type=field.type) if page[key].dtype != object
                      else conv(list(page[key])) for key, field, conv in zip(page, schema, converters, strict=True)]
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        else:
            if mode == "dict":  # keys are the selectors' names: by position, as hand-written code would by name
                keys = list(page[0]) if page else []
                cols = [[r[key] for r in page] for key in keys]
            else:
                cols = [list(c) for c in zip(*page, strict=True)]
            batch = pa.RecordBatch.from_arrays([conv(c) for conv, c in zip(converters, cols, strict=True)],
                                               schema=schema)
        seen += batch.num_rows
        paging = result.paging_state
        if paging is None:
            break
    elapsed = time.perf_counter() - started
    cluster.shutdown()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--fetch-size", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--table-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    ensure_loaded(args.table_rows, ensure_cassandra())
    results: dict[str, Any] = {}
    for mode in ("tuple", "dict", "named_tuple", "numpy"):
        try:
            times = [scan(mode, args.rows, args.fetch_size) for _ in range(args.repeat)]
        except Exception as exc:  # report a path the driver cannot take instead of hiding it
            results[mode] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{mode:12s} failed: {exc}")
            continue
        median = statistics.median(times)
        results[mode] = {"seconds": round(median, 3), "rows_per_s": round(args.rows / median)}
    if "seconds" not in results["tuple"]:
        print(f"bench_emitter: the emitter's own path failed: {results['tuple']['error']}", file=sys.stderr)
        return 1
    base = results["tuple"]["seconds"]
    for mode, r in results.items():
        if "seconds" in r:
            r["ratio_to_tuple"] = round(base / r["seconds"], 2)
            print(f"{mode:12s} {r['rows_per_s']:>10,} rows/s  {r['ratio_to_tuple']:.2f}x tuple")
    record("emitter", f"bench/bench_emitter.py --rows {args.rows} --repeat {args.repeat}", rows=args.rows,
           fetch_size=args.fetch_size, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
