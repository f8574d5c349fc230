"""Docs as tests: every fenced ``bash``, ``python`` and ``sql`` block of README.md and docs/ runs, one test per
block, in page order (``python -m pytest README.md docs``).

Why Sybil: it collects each block of a Markdown page as its own pytest item, in order, with one namespace per page
and the suite's session fixtures (the tests' own Cassandra node), and it takes a parser of our own, so the rules
below are ours in a few lines; pytest-codeblocks runs blocks alone, with no fixture and no page-wide session.

How a page runs, as a user would run it from the root of a clone with the virtualenv active:

- **bash** blocks run with ``bash -euo pipefail`` in a scratch directory of the page's own, which holds the
  clone's ``.venv``, ``scripts`` and ``bench`` (links), so relative outputs land in the scratch directory; the
  virtualenv is on ``PATH`` as if activated.
- **python** blocks run one after the other in one interpreter per page (tests/docs_kernel.py), in that directory;
  **sql** blocks run in the same interpreter through its ``spark`` session, each result shown.
- Cassandra: ``SPLITSOURCE_CASSANDRA_HOSTS`` names the suite's own node, which the Cassandra connector and
  scripts/demo.py take in place of the default 127.0.0.1 (the demo's node, on a user's machine).
- A block followed by an ``output`` block (only blank lines between) must print those lines: each shown line
  matches one printed line, in order (printed lines between them are allowed); ``...`` in a shown line matches any
  text, which is how a page marks timings and counts as variable.
- A bash block that fails (or times out) before its own ``python scripts/<server>.py stop ...`` lines has those
  lines run after it, so that a failed page leaves no server behind on its port.
- A block right after the comment ``<!-- not run: <what it needs> -->`` is not run; the runner counts and prints
  them, and tests/test_docs.py keeps them to a handful, each with its reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
RUN = ("bash", "python", "sql")
LINKED = (".venv", "scripts", "bench")  # what a page's commands may use of the clone, besides the installed package
FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*\Z", re.DOTALL)
BLOCK_TIMEOUT_S = 900
# a block's own lines that stop a server it started (scripts/postgres.py, s3server.py, iceberg_rest.py, ...): run
# again when the block fails before them, so a failed page leaves no server on its port for the next run
STOP_LINE = re.compile(r"^[ \t]*python scripts/\w+\.py stop\b.*$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    language: str
    source: str
    line: int
    expected: str | None  # the output block that follows it, if any


@dataclass(frozen=True)
class NotRun:
    path: str
    line: int
    reason: str


def blocks(text: str) -> tuple[list[tuple[int, int, Block]], list[tuple[int, str]]]:
    """The runnable blocks of a page (start, end, block) and the not-run ones (line, reason)."""
    found = list(FENCE.finditer(text))
    run, skipped = [], []
    for i, m in enumerate(found):
        language = m.group(1)
        if language not in RUN:
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[found[i - 1].end() if i else 0:m.start()]
        marker = NOT_RUN.search(before)
        if marker:
            skipped.append((line, marker.group(1)))
            continue
        expected = None
        if i + 1 < len(found) and found[i + 1].group(1) == "output" and not text[m.end():found[i + 1].start()].strip():
            expected = found[i + 1].group(2)
        run.append((m.start(), m.end(), Block(language, m.group(2), line, expected)))
    return run, skipped


def unmatched(expected: str, printed: str) -> str | None:
    """The first shown line that no printed line matches in order (``...`` matches any text), or None."""
    lines = printed.splitlines()
    at = 0
    for want in (w.rstrip() for w in expected.splitlines()):
        if not want.strip():
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.strip().split("...")))
        while at < len(lines) and not pattern.fullmatch(lines[at].strip()):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


@dataclass
class Page:
    """One page's scratch directory, environment and Python session."""

    scratch: Path
    env: dict[str, str]
    kernel: subprocess.Popen[bytes] | None = None
    control: IO[str] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.scratch.parent / f"{self.scratch.name}.python.log"

    def bash(self, source: str) -> tuple[bool, str]:
        ok, printed = False, ""
        try:
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", source], cwd=self.scratch, env=self.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT_S)
            ok, printed = result.returncode == 0, result.stdout.decode(errors="replace")
        finally:
            for stop in [] if ok else STOP_LINE.findall(source):  # what it started, stopped all the same
                subprocess.run(["bash", "-c", stop], cwd=self.scratch, env=self.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=120, check=False)
        return ok, printed

    def python(self, kind: str, source: str) -> tuple[bool, str]:
        if self.kernel is None:
            read, write = os.pipe()
            with open(self.log, "ab") as out:
                self.kernel = subprocess.Popen(
                    [str(ROOT / ".venv" / "bin" / "python"), "-u", str(ROOT / "tests" / "docs_kernel.py"),
                     str(write)], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=self.scratch,
                    env=self.env, pass_fds=(write,), start_new_session=True)
            os.close(write)
            self.control = os.fdopen(read)
        assert self.kernel.stdin is not None and self.control is not None
        start = self.log.stat().st_size
        data = source.encode()
        self.kernel.stdin.write(f"{kind} {len(data)}\n".encode() + data)
        self.kernel.stdin.flush()
        status = self.control.readline().strip()
        with open(self.log, "rb") as log:
            log.seek(start)
            printed = log.read().decode(errors="replace")
        if not status:
            return False, printed + "\n(the page's Python session ended)"
        return status == "ok", printed

    def close(self) -> None:
        if self.kernel is not None:
            assert self.kernel.stdin is not None
            self.kernel.stdin.close()
            try:
                self.kernel.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.kernel.pid, 9)
                self.kernel.wait()
            if self.control is not None:
                self.control.close()


def page_env(hosts: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONHOME")}
    venv = ROOT / ".venv"
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["SPLITSOURCE_CASSANDRA_HOSTS"] = hosts
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def new_page(path: Path, tmp_path_factory: Any, hosts: str) -> Page:
    from tests.fixtures import await_setup

    await_setup("s3", "extras")  # a page's commands may use any of what scripts/test.sh sets up
    scratch = tmp_path_factory.mktemp(f"docs-{path.stem}")
    for name in LINKED:
        (scratch / name).symlink_to(ROOT / name)
    return Page(scratch, page_env(hosts))


class BlockFailed(Exception):
    pass


def evaluate(example: Any) -> None:
    block: Block = example.parsed
    namespace = example.namespace
    page: Page = namespace.get("_page") or namespace.setdefault(
        "_page", new_page(Path(example.path), namespace["tmp_path_factory"], namespace["cassandra"].hosts))
    ok, printed = page.bash(block.source) if block.language == "bash" else page.python(block.language, block.source)
    where = f"{Path(example.path).name}:{block.line}"
    if not ok:
        raise BlockFailed(f"the {block.language} block at {where} failed:\n{block.source}\n--- it printed:\n"
                          f"{printed[-6000:]}")
    if block.expected is not None and (line := unmatched(block.expected, printed)) is not None:
        raise BlockFailed(f"the {block.language} block at {where} did not print the page's line {line!r}; "
                          f"it printed:\n{printed[-6000:]}")


NOT_RUN_SEEN: list[NotRun] = []


def parse(document: Any) -> Any:
    from sybil import Region

    run, skipped = blocks(document.text)
    NOT_RUN_SEEN.extend(NotRun(str(Path(document.path).relative_to(ROOT)), line, reason) for line, reason in skipped)
    for start, end, block in run:
        yield Region(start, end, block, evaluate)


def teardown(namespace: dict[str, Any]) -> None:
    page = namespace.get("_page")
    if page is not None:
        page.close()


def sybil_collector() -> Any:
    from sybil import Sybil

    return Sybil(parsers=[parse], path=str(ROOT), patterns=["README.md", "docs/*.md"],
                 fixtures=["cassandra", "tmp_path_factory"],
                 teardown=teardown).pytest()


def summary(terminal: Any) -> None:
    if NOT_RUN_SEEN:
        terminal.write_line(f"docs: {len(NOT_RUN_SEEN)} blocks not run, each marked on its page:")
        for n in NOT_RUN_SEEN:
            terminal.write_line(f"  {n.path}:{n.line}: {n.reason}")


if __name__ == "__main__":  # list the blocks: python tests/docs_runner.py README.md docs/*.md
    for name in sys.argv[1:]:
        ran, not_run = blocks(Path(name).read_text())
        print(f"{name}: {len(ran)} run, {len(not_run)} not run")
