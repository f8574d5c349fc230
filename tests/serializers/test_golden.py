"""Every golden file stays readable; the current version's bytes are stable (through the kit's own
``check_golden``, as an outside connector's tests use it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serializers import SerializationError, read_envelope
from splitsource.testing import check_golden
from splitsource.testing._golden import golden_layout
from tests.golden_cases import CASES, REFUSED

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_every_golden_file_reads_back_and_the_current_bytes_are_stable() -> None:
    checked = check_golden(GOLDEN, CASES)
    assert {p.name for p in checked} >= {f"{name}-v{golden_layout(s)}.bin" for name, (s, _) in CASES.items()}


def test_checkpoints_of_layouts_left_behind_are_refused_in_one_line() -> None:
    """PostgreSQL's split and plan, and the generator's, as written before they moved onto KeyRangeSource (no
    release wrote them): refused in one line, never misread as a key range or a key-range plan."""
    assert {p.name for p in (GOLDEN / "refused").iterdir()} == set(REFUSED)
    for name, serializer in REFUSED.items():
        with pytest.raises(SerializationError) as refused:
            read_envelope(serializer, (GOLDEN / "refused" / name).read_bytes())
        message = str(refused.value)
        assert "\n" not in message and ("bytes of another record" in message or "key ranges" in message), message
