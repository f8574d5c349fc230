"""Read a table a copy made with Spark's own table connector, in a Spark of the connector's line (run in its own
process by tests/splitsource/spark/test_table_readers.py, with that PySpark first on the path).

    python table_reader_job.py delta <table path> <versions> <jars>
    python table_reader_job.py iceberg <metadata.json> <snapshot ids, comma-separated> <jars>

The connector's jars come resolved by Maven (scripts/spark_tables.py), as ``spark.jars``: never through Ivy's
``spark.jars.packages``, which trusts a pom-only entry in ``~/.m2`` and then fails to download.

Prints one JSON object: the rows of the current version (every id, the count of each value of its partition column
``flag``, the count of a filter on it), and the row count of each version or snapshot asked for (time travel).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# C1 only, and the serial collector: a job of seconds pays more for C2's and G1's threads than for its work on 2
# cores (table_stream_job.py: 30 s -> 24 s)
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell')

def main() -> int:
    from pyspark.sql import SparkSession

    fmt, where, versions, jars = sys.argv[1], sys.argv[2], [v for v in sys.argv[3].split(",") if v], sys.argv[4]
    builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
               .config("spark.jars", jars))
    if fmt == "delta":
        builder = (builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    else:
        builder = builder.config("spark.sql.extensions",
                                 "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    option = "versionAsOf"  # Delta's version; Iceberg's snapshot id (its own snapshot-id option is retired)
    current = spark.read.format(fmt).load(where)
    ids = sorted(r.id for r in current.select("id").collect())
    counts = {v: spark.read.format(fmt).option(option, v).load(where).count() for v in versions}
    by_flag = {str(r["flag"]).lower(): r["count"] for r in current.groupBy("flag").count().collect()}
    flag_true = current.where("flag = true").count()  # a filter on the partition column
    print(json.dumps({"spark": spark.version, "ids": ids, "counts": counts, "by_flag": by_flag,
                      "flag_true": flag_true}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
