#!/usr/bin/env bash
# What the tests need beyond scripts/setup.sh, fetched step by step while the first tests run (scripts/test.sh
# starts it in the background): each step leaves its exit status in <dir>/<step>.status and its output in
# <dir>/<step>.log, and a test that needs a step waits for its status (tests/fixtures.py: await_setup). Every step is
# idempotent and cached by version (.complete marks a whole install).
#
#   bash scripts/setup_tests.sh <dir>
set -uo pipefail
dir="$1"
cd "$(dirname "$0")/.."
. .venv/bin/activate

step() {
  local name="$1"; shift
  "$@" >"$dir/$name.log" 2>&1
  local status=$?
  echo "$status" >"$dir/$name.tmp" && mv "$dir/$name.tmp" "$dir/$name.status"
  return "$status"
}

# packages kept apart from the venv, each in a folder of its own
apart() {
  local folder="$1"; shift
  if [ ! -f "$folder/.complete" ]; then
    rm -rf "$folder"
    python -m pip install -q --no-warn-conflicts --target "$folder" "$@" || return 1
    touch "$folder/.complete"
  fi
}
packages() {
  local jobs=()
  # the Spark Connect client's packages (tests/splitsource/spark/test_connect.py puts them on the client's path
  # only): pandas in the venv would be imported by pyarrow in every process of every other test
  apart .venv/connect-client "grpcio>=1.76" "grpcio-status>=1.76" "googleapis-common-protos>=1.71" \
    "zstandard>=0.25" "pandas>=2.2,<3" & jobs+=($!)
  # the table formats' Spark connectors lag Spark: Delta's runs on Spark 4.2, Iceberg's on 4.1, neither on 4.3
  # (tests/splitsource/spark/test_table_readers.py); each PySpark apart from the venv, only on that test's path
  apart .venv/pyspark-4.2 "pyspark==4.2.0" & jobs+=($!)
  apart .venv/pyspark-4.1 "pyspark==4.1.0" & jobs+=($!)
  # DuckDB's S3 reader for tests/splitsource/copyjob/test_object_store.py: DuckDB downloads its httpfs extension at
  # first use, which this machine cannot; the package index carries it for DuckDB 1.4 (LTS)
  apart .venv/duckdb-s3 "duckdb==1.4.4" "duckdb-ext-httpfs==1.4.4.20260205" & jobs+=($!)
  local failed=0
  for job in "${jobs[@]}"; do wait "$job" || failed=1; done
  return "$failed"
}
step packages packages &
packages_job=$!

# Maven runs one step at a time (its ~/.m2 has no locks), in the order the suite needs them:
# the older Cassandra lines of the version tests (tests/connectors/cassandra/test_cassandra_versions.py)
step cassandra-lines bash -c 'for v in 4.0 4.1; do python scripts/cassandra.py install --version "$v" || exit; done'
# Apache Iceberg's REST catalog server, for --table-format iceberg with a REST catalog (about 80 MB)
step iceberg-rest python scripts/iceberg_rest.py install
# hadoop-aws and the AWS SDK, for the tests' Spark reads of s3a:// (about 10 MB)
step s3a-jars python scripts/s3server.py spark-jars
# the table formats' jars, resolved by Maven into folders of their own (never through Ivy and whatever ~/.m2 holds),
# for the PySpark each runs on
wait "$packages_job"
step table-jars bash -c 'python scripts/spark_tables.py jars delta --spark .venv/pyspark-4.2 &&
                         python scripts/spark_tables.py jars iceberg --spark .venv/pyspark-4.1'
failed=0
for name in packages cassandra-lines iceberg-rest s3a-jars table-jars; do
  [ "$(cat "$dir/$name.status" 2>/dev/null)" = 0 ] || failed=1
done
echo "$failed" >"$dir/extras.tmp" && mv "$dir/extras.tmp" "$dir/extras.status"
