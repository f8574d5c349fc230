"""A locked-down Cassandra: one node started for this module with ``PasswordAuthenticator``,
``CassandraAuthorizer`` and TLS on its CQL port that requires a client certificate (keys and certificates made at
test time, ``tests/pki.py``). A role with only ``SELECT`` copies, reads and verifies, over verified TLS with a client
certificate; every misconfiguration ends in one line, with nothing claimed; the password is nowhere.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from scripts.cassandra import insert_rows
from tests.fixtures import ROOT
from tests.pki import PASSWORD, PKI, make_ca, make_pki

pytestmark = [pytest.mark.cassandra, pytest.mark.slow]
INDEXES = range(60, 70)  # the node's address: the first free one (conftest.free_loopback_block)
KS, TABLE, ROWS = "locked", "orders", 3000
READER, READER_PASSWORD = "reader", "Rd-7f3c9e2a-only-select"  # a value that cannot appear by chance


@dataclass(frozen=True)
class Secure:
    address: str
    pki: PKI
    password_file: Path

    def options(self, **extra: str | None) -> dict[str, str]:
        """Reader's options: verified TLS with a client certificate, the password from a file."""
        base: dict[str, str | None] = {
            "hosts": self.address, "keyspace": KS, "table": TABLE, "splits": "4",
            "username": READER, "password_file": str(self.password_file),
            "ssl": "true", "ssl_ca_file": str(self.pki.ca_cert),
            "ssl_cert_file": str(self.pki.client_cert), "ssl_key_file": str(self.pki.client_key),
        }
        base.update(extra)
        return {k: v for k, v in base.items() if v is not None}


def _superuser_session(address: str, pki: PKI) -> Any:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    cluster = Cluster([address], ssl_context=context, auth_provider=PlainTextAuthProvider("cassandra", "cassandra"))
    return cluster, cluster.connect()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    from scripts.cassandra import TLS, Settings, start, stop
    from tests.fixtures import free_loopback_block

    index = free_loopback_block(1, INDEXES)
    address = f"127.0.0.{index}"
    root = tmp_path_factory.mktemp("secure")
    pki = make_pki(root / "pki", address)
    settings = Settings(auth=True, tls=TLS(pki.server_keystore, PASSWORD, pki.truststore, PASSWORD, True))
    try:
        start(root / "nodes", first=index, heap_mb=768, cluster_name="locked-down", settings=settings)
    except SystemExit as exc:
        stop(root / "nodes")
        pytest.fail(f"the secure test node did not start: {exc}", pytrace=False)
    try:
        cluster, session = _superuser_session(address, pki)
        try:
            session.execute(f"CREATE KEYSPACE {KS} WITH replication = "
                            "{'class': 'SimpleStrategy', 'replication_factor': 1}")
            session.execute(f"CREATE TABLE {KS}.{TABLE} (id int PRIMARY KEY, item text)")
            insert = session.prepare(f"INSERT INTO {KS}.{TABLE} (id, item) VALUES (?, ?)")
            insert_rows(session, insert, [(i, f"item-{i}") for i in range(ROWS)])
            session.execute(f"CREATE ROLE {READER} WITH PASSWORD = '{READER_PASSWORD}' AND LOGIN = true")
            session.execute(f"GRANT SELECT ON KEYSPACE {KS} TO {READER}")
            session.execute("CREATE ROLE nobody WITH PASSWORD = 'nobody-pw' AND LOGIN = true")
        finally:
            cluster.shutdown()
        password_file = root / "reader.password"
        password_file.write_text(READER_PASSWORD + "\n")
        password_file.chmod(0o600)
        yield Secure(address, pki, password_file)
    finally:
        stop(root / "nodes", sig=9)


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "splitsource.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**os.environ, **(env or {})})


def flags(options: dict[str, str]) -> list[str]:
    return [a for k, v in options.items() for a in ("-o", f"{k}={v}")]


def files_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
        elif root.exists():
            yield from (p for p in root.rglob("*") if p.is_file())


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_select_only_role_copies_and_verifies_over_mutual_tls(secure: Secure, tmp_path: Path, engine: str) -> None:
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    result = cli("copy", "--engine", engine, "--connector", "cassandra", *flags(secure.options()), "--output",
                 str(out), "--quiet", "--summary-json", str(summary))
    assert result.returncode == 0, result.stderr
    ids = sorted(ds.dataset(str(out), format="parquet").to_table(columns=["id"])["id"].to_pylist())
    assert ids == list(range(ROWS))  # the inserted truth
    items = ds.dataset(str(out), format="parquet").to_table().to_pydict()
    assert all(item == f"item-{i}" for i, item in zip(items["id"], items["item"], strict=True))
    check = cli("verify", "--connector", "cassandra", *flags(secure.options()), "--output", str(out))
    assert check.returncode == 0 and "MATCH" in check.stdout, check.stdout + check.stderr
    # the password is in no file the copy wrote, and in nothing it printed
    leaks = [str(p) for p in files_under(out, Path(f"{out}.checkpoint"), summary)
             if READER_PASSWORD.encode() in p.read_bytes()]
    assert not leaks, f"the password is written in {leaks}"
    assert READER_PASSWORD not in result.stdout + result.stderr + check.stdout + check.stderr


@pytest.mark.spark
def test_spark_read_over_tls_and_its_plan_hide_the_password(secure: Secure, spark: Any) -> None:
    df = (spark.read.format("splitsource").option("connector", "cassandra")
          .options(**secure.options(password_file=None, password=READER_PASSWORD)).load())
    assert sorted(r.id for r in df.select("id").collect()) == list(range(ROWS))
    plans = df._jdf.queryExecution().toString() + df.schema.json()
    assert READER_PASSWORD not in plans


def test_a_wrong_password_is_one_line_exit_2_and_claims_nothing(secure: Secure, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    out = tmp_path / "out"
    result = cli("copy", "--engine", "local", "--connector", "cassandra",
                 *flags(secure.options(password_file=str(wrong))), "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"splitsource copy: Cassandra at {secure.address}:9042 refused the credentials "
                                     f"of user '{READER}' (wrong user name or password)")
    assert not out.exists() and not Path(f"{out}.checkpoint").exists()
    result = cli("copy", "--engine", "local", "--connector", "cassandra",
                 *flags(secure.options(username=None, password_file=None)), "--output", str(out))
    assert result.returncode == 2 and "requires a login: give -o username=" in result.stderr
    assert not out.exists()


def test_a_role_without_select_is_one_line_exit_2_and_claims_nothing(secure: Secure, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("copy", "--engine", "local", "--connector", "cassandra",
                 *flags(secure.options(username="nobody", password_file=None)), "--output", str(out),
                 env={"SPLITSOURCE_CASSANDRA_PASSWORD": "nobody-pw"})
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"user 'nobody' may not read {KS}.{TABLE}" in result.stderr and "GRANT SELECT" in result.stderr
    assert not out.exists() and not Path(f"{out}.checkpoint").exists()


def _schema_error(options: dict[str, str]) -> str:
    from connectors.cassandra import CassandraSource
    from splitsource import SplitSourceError

    with pytest.raises(SplitSourceError) as caught:
        CassandraSource(options).schema()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_tls_misconfigurations_each_say_what_is_wrong(secure: Secure, tmp_path: Path) -> None:
    # the server wants a client certificate
    message = _schema_error(secure.options(ssl_cert_file=None, ssl_key_file=None))
    assert "may require a client certificate (ssl_cert_file, ssl_key_file)" in message
    # a CA that did not sign the server's certificate
    other_ca, _ = make_ca(tmp_path, "other-ca")
    message = _schema_error(secure.options(ssl_ca_file=str(other_ca)))
    assert "the server's certificate was not verified by ssl_ca_file" in message
    # plain text to a TLS port
    message = _schema_error(secure.options(ssl="false", ssl_ca_file=None, ssl_cert_file=None, ssl_key_file=None))
    assert "does it require TLS (ssl=true)?" in message
    # an unreadable CA file names the option
    message = _schema_error(secure.options(ssl_ca_file=str(tmp_path / "missing.pem")))
    assert message.startswith("option 'ssl_ca_file': cannot read a PEM certificate from")


def test_ssl_without_a_ca_is_refused_at_parse_time_unless_verification_is_switched_off(secure: Secure,
                                                                                        tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("copy", "--engine", "local", "--connector", "cassandra",
                 *flags(secure.options(ssl_ca_file=None)), "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "splitsource copy: option 'ssl': TLS needs the CA that signed the servers' certificates: give "
        "ssl_ca_file=/path/ca.pem, or ssl_verify=false to encrypt without verifying the server")
    assert not out.exists()
    result = cli("copy", "--engine", "local", "--connector", "cassandra",
                 *flags(secure.options(ssl_ca_file=None, ssl_verify="false")), "--output", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "ssl_verify=false" in line]
    assert len(warnings) == 1 and "the server is not verified" in warnings[0]


class _WrongNameServer:
    """A TLS endpoint whose certificate (signed by the right CA) names another address: the one thing a real node
    cannot be made to show for one test only. It never speaks CQL: the handshake is where the check fails."""

    def __init__(self, pki: PKI) -> None:
        cert, key = pki.certificate("elsewhere", "IP:10.9.8.7")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.handshakes = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.handshakes += 1
            try:
                with self.context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass

    def close(self) -> None:
        self.listener.close()


def test_a_certificate_for_another_address_is_refused_unless_hostname_checking_is_off(secure: Secure) -> None:
    server = _WrongNameServer(secure.pki)
    try:
        options = secure.options(hosts="127.0.0.1", port=str(server.port), connect_timeout_s="3")
        message = _schema_error(options)
        assert server.handshakes >= 1  # the refusal came from a handshake, not from a closed port
        assert "the server's certificate does not name the address connected to" in message
        assert "ssl_check_hostname=false" in message
        # with the check off, the chain is still verified: the handshake passes and the fake then says nothing
        message = _schema_error({**options, "ssl_check_hostname": "false"})
        assert "does not name the address" not in message and "not verified by ssl_ca_file" not in message
    finally:
        server.close()


def test_protocol_v4_can_be_forced_on_cassandra_5(secure: Secure, tmp_path: Path) -> None:
    from connectors.cassandra import CassandraSource
    from connectors.cassandra._session import connect

    options = secure.options(protocol_version="4")
    cluster, _ = connect(CassandraSource(options).options)
    try:
        assert cluster.protocol_version == 4 and cluster.metadata.get_host(secure.address).release_version >= "5.0"
    finally:
        cluster.shutdown()
    out = tmp_path / "out"
    result = cli("copy", "--engine", "local", "--connector", "cassandra", *flags(options), "--output", str(out),
                 "--quiet")
    assert result.returncode == 0, result.stderr
    table = ds.dataset(str(out), format="parquet").to_table().to_pydict()
    assert sorted(table["id"]) == list(range(ROWS))
    assert all(item == f"item-{i}" for i, item in zip(table["id"], table["item"], strict=True))


def test_a_checkpoint_of_one_cluster_is_refused_against_another(secure: Secure, cassandra: Any,
                                                                tmp_path: Path) -> None:
    """The same keyspace and table on two clusters: a copy's checkpoint remembers which one it read."""
    with cassandra.fresh_table(KS, TABLE, "id int PRIMARY KEY, item text") as session:
        for i in range(10):
            session.execute(f"INSERT INTO {KS}.{TABLE} (id, item) VALUES (%s, %s)", (i, f"other-{i}"))
    out = tmp_path / "out"
    plain = {"hosts": cassandra.hosts, "port": str(cassandra.port), "keyspace": KS, "table": TABLE}
    first = cli("copy", "--engine", "local", "--connector", "cassandra", *flags(plain), "--output", str(out),
                "--quiet")
    assert first.returncode == 0, first.stderr
    identity_file = next(Path(f"{out}.checkpoint").rglob("splitsource-copy.json"))
    assert '"cluster": "splitsource-tests"' in identity_file.read_text()
    other = cli("copy", "--engine", "local", "--connector", "cassandra", *flags(secure.options()), "--output",
                str(out), "--quiet")
    assert other.returncode == 1
    assert other.stderr.strip().splitlines() == [
        f"splitsource copy: checkpoint {out}.checkpoint was made reading cluster 'splitsource-tests', and this copy "
        "reads cluster 'locked-down': resuming would mix two sources in one output; point the copy at the cluster it "
        "started from, or use another --checkpoint and --output"]
    assert sorted(ds.dataset(str(out), format="parquet").to_table()["id"].to_pylist()) == list(range(10))
