"""How a copy's summary and verify's verdict write their numbers: counts of things, and sizes in bytes."""

from __future__ import annotations

__all__ = ["counted", "size"]


def counted(n: int, one: str, many: str = "") -> str:
    """``n`` things in a summary's words: ``counted(1, "row")`` is "1 row", ``counted(2000, "row")`` "2,000 rows"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def size(n: float) -> str:
    """``n`` bytes in binary units: "512.0 B", "3.4 MiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
