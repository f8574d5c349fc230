"""Every golden file stays readable; the current version's bytes are stable (through the kit's own
``check_golden``, as an outside connector's tests use it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.postgres import PostgresSource
from serializers import SerializationError, read_envelope
from splitsource.testing import check_golden
from tests.golden_cases import CASES

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_every_golden_file_reads_back_and_the_current_bytes_are_stable() -> None:
    checked = check_golden(GOLDEN, CASES)
    assert {p.name for p in checked} >= {f"{name}-v{s.version}.bin" for name, (s, _) in CASES.items()}


def test_postgresql_checkpoints_from_before_the_short_path_are_refused_in_one_line() -> None:
    """PostgreSQL's split and plan as written before its ranges moved onto KeyRangeSource (no release wrote them):
    refused in one line, never misread as a key range or a key-range plan of as many fields."""
    source = PostgresSource({"table": "events"})
    for name, serializer in (("postgres-split-v1.bin", source.split_serializer()),
                             ("postgres-position-v1.bin", source.position_serializer())):
        with pytest.raises(SerializationError) as refused:
            read_envelope(serializer, (GOLDEN / name).read_bytes())
        assert "\n" not in str(refused.value) and "bytes of another record" in str(refused.value), refused.value
