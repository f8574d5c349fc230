#!/usr/bin/env python3
"""The jars of Spark's own table connectors (Delta's and Iceberg's), fetched with Maven into a folder of their own.

    python scripts/spark_tables.py jars delta|iceberg --spark DIR   # fetch once; print them for spark.jars

Spark's ``spark.jars.packages`` resolves through Ivy, whose ``local-m2-cache`` resolver trusts a pom it finds in
``~/.m2`` even when no jar lies beside it (other Maven steps leave poms only) and then gives up rather than ask
Maven Central: a test that passed on one machine failed on a fresh one. Maven resolves the jars here instead,
into ``~/.cache/splitsource/spark-tables-<format>``, less what the PySpark at ``--spark`` ships itself.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path.home() / ".cache" / "splitsource"
ARTIFACTS = {"delta": ("io.delta", "delta-spark_2.13", "4.4.0"),
             "iceberg": ("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0")}
POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>splitsource</groupId><artifactId>spark-tables</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>{0}</groupId><artifactId>{1}</artifactId><version>{2}</version></dependency>
  </dependencies>
</project>
"""


def jars(fmt: str, spark: Path) -> list[Path]:
    """The connector's jars for the PySpark installed at ``spark`` (a folder holding ``pyspark/``)."""
    group, artifact, version = ARTIFACTS[fmt]
    target = CACHE / f"spark-tables-{fmt}-{version}"
    if not (target / ".complete").exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SystemExit("spark_tables.py: Maven (mvn) is needed to fetch the table connectors")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tempfile.TemporaryDirectory() as work:
            pom = Path(work) / "pom.xml"
            pom.write_text(POM.format(group, artifact, version))
            subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                            f"-DoutputDirectory={partial}", "-DincludeScope=runtime"], check=True, stdout=sys.stderr)
        if not any((spark / "pyspark" / "jars").glob("*.jar")):
            raise SystemExit(f"spark_tables.py: no PySpark jars under {spark}")
        settle_jars(partial, target, spark / "pyspark" / "jars")
    return sorted(target.glob("*.jar"))


def settle_jars(partial: Path, target: Path, spark_jars: Path) -> None:
    """Make the jars Maven copied into ``partial`` the folder ``target``, once whole: without the artifacts Spark
    ships itself in ``spark_jars`` (scala, slf4j, netty...: one copy of each on the class path), marked complete."""
    shipped = {_artifact(p.name) for p in spark_jars.glob("*.jar")}
    for jar in partial.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").touch()


def _artifact(name: str) -> str:
    """A jar's artifact name without its version (delta-storage-4.4.0.jar -> delta-storage)."""
    return re.sub(r"-\d[\w.]*(-[A-Za-z0-9]+)?\.jar$", "", name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("jars", help="fetch a table connector's jars once; print them for spark.jars")
    cmd.add_argument("format", choices=sorted(ARTIFACTS))
    cmd.add_argument("--spark", type=Path, required=True, help="the folder a PySpark is installed in (--target)")
    args = parser.parse_args(argv)
    print(",".join(str(p) for p in jars(args.format, args.spark)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
