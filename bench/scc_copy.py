"""The Spark Cassandra Connector's copy of a table to Parquet, run by bench_tools.py in the PySpark 3.5 environment.

    bench/.tools/spark35/bin/python bench/scc_copy.py HOST KEYSPACE TABLE OUTPUT JAR [JAR ...]

Prints one JSON line with the seconds spent in this process; the caller counts the rows in the Parquet files.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    host, keyspace, table, output, *jars = sys.argv[1:]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("scc copy")
             .config("spark.jars", ",".join(jars))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.cassandra.connection.host", host)
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        (spark.read.format("org.apache.spark.sql.cassandra").options(keyspace=keyspace, table=table).load()
         .write.mode("overwrite").parquet(output))
    finally:
        spark.stop()
    print(json.dumps({"inner_seconds": time.perf_counter() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
