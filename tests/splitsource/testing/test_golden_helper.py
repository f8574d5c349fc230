"""check_golden, the outside author's golden files: it writes what is missing only when asked, never overwrites,
and fails, naming the case and the file, on a missing file, old bytes that no longer read back as the object, and
bytes that changed within a version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from serializers import MsgpackRecordSerializer, dataclass_serializer
from splitsource.testing import check_golden


@dataclass(frozen=True)
class OldPage:
    start: int
    end: int


@dataclass(frozen=True)
class Page:
    start: int
    end: int
    label: str


def test_it_writes_only_when_asked_then_checks(tmp_path: Path) -> None:
    cases = {"page": (dataclass_serializer(OldPage), OldPage(0, 10))}
    with pytest.raises(AssertionError, match=r"golden page: no file .*page-v1\.bin .*write=True"):
        check_golden(tmp_path, cases)
    assert [p.name for p in check_golden(tmp_path, cases, write=True)] == ["page-v1.bin"]
    before = (tmp_path / "page-v1.bin").read_bytes()
    assert [p.name for p in check_golden(tmp_path, cases, write=True)] == ["page-v1.bin"]
    assert (tmp_path / "page-v1.bin").read_bytes() == before


def test_a_new_version_reads_the_old_file_through_its_upgrade(tmp_path: Path) -> None:
    check_golden(tmp_path, {"page": (dataclass_serializer(OldPage), OldPage(0, 10))}, write=True)
    v2 = dataclass_serializer(Page, version=2, upgrades={1: lambda fields: [*fields, "old"]})
    checked = check_golden(tmp_path, {"page": (v2, Page(0, 10, "old"))}, write=True)
    assert [p.name for p in checked] == ["page-v1.bin", "page-v2.bin"]
    lossy = dataclass_serializer(Page, version=2, upgrades={1: lambda fields: [*fields, "lost"]})
    with pytest.raises(AssertionError, match=r"golden page: page-v1\.bin reads back as Page\(.*label='lost'\)"):
        check_golden(tmp_path, {"page": (lossy, Page(0, 10, "old"))})


def test_bytes_changed_within_a_version_fail(tmp_path: Path) -> None:
    check_golden(tmp_path, {"page": (dataclass_serializer(OldPage), OldPage(0, 10))}, write=True)
    # reads the old bytes right, but writes a field more under the same version
    padded = MsgpackRecordSerializer("OldPage", 1, lambda page: [page.start, page.end, None],
                                     lambda fields: OldPage(*fields[:2]))
    with pytest.raises(AssertionError, match=r"golden page: the bytes of version 1 changed .*new version"):
        check_golden(tmp_path, {"page": (padded, OldPage(0, 10))})


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "page-v1.bin").write_bytes(b"torn")
    with pytest.raises(AssertionError, match=r"golden page: page-v1\.bin cannot be read: .*truncated"):
        check_golden(tmp_path, {"page": (dataclass_serializer(OldPage), OldPage(0, 10))})
