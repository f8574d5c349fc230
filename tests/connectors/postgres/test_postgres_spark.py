"""PostgreSQL through Spark: ``spark.read.format("splitsource")`` and a SQL view read exactly the inserted rows,
and Spark's filters pushed into the server's query (text compared by bytes, as Spark compares strings; NULLs
left out as Spark leaves them) give the same rows as the same filters evaluated by Spark; a role with only SELECT
copies, verifies and reads."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.connectors.postgres.conftest import expected_events, make_events
from tests.fixtures import PostgresServer
from tests.splitsource.copyjob.test_copy import CLI

PROVING = "tests.connectors.postgres.proving_source:ProvingPostgresSource"
ROWS = 3_000
FILTERS = [
    ("id > 100 AND id <= 2000", lambda i, r: 100 < i <= 2000, '"id" > '),
    ("name = 'name 5'", lambda i, r: r[0] == "name 5", '"name" COLLATE "C" = '),
    ("name < 'name 2' AND name >= 'name 1'", lambda i, r: r[0] is not None and "name 1" <= r[0] < "name 2",
     '"name" COLLATE "C" < '),
    ("name IN ('name 7', 'name 70', 'nobody')", lambda i, r: r[0] in ("name 7", "name 70"), '"name" COLLATE "C" IN'),
    ("flag = true AND score < 100", lambda i, r: r[2] and r[1] < 100, '"flag" = '),
    ("at >= TIMESTAMP '2026-01-01 00:30:00'", lambda i, r: i >= 1800, '"at" >='),
]


def _read(spark: Any, server: PostgresServer, table: str, proof: Path, where: str, pushdown: bool) -> list[Any]:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", str(pushdown).lower())
    try:
        df = (spark.read.format("splitsource").option("connector", PROVING)
              .options(dsn=server.dsn, password=server.env["PGPASSWORD"], table=table, split_size_mb="0.05",
                       proof=str(proof)).load())
        return sorted(tuple(r) for r in df.where(where).select("id", "name", "score", "flag").collect())
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_spark_reads_the_inserted_rows_with_and_without_pushdown(postgres15: PostgresServer, table_name: str,
                                                                 spark: Any, tmp_path: Path) -> None:
    make_events(postgres15, table_name, ROWS)
    truth = expected_events(ROWS)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    for where, keep, pushed_sql in FILTERS:
        want = sorted((i, *r) for i, r in truth.items() if keep(i, r))
        for pushdown in (False, True):
            proof = tmp_path / f"{abs(hash(where))}-{pushdown}"
            proof.mkdir()
            got = _read(spark, postgres15, table_name, proof, where, pushdown)
            assert got == want, f"{where} (pushdown {pushdown}): {len(got)} rows, not the {len(want)} inserted"
            conditions = {p.read_text() for p in proof.iterdir()}
            assert conditions, "no reader was made"
            assert all((pushed_sql in c) == pushdown for c in conditions), (where, pushdown, conditions)


def test_a_sql_view_reads_the_table(postgres15: PostgresServer, table_name: str, spark: Any) -> None:
    make_events(postgres15, table_name, ROWS)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW pg_events USING splitsource OPTIONS (connector 'postgres', "
              f"dsn '{postgres15.dsn}', password '{postgres15.env['PGPASSWORD']}', table '{table_name}')")
    count, total, nulls = spark.sql("SELECT count(*), sum(id), count(*) - count(name) FROM pg_events").first()
    assert (count, total, nulls) == (ROWS, ROWS * (ROWS + 1) // 2, ROWS // 10)
    spark.catalog.dropTempView("pg_events")


def test_a_role_with_only_select_copies_verifies_and_reads(postgres15: PostgresServer, table_name: str,
                                                           spark: Any, tmp_path: Path) -> None:
    """A login granted SELECT on the table and nothing else: the copy (its snapshot, its plan from a sample of the
    table, the server's identity), verify and a Spark read all work with it."""
    make_events(postgres15, table_name, ROWS)
    with postgres15.connect() as conn:
        conn.execute("DROP ROLE IF EXISTS only_select")  # its grant went with the table make_events dropped
        conn.execute("CREATE ROLE only_select LOGIN PASSWORD 'secret-os' NOSUPERUSER NOCREATEDB NOCREATEROLE")
        conn.execute(f"GRANT SELECT ON {table_name} TO only_select")
    dsn = postgres15.dsn.replace("user=postgres", "user=only_select")
    env = {**postgres15.run_env(), "PGPASSWORD": "secret-os"}
    args = ["--connector", "postgres", "-o", f"dsn={dsn}", "-o", f"table={table_name}", "-o", "split_size_mb=0.05",
            "--output", str(tmp_path / "out")]
    copied = subprocess.run([*CLI, "copy", *args, "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert copied.returncode == 0, copied.stderr
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(1, ROWS + 1))
    verified = subprocess.run([*CLI, "verify", *args], capture_output=True, text=True, env=env, timeout=300)
    assert verified.returncode == 0 and verified.stdout.startswith("MATCH"), verified.stdout + verified.stderr
    df = (spark.read.format("splitsource").option("connector", "postgres")
          .options(dsn=dsn, password="secret-os", table=table_name, split_size_mb="0.05").load())
    assert df.selectExpr("count(*)", "sum(id)").first() == (ROWS, ROWS * (ROWS + 1) // 2)

@pytest.fixture(autouse=True)
def _utc(spark: Any) -> None:
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_a_one_dimensional_array_is_spark_s_array_type_and_sums_as_postgresql_does(
        postgres15: PostgresServer, table_name: str, spark: Any) -> None:
    """integer[], numeric(6,2)[] and text[] arrive as Spark's ArrayType of their items' types, as Spark's JDBC source
    types them: the sums of their items in Spark (explode, no cast) equal PostgreSQL's over unnest, NULL items are
    kept where they were, and an empty array stays empty, not NULL."""
    from pyspark.sql.types import ArrayType, DecimalType, IntegerType, StringType

    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int PRIMARY KEY, a int[], p numeric(6,2)[], t text[])")
        conn.execute(f"INSERT INTO {table_name} SELECT i, ARRAY[i, NULL, -i * 2], ARRAY[i * 0.25, NULL], "
                     "ARRAY['x' || i, NULL] FROM generate_series(1, 3000) i")
        conn.execute(f"INSERT INTO {table_name} VALUES (3001, '{{}}', '{{}}', '{{}}'), (3002, NULL, NULL, NULL)")
        sums = conn.execute(f"SELECT (SELECT sum(x) FROM {table_name}, unnest(a) x), "
                            f"(SELECT sum(x) FROM {table_name}, unnest(p) x), "
                            f"(SELECT count(*) FROM {table_name}, unnest(a) x WHERE x IS NULL)").fetchone()
    df = (spark.read.format("splitsource").option("connector", "postgres")
          .options(dsn=postgres15.dsn, password=postgres15.env["PGPASSWORD"], table=table_name, split_size_mb="0.1")
          .load())
    types = {f.name: f.dataType for f in df.schema.fields}
    assert (types["a"], types["p"], types["t"]) == (ArrayType(IntegerType()), ArrayType(DecimalType(6, 2)),
                                                    ArrayType(StringType())), types
    df.createOrReplaceTempView("pg_arrays")
    got = spark.sql("SELECT (SELECT sum(x) FROM pg_arrays LATERAL VIEW explode(a) e AS x), "
                    "(SELECT sum(x) FROM pg_arrays LATERAL VIEW explode(p) e AS x), "
                    "(SELECT count(*) FROM pg_arrays LATERAL VIEW explode(a) e AS x WHERE x IS NULL)").first()
    assert tuple(got) == sums, (tuple(got), sums)
    rows = {r["id"]: r for r in spark.sql("SELECT * FROM pg_arrays WHERE id IN (7, 3001, 3002)").collect()}
    assert (rows[7]["a"], rows[7]["t"]) == ([7, None, -14], ["x7", None])
    assert (rows[3001]["a"], rows[3002]["a"]) == ([], None)
    spark.catalog.dropTempView("pg_arrays")


def test_a_numeric_column_is_a_decimal_spark_sums_as_postgresql_does(postgres15: PostgresServer, table_name: str,
                                                                      spark: Any, tmp_path: Path) -> None:
    """numeric(12,2), a domain over numeric(10,3) and numeric(38,0) arrive as Spark's DecimalType(p,s), as Spark's
    JDBC source types them: their sums in Spark, with no cast, equal PostgreSQL's own sums; an unconstrained numeric
    stays the server's text unless option decimal names a precision and scale. A NaN in a numeric(12,2) column is
    refused in one line naming text_columns, and read as text with it."""
    import decimal

    from pyspark.sql.types import DecimalType, StringType

    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"DROP DOMAIN IF EXISTS {table_name}_price")
        conn.execute(f"CREATE DOMAIN {table_name}_price AS numeric(10,3)")
        conn.execute(f"CREATE TABLE {table_name} (id int PRIMARY KEY, a numeric(12,2), d {table_name}_price, "
                     "e numeric(38,0), b numeric)")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i * 1.25 - 7000, i * 0.001, (10::numeric ^ 30) + i, i / 8.0 "
                     "FROM generate_series(1, 5000) i")
        conn.execute(f"INSERT INTO {table_name} VALUES (5001, NULL, NULL, NULL, NULL)")
        sums = conn.execute(f"SELECT sum(a), sum(d), sum(e) FROM {table_name}").fetchone()

    def read(**extra: str) -> Any:
        return (spark.read.format("splitsource").option("connector", "postgres")
                .options(dsn=postgres15.dsn, password=postgres15.env["PGPASSWORD"], table=table_name,
                         split_size_mb="0.1", **extra).load())

    df = read()
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types == {"id": types["id"], "a": DecimalType(12, 2), "d": DecimalType(10, 3), "e": DecimalType(38, 0),
                     "b": StringType()}, types
    got = df.selectExpr("sum(a)", "sum(d)", "sum(e)").first()
    assert tuple(got) == sums, (tuple(got), sums)
    assert read(decimal="38,10").schema["b"].dataType == DecimalType(38, 10)
    assert read(decimal="38,10").selectExpr("sum(b)").first()[0] == decimal.Decimal(sum(range(1, 5001))) / 8

    with postgres15.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET a = 'NaN' WHERE id = 17")
    out = tmp_path / "nan"
    args = ["--connector", "postgres", "-o", f"dsn={postgres15.dsn}", "-o", f"table={table_name}", "--output", str(out),
            "--engine", "local", "--quiet"]
    refused = subprocess.run([*CLI, "copy", *args], capture_output=True, text=True, env=postgres15.run_env(),
                             timeout=300)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert ("column a of public." in refused.stderr and "holds NaN (row id=17), which Arrow's decimal128(12, 2) "
            "cannot hold exactly; add -o text_columns=a" in refused.stderr), refused.stderr
    done = subprocess.run([*CLI, "copy", *args, "-o", "text_columns=a", "--overwrite"], capture_output=True,
                          text=True, env=postgres15.run_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    a = dict(zip(*(pq.read_table(out, columns=["id", "a"]).column(c).to_pylist() for c in ("id", "a")), strict=True))
    assert a[17] == "NaN" and a[18] == "-6977.50"
