"""The one error the serializers raise."""

from __future__ import annotations

__all__ = ["SerializationError"]


class SerializationError(ValueError):
    """Bytes that cannot be turned back into an object: unknown version, truncated or corrupt.

    The message always names the serializer and the version involved, because the person reading it is usually
    looking at a checkpoint written by another release of the code.
    """
