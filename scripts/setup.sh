#!/usr/bin/env bash
# Set up a fresh machine for splitsource: a virtualenv with the package (editable) and its test tools, and
# Apache Cassandra 5.0's jars from Maven Central in ~/.cache/splitsource. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip uv
# the build backend (hatchling) installs the package editable as a path entry (a .pth file), which is what lets
# Spark's Python workers discover pyspark_splitsource (they scan sys.path for pyspark_* modules). Through uv: the same
# packages as pip's install, sooner (docs/testing.md), each package's bytecode compiled as pip does (these machines
# set PYTHONDONTWRITEBYTECODE, so a package installed without it would be compiled again by every process that
# imports it)
.venv/bin/python -m uv pip install -q --compile-bytecode --python .venv/bin/python -e ".[dev]"
# the project's bytecode, as a wheel's install writes it: where PYTHONDONTWRITEBYTECODE is set, every process the
# tests start (a copy, its workers, Spark's Python workers) would otherwise compile the package from source
.venv/bin/python -m compileall -q splitsource connectors serializers pyspark_splitsource pyspark_bucketing >/dev/null

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && apt-get install -y -q openjdk-17-jdk-headless maven
  else
    echo "setup: Java 17 and Maven are needed (apt-get install openjdk-17-jdk-headless maven)" >&2
    exit 1
  fi
fi
.venv/bin/python scripts/cassandra.py install >/dev/null
# the Spark driver's class archive (about 110 MiB, recorded once in about 15 s): every Spark-engine copy's JVM
# starts about 1.5 s sooner from it; without it the first such copy records it
.venv/bin/python -m splitsource.spark._jvm >/dev/null || echo "setup: continuing without the archive" >&2
echo "setup: ready (.venv; Cassandra jars and Spark's class archive in ${SPLITSOURCE_CACHE:-$HOME/.cache/splitsource})"
