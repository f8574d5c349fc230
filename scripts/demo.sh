#!/usr/bin/env bash
# One command on a fresh machine: set up, start a local Cassandra, load a sample table, copy it to Parquet, verify.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
