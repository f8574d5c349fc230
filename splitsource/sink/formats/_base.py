"""What every part-file format provides: a writer into an open stream, and a reader of its finished files that
``splitsource verify`` uses (a reader of the format, apart from the writer: it does not share its encoding code)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa

from splitsource._fs import Store
from splitsource.sink._text import plain_storage

__all__ = ["FileFormat", "PartFileWriter", "combine_batches"]


class PartFileWriter(ABC):
    """Writes batches into one open part file; ``length`` is what a reader would find after :meth:`flush`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @abstractmethod
    def write(self, batch: pa.RecordBatch) -> None: ...

    @property
    def length(self) -> int:
        return int(self._stream.tell())

    @property
    def buffered(self) -> int:
        """Bytes of rows held in memory, not yet encoded into the file (0 for the row formats)."""
        return 0

    def spill(self) -> None:
        """Encode what :attr:`buffered` holds into the file now (a Parquet row group); the file stays open. The
        row formats buffer nothing: nothing to do."""
        return None

    def flush(self) -> int:
        """Push buffered bytes to the file system; returns the length that is now valid."""
        self._stream.flush()
        return self.length

    def close(self) -> int:
        length = self.length
        self._stream.close()
        return length


def combine_batches(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """One batch of ``batches``' rows, copied into buffers of its own (slices no longer keep their whole batches
    in memory); a single batch is returned as it is."""
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, schema).combine_chunks().to_batches()[0]


class FileFormat(ABC):
    """A part-file format: its name (the ``format`` option), its default suffix, whether it is bulk (a file is
    readable only once closed: it rolls at every commit) or a row format (a prefix of a file is a valid file, which
    lets recovery truncate an in-progress file back to its committed length), its writer and its reader.

    A new format is one module holding a subclass, registered in :mod:`splitsource.sink.formats`; the sink's
    options, the command line and ``verify`` read the registry."""

    name: ClassVar[str]
    suffix: ClassVar[str]
    bulk: ClassVar[bool]

    def check(self, schema: pa.Schema) -> None:  # noqa: B027 - a hook: most formats hold every schema
        """Refuse, before anything is written, a schema this format cannot hold (every format here holds every
        Arrow type the connectors produce: CSV holds nested values as their JSON text)."""

    @abstractmethod
    def open(self, stream: Any, schema: pa.Schema, *, compression: str, header: bool, fresh: bool
             ) -> PartFileWriter:
        """A writer into ``stream`` (``fresh``: the file is new, not reopened after recovery)."""

    @abstractmethod
    def rows(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[list[Any]]:
        """The rows of the finished file at ``path`` as its readers read it, each a list of plain values
        (:func:`splitsource.sink._text.plain_storage`) in the order of ``fields``."""

    TEXT_CHUNK: ClassVar[int] = 16_384  # rows of a text file turned into Arrow arrays at a time

    def batches(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[dict[str, pa.Array]]:
        """The columns ``fields`` of the file at ``path`` in batches, each a dict of name to array of the fields'
        plain types (by default :meth:`rows` in chunks)."""
        chunk: list[list[Any]] = []
        for row in self.rows(fs, path, fields, header):
            chunk.append(row)
            if len(chunk) == self.TEXT_CHUNK:
                yield _arrays(chunk, fields)
                chunk = []
        if chunk:
            yield _arrays(chunk, fields)


def _arrays(rows: list[list[Any]], fields: list[pa.Field]) -> dict[str, pa.Array]:
    columns = list(zip(*rows, strict=True))
    return {f.name: pa.array(c, plain_storage(f.type)) for f, c in zip(fields, columns, strict=True)}
