"""Every golden file stays readable; the current version's bytes are stable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serializers import read_envelope, write_envelope
from tests.golden_cases import CASES

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FILES = sorted(p for p in GOLDEN.glob("*-v*.bin") if not p.name.startswith("point-"))


def test_every_case_has_a_golden_file_for_its_current_version() -> None:
    for name, (serializer, _) in CASES.items():
        assert (GOLDEN / f"{name}-v{serializer.version}.bin").exists(), f"run scripts/write_golden.py for {name}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_golden_file_reads_back(path: Path) -> None:
    match = re.fullmatch(r"(.+)-v(\d+)\.bin", path.name)
    assert match, path
    serializer, expected = CASES[match.group(1)]
    data = path.read_bytes()
    assert read_envelope(serializer, data) == expected
    if int(match.group(2)) == serializer.version:
        assert write_envelope(serializer, expected) == data, "current version's bytes changed: bump the version"
