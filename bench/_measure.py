"""Run a command as a child process and report its wall time and the peak memory of its whole process tree.

Before the first command, the project's modules are compiled to bytecode, as installing its wheel does: in a
checkout where ``PYTHONDONTWRITEBYTECODE`` is set (the machines these figures come from set it) every process of a
copy would compile them again from source, 0.15 s of CPU each, which no installed copy pays and the peers,
installed, never do.
"""

from __future__ import annotations

import compileall
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_mb: float
    returncode: int
    output: str


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _tree_rss_kb(root: int) -> int:
    tree, total, todo = _children(), 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("splitsource", "connectors", "serializers", "pyspark_splitsource", "pyspark_bucketing")
_compiled: list[bool] = []


def run(command: list[str], timeout: float = 1800, env: dict[str, str] | None = None) -> Measured:
    """Run ``command``; sample the RSS of it and all its descendants every 0.2 s; return time and peak."""
    if not _compiled:
        for package in PACKAGES:
            compileall.compile_dir(str(ROOT / package), quiet=1)
        _compiled.append(True)
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
    stop.set()
    sampler.join()
    return Measured(time.perf_counter() - started, peak / 1024, proc.returncode, output)


def record(name: str, command: str, **fields: object) -> Path:
    """Write ``fields`` to bench/results/<name>.json with where they come from: the command, the commit measured,
    the machine and the date (a table in docs/benchmarks.md names its result file)."""
    import json
    import platform
    import subprocess
    import time

    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=root).stdout.strip()
    result = {"commit": commit, "date": time.strftime("%Y-%m-%d"),
              "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()},
              "command": command, **fields}
    path = root / "bench" / "results" / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def record_run(name: str, fields: dict[str, object], env: tuple[str, ...] = ()) -> Path:
    """:func:`record` with the command this process was started with (and the named environment variables that
    change what it measures, as a prefix)."""
    import shlex
    import sys

    prefix = "".join(f"{k}={shlex.quote(os.environ[k])} " for k in env if k in os.environ)
    command = f"{prefix}.venv/bin/python bench/{Path(sys.argv[0]).name} {shlex.join(sys.argv[1:])}".rstrip()
    path = record(name, command, **{k: v for k, v in fields.items() if k != "command"})
    print(f"wrote {path.relative_to(path.parents[2])}")
    return path
