"""Versioned serializers shared by the splitsource framework and its connectors."""

from serializers._errors import SerializationError
from serializers._versioned import (
    MAGIC,
    MsgpackRecordSerializer,
    SimpleVersionedSerializer,
    dataclass_serializer,
    pack,
    read_envelope,
    refused,
    unpack,
    write_envelope,
)

__all__ = [
    "MAGIC",
    "MsgpackRecordSerializer",
    "SerializationError",
    "SimpleVersionedSerializer",
    "dataclass_serializer",
    "pack",
    "read_envelope",
    "refused",
    "unpack",
    "write_envelope",
]
