#!/usr/bin/env bash
# Set up (if needed) and run every check: ruff, mypy --strict, and the whole pytest suite, which starts a real
# local Cassandra and a local Spark itself. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the S3-compatible server of the object-store tests (SeaweedFS, built once from the Go module proxy into the cache:
# 8 to 10 minutes on a fresh 2-core machine, most of it compiling), built in the background (by the machine's
# python3: the script needs only the standard library) while the rest downloads and the first tests run; the tests'
# s3 fixture waits for the exit status it leaves in $SPLITSOURCE_S3_BUILD
build_dir=$(mktemp -d)
export SPLITSOURCE_S3_BUILD="$build_dir/status"
# in a process group of its own, so that the exit stops Go's compilers too
setsid bash -c 'python3 scripts/s3server.py install >"$1/log" 2>&1; echo $? >"$1/status.tmp"; mv "$1/status.tmp" "$1/status"' \
  _ "$build_dir" &
s3server=$!
trap 'kill -- -"$s3server" 2>/dev/null || true; rm -rf "$build_dir"' EXIT

bash scripts/setup.sh
. .venv/bin/activate

# packages kept apart from the venv, each in a folder of its own (installed once: .complete marks a whole install),
# fetched in the background while Maven fetches the jars below (Maven runs one at a time: its ~/.m2 has no locks)
apart() {
  local folder="$1"; shift
  if [ ! -f "$folder/.complete" ]; then
    rm -rf "$folder"
    python -m pip install -q --no-warn-conflicts --target "$folder" "$@"
    touch "$folder/.complete"
  fi
}
# the Spark Connect client's packages (tests/splitsource/spark/test_connect.py puts them on the client's path only):
# pandas in the venv would be imported by pyarrow in every process of every other test
apart .venv/connect-client "grpcio>=1.76" "grpcio-status>=1.76" "googleapis-common-protos>=1.71" "zstandard>=0.25" \
  "pandas>=2.2,<3" &
connect=$!
# the table formats' Spark connectors lag Spark: Delta's runs on Spark 4.2, Iceberg's on 4.1, neither on 4.3
# (tests/splitsource/spark/test_table_readers.py); each PySpark apart from the venv, only on that test's path
apart .venv/pyspark-4.2 "pyspark==4.2.0" &
pyspark42=$!
apart .venv/pyspark-4.1 "pyspark==4.1.0" &
pyspark41=$!
# DuckDB's S3 reader for tests/splitsource/copyjob/test_object_store.py: DuckDB downloads its httpfs extension at
# first use, which this machine cannot; the package index carries it for DuckDB 1.4 (LTS)
apart .venv/duckdb-s3 "duckdb==1.4.4" "duckdb-ext-httpfs==1.4.4.20260205" &
duckdb=$!

# the older Cassandra lines of the version tests (tests/connectors/cassandra/test_cassandra_versions.py)
for version in 4.0 4.1; do python scripts/cassandra.py install --version "$version" >/dev/null; done

# Apache Iceberg's REST catalog server, for the tests of --table-format iceberg with a REST catalog (Maven Central,
# about 80 MB)
python scripts/iceberg_rest.py install >/dev/null

# hadoop-aws and the AWS SDK, for the tests' Spark reads of s3a:// (from Maven Central, about 10 MB)
python scripts/s3server.py spark-jars >/dev/null

for job in "$connect" "$pyspark42" "$pyspark41" "$duckdb"; do
  wait "$job" || { echo "test.sh: installing the packages kept apart from the venv failed" >&2; exit 1; }
done

# the table formats' jars, resolved by Maven into folders of their own (never through Ivy and whatever ~/.m2 holds)
python scripts/spark_tables.py jars delta --spark .venv/pyspark-4.2 >/dev/null
python scripts/spark_tables.py jars iceberg --spark .venv/pyspark-4.1 >/dev/null

# the project's own bytecode, as a wheel installs it: this machine sets PYTHONDONTWRITEBYTECODE, so every process
# the suite starts (a copy, its workers, Spark's Python workers) would compile the package again (0.15 s of CPU each)
python -m compileall -q -j 2 splitsource connectors serializers pyspark_splitsource pyspark_bucketing tests scripts \
  conftest.py >/dev/null

echo "== ruff"; ruff check splitsource connectors serializers pyspark_splitsource pyspark_bucketing tests scripts bench conftest.py
echo "== mypy --strict"; mypy
echo "== pytest"
set +e
# one pytest process: two (-n 2 --dist loadgroup: a module whole on one worker, the session Cassandra's modules all
# on one, conftest.py) took 55 minutes against 61 on 2 cores, a gain too small for two Cassandras and two Spark
# drivers on 2 cores; the timeout is the net for a hang, not the budget, and it sits inside CI's 90 minutes
timeout --signal=TERM 4800 python -m pytest -p no:cacheprovider --durations=60 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$status"
