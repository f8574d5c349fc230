"""Write the option tables in docs/ from the options' own declarations (``splitsource.options_table``).

A table in a doc sits between ``<!-- options: module:Class -->`` and ``<!-- /options -->``; this rewrites what is
between them. ``--check`` changes nothing and exits 1 when a table is stale (the tests run it).

    .venv/bin/python scripts/option_tables.py          # rewrite
    .venv/bin/python scripts/option_tables.py --check  # verify
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splitsource import options_table  # noqa: E402

TABLE = re.compile(r"(<!-- options: (?P<target>[\w.]+:\w+) -->\n)(?P<body>.*?)(<!-- /options -->)", re.S)


def render(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        module, _, name = match.group("target").partition(":")
        cls = getattr(importlib.import_module(module), name)
        return f"{match.group(1)}{options_table(cls)}\n{match.group(4)}"

    return TABLE.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale; change nothing")
    args = parser.parse_args(argv)
    stale = []
    tables = 0
    for path in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        text = path.read_text()
        tables += len(TABLE.findall(text))
        new = render(text)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale option tables in {', '.join(map(str, stale))}: run scripts/option_tables.py", file=sys.stderr)
        return 1
    print(f"{tables} option tables {'checked' if args.check else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
