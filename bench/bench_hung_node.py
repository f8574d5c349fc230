"""What a hung Cassandra node costs a copy: a node that takes connections and never answers (a machine that lost
power behind a firewall that drops packets), with this tree beside an earlier commit (``--before``).

    .venv/bin/python bench/bench_hung_node.py --before d5633a3 --repeat 1

It starts its own three-node ring (127.0.0.94-96, replication factor 3) under a temporary directory, loads
``--rows`` rows of 200 bytes, and copies them with both engines (16 splits, ``connect_timeout_s=2``): with every
node up, then with node 96 stopped and its CQL port taken by a socket that accepts and never answers. Each copy runs
from this tree and from a git worktree of ``--before`` (d5633a3: readers shared a session, the schema and the plan
opened their own; 14dc81e: nothing shared), so both builds meet the same ring. The hung node's cost is each build's
time with it less its time without it. The result goes to bench/results/hung_node.json with the commit, machine and
date it measured.
"""

from __future__ import annotations

import argparse
import json
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

from bench._measure import record  # noqa: E402
from bench.bench_replica_loss import load  # noqa: E402
from tests.connectors.cassandra.hung_port import HungPort  # noqa: E402

FIRST, NODES, SPLITS, CONNECT_TIMEOUT_S = 94, 3, 16, 2
HOSTS = ",".join(f"127.0.0.{i}" for i in range(FIRST, FIRST + NODES))
HUNG = f"127.0.0.{FIRST + NODES - 1}"


def copy(tree: Path, engine: str, out: Path) -> float:
    command = [sys.executable, "-m", "splitsource.cli", "copy", "--engine", engine, "--connector", "cassandra",
               "-o", f"hosts={HOSTS}", "-o", "keyspace=rf3", "-o", "table=t", "-o", f"splits={SPLITS}",
               "-o", f"connect_timeout_s={CONNECT_TIMEOUT_S}", "--output", str(out), "--quiet"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=900,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "PYSPARK_PYTHON": sys.executable,
                               "HOME": str(Path.home())})
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"bench: the {engine} copy from {tree} failed: {done.stderr[-2000:]}")
    for path in (out, Path(f"{out}.checkpoint"), Path(f"{out}.bucketing")):
        shutil.rmtree(path, ignore_errors=True)
    return seconds


def main() -> int:
    from scripts.cassandra import Node, running_pid, start, stop

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit to compare with (a git revision)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hung-node-"))
    nodes, before = work / "nodes", work / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                   capture_output=True)
    builds = {"before": before, "after": ROOT}
    times: dict[str, list[float]] = {}
    hung: HungPort | None = None
    try:
        start(nodes, nodes=NODES, num_tokens=4, heap_mb=768, first=FIRST, cluster_name="bench-hung")
        load(args.rows, HOSTS)
        for mode in ("every node up", "a node hung"):
            if mode == "a node hung":
                pid = running_pid(Node(FIRST + NODES - 1, nodes))
                assert pid is not None, "bench: the node to hang is not running"
                subprocess.run(["kill", "-KILL", str(pid)], check=True)
                deadline = time.monotonic() + 60
                while True:  # its port is free once the process is gone
                    try:
                        hung = HungPort(HUNG, hold_s=None)
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
            for round_ in range(args.repeat):
                for engine in ("local", "spark"):
                    for build, tree in builds.items():
                        key = f"{build}, {engine}, {mode}"
                        times.setdefault(key, []).append(copy(tree, engine, work / f"out-{round_}"))
                        print(f"{key:<40} {times[key][-1]:6.2f} s", flush=True)
    finally:
        if hung is not None:
            hung.close()
        stop(nodes, sig=signal.SIGKILL)
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    costs = {f"{build}, {engine}": round(medians[f"{build}, {engine}, a node hung"]
                                         - medians[f"{build}, {engine}, every node up"], 2)
             for build in builds for engine in ("local", "spark")}
    print(json.dumps({"median_s": medians, "hung_node_cost_s": costs}, indent=2))
    record("hung_node", f"bench/bench_hung_node.py --before {args.before} --rows {args.rows} --repeat {args.repeat}",
           rows=args.rows, splits=SPLITS, connect_timeout_s=CONNECT_TIMEOUT_S, before=args.before, seconds=times,
           median_s=medians, hung_node_cost_s=costs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
