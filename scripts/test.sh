#!/usr/bin/env bash
# Set up (if needed) and run every check: ruff, mypy --strict, and the whole pytest suite, which starts a real
# local Cassandra and a local Spark itself. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate

# the older Cassandra lines of the version tests (tests/connectors/cassandra/test_cassandra_versions.py)
for version in 4.0 4.1; do python scripts/cassandra.py install --version "$version" >/dev/null; done

echo "== ruff"; ruff check splitsource connectors serializers pyspark_splitsource pyspark_bucketing tests scripts bench
echo "== mypy --strict"; mypy
echo "== pytest"
set +e
timeout --signal=TERM 2400 python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$status"
