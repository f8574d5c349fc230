from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from serializers import (
    MAGIC,
    MsgpackRecordSerializer,
    SerializationError,
    dataclass_serializer,
    pack,
    read_envelope,
    unpack,
    write_envelope,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int
    label: str


V2 = MsgpackRecordSerializer(
    "PointSerializer",
    2,
    to_fields=lambda p: [p.x, p.y, p.label],
    from_fields=lambda f: Point(f[0], f[1], f[2]),
    upgrades={1: lambda f: [f[0], f[1], "unlabelled"]},  # version 1 had no label
)
V1 = MsgpackRecordSerializer("PointSerializer", 1, to_fields=lambda p: [p.x, p.y], from_fields=lambda f: Point(*f, ""))


def test_round_trip_and_frame_layout() -> None:
    data = write_envelope(V2, Point(1, -2, "a"))
    assert data[:4] == MAGIC
    assert int.from_bytes(data[4:8], "big") == 2
    assert read_envelope(V2, data) == Point(1, -2, "a")


def test_older_version_is_upgraded() -> None:
    old = write_envelope(V1, Point(3, 4, "ignored"))
    assert read_envelope(V2, old) == Point(3, 4, "unlabelled")


def test_newer_version_is_refused_with_name_and_version() -> None:
    new = write_envelope(V2, Point(1, 2, "x"))
    with pytest.raises(SerializationError, match=r"PointSerializer: unknown version 2; this release reads versions 1"):
        read_envelope(V1, new)


@pytest.mark.parametrize("cut", [0, 3, 15, 17])
def test_truncated_bytes(cut: int) -> None:
    data = write_envelope(V2, Point(1, 2, "hello"))
    with pytest.raises(SerializationError, match="PointSerializer"):
        read_envelope(V2, data[:cut])


def test_corrupt_byte_is_caught_by_checksum() -> None:
    data = bytearray(write_envelope(V2, Point(1, 2, "hello")))
    data[-1] ^= 0xFF
    with pytest.raises(SerializationError, match="PointSerializer version 2: checksum mismatch"):
        read_envelope(V2, bytes(data))


def test_foreign_bytes() -> None:
    with pytest.raises(SerializationError, match="not a splitsource envelope"):
        read_envelope(V2, b"\x80\x04\x95" + b"\x00" * 30)  # a pickle header is not accepted


def test_missing_upgrade_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no upgrade from version"):
        MsgpackRecordSerializer("S", 3, to_fields=list, from_fields=list, upgrades={1: list})


def test_golden_point_v1_stays_readable() -> None:
    assert read_envelope(V2, (GOLDEN / "point-v1.bin").read_bytes()) == Point(7, 8, "unlabelled")


@dataclasses.dataclass(frozen=True)
class Span:
    start: Point
    end: Point | None = None


@dataclasses.dataclass(frozen=True)
class Path_:
    spans: tuple[Span, ...]
    name: str = ""
    keys: tuple[str, ...] | None = None


def test_a_dataclass_serializer_writes_nested_dataclasses_as_field_lists() -> None:
    """A plan of splits in a position: each dataclass as its own field list (no class name, no pickle), read back
    as the same objects, tuples as tuples."""
    path = Path_((Span(Point(0, 1, "a"), Point(2, 3, "b")), Span(Point(4, 5, "c"))), "p", ("k", "l"))
    serializer = dataclass_serializer(Path_)
    assert unpack(serializer.serialize(path)) == [[[[0, 1, "a"], [2, 3, "b"]], [[4, 5, "c"], None]], "p", ["k", "l"]]
    assert read_envelope(serializer, write_envelope(serializer, path)) == path


def test_a_dataclass_serializer_fills_missing_fields_with_defaults_and_refuses_extra_ones() -> None:
    serializer = dataclass_serializer(Path_)
    assert serializer.deserialize(1, pack([[]])) == Path_(())
    with pytest.raises(SerializationError, match="Path_ version 1: fields do not fit"):
        serializer.deserialize(1, pack([[], "p", None, "one too many"]))


def test_a_dataclass_serializer_refuses_a_value_of_another_type_than_its_field_s() -> None:
    """Bytes of another record with as many fields (a connector's old split) are refused in one line, never misread:
    a field typed int, str, bool, float or bytes must hold one (an int is a float; a bool is not an int)."""
    serializer = dataclass_serializer(Point)
    assert serializer.deserialize(1, pack([1, 2, "a"])) == Point(1, 2, "a")
    for fields, field in (([[1, 2], 2, "a"], "Point.x"), ([1, True, "a"], "Point.y"), ([1, 2, 3], "Point.label")):
        with pytest.raises(SerializationError, match=rf"{field}: .* is not (int|str) \(bytes of another record\?\)"):
            serializer.deserialize(1, pack(fields))
