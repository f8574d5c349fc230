#!/usr/bin/env python3
"""Write golden serializer files for the current versions, never overwriting one that exists.

A golden file freezes the bytes of one serializer version; tests read every golden file forever, so old
checkpoints stay readable. Run after bumping a serializer's version, then commit the new files.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splitsource.testing import check_golden  # noqa: E402
from tests.golden_cases import CASES  # noqa: E402


def main() -> int:
    for path in check_golden(ROOT / "tests" / "golden", CASES, write=True):
        print(f"checked {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
