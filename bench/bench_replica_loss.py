"""What losing a replica costs a copy: the same throttled copy with every node up and with one node SIGKILLed in the
middle, both engines, in one run; exits 1 when the loss costs more than ``--bound`` seconds.

    .venv/bin/python bench/bench_replica_loss.py --rows 100000 --repeat 1

It starts its own three-node ring (127.0.0.91-93, replication factor 3, four tokens a node) under a temporary
directory, loads ``--rows`` rows of 200 bytes, and copies them at 10,000 rows/s (about 10 s of reading, as the
issue measured), killing node 53 five seconds after the copy started; the node is started again before the next
copy. The result goes to bench/results/replica_loss.json with the commit, machine and date it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIRST, NODES, RATE, KILL_AFTER_S = 91, 3, 10_000, 5.0  # 127.0.0.91-93: apart from the tests' nodes
HOSTS = ",".join(f"127.0.0.{i}" for i in range(FIRST, FIRST + NODES))


from bench._measure import record  # noqa: E402


def load(rows: int, hosts: str = HOSTS) -> None:
    """``rows`` rows of 200 random bytes into rf3.t (replication factor 3) on the ring of ``hosts``."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import Cluster
    from cassandra.concurrent import execute_concurrent_with_args

    cluster = Cluster(hosts.split(","))
    try:
        session = cluster.connect()
        deadline = time.monotonic() + 120
        while len(list(session.execute("SELECT peer FROM system.peers"))) < len(hosts.split(",")) - 1:
            if time.monotonic() > deadline:
                raise SystemExit("bench: the ring's nodes never all joined")
            time.sleep(0.2)
        session.execute("CREATE KEYSPACE rf3 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}")
        # a ring just started: the next statement may reach a node the keyspace has not reached yet (it failed
        # once with "Keyspace 'rf3' doesn't exist"); poll until every node knows it
        from cassandra import InvalidRequest

        while True:
            cluster.control_connection.wait_for_schema_agreement(wait_time=30)
            try:
                session.execute("CREATE TABLE IF NOT EXISTS rf3.t (id bigint PRIMARY KEY, payload blob)")
                break
            except InvalidRequest:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        cluster.control_connection.wait_for_schema_agreement(wait_time=30)
        insert = session.prepare("INSERT INTO rf3.t (id, payload) VALUES (?, ?)")
        insert.consistency_level = ConsistencyLevel.ALL
        execute_concurrent_with_args(session, insert, [(i, os.urandom(200)) for i in range(rows)], concurrency=128,
                                     raise_on_first_error=True)
    finally:
        cluster.shutdown()


def copy(engine: str, out: Path, kill: Path | None) -> tuple[float, dict[str, object]]:
    from scripts.cassandra import Node, running_pid

    command = [sys.executable, "-m", "splitsource.cli", "copy", "--engine", engine, "--connector", "cassandra",
               "-o", f"hosts={HOSTS}", "-o", "keyspace=rf3", "-o", "table=t", "-o", "splits=16",
               "--max-rows-per-second", str(RATE), "--output", str(out), "--quiet",
               "--summary-json", f"{out}.json"]
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill is not None:
        while time.monotonic() - started < KILL_AFTER_S and proc.poll() is None:
            time.sleep(0.05)
        pid = running_pid(Node(FIRST + NODES - 1, kill))
        if pid is None or proc.poll() is not None:
            raise SystemExit("bench: the copy ended, or the node was down, before the kill")
        os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=600)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"bench: the {engine} copy failed: {stderr[-2000:]}")
    summary = json.loads(Path(f"{out}.json").read_text())
    if summary["total_rows"] != summary["rows"]:
        raise SystemExit(f"bench: the copy is not whole: {summary}")
    return seconds, summary


def main() -> int:
    from scripts.cassandra import Settings, restart_node, start, stop

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--bound", type=float, default=5.0, help="seconds a lost replica may cost (default 5)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-replica-loss-"))
    nodes = work / "nodes"
    times: dict[str, list[float]] = {}
    events: dict[str, list[object]] = {}
    try:
        start(nodes, nodes=NODES, num_tokens=4, heap_mb=768, first=FIRST, cluster_name="bench-replicas")
        load(args.rows)
        for round_ in range(args.repeat):
            for engine in ("local", "spark"):
                for mode in ("every node up", "a node lost"):
                    out = work / f"{engine}-{round_}-{mode.replace(' ', '-')}"
                    seconds, summary = copy(engine, out, nodes if mode == "a node lost" else None)
                    times.setdefault(f"{engine}, {mode}", []).append(seconds)
                    events.setdefault(f"{engine}, {mode}", []).append(summary.get("events", {}))
                    shutil.rmtree(out, ignore_errors=True)
                    shutil.rmtree(f"{out}.checkpoint", ignore_errors=True)
                    shutil.rmtree(f"{out}.bucketing", ignore_errors=True)  # the output's records
                    if mode == "a node lost":
                        restart_node(nodes, FIRST + NODES - 1, NODES, num_tokens=4, heap_mb=768, first=FIRST,
                                     cluster_name="bench-replicas", settings=Settings())
    finally:
        stop(nodes, sig=signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.rows:,} rows of 200 bytes at {RATE:,} rows/s, node {FIRST + NODES - 1} SIGKILLed "
          f"{KILL_AFTER_S:g} s in")
    print(f"{'copy':<32} {'median s':>9}  runs; events")
    for key, value in medians.items():
        print(f"{key:<32} {value:>9.2f}  {', '.join(f'{t:.2f}' for t in times[key])}; {events[key]}")
    costs = {engine: medians[f"{engine}, a node lost"] - medians[f"{engine}, every node up"]
             for engine in ("local", "spark")}
    for engine, cost in costs.items():
        print(f"{engine}: the lost node cost {cost:+.2f} s (bound {args.bound:g} s)")
    record("replica_loss", f"bench/bench_replica_loss.py --rows {args.rows} --repeat {args.repeat}",
           rows=args.rows, rate=RATE, seconds=times, median_s=medians, cost_s=costs, events=events)
    return 0 if all(cost <= args.bound for cost in costs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
