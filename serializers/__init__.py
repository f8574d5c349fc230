"""Versioned serializers shared by the splitsource framework and its connectors."""

from serializers._errors import SerializationError
from serializers._versioned import (
    MAGIC,
    MsgpackRecordSerializer,
    SimpleVersionedSerializer,
    pack,
    read_envelope,
    unpack,
    write_envelope,
)

__all__ = [
    "MAGIC",
    "MsgpackRecordSerializer",
    "SerializationError",
    "SimpleVersionedSerializer",
    "pack",
    "read_envelope",
    "unpack",
    "write_envelope",
]
