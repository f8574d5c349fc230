"""scripts/cassandra.py deletes nothing unless asked by name, and never takes another node for its own."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from scripts import cassandra as script

pytestmark = pytest.mark.cassandra


def test_start_on_a_directory_with_a_running_nodes_data_keeps_every_row(cassandra: Any, capsys: Any) -> None:
    if cassandra.root is None:
        pytest.skip("CASSANDRA_HOSTS names a node this session did not start")
    with cassandra.fresh_table("splitsource_script", "kept", "id int PRIMARY KEY") as session:
        for i in range(50):
            session.execute("INSERT INTO splitsource_script.kept (id) VALUES (%s)", (i,))
    # what a user types, options after the subcommand
    assert script.main(["start", "--dir", str(cassandra.root), "--first", str(cassandra.index),
                        "--cluster-name", "splitsource-tests"]) == 0
    assert f"127.0.0.{cassandra.index}:9042" in capsys.readouterr().out
    cluster, session = cassandra.session()
    try:
        assert session.execute("SELECT count(*) FROM splitsource_script.kept").one()[0] == 50
    finally:
        cluster.shutdown()


def test_a_directory_of_another_cluster_or_of_a_user_is_refused(cassandra: Any, tmp_path: Path) -> None:
    if cassandra.root is None:
        pytest.skip("CASSANDRA_HOSTS names a node this session did not start")
    with pytest.raises(SystemExit, match=r"holds the data of cluster 'splitsource-tests', not 'other'"):
        script.start(cassandra.root, first=cassandra.index, cluster_name="other")
    mine = tmp_path / "node7"
    mine.mkdir()
    (mine / "thesis.tex").write_text("mine")
    with pytest.raises(SystemExit, match=r"holds files this script did not write"):
        script.start(tmp_path, first=7)
    assert (mine / "thesis.tex").read_text() == "mine"
    assert script.wipe(tmp_path) == [] and (mine / "thesis.tex").exists()


def test_an_address_where_another_cassandra_answers_is_refused(cassandra: Any, tmp_path: Path) -> None:
    """A node that cannot bind dies; the script must not then take whatever answers there for it."""
    host = cassandra.hosts.split(",")[0]
    with socket.create_connection((host, cassandra.port), timeout=5):
        pass
    index = int(host.rsplit(".", 1)[1]) if host.startswith("127.0.0.") else pytest.skip("not a loopback node")
    with pytest.raises(SystemExit, match=r"already answers CQL: another Cassandra runs there"):
        script.start(tmp_path / "second", first=index, cluster_name="second")


def _fake_node(outcomes: list[str]) -> Any:
    """A stand-in for start_node: each start runs a process that logs one outcome and exits 3, or stays up
    ("up"). A real node cannot be made to miss its seed within its ring delay on demand."""
    import subprocess
    import sys

    starts: list[int] = []

    def start_node(node: script.Node, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        outcome = outcomes[len(starts)]
        starts.append(node.index)
        node.log_file.parent.mkdir(parents=True, exist_ok=True)
        node.log_file.write_text(outcome + "\n")
        code = "import time; time.sleep(60)" if outcome == "up" else "raise SystemExit(3)"
        procs.append(subprocess.Popen([sys.executable, "-c", code]))
        return procs[-1]

    procs: list[subprocess.Popen[bytes]] = []
    start_node.starts = starts  # type: ignore[attr-defined]
    start_node.procs = procs  # type: ignore[attr-defined]
    return start_node


def test_a_node_that_heard_no_seed_in_its_ring_delay_is_started_again(tmp_path: Path, monkeypatch: Any,
                                                                      capsys: Any) -> None:
    unseen = "ERROR [main] java.lang.IllegalStateException: Unable to contact any seeds: [/127.0.0.40:7000]"
    fake = _fake_node([unseen, "up"])
    monkeypatch.setattr(script, "start_node", fake)
    monkeypatch.setattr(script, "ready", lambda node, settings=None: node.log_file.read_text() == "up\n")
    node = script.Node(42, tmp_path)
    try:
        script._start_and_wait(node, 3, 4, 640, "replicas", 40, 30.0, script.Settings())
    finally:
        for proc in fake.procs:
            proc.kill()
            proc.wait()
    assert fake.starts == [42, 42]  # the fault happened, and the second start joined
    assert "node 42 heard no seed in its ring delay; starting it again" in capsys.readouterr().err


def test_a_node_that_fails_otherwise_is_not_started_again(tmp_path: Path, monkeypatch: Any) -> None:
    fake = _fake_node(["ERROR [main] java.io.IOException: No space left on device", "up"])
    monkeypatch.setattr(script, "start_node", fake)
    monkeypatch.setattr(script, "ready", lambda node, settings=None: False)
    with pytest.raises(SystemExit, match="node 42 exited with 3:\nERROR .*No space left on device"):
        script._start_and_wait(script.Node(42, tmp_path), 3, 4, 640, "replicas", 40, 30.0, script.Settings())
    assert fake.starts == [42]
