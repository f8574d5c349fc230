"""The tools PostgreSQL users read a table with, each reading one whole table into Parquet: run by the peers'
own Python (``bench/tools.py pg_peers``), one process per read, by bench/bench_postgres.py.

    bench/.tools/pg-peers/bin/python bench/postgres_peers.py METHOD CONNINFO TABLE OUT

METHOD is ``connectorx`` (2 partitions on the key), ``adbc`` (one connection, ``COPY BINARY`` into Arrow),
``duckdb`` (the postgres extension, 2 threads), ``adbc_read_floor`` (the connector's driver reading on two
connections, nothing written: run by the project's Python) or ``dlt`` (``sql_database`` with the pyarrow backend, into a
filesystem destination as Parquet). Prints the rows it wrote. ``dlt_incremental`` (bench/bench_incremental.py) is
dlt's incremental load with a cursor column and a merge, run again for each later load.
"""

from __future__ import annotations

import sys
from pathlib import Path


def connectorx(conninfo: str, table: str, out: Path) -> int:
    import connectorx as cx
    import pyarrow.parquet as pq

    data = cx.read_sql(_uri(conninfo), f"SELECT * FROM {table}", return_type="arrow", partition_on="id",
                       partition_num=2)
    pq.write_table(data, out)
    return int(data.num_rows)


def adbc(conninfo: str, table: str, out: Path) -> int:
    import adbc_driver_postgresql.dbapi as dbapi
    import pyarrow.parquet as pq

    rows = 0
    with dbapi.connect(_uri(conninfo)) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        reader = cursor.fetch_record_batch()
        with pq.ParquetWriter(out, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
    return rows


def adbc_read_floor(conninfo: str, table: str, out: Path) -> int:
    """The connector's own driver alone, as bench/bench_postgres.py runs it with the project's Python (ADBC 1.13,
    not the peers'): two connections at once, each reading half of the table's blocks, every batch dropped; no
    plan, no snapshot, no Parquet. What any copy decoding through this driver on two cores takes at least."""
    import threading

    import adbc_driver_postgresql.dbapi as dbapi

    del out
    with dbapi.connect(_uri(conninfo)) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT pg_relation_size('{table}'::regclass) / 8192")
        half = int(cursor.fetchone()[0]) // 2  # type: ignore[index]
    rows = [0, 0]

    def read(part: int, condition: str) -> None:
        with dbapi.connect(_uri(conninfo)) as conn, conn.cursor() as cursor:
            cursor.execute(f"SELECT * FROM {table} WHERE {condition}")
            for batch in cursor.fetch_record_batch():
                rows[part] += batch.num_rows

    threads = [threading.Thread(target=read, args=(0, f"ctid < '({half},0)'::tid")),
               threading.Thread(target=read, args=(1, f"ctid >= '({half},0)'::tid"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(rows)


def duckdb(conninfo: str, table: str, out: Path) -> int:
    import duckdb as ddb
    import duckdb_ext  # type: ignore[import-not-found]  # the extension wheel: duckdb_ext/extensions/v<version>/<platform>

    con = ddb.connect(config={"threads": 2, "extension_directory": str(Path(duckdb_ext.__path__[0]) / "extensions")})
    con.execute("LOAD postgres")
    con.execute(f"ATTACH '{conninfo}' AS pg (TYPE postgres, READ_ONLY)")
    con.execute(f"COPY (SELECT * FROM pg.{table}) TO '{out}' (FORMAT parquet)")
    return int(con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0])  # type: ignore[index]


def dlt(conninfo: str, table: str, out: Path) -> int:
    import dlt as dlt_
    import pyarrow.parquet as pq
    from dlt.sources.sql_database import sql_database

    schema, _, name = table.rpartition(".")
    source = sql_database(credentials=_uri(conninfo).replace("postgresql://", "postgresql+psycopg://"),
                          schema=schema or "public", table_names=[name], backend="pyarrow")
    pipeline = dlt_.pipeline(pipeline_name="bench", destination=dlt_.destinations.filesystem(str(out)),
                             dataset_name="bench", pipelines_dir=str(out.with_suffix(".dlt")))
    pipeline.run(source, loader_file_format="parquet")
    return sum(pq.ParquetFile(p).metadata.num_rows for p in out.rglob("*.parquet"))


def dlt_incremental(conninfo: str, table: str, out: Path) -> int:
    """dlt's incremental load as its docs give it: ``sql_table`` with ``incremental("updated_at")`` and the merge
    write disposition on the primary key, into DuckDB (a destination that merges); ``out`` is the DuckDB file, and
    the pipeline's state (the cursor's last value) is kept beside it between runs. Prints the rows loaded."""
    import dlt as dlt_
    from dlt.sources.sql_database import sql_table

    schema, _, name = table.rpartition(".")
    resource = sql_table(credentials=_uri(conninfo).replace("postgresql://", "postgresql+psycopg://"),
                         schema=schema or "public", table=name, backend="pyarrow",
                         incremental=dlt_.sources.incremental("updated_at"))
    resource.apply_hints(write_disposition="merge", primary_key="id")
    pipeline = dlt_.pipeline(pipeline_name="bench_incremental", destination=dlt_.destinations.duckdb(str(out)),
                             dataset_name="bench", pipelines_dir=str(out.with_suffix(".dlt")))
    info = pipeline.run(resource)
    loaded = pipeline.last_trace.last_normalize_info.row_counts.get(name, 0) if pipeline.last_trace else 0
    del info
    return int(loaded)


def _uri(conninfo: str) -> str:
    """A key=value conninfo as the postgresql:// URI ConnectorX and SQLAlchemy take."""
    pairs = dict(item.split("=", 1) for item in conninfo.split())
    password = f":{pairs['password']}" if "password" in pairs else ""
    return f"postgresql://{pairs['user']}{password}@{pairs['host']}:{pairs['port']}/{pairs['dbname']}"


METHODS = {"connectorx": connectorx, "adbc": adbc, "adbc_read_floor": adbc_read_floor, "duckdb": duckdb, "dlt": dlt,
           "dlt_incremental": dlt_incremental}

if __name__ == "__main__":
    method, conninfo, table, out = sys.argv[1:5]
    print(METHODS[method](conninfo, table, Path(out)))
