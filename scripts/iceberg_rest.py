#!/usr/bin/env python3
"""A local Apache Iceberg REST catalog for trying and testing ``--table-format iceberg`` against a real catalog
server: Iceberg's own REST catalog fixture (``RESTCatalogServer``, the server of the apache/iceberg-rest-fixture
image, Apache-2.0), its jars fetched once from Maven Central into the cache, run on a loopback port with a SQLite
JDBC catalog and a warehouse under ``--dir``.

    python scripts/iceberg_rest.py install                      # fetch the jars (about 80 MB, once)
    python scripts/iceberg_rest.py start [--dir D] [--port 18181]
    python scripts/iceberg_rest.py stop [--dir D]

``start`` prints the catalog's URI (the value of the ``iceberg_catalog`` sink option); it reuses a server that
runs under ``--dir`` and deletes nothing; ``stop`` stops it by its PID.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # scripts/ holds cassandra.py, which would shadow the driver: the repository first
    sys.path[0] = str(ROOT)

from scripts.cassandra import java_binary, port_open  # noqa: E402
from scripts.s3server import pid_of, stop_by_pid_file  # noqa: E402

VERSION = "1.10.0"
CACHE = Path(os.environ.get("SPLITSOURCE_CACHE", Path.home() / ".cache" / "splitsource"))
JARS = CACHE / f"iceberg-rest-{VERSION}-loopback"
DEFAULT_DIR = Path(tempfile.gettempdir()) / "splitsource-iceberg-rest"
MAIN = "org.apache.iceberg.rest.LoopbackRESTCatalogServer"  # scripts/iceberg-rest/: the fixture on one address


def install() -> Path:
    """The server's jars, fetched once with Maven from scripts/iceberg-rest/pom.xml."""
    if (JARS / ".complete").exists():
        return JARS
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("iceberg_rest.py: Maven (mvn) is needed to fetch the REST catalog from Maven Central")
    partial = JARS.with_name(JARS.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    done = subprocess.run([mvn, "-q", "-B", "-f", str(ROOT / "scripts" / "iceberg-rest" / "pom.xml"),
                           f"-Diceberg.version={VERSION}", "dependency:copy-dependencies",
                           f"-DoutputDirectory={partial}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"iceberg_rest.py: fetching the jars failed:\n{(done.stdout + done.stderr)[-3000:]}")
    source = ROOT / "scripts" / "iceberg-rest" / "LoopbackRESTCatalogServer.java"
    javac = Path(java_binary()).with_name("javac")
    done = subprocess.run([str(javac), "-cp", f"{partial}/*", "-d", str(partial / "classes"), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"iceberg_rest.py: compiling {source.name} failed:\n{done.stderr[-3000:]}")
    shutil.rmtree(JARS, ignore_errors=True)
    partial.rename(JARS)
    (JARS / ".complete").touch()
    return JARS


def uri(address: str, port: int) -> str:
    return f"http://{address}:{port}"


def _answers(address: str, port: int) -> bool:
    if not port_open(address, port, 0.5):
        return False
    try:
        with urllib.request.urlopen(f"{uri(address, port)}/v1/config", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _pid(root: Path) -> int | None:
    return pid_of(root / "rest.pid")


def start(root: Path = DEFAULT_DIR, address: str = "127.0.0.1", port: int = 18181, timeout: float = 120.0) -> str:
    """Start the catalog under ``root`` on ``address:port`` unless it runs there already; its URI once it answers."""
    if _pid(root) is None:
        if port_open(address, port):
            raise SystemExit(f"iceberg_rest.py: something else answers on {address}:{port}: use another --port")
        jars = install()
        (root / "warehouse").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CATALOG_WAREHOUSE": f"file://{root / 'warehouse'}",
               "CATALOG_URI": f"jdbc:sqlite:file:{root / 'catalog.db'}", "CATALOG_JDBC_USER": "splitsource",
               "CATALOG_JDBC_PASSWORD": "splitsource", "ADDRESS": address, "PORT": str(port)}
        command = [java_binary(), "-cp", f"{jars}/classes:{jars}/*", MAIN]  # Java 17, as for Cassandra 5.0
        with open(root / "rest.log", "ab") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        (root / "rest.pid").write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while not _answers(address, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(root)
                tail = (root / "rest.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"iceberg_rest.py: the REST catalog did not answer on {address}:{port}:\n{tail}")
            time.sleep(0.3)
    return uri(address, port)


def stop(root: Path = DEFAULT_DIR, timeout: float = 30.0) -> None:
    stop_by_pid_file(root / "rest.pid", timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="fetch the server's jars into the cache")
    for name in ("start", "stop"):
        p = sub.add_parser(name)
        p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"the server's files (default {DEFAULT_DIR})")
        if name == "start":
            p.add_argument("--port", type=int, default=18181)
    args = parser.parse_args(argv)
    if args.command == "install":
        print(install())
    elif args.command == "start":
        print(start(args.dir, port=args.port))
    else:
        stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
