"""Offsets of a bounded source read in batches of splits: the checkpoint of Spark's streaming reader and of the
local copy engine alike (step 1 of the batch protocol, see :mod:`splitsource.copyjob._protocol`).

An offset is a JSON dict that carries everything needed to replay its batch after a crash:

- ``state``: the enumerator's versioned, serialized state after this batch's splits were taken;
- ``batch``: this batch's splits, serialized: a replay reads exactly them;
- ``taken`` / ``total``: splits handed out so far and the enumerator's estimate of all (for progress);
- ``source``: a fingerprint of the source's identity: a checkpoint of another source is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from serializers import SerializationError, read_envelope, write_envelope
from splitsource._api import FixedEnumeratorContext, Source, Split
from splitsource._errors import CheckpointError
from splitsource._planning import BatchLimit
from splitsource._state import enumerator_state_from_bytes, enumerator_state_to_bytes

__all__ = ["OFFSET_VERSION", "check_offset", "initial_offset", "next_offset", "offset_splits", "source_fingerprint"]

OFFSET_VERSION = 1


START_OVER = "to start over, run the same copy with --overwrite (it deletes what the output holds)"


def source_fingerprint(source: Source[Any, Any, Any, Any]) -> str:
    """A short digest of what the source reads (its identity, secrets excluded)."""
    identity = json.dumps(source.identity(), sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _offset(source: Source[Any, Any, Any, Any], fingerprint: str, state: bytes, batch: list[Split], *, taken: int,
            total: int | None) -> dict[str, Any]:
    serializer = source.split_serializer()
    return {
        "version": OFFSET_VERSION,
        "source": fingerprint,
        "taken": taken,
        "total": total if total is not None else -1,
        "state": _b64(state),
        "batch": [_b64(write_envelope(serializer, s)) for s in batch],
    }


def initial_offset(source: Source[Any, Any, Any, Any], fingerprint: str, parallelism: int) -> dict[str, Any]:
    """The offset before the first batch: a fresh enumerator's state, no split taken."""
    enumerator = source.create_enumerator(FixedEnumeratorContext(parallelism))
    enumerator.start()
    try:
        total = enumerator.estimated_total_splits()
        state = enumerator_state_to_bytes(source, enumerator.snapshot_state())
    finally:
        enumerator.close()
    return _offset(source, fingerprint, state, [], taken=0, total=total)


def next_offset(source: Source[Any, Any, Any, Any], fingerprint: str, start: Mapping[str, Any], parallelism: int,
                limit: BatchLimit) -> dict[str, Any] | None:
    """The offset after the next batch: splits taken from the enumerator restored at ``start`` up to ``limit``
    (at least one split). None when the enumerator has no split left: the bounded source is done."""
    max_splits, max_bytes = limit.max_splits, limit.max_bytes
    check_offset(start, fingerprint)
    try:
        state = enumerator_state_from_bytes(source, base64.b64decode(start["state"], validate=True))
        taken = int(start["taken"])
    except (SerializationError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint's offset cannot be read ({exc}); it is corrupt or was written by an "
                              f"incompatible release; {START_OVER}") from None
    enumerator = source.restore_enumerator(FixedEnumeratorContext(parallelism), state)
    enumerator.start()
    batch: list[Split] = []
    size = 0
    try:
        while True:
            if max_splits and len(batch) >= max_splits:
                break
            if max_bytes and batch and size >= max_bytes:
                break
            split = enumerator.next_split()
            if split is None:
                break
            batch.append(split)
            size += split.estimated_size_bytes
        if not batch:
            return None
        new_state = enumerator_state_to_bytes(source, enumerator.snapshot_state())
    finally:
        enumerator.close()
    return _offset(source, fingerprint, new_state, batch, taken=taken + len(batch),
                   total=start.get("total"))


def offset_splits(source: Source[Any, Any, Any, Any], offset: Mapping[str, Any]) -> list[Split]:
    """The splits of the batch that ends at ``offset``, exactly as they were taken."""
    serializer = source.split_serializer()
    try:
        return [read_envelope(serializer, base64.b64decode(s)) for s in offset["batch"]]
    except (SerializationError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint's offset cannot be read ({exc}); it is corrupt or was written "
                              f"by an incompatible release; {START_OVER}") from None


def validated(offset: Any) -> dict[str, Any]:
    """``offset`` (parsed JSON) if its fields have the types splitsource writes; else a one-line CheckpointError."""
    try:
        if not isinstance(offset, Mapping):
            raise TypeError("not an object")
        int(offset["taken"])
        if offset.get("total") is not None:
            int(offset["total"])
        base64.b64decode(offset["state"], validate=True)
        return dict(offset)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint's offset cannot be read ({type(exc).__name__}: {exc}); it is corrupt "
                              f"or was written by an incompatible release; {START_OVER}") from None


def check_offset(offset: Any, fingerprint: str) -> None:
    if not isinstance(offset, Mapping) or offset.get("version") != OFFSET_VERSION or "state" not in offset:
        raise CheckpointError("the checkpoint holds an offset splitsource did not write (or a newer release "
                              "wrote): use another checkpoint location")
    if offset.get("source") != fingerprint:
        raise CheckpointError("the checkpoint belongs to another source (different connector, table or options): "
                              "use another checkpoint location, or the options it was started with")
