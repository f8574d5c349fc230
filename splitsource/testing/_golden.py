"""Golden files: a serializer's bytes frozen per version in the author's repository, read back forever."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serializers import SerializationError, SimpleVersionedSerializer, read_envelope, write_envelope

__all__ = ["check_golden"]


def check_golden(folder: str | Path, cases: Mapping[str, tuple[SimpleVersionedSerializer[Any], Any]],
                 write: bool = False) -> list[Path]:
    """Check every golden file of ``cases`` in ``folder``; with ``write``, first write the missing ones.

    ``cases`` maps a name to a serializer and the object it holds at its current version. The file
    ``<name>-v<version>.bin`` freezes that version's bytes (with their envelope; an enumerator state's file is named
    by its own version and its splits' and position's, ``-v1.3.4``). Each file in ``folder`` of a
    case's name, at any version, must read back as the case's object (so an older version's bytes must upgrade to
    it); the current version's bytes must not change (a change needs a new version and an upgrade). A case with no
    file for its current version fails, unless ``write`` makes it: run once with ``write=True`` after a version
    bump, commit the new file, and it is checked from then on. Returns the files checked::

        CASES = {"evens-split": (dataclass_serializer(KeyRange), KeyRange(3, 2_999, 3_999, 4_000))}

        def test_old_checkpoints_stay_readable():
            check_golden(Path(__file__).parent / "golden", CASES)
    """
    folder = Path(folder)
    checked = []
    for name, (serializer, expected) in cases.items():
        layout = golden_layout(serializer)
        current = folder / f"{name}-v{layout}.bin"
        if write and not current.exists():
            folder.mkdir(parents=True, exist_ok=True)
            current.write_bytes(write_envelope(serializer, expected))
        if not current.exists():
            raise AssertionError(f"golden {name}: no file {current} for {serializer.name} version "
                                 f"{serializer.version}; write it once with check_golden(..., write=True), commit it")
        for path in sorted(folder.glob(f"{name}-v*.bin")):
            match = re.fullmatch(rf"{re.escape(name)}-v([\d.]+)\.bin", path.name)
            if match is None:
                continue
            data = path.read_bytes()
            try:
                got = read_envelope(serializer, data)
            except SerializationError as exc:
                raise AssertionError(f"golden {name}: {path.name} cannot be read: {exc}") from None
            if got != expected:
                raise AssertionError(f"golden {name}: {path.name} reads back as {got!r}, not {expected!r}")
            if match.group(1) == layout and write_envelope(serializer, expected) != data:
                raise AssertionError(f"golden {name}: the bytes of version {layout} changed "
                                     f"({path.name}): give {serializer.name} a new version and an upgrade")
            checked.append(path)
    return checked


def golden_layout(serializer: SimpleVersionedSerializer[Any]) -> str:
    """The version a golden file of ``serializer`` is named by: its own, and for one that holds the bytes of others
    (an enumerator's state: its splits' and position's), theirs after it (``1.3.4``), since their versions change
    its bytes."""
    return ".".join(str(v) for v in getattr(serializer, "layout", (serializer.version,)))
