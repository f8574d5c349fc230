#!/usr/bin/env python3
"""A local S3-compatible server for trying and testing copies to object storage: SeaweedFS (Apache-2.0), built once
from the Go module proxy into the cache, run as ``weed mini`` on a loopback address with its own credentials.

    python scripts/s3server.py install                     # build weed into ~/.cache/splitsource (about 5 minutes)
    python scripts/s3server.py start [--dir D] [--port 18333] [--bucket lake]
    python scripts/s3server.py stop [--dir D]
    python scripts/s3server.py spark-jars                  # hadoop-aws and the AWS SDK for Spark's s3a://

``spark-jars`` fetches (once, from Maven Central) what Spark needs to read ``s3a://`` and prints it as a value of
``spark.jars``; ``spark_s3a_conf`` gives the settings that point s3a at the server.

``start`` prints the environment a client needs (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL,
AWS_REGION, AWS_ALLOW_HTTP). It reuses a server that runs under ``--dir`` and deletes nothing; ``stop`` stops it
by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # scripts/ holds cassandra.py, which would shadow the driver: the repository first
    sys.path[0] = str(ROOT)

from scripts.cassandra import port_open  # noqa: E402
from scripts.spark_tables import settle_jars  # noqa: E402

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"  # the module proxy serves this pseudo-version of SeaweedFS 4.x
REPLACE = "github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0"  # SeaweedFS's own go.mod has it
CACHE = Path(os.environ.get("SPLITSOURCE_CACHE", Path.home() / ".cache" / "splitsource"))
BINARY = CACHE / f"seaweedfs-{VERSION.split('-')[1]}" / "weed"
DEFAULT_DIR = Path(tempfile.gettempdir()) / "splitsource-s3"
ACCESS_KEY, SECRET_KEY, REGION = "splitsource", "splitsource-secret", "us-east-1"


def install() -> Path:
    """Build ``weed`` once (a throwaway module that requires SeaweedFS at VERSION) and keep it in the cache."""
    if BINARY.exists():
        return BINARY
    if shutil.which("go") is None:
        raise SystemExit("s3server.py: Go is needed to build SeaweedFS (https://go.dev/dl/)")
    with tempfile.TemporaryDirectory(prefix="splitsource-weed-") as work:
        (Path(work) / "go.mod").write_text(f"module splitsource.local/weed\n\ngo 1.26\n\nreplace {REPLACE}\n")
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        for command in (["go", "get", f"{MODULE}/weed@{VERSION}"],
                        ["go", "build", "-o", str(Path(work) / "weed"), f"{MODULE}/weed"]):
            print(f"s3server.py: {' '.join(command)}", file=sys.stderr, flush=True)
            done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"s3server.py: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
        BINARY.parent.mkdir(parents=True, exist_ok=True)
        tmp = BINARY.with_suffix(".tmp")
        shutil.copy(Path(work) / "weed", tmp)
        tmp.replace(BINARY)
    return BINARY


def environment(address: str, port: int) -> dict[str, str]:
    """What a client sets to reach the server (the standard AWS variables; AWS_ALLOW_HTTP lets the Rust
    object_store clients, Polars' among them, speak plain HTTP to a loopback endpoint)."""
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL": f"http://{address}:{port}", "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}


def pid_of(pid_file: Path) -> int | None:
    """The PID ``pid_file`` names, if that process runs."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def stop_by_pid_file(pid_file: Path, timeout: float = 30.0) -> None:
    """Stop the process group ``pid_file`` names (SIGTERM, then SIGKILL after ``timeout``); forget the file."""
    pid = pid_of(pid_file)
    if pid is None:
        return
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_of(pid_file) is not None and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        except ChildProcessError:
            pass
        time.sleep(0.2)
    if pid_of(pid_file) is not None:
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def _pid(root: Path) -> int | None:
    return pid_of(root / "weed.pid")


def start(root: Path = DEFAULT_DIR, address: str = "127.0.0.1", port: int = 18333, bucket: str = "lake",
          timeout: float = 120.0) -> dict[str, str]:
    """Start ``weed mini`` under ``root`` (S3 on ``address:port``, its other services on the ports after it) unless
    one runs there already; wait until the bucket answers; the client environment."""
    if _pid(root) is None:
        if port_open(address, port):
            raise SystemExit(f"s3server.py: something else answers on {address}:{port}: use another --port")
        binary = install()
        (root / "data").mkdir(parents=True, exist_ok=True)
        config = root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "splitsource", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        ports = {"s3.port": port, "master.port": port + 1, "volume.port": port + 2, "filer.port": port + 3,
                 "webdav.port": port + 4, "admin.port": port + 5, "admin.port.legacy": 0, "s3.port.iceberg": 0,
                 "s3.port.lance": 0}
        command = [str(binary), "mini", f"-dir={root / 'data'}", f"-ip={address}", f"-ip.bind={address}",
                   f"-bucket={bucket}", f"-s3.config={config}", "-master.telemetry=false", "-admin.ui=false",
                   "-webdav=false", *(f"-{k}={v}" for k, v in ports.items())]
        with open(root / "weed.log", "ab") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (root / "weed.pid").write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while not _bucket_answers(address, port, bucket):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(root)
                tail = (root / "weed.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"s3server.py: SeaweedFS did not serve {bucket} on {address}:{port}:\n{tail}")
            time.sleep(0.3)
    return environment(address, port)


def _bucket_answers(address: str, port: int, bucket: str) -> bool:
    if not port_open(address, port):
        return False
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, endpoint_override=f"{address}:{port}",
                           scheme="http", region=REGION, connect_timeout=1, request_timeout=2)
    try:
        return fs.get_file_info(bucket).type == pafs.FileType.Directory
    except OSError:
        return False


def stop(root: Path = DEFAULT_DIR, timeout: float = 30.0) -> None:
    stop_by_pid_file(root / "weed.pid", timeout)


def spark_jars() -> list[Path]:
    """hadoop-aws of the Hadoop inside pyspark, with the AWS SDK version that Hadoop was built with (its
    hadoop-project pom says), less the jars Spark ships itself; fetched once into the cache."""
    import pyspark

    spark_jars_dir = Path(pyspark.__file__).parent / "jars"
    shipped = sorted(spark_jars_dir.glob("hadoop-client-api-*.jar"))
    if not shipped:
        raise SystemExit(f"s3server.py: no hadoop-client-api jar in {spark_jars_dir}")
    hadoop = shipped[0].stem.rsplit("-", 1)[1]
    target = CACHE / f"spark-s3a-{hadoop}"
    if not (target / ".complete").exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SystemExit("s3server.py: Maven (mvn) is needed to fetch hadoop-aws from Maven Central")
        # the local repository named, not left to Maven: Maven finds the home directory from the user database,
        # not $HOME, and this reads the pom from where it put it
        repository = Path.home() / ".m2" / "repository"
        subprocess.run([mvn, "-q", "-B", f"-Dmaven.repo.local={repository}", "dependency:get",
                        f"-Dartifact=org.apache.hadoop:hadoop-project:{hadoop}:pom", "-Dtransitive=false"],
                       check=True, stdout=sys.stderr)
        pom = repository / "org" / "apache" / "hadoop" / "hadoop-project" / hadoop / f"hadoop-project-{hadoop}.pom"
        sdk = re.search(r"<aws-java-sdk-v2.version>([^<]+)<", pom.read_text())
        if sdk is None:
            raise SystemExit(f"s3server.py: {pom} names no AWS SDK version")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run([mvn, "-q", "-B", "-f", str(ROOT / "scripts" / "s3a" / "pom.xml"), f"-Dhadoop.version={hadoop}",
                        f"-Dsdk.version={sdk.group(1)}", "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
                        "-DincludeScope=runtime"], check=True, stdout=sys.stderr)
        settle_jars(partial, target, spark_jars_dir)
    return sorted(target.glob("*.jar"))


def spark_s3a_conf(env: dict[str, str]) -> dict[str, str]:
    """Spark settings that point s3a:// at the server whose environment ``env`` is (what ``start`` prints)."""
    return {"spark.jars": ",".join(str(p) for p in spark_jars()),
            "spark.hadoop.fs.s3a.endpoint": env["AWS_ENDPOINT_URL"],
            "spark.hadoop.fs.s3a.endpoint.region": env["AWS_REGION"],
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": env["AWS_ACCESS_KEY_ID"],
            "spark.hadoop.fs.s3a.secret.key": env["AWS_SECRET_ACCESS_KEY"]}


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"data and log (default {DEFAULT_DIR})")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="build weed into the cache (Go and the module proxy)")
    p_start = sub.add_parser("start", parents=[common], help="start (or reuse) the server; print its environment")
    p_start.add_argument("--address", default="127.0.0.1")
    p_start.add_argument("--port", type=int, default=18333, help="S3 port (the next five are its other services)")
    p_start.add_argument("--bucket", default="lake")
    sub.add_parser("stop", parents=[common], help="stop the server under --dir")
    sub.add_parser("spark-jars", help="fetch hadoop-aws and the AWS SDK for Spark's s3a://; print them for spark.jars")
    args = parser.parse_args(argv)
    if args.command == "install":
        print(install())
    elif args.command == "start":
        for key, value in start(args.dir.resolve(), args.address, args.port, args.bucket).items():
            print(f"export {key}={value}")
    elif args.command == "spark-jars":
        print(",".join(str(p) for p in spark_jars()))
    else:
        stop(args.dir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
