"""The docs runner itself (tests/docs_runner.py): it fails a page whose command fails or prints something else
than the page shows, and the blocks it does not run stay few, each with its reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.spark_standalone import free_port
from tests.docs_runner import blocks, unmatched
from tests.fixtures import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_NOT_RUN = 6


def test_few_blocks_are_not_run_and_each_says_what_it_needs() -> None:
    not_run = [(page.name, line, reason) for page in PAGES for line, reason in blocks(page.read_text())[1]]
    assert len(not_run) <= MAX_NOT_RUN, not_run
    assert all(len(reason.split()) >= 5 for _, _, reason in not_run), not_run
    assert sum(len(blocks(page.read_text())[0]) for page in PAGES) >= 20  # the pages' blocks are found at all


def test_output_lines_match_in_order_with_dots_for_what_varies() -> None:
    printed = "noise\ncopy finished: 200,000 rows in 3 files (4.5 MiB), 32 splits\nmore\nMATCH: a b\n"
    assert unmatched("copy finished: 200,000 rows in ... files (... MiB), ... splits\nMATCH: ...", printed) is None
    assert unmatched("MATCH: ...\ncopy finished: ...", printed) == "copy finished: ..."  # order counts
    assert unmatched("copy finished: 100,000 rows ...", printed) == "copy finished: 100,000 rows ..."


def test_a_broken_command_or_a_wrong_output_fails_the_page(tmp_path: Path) -> None:
    # a scratch copy of the clone's runner, with one page of docs that has a broken command and a wrong output
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "fixtures.py", "docs_runner.py", "docs_kernel.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests" / name)
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    for name in (".venv", "scripts", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    # a server the page starts, outside pytest's directories (which PostgreSQL's user cannot enter)
    port, pg = free_port(), Path(tempfile.mkdtemp(prefix="splitsource-docs-runner-pg-"))
    page = tmp_path / "docs" / "broken.md"
    page.parent.mkdir()
    page.write_text("# A page\n\n```bash\necho fine\n```\n\n```output\nfine\n```\n\n"
                    "```bash\nsplitsource copy --connector generator --rows 10 --output out\n```\n\n"
                    "```python\nprint(6 * 7)\n```\n\n```output\n41\n```\n\n"
                    "<!-- not run: needs a cloud bucket that CI does not have -->\n```bash\nexit 1\n```\n\n"
                    f"```bash\neval \"$(python scripts/postgres.py start --version 15 --dir {pg} --port {port})\"\n"
                    f"false\npython scripts/postgres.py stop --dir {pg}\n```\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CASSANDRA_HOSTS"] = "127.0.0.1"  # the page reads no Cassandra: the session's node fixture starts none
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir",
                                 str(tmp_path), "-c", "/dev/null", "docs/broken.md"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=600, env=env)
        stopped = not (pg / "data" / "postmaster.pid").exists()
    finally:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "postgres.py"), "stop", "--dir", str(pg)],
                       capture_output=True, timeout=120, check=False)
        shutil.rmtree(pg, ignore_errors=True)
    out = result.stdout
    assert result.returncode == 1, out[-3000:]
    assert "3 failed, 1 passed" in out, out[-3000:]
    assert "unrecognized arguments: --rows" in out  # the failing command's own words
    assert "did not print the page's line '41'" in out
    assert "docs: 1 blocks not run" in out and "needs a cloud bucket" in out
    # the block that started a server and failed before its stop line: the runner stopped it
    assert "initdb" not in out, out[-3000:]  # the server started, and the block failed after it
    assert stopped, "the page's server still runs after its block failed"
