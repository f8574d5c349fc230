"""The split ledger: how many rows each split put into the committed output, kept in the copy's checkpoint.

``<checkpoint>/splits/<batch>.json`` holds, for one committed batch of the copy, every split the batch read: its
id, the rows it contributed and the split itself (its versioned envelope, base64), so that ``verify`` can count
that split in the source again and name the splits whose counts differ.

A batch's ledger file is written by whoever commits the batch (the local engine's coordinator, the bucketing sink's
stream commit on the Spark engine), *after* the batch is known not to be committed yet and *before* its commit
record: a batch committed has its ledger file, and a replay of a committed batch never rewrites it. A ledger file
of a batch that then failed to commit is rewritten by the batch's replay (the same splits: the offset is logged
first).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from splitsource._errors import CheckpointError
from splitsource._fs import Location
from splitsource._names import LEDGER_DIR

__all__ = ["LEDGER_DIR", "SplitCount", "decode_counts", "encode_counts", "read_ledger", "split_counts",
           "write_batch"]

_VERSION = 1


@dataclass(frozen=True)
class SplitCount:
    """The rows one split contributed to the output, and the split (its serializer's envelope)."""

    split_id: str
    rows: int
    split: bytes


def split_counts(envelopes: Mapping[str, bytes], rows: Mapping[str, int]) -> list[SplitCount]:
    """The counts of the splits ``envelopes`` (id → envelope) a task read, ``rows`` by split id (a split that
    emitted nothing is absent there: 0 rows)."""
    return [SplitCount(split_id, int(rows.get(split_id, 0)), data) for split_id, data in envelopes.items()]


def _plain(counts: Iterable[SplitCount]) -> list[list[object]]:
    return [[c.split_id, c.rows, base64.b64encode(c.split).decode("ascii")] for c in counts]


def _from_plain(items: Iterable[Sequence[object]]) -> list[SplitCount]:
    return [SplitCount(str(i), int(str(n)), base64.b64decode(str(s))) for i, n, s in items]


def encode_counts(counts: Iterable[SplitCount]) -> bytes:
    return json.dumps(_plain(counts)).encode()


def decode_counts(data: bytes) -> list[SplitCount]:
    return _from_plain(json.loads(data))


def _path(base: str, batch_id: int) -> str:
    return f"{base}/{LEDGER_DIR}/{batch_id:020d}.json"


def write_batch(checkpoint: Location, query_id: str, batch_id: int, counts: Sequence[SplitCount]) -> None:
    """Write the ledger file of batch ``batch_id`` (atomically: a reader never sees half of it)."""
    fs, base = checkpoint.store, checkpoint.path
    fs.make_dirs(f"{base}/{LEDGER_DIR}")
    body = {"version": _VERSION, "query": query_id, "batch": batch_id, "splits": _plain(counts)}
    fs.write(_path(base, batch_id), json.dumps(body).encode())


def read_ledger(checkpoint: Location, last_committed: Callable[[str], int | None]) -> dict[str, SplitCount] | None:
    """Every split of the committed batches, by split id; ``last_committed(query id)``: the last batch the output's
    commit log has of that streaming query. None when the checkpoint has no ledger (it is gone, or the copy was made
    before there was one)."""
    fs, base = checkpoint.store, checkpoint.path
    try:
        infos = fs.list(f"{base}/{LEDGER_DIR}")
    except OSError:
        return None
    if not infos:
        return None
    found: dict[str, SplitCount] = {}
    for info in sorted(infos, key=lambda i: i.name):
        if not info.name.endswith(".json"):  # a write in progress (the door's temporary) ends otherwise
            continue  # a write in progress
        try:
            body = json.loads(fs.read_text(info.path))
            version, query, batch = int(body["version"]), str(body["query"]), int(body["batch"])
            counts = _from_plain(body["splits"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"split ledger file {info.path} is corrupt ({exc})") from None
        if version > _VERSION:
            raise CheckpointError(f"split ledger file {info.path} has version {version}; this splitsource reads up "
                                  f"to {_VERSION}: upgrade splitsource")
        last = last_committed(query)
        if last is None or batch > last:
            continue  # a batch whose commit failed (its replay rewrites the file)
        found.update((c.split_id, c) for c in counts)
    return found
