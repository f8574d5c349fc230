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
