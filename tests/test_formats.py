"""docs/formats.md and ``splitsource._names`` describe the same files: every name the package gives a file or
directory on disk is on the page, and every name the page's tables give is the package's."""

from __future__ import annotations

import re
from pathlib import Path

from splitsource import _names

PAGE = Path(__file__).resolve().parents[1] / "docs" / "formats.md"


def _module_names() -> dict[str, str]:
    return {k: v for k, v in vars(_names).items() if k.isupper() and isinstance(v, str)}


def test_every_name_on_disk_is_described() -> None:
    codes = re.findall(r"`([^`]+)`", PAGE.read_text())
    missing = {k: v for k, v in _module_names().items() if not any(v in code for code in codes)}
    assert missing == {}, f"docs/formats.md does not describe {missing}"


def _made_of(piece: str, tokens: set[str]) -> bool:
    """Whether ``piece`` is a run of ``tokens`` (``lock.json.break-`` is LOCK_FILE then LOCK_BREAK)."""
    ends = {0}
    for end in range(1, len(piece) + 1):
        if any(start in ends and piece[start:end] in tokens for start in range(end)):
            ends.add(end)
    return len(piece) in ends


def test_every_file_the_page_names_is_the_packages() -> None:
    """The first column of every table names files with the package's names: placeholders (``<batch>``,
    ``[-<n>]``), separators and a ``.json`` extension aside."""
    tokens = set(_module_names().values()) | {".json", "-", "_"}
    cells = [line.split("|")[1] for line in PAGE.read_text().splitlines() if line.startswith("| `")]
    assert len(cells) > 20
    unknown = [code for cell in cells for code in re.findall(r"`([^`]+)`", cell)
               if not all(_made_of(piece, tokens) for piece in re.split(r"<[^>]*>|\[[^\]]*\]|/", code) if piece)]
    assert unknown == [], f"docs/formats.md names files the package does not: {unknown}"
