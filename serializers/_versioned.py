"""Versioned serialization: the protocol, the framed envelope, and a msgpack helper for records.

Every byte splitsource persists (enumerator state in a streaming offset, committables, sink state) is written by a
``SimpleVersionedSerializer`` and wrapped in an envelope::

    offset  size  field
    0       4     magic  b"SPS1"  (SPS = splitsource, 1 = envelope layout)
    4       4     serializer version, unsigned big-endian
    8       4     payload length, unsigned big-endian
    12      4     CRC-32 of the payload
    16      n     payload

A payload that contains another serialized object holds that object's own envelope, so nested objects carry their
own versions and a connector can change its split format without a framework release, and the other way round.
No payload is ever pickled: pickle ties stored bytes to class paths and runs code on load.
"""

from __future__ import annotations

import dataclasses
import functools
import reprlib
import struct
import types
import typing
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import msgpack

from serializers._errors import SerializationError

__all__ = [
    "MAGIC",
    "MsgpackRecordSerializer",
    "SimpleVersionedSerializer",
    "dataclass_serializer",
    "pack",
    "read_envelope",
    "unpack",
    "write_envelope",
]

T = TypeVar("T")
MAGIC = b"SPS1"
_HEADER = struct.Struct(">4sIII")


@runtime_checkable
class SimpleVersionedSerializer(Protocol[T]):
    """Turns one kind of object into bytes and back, for the current and every older version.

    Contract (Flink's ``SimpleVersionedSerializer``):

    - ``version`` is the version that ``serialize`` writes; it only ever grows.
    - ``deserialize(version, data)`` reads bytes written by ``serialize`` of that version, for every version this
      serializer has ever had; for a version it does not know it raises ``SerializationError``.
    - ``name`` appears in error messages.
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    def serialize(self, obj: T) -> bytes: ...

    def deserialize(self, version: int, data: bytes) -> T: ...


def write_envelope(serializer: SimpleVersionedSerializer[T], obj: T) -> bytes:
    """Serialize ``obj`` and frame it with magic, version, length and checksum."""
    payload = serializer.serialize(obj)
    return _HEADER.pack(MAGIC, serializer.version, len(payload), zlib.crc32(payload)) + payload


def read_envelope(serializer: SimpleVersionedSerializer[T], data: bytes) -> T:
    """Check the frame and hand the payload to ``serializer.deserialize`` with the version it was written in."""
    if len(data) < _HEADER.size:
        raise SerializationError(
            f"{serializer.name}: {len(data)} bytes is shorter than the {_HEADER.size}-byte envelope header "
            "(truncated data)"
        )
    magic, version, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SerializationError(f"{serializer.name}: not a splitsource envelope (magic {magic!r}, want {MAGIC!r})")
    payload = bytes(data[_HEADER.size :])
    if len(payload) != length:
        raise SerializationError(
            f"{serializer.name} version {version}: payload is {len(payload)} bytes, header says {length} "
            "(truncated or padded data)"
        )
    if zlib.crc32(payload) != crc:
        raise SerializationError(f"{serializer.name} version {version}: checksum mismatch (corrupt data)")
    if version > serializer.version or version < 1:
        raise SerializationError(
            f"{serializer.name}: unknown version {version}; this release reads versions 1..{serializer.version}"
        )
    try:
        return serializer.deserialize(version, payload)
    except SerializationError:
        raise
    except Exception as exc:  # a payload that passed the checksum but does not decode
        raise SerializationError(f"{serializer.name} version {version}: cannot decode payload: {exc}") from exc


def pack(value: Any) -> bytes:
    """msgpack with the options every serializer here uses (bin type, no implicit conversions)."""
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    """Inverse of :func:`pack`; lists stay lists, strings stay strings, bytes stay bytes."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class MsgpackRecordSerializer(Generic[T]):
    """A serializer for a small record type, built from two functions and the migrations of older versions.

    ``to_fields(obj)`` returns a msgpack-able list; ``from_fields(fields)`` builds the object from the current
    version's list. ``upgrades[v]`` turns the field list of version ``v`` into that of version ``v + 1``, so old
    bytes stay readable after a change: that is the whole versioning story for a connector author.
    """

    def __init__(
        self,
        name: str,
        version: int,
        to_fields: Callable[[T], list[Any]],
        from_fields: Callable[[list[Any]], T],
        upgrades: Mapping[int, Callable[[list[Any]], list[Any]]] | None = None,
    ) -> None:
        self._name = name
        self._version = version
        self._to_fields = to_fields
        self._from_fields = from_fields
        self._upgrades = dict(upgrades or {})
        missing = [v for v in range(1, version) if v not in self._upgrades]
        if missing:
            raise ValueError(f"{name}: no upgrade from version(s) {missing} to version {version}")

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int:
        return self._version

    def serialize(self, obj: T) -> bytes:
        return pack(self._to_fields(obj))

    def deserialize(self, version: int, data: bytes) -> T:
        if not 1 <= version <= self._version:
            raise SerializationError(
                f"{self._name}: unknown version {version}; this release reads versions 1..{self._version}"
            )
        try:
            fields = unpack(data)
        except Exception as exc:
            raise SerializationError(f"{self._name} version {version}: corrupt msgpack: {exc}") from exc
        if not isinstance(fields, list):
            raise SerializationError(f"{self._name} version {version}: expected a field list, got {type(fields)}")
        for v in range(version, self._version):
            fields = self._upgrades[v](fields)
        try:
            return self._from_fields(fields)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise SerializationError(f"{self._name} version {version}: fields do not fit: {exc}") from exc

    def __repr__(self) -> str:
        return f"MsgpackRecordSerializer({self._name!r}, version={self._version})"


def _tuples(value: Any) -> Any:
    """msgpack's lists back to the tuples a frozen dataclass holds (so keys compare and hash as they did)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def refused(reason: str) -> Callable[[list[Any]], list[Any]]:
    """An upgrade (``upgrades[v]`` of :class:`MsgpackRecordSerializer` or :func:`dataclass_serializer`) that refuses
    the bytes of version ``v`` in one line saying why: a change that older bytes cannot follow (no release read
    them). ``upgrades={1: refused("written before splits were key ranges; copy again with --overwrite")}``."""
    def refuse(fields: list[Any]) -> list[Any]:
        raise SerializationError(reason)

    return refuse


def dataclass_serializer(
    cls: type[T], version: int = 1, upgrades: Mapping[int, Callable[[list[Any]], list[Any]]] | None = None
) -> MsgpackRecordSerializer[T]:
    """The serializer of a frozen dataclass whose fields are plain values (numbers, strings, bytes, None, and
    tuples of them), or frozen dataclasses of such fields, or tuples of those (a plan of splits): its fields in
    declaration order, as msgpack (a dataclass in a field as its own list of fields), named after the class. Add a
    field, bump ``version`` and give ``upgrades[old]`` that fills it in for bytes written before::

        @dataclass(frozen=True)
        class Page:
            start: int
            end: int

        serializer = dataclass_serializer(Page)
        assert serializer.deserialize(1, serializer.serialize(Page(0, 10))) == Page(0, 10)
    """
    return MsgpackRecordSerializer(cls.__name__, version, _fields_of, lambda fields: _build(cls, fields), upgrades)


def _fields_of(record: Any) -> list[Any]:
    return [_plain(getattr(record, f.name)) for f in dataclasses.fields(record)]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields_of(value)
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _build(cls: Any, fields: list[Any]) -> Any:
    """``cls`` from its field list (fewer: the rest take their defaults); a field whose type is a dataclass, or a
    tuple of one, built from its own; one typed ``int``, ``str``, ``bool``, ``float`` or ``bytes`` must hold one
    (or None), so that bytes of another record of as many fields are refused, not misread."""
    kinds = _nested(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = []
    for name, value in zip(names, fields, strict=False):
        kind = kinds.get(name)
        if kind is not None and kind[1] is None and value is not None and (
                not isinstance(value, (int, float) if kind[0] is float else kind[0])
                or isinstance(value, bool) and kind[0] is not bool):
            raise SerializationError(f"{cls.__name__}.{name}: {reprlib.repr(value)} is not {kind[0].__name__} "
                                     "(bytes of another record?)")
        values.append(_value(kind, value))
    return cls(*values, *fields[len(names):])


def _value(kind: tuple[Any, bool | None] | None, value: Any) -> Any:
    if kind is None or kind[1] is None or value is None:
        return _tuples(value)
    record, many = kind
    return tuple(_build(record, v) for v in value) if many else _build(record, value)


_PLAIN = (int, str, bool, float, bytes)


@functools.cache
def _nested(cls: Any) -> dict[str, tuple[Any, bool | None]]:
    """The fields of ``cls`` that hold a dataclass (``(it, False)``), a tuple of one (``(it, True)``), or a plain
    value (``(its type, None)``), optional or not, from its type hints (none where they cannot be resolved: a class
    local to a function)."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        return {}
    found: dict[str, tuple[Any, bool | None]] = {}
    for name, hint in hints.items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint, args = args[0], list(typing.get_args(args[0]))
        if hint in _PLAIN:
            found[name] = (hint, None)
        elif dataclasses.is_dataclass(hint):
            found[name] = (hint, False)
        elif typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis \
                and dataclasses.is_dataclass(args[0]):
            found[name] = (args[0], True)
    return found
