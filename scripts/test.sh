#!/usr/bin/env bash
# Set up (if needed) and run every check: ruff, mypy --strict, and the whole pytest suite, which starts a real
# local Cassandra and a local Spark itself. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# what the tests need that is slow to fetch is set up in the background while the first tests run, each step
# leaving its exit status in $SPLITSOURCE_SETUP/<step>.status, which a test that needs the step waits for
# (tests/fixtures.py: await_setup):
# - the S3-compatible server of the object-store tests (SeaweedFS, built once from the Go module proxy into the
#   cache: 5 to 10 minutes of both cores on a fresh 2-core machine, most of it compiling), by the machine's python3
#   (the script needs only the standard library), from the start;
# - the rest (scripts/setup_tests.sh: older Cassandra lines, the Iceberg REST catalog, Spark's jars, the packages kept
#   apart from the venv), once the venv is made.
setup_dir=$(mktemp -d)
export SPLITSOURCE_SETUP="$setup_dir"
jobs_started=()
# in a process group of its own, so that the exit stops Go's compilers and Maven too
setsid bash -c 'python3 scripts/s3server.py install >"$1/s3.log" 2>&1; echo $? >"$1/s3.tmp"; mv "$1/s3.tmp" "$1/s3.status"' \
  _ "$setup_dir" &
jobs_started+=($!)
trap 'for job in "${jobs_started[@]}"; do kill -- -"$job" 2>/dev/null || true; done; rm -rf "$setup_dir"' EXIT

bash scripts/setup.sh
. .venv/bin/activate
setsid bash scripts/setup_tests.sh "$setup_dir" &
jobs_started+=($!)

# the project's own bytecode, as a wheel installs it: this machine sets PYTHONDONTWRITEBYTECODE, so every process
# the suite starts (a copy, its workers, Spark's Python workers) would compile the package again (0.15 s of CPU each)
python -m compileall -q -j 2 splitsource connectors serializers pyspark_splitsource pyspark_bucketing tests scripts \
  conftest.py >/dev/null

echo "== ruff"; ruff check splitsource connectors serializers pyspark_splitsource pyspark_bucketing tests scripts bench conftest.py
echo "== mypy --strict"; mypy
echo "== pytest"
set +e
# two pytest processes (pytest-xdist): a module runs whole on one of them, and every module on the session's Cassandra
# (the docs' pages too) on the same one (conftest.py), so each server starts once. The suite waits on servers,
# processes and gates more than it computes: one process left the 2 cores 39% idle, and took 39 minutes of pytest
# against 30 for two (fresh clones, this machine). -n 0 after the command runs it in one process. The timeout is the
# net for a hang, not the budget, and it sits inside CI's 90 minutes
timeout --signal=TERM 4800 python -m pytest -p no:cacheprovider -n 2 --dist loadgroup --durations=60 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$status"
