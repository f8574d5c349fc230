"""The Cassandra connector on a two-node cluster (127.0.0.31 and .32, one token each) started for this module.

The session's own node has 16 vnodes; this cluster has ``num_tokens: 1``, so the two together cover both ends of
the ring layouts users run. The cluster runs beside the session node (other addresses, other JMX ports).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connectors.cassandra import CassandraSource
from scripts.cassandra import create_schema, insert_rows
from splitsource.runtime import InProcessRuntime, RetryPolicy, read_local
from tests.fixtures import wait_for

from .test_cassandra_source import checksum

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
KS = "splitsource_ring"
ROWS = 12_000
FIRST, NODES = 31, 2  # 127.0.0.31-32: beside the session node, the demo's and the docs' second cluster


class Ring:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.hosts = ",".join(f"127.0.0.{i}" for i in range(FIRST, FIRST + NODES))

    def nodetool(self, index: int, *args: str) -> str:
        from scripts.cassandra import nodetool

        return nodetool(self.root, index, *args)

    def session(self) -> Any:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import RoundRobinPolicy

        profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60)
        cluster = Cluster(self.hosts.split(","), protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
        return cluster, cluster.connect()

    def options(self, **extra: str) -> dict[str, str]:
        return {"hosts": self.hosts, "keyspace": KS, "table": "events", **extra}


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ring]:
    from scripts.cassandra import start, stop

    reuse = os.environ.get("SPLITSOURCE_RING_DIR")  # a cluster already started with --first 3 --nodes 2
    root = Path(reuse) if reuse else tmp_path_factory.mktemp("ring")
    if not reuse:
        try:
            start(root, nodes=NODES, num_tokens=1, heap_mb=768, first=FIRST)
        except SystemExit as exc:
            stop(root)
            pytest.fail(f"the two-node test cluster did not start: {exc}", pytrace=False)
    ring = Ring(root)
    try:  # a setup that fails stops the ring too: else its nodes outlive the suite, on their addresses
        wait_until_every_node_serves(ring)
        cluster, session = ring.session()
        try:
            create_schema(session, f"DROP KEYSPACE IF EXISTS {KS}",
                          f"CREATE KEYSPACE {KS} WITH replication = "
                          "{'class': 'SimpleStrategy', 'replication_factor': 1}",
                          f"CREATE TABLE {KS}.events (id bigint PRIMARY KEY, kind text, payload blob)")
            insert = session.prepare(f"INSERT INTO {KS}.events (id, kind, payload) VALUES (?, ?, ?)")
            args = [(i, f"k{i % 13}", i.to_bytes(8, "big") * 8) for i in range(ROWS)]
            insert_rows(session, insert, args)
        finally:
            cluster.shutdown()
        for index in range(FIRST, FIRST + NODES):
            ring.nodetool(index, "flush", KS)
            ring.nodetool(index, "refreshsizeestimates")
        yield ring
    finally:
        if not reuse:
            stop(root, sig=signal.SIGKILL)  # throwaway data: no need to wait for a clean drain


def wait_until_every_node_serves(ring: Ring, timeout: float = 120.0) -> None:
    """CQL answering on a node does not mean it has joined the ring: poll until a fresh driver sees both nodes
    up, the token map holds both tokens, and a query runs on each node."""
    from cassandra.cluster import Cluster

    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        cluster = Cluster(ring.hosts.split(","), protocol_version=5)
        try:
            session = cluster.connect()
            hosts = cluster.metadata.all_hosts()
            if len(hosts) == NODES and all(h.is_up for h in hosts) and len(cluster.metadata.token_map.ring) == NODES:
                for host in hosts:
                    session.execute("SELECT release_version FROM system.local", host=host)
                return
            last = f"{[(str(h.endpoint), h.is_up) for h in hosts]}, {len(cluster.metadata.token_map.ring)} tokens"
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"; the last one is reported
            last = repr(exc)
        finally:
            cluster.shutdown()
        time.sleep(1.0)
    pytest.fail(f"the two-node cluster never became ready: {last}", pytrace=False)


def reference(ring: Ring) -> pa.Table:
    cluster, session = ring.session()
    try:
        rows = [tuple(r) for r in session.execute(f"SELECT id, kind, payload FROM {KS}.events")]
    finally:
        cluster.shutdown()
    ids, kinds, payloads = zip(*rows, strict=True)
    schema = CassandraSource(ring.options()).schema()
    return pa.table([pa.array(ids, pa.int64()), pa.array(kinds), pa.array(payloads, pa.binary())], schema=schema)


def test_one_token_per_node_ring_is_covered_and_sized_from_both_nodes(ring: Ring) -> None:
    source = CassandraSource(ring.options(split_size_mb="1"))
    plan = sorted(source.plan(), key=lambda e: e.start)  # the plan itself is interleaved across replicas
    # two nodes with one token each: two ring ranges, the wrapping one cut at the ring's end, so three entries
    # that tile the ring from the minimum token to the maximum, each sized by its own node's estimate
    assert len(plan) == 3
    assert plan[0].start == -(2**63) and plan[-1].end == 2**63 - 1
    assert all(a.end == b.start for a, b in zip(plan, plan[1:], strict=False))
    assert all(entry.estimated_bytes > 0 for entry in plan)
    assert sum(entry.parts for entry in plan) >= 2
    assert checksum(read_local(source, 2)) == checksum(reference(ring))


def test_spark_count_on_two_nodes(ring: Ring, spark: Any) -> None:
    df = spark.read.format("splitsource").option("connector", "cassandra").options(**ring.options()).load()
    assert df.count() == ROWS


def test_scan_survives_a_node_crash_and_restart_mid_scan(ring: Ring, tmp_path: Path) -> None:
    """SIGKILL node 4 while a split it owns is provably half read (its reader waits at a gate before page 3),
    wait until a reader has failed on the dead node, restart it: the scan waits, resumes from paging state, and
    the result is exact."""
    from scripts.cassandra import Node, restart_node, stop_node
    from tests.connectors.cassandra.gated_connector import GatedCassandraSource

    options = ring.options(fetch_size="100", splits="8")
    plan = CassandraSource(options).create_enumerator(None)  # type: ignore[arg-type]
    splits = list(iter(plan.next_split, None))
    cluster, _ = ring.session()
    try:
        tm = cluster.metadata.token_map
        owned = [s.split_id for s in splits
                 if [h.address for h in tm.get_replicas(KS, tm.token_class(s.end))] == [f"127.0.0.{FIRST + 1}"]]
    finally:
        cluster.shutdown()
    assert owned, "node 4 owns no split: the crash would prove nothing"
    gate = tmp_path / "gate"
    gate.mkdir()
    source = GatedCassandraSource({**options, "gate": str(gate), "gate_splits": ";".join(owned)})
    runtime = InProcessRuntime(source, 2, retry=RetryPolicy(max_attempts=5, initial_backoff=0.2, max_backoff=2.0,
                                                        max_wait=240))
    outcome: dict[str, Any] = {}

    def scan() -> None:
        try:
            outcome["result"] = runtime.run()
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    wait_for(lambda: any(gate.glob("reached-*")), "reader half way through a split of node 4", 120, thread.is_alive)
    stop_node(Node(FIRST + 1, ring.root), sig=signal.SIGKILL)
    (gate / "release").touch()
    wait_for(lambda: any(gate.glob("failed-*")), "reader failure on the dead node", 120, thread.is_alive)
    restart_node(ring.root, FIRST + 1, NODES, num_tokens=1, heap_mb=768, first=FIRST)
    thread.join(timeout=300)
    assert not thread.is_alive(), "the scan did not finish after the node came back"
    assert "error" not in outcome, f"the scan failed instead of waiting for the node: {outcome.get('error')}"
    assert outcome["result"].retries > 0
    table = outcome["result"].table(source.schema())
    assert checksum(table) == checksum(reference(ring))


