"""Replicas that take over: a three-node ring in two data centres (two nodes in ``dc1``, one in ``dc2``, on the first
free loopback addresses from 127.0.0.40;
``NetworkTopologyStrategy`` with two replicas in dc1 and one in dc2) started for this module.

- a dc1 node SIGKILLed in the middle of a copy, both engines: the copy reads on from the other replica and ends
  exact, reports the lost node (``node_down``; no page shrunk, no hot partition), and prints what the loss cost
  beside the same copy without it (``bench/bench_replica_loss.py`` holds the bound);
- ``local_dc=dc1`` reads only dc1 (each node's own count of range reads, ``system_views.local_scan_latency``);
- first-page timeouts on every split (a fake): a wide partition with every node up, a lost replica (read again at
  full size) with a dc1 node down and its port hung, so that the copy's readers are still connecting to it;
- ``LOCAL_QUORUM`` with a dc1 replica down fails after the retry budget in one line naming the consistency level and
  the live replicas; with no dc1 node up, a copy fails in one line before claiming anything.

Nodes are restored by the tests that need them up (``Ring.ensure_up``), so each test also runs alone. The tests
are in the order that restarts fewest nodes (a restart: about 16 s): those with every node up first, then those
that lose the same dc1 node, then those with it down.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from scripts.cassandra import create_schema, insert_rows
from tests.connectors.cassandra.hung_port import HungPort
from tests.fixtures import ROOT

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
NODES, DCS = 3, ("dc1", "dc1", "dc2")
INDEXES = range(40, 60)  # the ring takes the first free block of three (conftest.free_loopback_block)
KS, TABLE, ROWS = "replicated", "events", 30_000
RATE = 6_000  # rows/s: about 5 s of reading, so a node can be lost in the middle
# where the ring runs, set by the ring fixture before anything uses it (node FIRST, FIRST + 1 in dc1, FIRST + 2 in dc2)
FIRST = 0
DC1: list[str] = []
HOSTS = ""


def _place(first: int) -> None:
    global FIRST, DC1, HOSTS
    FIRST = first
    DC1 = [f"127.0.0.{first}", f"127.0.0.{first + 1}"]
    HOSTS = ",".join(f"127.0.0.{i}" for i in range(first, first + NODES))


class Ring:
    def __init__(self, root: Path) -> None:
        from scripts.cassandra import Settings

        self.root = root
        self.settings = Settings(dcs=DCS)

    def pid(self, index: int) -> int | None:
        from scripts.cassandra import Node, running_pid

        return running_pid(Node(index, self.root))

    def kill(self, index: int) -> None:
        """SIGKILL one node (a lost machine) and prove it is gone."""
        pid = self.pid(index)
        assert pid is not None, f"node {index} was not running"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.pid(index) is not None:
            assert time.monotonic() < deadline, f"node {index} outlived its SIGKILL"
            time.sleep(0.05)

    def ensure_up(self, *indexes: int) -> None:
        from scripts.cassandra import restart_node

        for index in indexes:
            if self.pid(index) is None:
                restart_node(self.root, index, NODES, num_tokens=4, heap_mb=640, first=FIRST,
                             cluster_name="replicas", settings=self.settings)
        for index in indexes:
            wait_until_seen(self.root, index, up=True)

    def session_on(self, address: str) -> Any:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import WhiteListRoundRobinPolicy

        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([address]), request_timeout=60)
        cluster = Cluster([address], execution_profiles={EXEC_PROFILE_DEFAULT: profile})
        return cluster, cluster.connect()

    def scans(self) -> dict[str, int]:
        """Each live node's own count of range reads of the table (its ``system_views.local_scan_latency``)."""
        counts = {}
        for index in range(FIRST, FIRST + NODES):
            address = f"127.0.0.{index}"
            cluster, session = self.session_on(address)
            try:
                row = session.execute("SELECT count FROM system_views.local_scan_latency WHERE keyspace_name = %s "
                                      "AND table_name = %s", (KS, TABLE)).one()
                counts[address] = int(row[0]) if row else 0
            finally:
                cluster.shutdown()
        return counts


def wait_until_seen(root: Path, index: int, up: bool, timeout: float = 120) -> None:
    """Until every other live node's failure detector says node ``index`` is up (or down): a coordinator's view,
    which decides Unavailable against a timeout."""
    from scripts.cassandra import Node, running_pid

    word = "UP" if up else "DOWN"
    deadline = time.monotonic() + timeout
    for other in range(FIRST, FIRST + NODES):
        node = Node(other, root)
        if other == index or running_pid(node) is None:
            continue
        while True:
            lines = [line for line in node.log_file.read_text(errors="replace").splitlines()
                     if f"/127.0.0.{index}:7000 is now " in line]
            if lines and lines[-1].endswith(f"is now {word}"):
                break
            assert time.monotonic() < deadline, f"node {other} never saw node {index} {word}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ring]:
    from cassandra import ConsistencyLevel

    from scripts.cassandra import start, stop
    from tests.fixtures import free_loopback_block

    _place(free_loopback_block(NODES, INDEXES))
    root = tmp_path_factory.mktemp("replicas")
    ring = Ring(root)
    try:
        start(root, nodes=NODES, num_tokens=4, heap_mb=640, first=FIRST, cluster_name="replicas",
              settings=ring.settings)
    except SystemExit as exc:
        stop(root, sig=signal.SIGKILL)
        pytest.fail(f"the replica tests' ring did not start: {exc}", pytrace=False)
    try:
        for index in range(FIRST, FIRST + NODES):
            wait_until_seen(root, index, up=True)
        cluster, session = ring.session_on(DC1[0])
        try:
            deadline = time.monotonic() + 120
            while sorted(r[0] for r in session.execute("SELECT data_center FROM system.peers")) != ["dc1", "dc2"]:
                assert time.monotonic() < deadline, "node 33 never learned the other nodes' data centres"
                time.sleep(0.2)
            create_schema(session, f"CREATE KEYSPACE {KS} WITH replication = {{'class': 'NetworkTopologyStrategy', "
                                   "'dc1': 2, 'dc2': 1}",
                          f"CREATE TABLE {KS}.{TABLE} (id bigint PRIMARY KEY, payload blob)")
            insert = session.prepare(f"INSERT INTO {KS}.{TABLE} (id, payload) VALUES (?, ?)")
            # every replica holds every row before one is lost
            insert_rows(session, insert, [(i, i.to_bytes(8, "big") * 25) for i in range(ROWS)], ConsistencyLevel.ALL)
        finally:
            cluster.shutdown()
        yield ring
    finally:
        stop(root, sig=signal.SIGKILL)


def copy_command(engine: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "splitsource.cli", "copy", "--engine", engine, "--connector", "cassandra",
            "-o", f"hosts={HOSTS}", "-o", f"keyspace={KS}", "-o", f"table={TABLE}", "-o", "splits=16",
            "-o", "local_dc=dc1", "--max-splits-per-batch", "4", "--output", str(out), "--quiet",
            "--summary-json", f"{out}.summary.json", *extra]


def committed(out: Path) -> int:
    log = out.with_name(out.name + ".bucketing") / "log"
    return len(list(log.glob("*.commit"))) if log.exists() else 0


def run_copy(engine: str, out: Path, *extra: str, kill: tuple[Ring, int] | None = None
             ) -> tuple[subprocess.CompletedProcess[str], float, dict[str, Any]]:
    """A throttled copy (4 batches); ``kill``: SIGKILL that node once the first batch has committed, with three
    batches still to read."""
    started = time.monotonic()
    proc = subprocess.Popen(copy_command(engine, out, "--max-rows-per-second", str(RATE), *extra), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if kill is not None:
            deadline = time.monotonic() + 120
            while committed(out) < 1:
                assert proc.poll() is None, f"the copy ended before its first commit: {proc.communicate()}"
                assert time.monotonic() < deadline, "no batch committed in 120 s"
                time.sleep(0.05)
            kill[0].kill(kill[1])
            assert committed(out) < 4, "the copy had finished before the node was lost"
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    seconds = time.monotonic() - started
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    summary_file = Path(f"{out}.summary.json")
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return result, seconds, summary


def assert_exact(out: Path) -> None:
    table = ds.dataset(str(out), format="parquet").to_table()
    ids = table["id"].to_pylist()
    assert sorted(ids) == list(range(ROWS))  # every inserted row, once
    assert all(p == i.to_bytes(8, "big") * 25 for i, p in zip(ids, table["payload"].to_pylist(), strict=True))


def test_local_dc_reads_only_its_data_centre(ring: Ring, tmp_path: Path) -> None:
    ring.ensure_up(*range(FIRST, FIRST + NODES))
    before = ring.scans()
    result = subprocess.run(copy_command("local", tmp_path / "out", "-o", "consistency=LOCAL_QUORUM"), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_exact(tmp_path / "out")
    after = ring.scans()
    grew = {address: after[address] - before[address] for address in after}
    assert grew[f"127.0.0.{FIRST + 2}"] == 0, f"dc2 served range reads: {grew}"
    assert all(grew[address] > 0 for address in DC1), f"dc1 did not serve the reads: {grew}"


@pytest.mark.parametrize("lost", [False, True], ids=["every-node-up", "a-replica-down"])
def test_a_timeout_with_a_replica_down_is_not_taken_for_a_wide_partition(ring: Ring, tmp_path: Path,
                                                                          lost: bool) -> None:
    """The same first-page timeouts: with every node up they shrink the page (a wide partition, as far as the
    reader can tell); with a replica of the range down (hung: its port answers late) they are read again at full
    size from a live replica, by readers that start after it was lost."""
    ring.ensure_up(FIRST, FIRST + 2)
    if lost and ring.pid(FIRST + 1) is not None:
        ring.kill(FIRST + 1)
    if not lost:
        ring.ensure_up(FIRST + 1)
    hung = HungPort(f"127.0.0.{FIRST + 1}") if lost else None
    proof = tmp_path / "proof"
    proof.mkdir()
    out = tmp_path / "out"
    command = copy_command("local", out, "-o", f"proof={proof}")
    command[command.index("cassandra")] = "tests.connectors.cassandra.first_page_timeout:FirstPageTimeoutSource"
    try:
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        if hung is not None:
            hung.close()
    assert result.returncode == 0, result.stderr
    assert_exact(out)
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    splits, events = summary["splits"], summary.get("events", {})
    timeouts = len(list(proof.glob("timeout-*")))
    assert timeouts == splits, f"the fake timed out {timeouts} first pages of {splits} splits"  # the fault happened
    if hung is not None:
        assert hung.accepted > 0, "no session tried the hung node"
        assert events.get("replica_down") == splits and "page_shrunk" not in events, events
    else:
        assert events.get("page_shrunk") == splits and "replica_down" not in events, events


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_replica_lost_mid_copy_is_read_around_and_named(ring: Ring, tmp_path: Path, engine: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # what the loss costs is bench/bench_replica_loss.py's to measure, beside a copy with every node
    ring.ensure_up(*range(FIRST, FIRST + NODES))
    lost_node = FIRST + 1
    result, lost_s, summary = run_copy(engine, tmp_path / "out", kill=(ring, lost_node))
    assert result.returncode == 0, result.stderr
    assert_exact(tmp_path / "out")
    events = summary.get("events", {})
    assert events.get("node_down", 0) >= 1, f"the lost node is not reported: {summary}"
    assert "page_shrunk" not in events and "hot_partition" not in events, f"a lost node taken for data: {events}"
    named = {line.split()[4] for line in result.stdout.splitlines() if line.strip().startswith("node_down in split")}
    assert named == {f"127.0.0.{lost_node}"}, result.stdout
    with capsys.disabled():
        print(f"\n{engine} engine, {ROWS:,} rows at {RATE:,} rows/s: {lost_s:.1f} s with 127.0.0.{lost_node} "
              f"SIGKILLed after the first of 4 batches; events {events}")
    check = subprocess.run([sys.executable, "-m", "splitsource.cli", "verify", "--connector", "cassandra",
                            "-o", f"hosts={HOSTS}", "-o", f"keyspace={KS}", "-o", f"table={TABLE}", "-o",
                            "local_dc=dc1", "--output", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0 and "MATCH" in check.stdout, check.stdout + check.stderr


def test_local_quorum_with_a_replica_down_fails_in_one_line(ring: Ring, tmp_path: Path) -> None:
    ring.ensure_up(FIRST, FIRST + 2)
    if ring.pid(FIRST + 1) is not None:
        ring.kill(FIRST + 1)
    wait_until_seen(ring.root, FIRST + 1, up=False)  # the coordinator knows: Unavailable, not a timeout
    out = tmp_path / "out"
    result = subprocess.run(copy_command("local", out, "-o", "consistency=LOCAL_QUORUM", "-o", "max_attempts=2",
                                         "-o", "initial_backoff_ms=100", "-o", "max_retry_wait_s=1"),
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if "no size estimates from" not in line]
    assert len(lines) == 1, result.stderr  # the planner's warning about the lost node's estimates aside
    assert re.search(r"failed after \d+ attempts over [\d.]+s: consistency LOCAL_QUORUM", lines[0]), lines[0]
    assert "consistency LOCAL_QUORUM needs 2 replica(s) of token(" in lines[0]
    assert f"up as this reader sees them: 127.0.0.{FIRST}" in lines[0], lines[0]
    assert committed(out) == 0


def test_no_live_node_in_local_dc_fails_in_one_line_before_claiming(ring: Ring, tmp_path: Path) -> None:
    ring.ensure_up(FIRST + 2)
    for index in (FIRST, FIRST + 1):
        if ring.pid(index) is not None:
            ring.kill(index)
    out = tmp_path / "out"
    result = subprocess.run(copy_command("local", out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "splitsource copy: no node of data centre 'dc1' (local_dc) is up to read from; nodes elsewhere: "
        f"127.0.0.{FIRST + 2} (dc2); bring one back, or read from another data centre with local_dc")
    assert not out.exists()
    elsewhere = [a if a != "local_dc=dc1" else "local_dc=dc9" for a in copy_command("local", out)]
    result = subprocess.run(elsewhere, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "option 'local_dc': 'dc9' is not a data centre of this cluster; its data centres: dc1, dc2" in result.stderr
