"""Install the tools the benchmarks compare against, from the package registries, into ``bench/.tools``.

- ``dsbulk``: DataStax Bulk Loader 1.10.0, assembled from its Maven Central artifacts (the distribution tarball
  is not published there) and run as ``java -cp lib/* com.datastax.oss.dsbulk.runner.DataStaxBulkLoader``;
- ``spark35``: a virtual environment with PySpark 3.5 (the Spark Cassandra Connector has no Spark 4 release)
  and the connector's 3.5.1 jars (the Scala 2.12 build, since PyPI's PySpark 3.5 is built for Scala 2.12);
- ``pg_peers``: a virtual environment with the tools PostgreSQL users read with (ConnectorX, ADBC, DuckDB with
  its postgres extension, dlt), pinned; DuckDB at the version its extension wheel was built for;
- ``pgjdbc``: PostgreSQL's JDBC driver 42.7.14, for Spark's JDBC source.

Each step is skipped when its result is already there, so a second run costs nothing.

    python bench/tools.py            # install them all; prints where they are
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = HERE / ".tools"
PYSPARK_35 = "pyspark==3.5.7"
DSBULK_MAIN = "com.datastax.oss.dsbulk.runner.DataStaxBulkLoader"
SCC_FORMAT = "org.apache.spark.sql.cassandra"
_SPARK_PROVIDES = ("slf4j-api-",)  # jars the connector lists that Spark 3.5 ships in a newer version


def _maven_copy(pom: Path, into: Path, drop: tuple[str, ...] = ()) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SystemExit("bench/tools.py: Maven (mvn) is needed to fetch the tools from Maven Central")
    staging = into.with_name(into.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}", "-DincludeScope=runtime"], check=True)
    for jar in staging.iterdir():
        if drop and jar.name.startswith(drop):
            jar.unlink()
    staging.rename(into)  # only a complete copy gets the final name


def dsbulk() -> list[str]:
    """The command that runs dsbulk (arguments follow), installing it first if needed."""
    lib = TOOLS / "dsbulk" / "lib"
    if not lib.is_dir():
        lib.parent.mkdir(parents=True, exist_ok=True)
        _maven_copy(HERE / "tools" / "dsbulk-pom.xml", lib)
    java = shutil.which("java") or "java"
    return [java, "-Xmx2g", "-cp", f"{lib}/*", DSBULK_MAIN]


def spark35() -> tuple[Path, list[Path]]:
    """The Python of the PySpark 3.5 environment and the Spark Cassandra Connector's jars, installed if needed."""
    env = TOOLS / "spark35"
    python = env / "bin" / "python"
    if not (env / ".installed").exists():
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PYSPARK_35], check=True)
        (env / ".installed").write_text(PYSPARK_35 + "\n")
    jars = TOOLS / "scc" / "jars"
    if not jars.is_dir():
        jars.parent.mkdir(parents=True, exist_ok=True)
        _maven_copy(HERE / "tools" / "scc-pom.xml", jars, drop=_SPARK_PROVIDES)
    return python, sorted(jars.glob("*.jar"))


PG_PEERS = ("connectorx==0.4.6", "adbc-driver-postgresql==1.13.0", "duckdb==1.4.4",
            "duckdb-ext-postgres==1.4.4.20260205", "dlt[parquet]==1.31.0", "sqlalchemy>=2", "psycopg[binary]==3.3.9",
            "pyarrow>=16")


def pg_peers() -> Path:
    """The Python of the environment that holds the PostgreSQL peers, installed if needed."""
    env = TOOLS / "pg-peers"
    python = env / "bin" / "python"
    if not (env / ".installed").exists():
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PG_PEERS], check=True)
        (env / ".installed").write_text("\n".join(PG_PEERS) + "\n")
    return python


def pgjdbc() -> Path:
    """PostgreSQL's JDBC driver jar, fetched from Maven Central if needed."""
    jars = TOOLS / "pgjdbc" / "jars"
    if not jars.is_dir():
        jars.parent.mkdir(parents=True, exist_ok=True)
        _maven_copy(HERE / "tools" / "pgjdbc-pom.xml", jars)
    return next(jars.glob("postgresql-*.jar"))


def main() -> int:
    print("dsbulk:", " ".join(dsbulk()))
    python, jars = spark35()
    print("pyspark 3.5:", python)
    print("spark cassandra connector:", len(jars), "jars in", jars[0].parent if jars else "?")
    print("postgresql peers:", pg_peers())
    print("postgresql jdbc:", pgjdbc())
    return 0


if __name__ == "__main__":
    sys.exit(main())
