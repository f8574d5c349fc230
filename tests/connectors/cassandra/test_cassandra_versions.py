"""The older Cassandra lines users copy from: a node of 4.0 and of 4.1 (on Java 11) started for this module, the
fidelity table loaded into it, copied by both engines (one of them over native protocol v4, forced) and read with
``spark.read.format("splitsource")``, each compared with the values the test inserted. Cassandra 5.0 is the session
node (``test_cassandra_fidelity.py``; v4 forced on it in ``test_cassandra_security.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from splitsource import copy
from splitsource.copyjob._verify import verify
from tests.connectors.cassandra.fidelity_table import COLUMNS, KS, TABLE, create_and_load, expected_plain
from tests.connectors.cassandra.test_cassandra_fidelity import assert_rows, plain_rows

pytestmark = [pytest.mark.cassandra, pytest.mark.spark, pytest.mark.slow]
VERSIONS = ("4.0", "4.1")
INDEXES = range(70, 80)  # a node's address: the first free one (conftest.free_loopback_block)


@dataclass(frozen=True)
class Versioned:
    version: str
    address: str
    release: str

    def options(self, **extra: str) -> dict[str, str]:
        return {"hosts": self.address, "keyspace": KS, "table": TABLE, "splits": "5", **extra}


@pytest.fixture(scope="module", params=VERSIONS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Versioned]:
    from cassandra.cluster import Cluster

    from scripts.cassandra import Settings, start, stop
    from tests.fixtures import await_setup, free_loopback_block

    await_setup("cassandra-lines")
    version: str = request.param
    index = free_loopback_block(1, INDEXES)
    address = f"127.0.0.{index}"
    root = tmp_path_factory.mktemp(f"cassandra-{version}")
    try:
        start(root, first=index, heap_mb=768, cluster_name=f"v{version}", settings=Settings(version))
    except SystemExit as exc:
        stop(root)
        pytest.fail(f"the Cassandra {version} node did not start: {exc}", pytrace=False)
    try:
        cluster = Cluster([address])  # negotiates, as the connector does by default
        try:
            session = cluster.connect()
            release = session.execute("SELECT release_version FROM system.local").one()[0]
            create_and_load(session)
        finally:
            cluster.shutdown()
        yield Versioned(version, address, release)
    finally:
        from connectors.cassandra._session import _shut_down_shared

        _shut_down_shared()  # the next version's node starts at the same address
        stop(root, sig=9)


@pytest.mark.parametrize("engine, protocol", [("local", "4"), ("spark", "auto")])
def test_a_copy_is_exact_to_the_inserted_values(node: Versioned, tmp_path: Path, engine: str, protocol: str,
                                                spark: Any) -> None:
    assert node.release.startswith(node.version)
    out = tmp_path / "out"
    options = node.options(protocol_version=protocol)
    summary = copy("cassandra", options, str(out), engine=engine, spark=spark if engine == "spark" else None)
    assert summary.total_rows == len(expected_plain())
    assert_rows(plain_rows(pq.read_table(out)), expected_plain(), f"Cassandra {node.release} {engine} v{protocol}")
    from connectors.cassandra import CassandraSource

    result = verify(CassandraSource(options), str(out))
    assert result.match, result.text()


def test_spark_read_is_exact_to_the_inserted_values(node: Versioned, spark: Any) -> None:
    df = spark.read.format("splitsource").option("connector", "cassandra").options(**node.options()).load()
    assert_rows(plain_rows(df.toArrow()), expected_plain(COLUMNS), f"spark.read of Cassandra {node.release}")


def test_the_negotiated_protocol_is_the_newest_both_speak(node: Versioned) -> None:
    from connectors.cassandra import CassandraSource
    from connectors.cassandra._session import connect

    for forced, expected in (("auto", 5), ("4", 4)):
        cluster, _ = connect(CassandraSource(node.options(protocol_version=forced)).options)
        try:
            assert cluster.protocol_version == expected, f"{node.release} {forced}"
        finally:
            cluster.shutdown()
