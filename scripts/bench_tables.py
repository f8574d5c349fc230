#!/usr/bin/env python3
"""Write the "Recorded results" of docs/benchmarks.md from bench/results/*.json: for each result file, the command
that produced it, the commit, date and machine it measured, and its figures as a table; a figure measured before
the code it measures last changed (or recorded without its commit) is marked stale.

    python scripts/bench_tables.py          # rewrite the section
    python scripts/bench_tables.py --check  # exit 1 if a table or command differs from its file (tests run this)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- recorded results: scripts/bench_tables.py writes what follows -->", "<!-- /recorded results -->"
MEASURED = ("splitsource", "connectors", "serializers", "pyspark_splitsource", "pyspark_bucketing")
STATUS = "Status: "  # the line that depends on the history, not on the file: --check leaves it out


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def _script(command: str) -> str | None:
    return next((word for word in command.split() if word.startswith("bench/") and word.endswith(".py")), None)


def status(data: dict[str, Any]) -> str:
    commit = data.get("commit")
    if not commit:
        return "**stale**: recorded without its commit, so which code it measured is unknown"
    script = _script(str(data.get("command", "")))
    paths = [*MEASURED, *([script] if script else [])]
    changed = _git("rev-list", "--count", f"{commit}..HEAD", "--", *paths)
    if not changed.isdigit():
        return f"**stale**: commit {commit[:10]} is not in this clone's history"
    if changed != "0":
        return f"**stale**: {changed} commits since {commit[:10]} changed the code it measures"
    return f"current: nothing it measures changed since {commit[:10]}"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def _table(results: dict[str, Any]) -> list[str]:
    rows = {name: r for name, r in results.items() if isinstance(r, dict)}
    columns: list[str] = []
    for r in rows.values():
        columns += [k for k, v in r.items() if k not in columns and not isinstance(v, (dict, list))]
    if not rows or not columns:
        return []
    lines = ["| | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |" for name, r in rows.items()]
    return lines


def section(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    machine = data.get("machine") or {}
    where = (f"{data.get('date', '?')}, {machine.get('cores', data.get('cores', '?'))} cores, Python "
             f"{machine.get('python', '?')}" if data.get("date") else "date and machine not recorded")
    lines = [f"### {path.stem}", "", f"`{data.get('command', '(command not recorded)')}` "
             f"(`bench/results/{path.name}`; {where})", "", STATUS + status(data), ""]
    table = _table(data["results"]) if isinstance(data.get("results"), dict) else []
    if table:
        lines += [*table, ""]
    else:
        figures = {k: v for k, v in data.items() if k not in ("commit", "date", "machine", "command")}
        lines += ["```json", json.dumps(figures, indent=1, sort_keys=True)[:1500], "```", ""]
    return lines


def render() -> str:
    out = [BEGIN, ""]
    for path in sorted(RESULTS.glob("*.json")):
        out += section(path)
    return "\n".join([*out, END])


def _without_status(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(STATUS)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from bench/results/")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    if BEGIN not in page or END not in page:
        print(f"bench_tables.py: {PAGE.relative_to(ROOT)} has no recorded-results markers", file=sys.stderr)
        return 1
    before, rest = page.split(BEGIN, 1)
    current, after = rest.split(END, 1)
    wanted = render()
    if args.check:
        if _without_status(BEGIN + current + END) != _without_status(wanted):
            print(f"bench_tables.py: the recorded results in {PAGE.relative_to(ROOT)} differ from bench/results/: "
                  "run python scripts/bench_tables.py", file=sys.stderr)
            return 1
        print(f"{len(list(RESULTS.glob('*.json')))} result files checked")
        return 0
    PAGE.write_text(before + wanted + after)
    stale = wanted.count("**stale**")
    print(f"{len(list(RESULTS.glob('*.json')))} result files written ({stale} stale)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
