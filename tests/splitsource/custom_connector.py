"""A user's own connector, outside this project's packages, used through format('splitsource')."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connectors.generator import GeneratorSource
from splitsource import KeyRange, KeyRangeSource, RecordEmitter, option


class SquaresSource(GeneratorSource):
    """The generator under another name, with one fixed column: proves module:Class resolution end to end."""

    name = "squares"

    def __init__(self, options: object) -> None:
        raw = dict(options) if isinstance(options, dict) else {}
        raw.setdefault("columns", "id:bigint")
        super().__init__(raw)


class OneUlpOffGenerator(GeneratorSource):
    """The generator with a planted conversion bug: its emitter moves every ``score`` by one unit in the last place,
    the kind of error a float on the conversion path makes."""

    def create_record_emitter(self) -> RecordEmitter[Any, Any]:
        from tests.splitsource.fakes import RewritingEmitter

        return RewritingEmitter(super().create_record_emitter(), "score", lambda column: pa.array(
            [None if v is None else math.nextafter(v, math.inf) for v in column.to_pylist()], pa.float64()))


def metadata_log(seed: int) -> str:
    """Where :class:`MetadataCountingSource` with option ``seed`` notes each read of its metadata."""
    import tempfile
    from pathlib import Path

    return str(Path(tempfile.gettempdir()) / f"splitsource-metadata-reads-{seed}.log")


class MetadataCountingSource(GeneratorSource):
    """The generator, reading its schema once per instance as the Cassandra source reads its table's metadata (a
    round trip to the server), and noting each such read in :func:`metadata_log` (any process: Spark's workers)."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._schema: pa.Schema | None = None

    def schema(self) -> pa.Schema:
        if self._schema is None:
            import os

            with open(metadata_log(self.options.seed), "a") as log:
                log.write(f"{os.getpid()}\n")
            self._schema = super().schema()
        return self._schema

    def create_record_emitter(self) -> Any:
        self.schema()  # as Cassandra's emitter needs the table's converters
        return super().create_record_emitter()


class UnpicklableCountingSource(MetadataCountingSource):
    """The same, holding something that does not pickle: Spark's later steps must build it again."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._held = (lambda: None).__code__  # a code object: no pickler takes it

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)


class KeyedGenerator(GeneratorSource):
    """The generator with a key: its column ``id`` (the row's number) names a row."""

    def key_columns(self) -> list[str]:
        return ["id"]


@dataclass(frozen=True)
class UnsizedOptions:
    rows: int = option(doc="the keys 0 to rows - 1", minimum=0)


class UnsizedSource(KeyRangeSource[UnsizedOptions]):
    """Keys in ranges of 100 whose splits estimate no size (the boundaries give 0 bytes)."""

    name = "unsized"
    options_class = UnsizedOptions

    def schema(self) -> pa.Schema:
        return pa.schema([("n", pa.int64())])

    def boundaries(self) -> Any:
        return ((upto, 0) for upto in range(99, self.options.rows - 1, 100))

    def read(self, connection: Any, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        start = 0 if split.after is None else split.after + 1
        stop = self.options.rows if split.upto is None else min(split.upto + 1, self.options.rows)
        keys = list(range(start, min(stop, start + limit)))
        return (pa.record_batch([pa.array(keys, pa.int64())], names=["n"]), (keys[-1] if keys else None),
                start + limit >= stop)
