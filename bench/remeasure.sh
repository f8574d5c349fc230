#!/usr/bin/env bash
# Measure again every result under bench/results/ on this machine, one benchmark after the other (about an hour and
# a half on 2 cores; give them the machine), then write docs/benchmarks.md's recorded results from them.
# The commands are those docs/benchmarks.md shows; each benchmark records its own command, commit, date and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
run() { echo "== $*"; "$@"; }
# first: the 5M-row target of issue 30 (it loads the table with 5,000,000 rows, 637 s, unless it holds them already)
run $py bench/bench_tools.py --rows 5000000 --repeat 3 --only "splitsource copy -> parquet (Spark engine)" \
    "splitsource copy --engine local -> parquet"
run $py bench/cassandra_table.py --rows 1000000
run $py bench/bench_framework.py --rows 5000000 --repeat 3
run $py bench/bench_cassandra.py --rows 1000000 --repeat 3
run $py bench/bench_emitter.py --rows 200000 --repeat 2
run $py bench/bench_tools.py --repeat 3
run $py bench/bench_tools.py --only "splitsource copy --engine local -> parquet" --repeat 3
run $py bench/profile_copy.py --format parquet
run $py bench/profile_copy.py --format csv
run $py bench/bench_sink.py --rows 5000000 --repeat 3
ARROW_BATCH=65536 run $py bench/bench_sink.py --rows 5000000 --repeat 3
run $py bench/bench_sink_buckets.py --rows 2000000 --buckets 10,2000,20000
run $py bench/bench_sink_buckets.py --rows 2000000 --buckets 10 --repeat 3
run $py bench/bench_throttle.py --seconds 30 || echo "bench_throttle: a ratio outside 0.9-1.1 (recorded)"
run $py bench/bench_throttle.py --seconds 30 --max-splits-per-batch 8 || echo "bench_throttle: a ratio outside 0.9-1.1 (recorded)"
run $py bench/bench_wide_partition.py --repeat 5
run $py bench/bench_ring.py
run $py bench/bench_spark_overhead.py --rows 2000000 --repeat 3
run $py bench/bench_cluster_copy.py --repeat 2
run $py bench/bench_durability.py --rows 2000000 --repeat 3
run $py bench/bench_replica_loss.py --rows 100000 --repeat 1
run $py bench/bench_hung_node.py --before 14dc81e --repeat 1  # the commit before the driver sessions were shared
run $py bench/bench_object_store.py --repeat 3
run $py bench/bench_tables.py --repeat 3
run $py bench/bench_postgres.py --repeat 3  # starts its own PostgreSQL 15; bench/tools.py fetches the peers
run $py scripts/bench_tables.py
