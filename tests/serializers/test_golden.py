"""Every golden file stays readable; the current version's bytes are stable (through the kit's own
``check_golden``, as an outside connector's tests use it)."""

from __future__ import annotations

from pathlib import Path

from splitsource.testing import check_golden
from tests.golden_cases import CASES

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_every_golden_file_reads_back_and_the_current_bytes_are_stable() -> None:
    checked = check_golden(GOLDEN, CASES)
    assert {p.name for p in checked} >= {f"{name}-v{s.version}.bin" for name, (s, _) in CASES.items()}
