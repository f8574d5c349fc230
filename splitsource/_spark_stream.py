"""``spark.readStream.format("splitsource")``: a bounded source read as micro-batches of splits.

Each micro-batch takes the next splits from the enumerator, up to a read limit (``max_splits_per_batch`` splits,
or ``max_bytes_per_batch_mb`` of estimated size). The offset is a JSON dict that carries everything needed to
replay the batch after a crash, so Spark's own checkpoint is the copy job's checkpoint:

- ``state``: the enumerator's versioned, serialized state after this batch's splits were taken;
- ``batch``: this batch's splits, serialized: ``partitions(start, end)`` returns exactly them, on any replay;
- ``taken`` / ``total``: splits handed out so far and the enumerator's estimate of all (for progress);
- ``source``: a fingerprint of the source's identity: a checkpoint of another source is refused.

Bounded: once the enumerator has no split left, ``latestOffset`` returns its start offset unchanged, which ends a
``trigger(availableNow=True)`` query after its last batch is committed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from serializers import SerializationError, read_envelope, write_envelope
from splitsource._api import Source, Split, _FixedContext
from splitsource._errors import CheckpointError, OptionsError
from splitsource._spark_reader import SplitsPartition, build_source, conform_batch, pack_splits, read_partition
from splitsource._state import enumerator_state_from_bytes, enumerator_state_to_bytes
from splitsource._version import __version__

__all__ = ["OFFSET_VERSION", "SplitSourceStreamReader", "source_fingerprint"]

OFFSET_VERSION = 1


def source_fingerprint(source: Source[Any, Any, Any, Any]) -> str:
    """A short digest of what the source reads (its identity, secrets excluded)."""
    identity = json.dumps(source.identity(), sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _copy_sink(raw: str) -> Any:
    if not raw:
        return None
    from splitsource.sink._options import parse_sink_options

    try:
        options = json.loads(raw)
    except ValueError:
        raise OptionsError("option 'copy_sink' is not JSON (it is set by splitsource copy)") from None
    return parse_sink_options(options)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class SplitSourceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of splits over one bounded source (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = dict(options)
        self._expected = to_arrow_schema(schema, timezone="UTC")
        framework, source = build_source(self._options)
        self._framework = framework
        self._fingerprint = source_fingerprint(source)
        # the copy job: each read task writes its splits' rows into pending files and emits only the committables,
        # so the rows never cross into the JVM and back (see docs/architecture.md, "The copy job's write path")
        self._sink = _copy_sink(framework.copy_sink)

    # -- offsets -----------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        _, source = build_source(self._options)
        enumerator = source.create_enumerator(_FixedContext(self._parallelism()))
        enumerator.start()
        try:
            total = enumerator.estimated_total_splits()
            state = enumerator_state_to_bytes(source, enumerator.snapshot_state())
        finally:
            enumerator.close()
        return self._offset(state, [], taken=0, total=total, source=source)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self._framework.max_splits_per_batch > 0:
            return ReadMaxFiles(self._framework.max_splits_per_batch)
        return ReadMaxBytes(int(self._framework.max_bytes_per_batch_mb * 1024 * 1024))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        # the source is bounded: "all data available now" is all of it; nothing to record
        return None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        _, source = build_source(self._options)
        self._check(start)
        state = enumerator_state_from_bytes(source, base64.b64decode(start["state"]))
        enumerator = source.restore_enumerator(_FixedContext(self._parallelism()), state)
        enumerator.start()
        batch: list[Split] = []
        size = 0
        try:
            while True:
                if isinstance(limit, ReadMaxFiles) and len(batch) >= limit.max_files:
                    break
                if isinstance(limit, ReadMaxBytes) and batch and size >= limit.max_bytes:
                    break
                split = enumerator.next_split()
                if split is None:
                    break
                batch.append(split)
                size += split.estimated_size_bytes
                if not isinstance(limit, ReadAllAvailable | ReadMaxFiles | ReadMaxBytes):
                    break  # a limit we do not know: one split per batch is always safe
            if not batch:
                return start  # nothing left: the bounded source is done
            new_state = enumerator_state_to_bytes(source, enumerator.snapshot_state())
        finally:
            enumerator.close()
        return self._offset(new_state, batch, taken=int(start["taken"]) + len(batch), total=start.get("total"),
                            source=source)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if start == end:
            return []
        self._check(end)
        _, source = build_source(self._options)
        serializer = source.split_serializer()
        try:
            splits = [read_envelope(serializer, base64.b64decode(s)) for s in end["batch"]]
        except (SerializationError, ValueError) as exc:
            raise CheckpointError(f"the checkpoint's offset cannot be read ({exc}); it is corrupt or was written "
                                  "by an incompatible release") from None
        groups = pack_splits(splits, target_bytes=int(self._framework.partition_size_mb * 1024 * 1024),
                             partitions=self._framework.partitions, min_partitions=self._framework.min_partitions)
        python = (sys.version_info[0], sys.version_info[1])
        return [SplitsPartition(group, python, __version__) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        if self._sink is None:
            yield from read_partition(self._options, partition, self._expected)
            return
        from splitsource.sink._spark import committables_batch, write_task

        message = write_task(self._sink, read_partition(self._options, partition, None))
        yield conform_batch(committables_batch(message), self._expected)

    def commit(self, end: dict[str, Any]) -> None:
        return None

    # -- internals ---------------------------------------------------------------------------------------------

    def _parallelism(self) -> int:
        return max(self._framework.partitions, self._framework.min_partitions, 1)

    def _offset(self, state: bytes, batch: list[Split], *, taken: int, total: int | None,
                source: Source[Any, Any, Any, Any]) -> dict[str, Any]:
        serializer = source.split_serializer()
        return {
            "version": OFFSET_VERSION,
            "source": self._fingerprint,
            "taken": taken,
            "total": total if total is not None else -1,
            "state": _b64(state),
            "batch": [_b64(write_envelope(serializer, s)) for s in batch],
        }

    def _check(self, offset: Mapping[str, Any]) -> None:
        if not isinstance(offset, Mapping) or offset.get("version") != OFFSET_VERSION or "state" not in offset:
            raise CheckpointError("the streaming checkpoint holds an offset splitsource did not write (or a newer "
                                  "release wrote): use another checkpoint location")
        if offset.get("source") != self._fingerprint:
            raise CheckpointError("the streaming checkpoint belongs to another source (different connector, table or "
                                  "options): use another checkpoint location, or the options it was started with")
