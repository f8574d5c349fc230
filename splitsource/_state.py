"""Serialization of enumerator state: pending splits and plan position, each in its own nested envelope."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from serializers import SerializationError, SimpleVersionedSerializer, pack, read_envelope, unpack, write_envelope
from splitsource._api import EnumeratorState, Source, Split

__all__ = ["EnumeratorStateSerializer", "enumerator_state_from_bytes", "enumerator_state_to_bytes"]

SplitT = TypeVar("SplitT", bound=Split)
PositionT = TypeVar("PositionT")


class EnumeratorStateSerializer(Generic[SplitT, PositionT]):
    """Version 1: msgpack ``[[split envelope, ...], position envelope]``.

    The split and position envelopes carry the connector's own serializer versions, so a connector can evolve
    its formats independently of this one.
    """

    version = 1

    def __init__(
        self,
        split_serializer: SimpleVersionedSerializer[SplitT],
        position_serializer: SimpleVersionedSerializer[PositionT],
    ) -> None:
        self._splits = split_serializer
        self._position = position_serializer

    @property
    def name(self) -> str:
        return f"EnumeratorStateSerializer[{self._splits.name}, {self._position.name}]"

    @property
    def layout(self) -> tuple[int, int, int]:
        """Its version and those of the split and position serializers whose envelopes its bytes hold."""
        return self.version, self._splits.version, self._position.version

    def serialize(self, obj: EnumeratorState[SplitT, PositionT]) -> bytes:
        return pack(
            [[write_envelope(self._splits, s) for s in obj.pending], write_envelope(self._position, obj.position)]
        )

    def deserialize(self, version: int, data: bytes) -> EnumeratorState[SplitT, PositionT]:
        if version != 1:
            raise SerializationError(f"{self.name}: unknown version {version}; this release reads version 1")
        fields = unpack(data)
        if not (isinstance(fields, list) and len(fields) == 2 and isinstance(fields[0], list)):
            raise SerializationError(f"{self.name} version {version}: unexpected layout")
        pending = tuple(read_envelope(self._splits, b) for b in fields[0])
        return EnumeratorState(pending=pending, position=read_envelope(self._position, fields[1]))


def enumerator_state_to_bytes(source: Source[Any, Any, Any, Any], state: EnumeratorState[Any, Any]) -> bytes:
    """The enveloped bytes of ``state``, with ``source``'s serializers."""
    return write_envelope(EnumeratorStateSerializer(source.split_serializer(), source.position_serializer()), state)


def enumerator_state_from_bytes(source: Source[Any, Any, Any, Any], data: bytes) -> EnumeratorState[Any, Any]:
    return read_envelope(EnumeratorStateSerializer(source.split_serializer(), source.position_serializer()), data)
