#!/usr/bin/env python3
"""Where a copy's time goes: one reader in one process over the whole benchmark table, stage by stage.

The stages are the copy task's own code, timed around each call:

- ``fetch``: ``CassandraSplitReader.fetch`` (the request, Cassandra's work, the wire and the driver's decoding);
- ``emit``: ``CassandraEmitter.emit`` (rows to an Arrow batch);
- ``conform``: the batch into Spark's Arrow schema (the copy writes what a Spark read would return);
- ``write``: the bucketing sink's writer (Parquet or CSV encoding and the file write).

It also reports the CPU seconds of this process and of the Cassandra server during the scan (from /proc), so
the fetch time splits into the server's work and the client's. The Spark engine's fixed cost (JVM, Python
workers, planning) is the difference between its wall time and the local engine's in bench_tools.py.

    python bench/profile_copy.py --format parquet
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE, ensure_cassandra, ensure_loaded  # noqa: E402


def _cassandra_cpu_s() -> float:
    """CPU seconds (user + system) of the local Cassandra server, or -1 if it is not found."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"CassandraDaemon" not in (entry / "cmdline").read_bytes():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return -1.0


def profile(fmt: str) -> dict[str, Any]:
    from connectors.cassandra import CassandraSource
    from splitsource._api import FixedEnumeratorContext
    from splitsource.runtime import conform_batch
    from splitsource.sink._options import parse_sink_options
    from splitsource.sink._writer import write_files

    source = CassandraSource({"hosts": HOSTS, "keyspace": KEYSPACE, "table": TABLE})
    expected = source.schema()  # a copy writes the source's own schema
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    splits = []
    while (split := enumerator.next_split()) is not None:
        splits.append(split)
    enumerator.close()
    spent = {"fetch": 0.0, "emit": 0.0, "conform": 0.0, "write": 0.0}
    rows = 0

    def batches() -> Any:
        nonlocal rows
        reader = source.create_split_reader()
        emitter = source.create_record_emitter()
        try:
            for split in splits:
                reader.add_splits([split])
                state = source.create_split_state(split)
                done = False
                while not done:
                    t = time.perf_counter()
                    result = reader.fetch()
                    spent["fetch"] += time.perf_counter() - t
                    for _, raw in result.batches:
                        t = time.perf_counter()
                        batch = emitter.emit(raw, state)
                        spent["emit"] += time.perf_counter() - t
                        if batch is not None:
                            t = time.perf_counter()
                            batch = conform_batch(batch, expected)
                            spent["conform"] += time.perf_counter() - t
                            rows += batch.num_rows
                            t = time.perf_counter()
                            yield batch
                            spent["write"] += time.perf_counter() - t  # the writer ran until it asked again
                    done = bool(result.finished)
        finally:
            reader.close()

    with tempfile.TemporaryDirectory() as out:
        sink = parse_sink_options({"path": out, "format": fmt, "bucketer": "none"})
        cpu0, server0, wall0 = time.process_time(), _cassandra_cpu_s(), time.perf_counter()
        write_files(sink, batches(), 0)
        wall = time.perf_counter() - wall0
        cpu, server = time.process_time() - cpu0, _cassandra_cpu_s() - server0
    return {"format": fmt, "rows": rows, "splits": len(splits), "wall_s": round(wall, 2),
            "stages_s": {k: round(v, 2) for k, v in spent.items()},
            "client_cpu_s": round(cpu, 2), "cassandra_cpu_s": round(server, 2) if server0 >= 0 else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", default="parquet", choices=("parquet", "csv", "jsonl"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    ensure_loaded(args.rows, ensure_cassandra())
    result = profile(args.format)
    wall = result["wall_s"]
    print(f"{result['rows']:,} rows, {result['splits']} splits, one reader, {wall:.1f} s "
          f"({result['rows'] / wall:,.0f} rows/s)")
    for stage, seconds in result["stages_s"].items():
        print(f"  {stage:8s} {seconds:6.2f} s  {seconds / wall:6.1%}")
    print(f"  client CPU {result['client_cpu_s']:.1f} s, Cassandra CPU {result['cassandra_cpu_s']} s")
    record_run(f"profile_{args.format}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
