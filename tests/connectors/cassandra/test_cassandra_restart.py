"""A single-node Cassandra SIGKILLed and restarted while a split on it is provably half read: the copy (both
engines) and a Spark read wait for the node and finish with every row exactly once, in the same run.

The node (127.0.0.5) is this module's own, so killing it disturbs no other test. Each test stops its readers at a
gate before a page in the middle of a split (``gated_connector.py``), kills the node, opens the gate, waits until
a reader has failed on the dead node (so the crash provably reached it), then restarts the node.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.cassandra import insert_rows
from tests.fixtures import wait_for
from tests.splitsource.copyjob.test_copy import CLI, run

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
INDEXES = range(35, 40)  # the node's address: the first free one (conftest.free_loopback_block)
INDEX = 0  # set by the node fixture, before anything uses it
HOST = ""
KS = "splitsource_restart"
ROWS = 20_000
CONNECTOR = "tests.connectors.cassandra.gated_connector:GatedCassandraSource"


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root

    def session(self) -> Any:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import RoundRobinPolicy

        profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60)
        cluster = Cluster([HOST], protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
        return cluster, cluster.connect()

    def kill(self) -> None:
        from scripts.cassandra import Node as ScriptNode
        from scripts.cassandra import cql_up, stop_node

        stop_node(ScriptNode(INDEX, self.root), sig=signal.SIGKILL)
        assert not cql_up(HOST, 9042), "the node still answers after SIGKILL"

    def restart(self) -> None:
        from scripts.cassandra import restart_node

        restart_node(self.root, INDEX, 1, num_tokens=16, heap_mb=768, first=INDEX, cluster_name="restart")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    from scripts.cassandra import start, stop
    from tests.fixtures import free_loopback_block

    global INDEX, HOST
    INDEX = free_loopback_block(1, INDEXES)
    HOST = f"127.0.0.{INDEX}"
    root = tmp_path_factory.mktemp("restart")
    try:
        start(root, nodes=1, num_tokens=16, heap_mb=768, first=INDEX, cluster_name="restart")
    except SystemExit as exc:
        stop(root, sig=signal.SIGKILL)
        pytest.fail(f"the restart test node did not start: {exc}", pytrace=False)
    n = Node(root)
    try:
        cluster, session = n.session()
        try:
            session.execute(f"CREATE KEYSPACE {KS} WITH replication = {{'class': 'SimpleStrategy', "
                            "'replication_factor': 1}")
            session.execute(f"CREATE TABLE {KS}.events (id bigint PRIMARY KEY, kind text)")
            insert = session.prepare(f"INSERT INTO {KS}.events (id, kind) VALUES (?, ?)")
            insert_rows(session, insert, [(i, f"k{i % 7}") for i in range(ROWS)])
        finally:
            cluster.shutdown()
        from scripts.cassandra import nodetool

        nodetool(root, INDEX, "flush", KS)  # the commit log replays anyway; flushed data makes restarts quicker
        yield n
    finally:
        stop(root, sig=signal.SIGKILL)


def options(gate: Path) -> dict[str, str]:
    return {"hosts": HOST, "keyspace": KS, "table": "events", "splits": "8", "fetch_size": "250",
            "gate": str(gate), "connect_timeout_s": "3", "request_timeout_s": "5"}


def crash_mid_split(node: Node, gate: Path, alive: Any) -> None:
    """Gate reached (a split half read) → SIGKILL → release → a reader failed on the dead node → restart (also
    when the test fails half way, so the next test finds the node up)."""
    wait_for(lambda: any(gate.glob("reached-*")), "reader at the gate", 240, alive)
    node.kill()
    try:
        (gate / "release").touch()
        wait_for(lambda: any(gate.glob("failed-*")), "reader failure on the dead node", 120, alive)
    finally:
        node.restart()


def ids_of(node: Node) -> set[int]:
    cluster, session = node.session()
    try:
        return {r.id for r in session.execute(f"SELECT id FROM {KS}.events")}
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_copy_waits_for_a_restarted_node_and_finishes_exact_in_the_same_run(node: Node, tmp_path: Path,
                                                                             engine: str) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    out = tmp_path / "out"
    args = ["copy", "--engine", engine, "--connector", CONNECTOR,
            *[a for k, v in options(gate).items() for a in ("-o", f"{k}={v}")], "--output", str(out), "--quiet"]
    log = tmp_path / "copy.err"
    with open(log, "w") as err:
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            crash_mid_split(node, gate, alive=lambda: proc.poll() is None)
            stdout, _ = proc.communicate(timeout=400)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the copy said: {log.read_text()[-3000:]}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = log.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert f"copy finished: {ROWS:,} rows" in stdout, stdout
    check = run(["verify", "--connector", "cassandra", "-o", f"hosts={HOST}", "-o", f"keyspace={KS}",
                 "-o", "table=events", "--output", str(out)])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    assert len(list(gate.glob("failed-*"))) >= 1


def test_spark_read_waits_for_a_restarted_node(node: Node, tmp_path: Path, spark: Any) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    df = spark.read.format("splitsource").option("connector", CONNECTOR).options(**options(gate)).load()
    outcome: dict[str, Any] = {}

    def collect() -> None:
        try:
            outcome["ids"] = [r.id for r in df.select("id").collect()]
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    crash_mid_split(node, gate, alive=thread.is_alive)
    thread.join(timeout=400)
    assert not thread.is_alive(), "the read did not finish after the node came back"
    assert "error" not in outcome, str(outcome.get("error"))[-2000:]
    assert len(outcome["ids"]) == ROWS and set(outcome["ids"]) == ids_of(node) == set(range(ROWS))


if __name__ == "__main__":  # pragma: no cover - for running the module alone
    sys.exit(pytest.main([__file__, "-q"]))
