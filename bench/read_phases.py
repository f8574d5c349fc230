"""One Spark read of the benchmark table, phase by phase, run by bench_tools.py as a child process.

    python bench/read_phases.py splitsource HOST KEYSPACE TABLE [--noop] [--option columns=id] [--where "id = 7"]
    bench/.tools/spark35/bin/python bench/read_phases.py scc HOST KEYSPACE TABLE [--noop] --jars JAR [JAR ...]
    python bench/read_phases.py peer HOST KEYSPACE TABLE [--noop]

Times the session's start, ``load()`` (the schema), the first ``count()``, and with ``--noop`` a full read of every
column into Spark's ``noop`` writer; prints one JSON line: rows counted and each phase's seconds.

- ``splitsource``: ``spark.read.format("splitsource")`` (PySpark 4.3 and this project);
- ``scc``: the Spark Cassandra Connector 3.5.1 on PySpark 3.5 (it has no Spark 4 release);
- ``floor``: what any Python data source costs: one that reads nothing from anywhere (``--rows 0``), or hands
  Spark ``--rows`` rows of the benchmark table's shape built in memory (the cost of moving them into Spark);
- ``peer``: the nearest pure-Python peer, written here since none installs from the package index: a PySpark
  Python data source for Cassandra with one partition per token range of the ring, the driver's rows as tuples, no
  resume (as alexott/spark-cassandra-data-source reads).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def _peer_source(host: str) -> Any:
    """The pure-Python peer's data source class (defined here, so Spark pickles it by value to its workers)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    spark_types = {"bigint": "bigint", "int": "int", "text": "string", "varchar": "string", "ascii": "string",
                   "double": "double", "float": "float", "boolean": "boolean", "timestamp": "timestamp",
                   "uuid": "string", "timeuuid": "string", "blob": "binary", "date": "date", "smallint": "smallint",
                   "tinyint": "tinyint", "inet": "string", "varint": "decimal(38,0)"}

    class TokenRange(InputPartition):
        def __init__(self, start: int, end: int) -> None:
            self.start, self.end = start, end

    class PeerReader(DataSourceReader):
        def __init__(self, options: dict[str, str], columns: list[str], key: list[str]) -> None:
            self.options, self.columns, self.key = options, columns, key

        def partitions(self) -> list[TokenRange]:
            from cassandra.cluster import Cluster

            cluster = Cluster([self.options["host"]])
            cluster.connect()
            try:
                ring = sorted(t.value for t in cluster.metadata.token_map.ring)
            finally:
                cluster.shutdown()
            low, high = -(2**63), 2**63 - 1
            bounds = [low, *ring, high] if ring[0] != low else [*ring, high]
            return [TokenRange(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]

        def read(self, partition: TokenRange) -> Iterator[tuple[Any, ...]]:
            from uuid import UUID

            from cassandra.cluster import Cluster
            from cassandra.query import SimpleStatement, tuple_factory

            cluster = Cluster([self.options["host"]])
            session = cluster.connect()
            session.row_factory = tuple_factory
            token = f"token({', '.join(self.key)})"
            cql = (f"SELECT {', '.join(self.columns)} FROM {self.options['keyspace']}.{self.options['table']} "
                   f"WHERE {token} > {partition.start} AND {token} <= {partition.end}")
            try:
                for row in session.execute(SimpleStatement(cql, fetch_size=5000)):
                    yield tuple(str(v) if isinstance(v, UUID) else v for v in row)
            finally:
                cluster.shutdown()

    class PeerDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pycassandra"

        def _table(self) -> Any:
            from cassandra.cluster import Cluster

            cluster = Cluster([self.options["host"]])
            cluster.connect()
            try:
                return cluster.metadata.keyspaces[self.options["keyspace"]].tables[self.options["table"]]
            finally:
                cluster.shutdown()

        def schema(self) -> str:
            table = self._table()
            return ", ".join(f"{name} {spark_types[str(c.cql_type)]}" for name, c in table.columns.items())

        def reader(self, schema: Any) -> PeerReader:
            key = [c.name for c in self._table().partition_key]
            return PeerReader(dict(self.options), [f.name for f in schema.fields], key)

    return PeerDataSource


def _floor_source(rows: int) -> Any:
    """What any Python data source costs in Spark: a source that reads nothing from anywhere (``rows`` 0: no data;
    else ``rows`` rows of the benchmark table's shape built in memory, Arrow batches handed to Spark)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Half(InputPartition):
        def __init__(self, index: int) -> None:
            self.index = index

    class FloorReader(DataSourceReader):
        def partitions(self) -> list[Half]:
            return [Half(0), Half(1)]

        def read(self, partition: Half) -> Iterator[Any]:
            import pyarrow as pa

            share = rows // 2
            if not share:
                return
            n = 10_000
            batch = pa.RecordBatch.from_pydict({
                "id": pa.array(range(n), pa.int64()), "active": pa.array([True] * n),
                "created": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                "email": pa.array([f"user{i}@example-{i % 97}.com" for i in range(n)]),
                "name": pa.array([f"user-{i:010d}-abcd" for i in range(n)]),
                "payload": pa.array([bytes(64)] * n, pa.binary()), "score": pa.array([0.5] * n),
                "tag": pa.array(["9b2f6d3e-0f55-4a8a-8c1b-6c7d3f1e2a4b"] * n), "visits": pa.array([7] * n, pa.int32()),
            })
            for _ in range(share // n):
                yield batch

    class FloorDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor"

        def schema(self) -> str:
            return ("id bigint, active boolean, created timestamp, email string, name string, payload binary, "
                    "score double, tag string, visits int")

        def reader(self, schema: Any) -> FloorReader:
            return FloorReader()

    return FloorDataSource


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("method", choices=("splitsource", "scc", "peer", "floor"))
    parser.add_argument("host")
    parser.add_argument("keyspace")
    parser.add_argument("table")
    parser.add_argument("--noop", action="store_true", help="also read every column into the noop writer")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of splitsource's read (columns=id, pushdown=false)")
    parser.add_argument("--where", default="", help="a filter applied to the DataFrame before count()")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    parser.add_argument("--jars", nargs="*", default=[])
    parser.add_argument("--rows", type=int, default=0, help="floor: rows built in memory (0: none)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    phases: dict[str, float] = {}
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(f"read {args.method}")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for pair in args.conf:
        key, _, value = pair.partition("=")
        builder = builder.config(key, value)
    if args.method == "scc":
        builder = (builder.config("spark.jars", ",".join(args.jars))
                   .config("spark.cassandra.connection.host", args.host))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    phases["session"] = time.perf_counter() - started
    try:
        mark = time.perf_counter()
        if args.method == "scc":
            df = spark.read.format("org.apache.spark.sql.cassandra").options(keyspace=args.keyspace,
                                                                             table=args.table).load()
        elif args.method == "floor":
            spark.dataSource.register(_floor_source(args.rows))
            df = spark.read.format("floor").load()
        elif args.method == "peer":
            spark.dataSource.register(_peer_source(args.host))
            df = spark.read.format("pycassandra").options(host=args.host, keyspace=args.keyspace,
                                                          table=args.table).load()
        else:
            reader = spark.read.format("splitsource").option("connector", "cassandra").options(
                hosts=args.host, keyspace=args.keyspace, table=args.table)
            for pair in args.option:
                key, _, value = pair.partition("=")
                reader = reader.option(key, value)
            df = reader.load()
        phases["load"] = time.perf_counter() - mark
        if args.where:
            df = df.where(args.where)
        mark = time.perf_counter()
        rows = df.count()
        phases["count"] = time.perf_counter() - mark
        if args.noop:
            mark = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            phases["noop"] = time.perf_counter() - mark
    finally:
        mark = time.perf_counter()
        spark.stop()
        phases["stop"] = time.perf_counter() - mark
    print(json.dumps({"rows": rows, "phases": {k: round(v, 3) for k, v in phases.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
