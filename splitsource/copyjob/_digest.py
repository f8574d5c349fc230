"""The pieces of ``verify``'s work, one call each, run in worker processes: a part of the source's reference rows or
one output file, reduced to a row count and the two sums of its row hashes (:mod:`splitsource.copyjob._rowhash`).

Both sides hash a row alike: its data columns (every column but the bucket columns) in schema order, of a volatile
column only whether it is null, then the bucket columns as the text the sink names their directories with (``''``
as null). The source side turns the connector's plain values into Arrow arrays with pyarrow's own conversion
(never the record emitter); the output side reads the files as their readers would
(each format's reader, :mod:`splitsource.sink.formats`).

With ``detail``, a call also returns every row's hash and its key's hash (the key columns, else the row), in the
order read: what ``verify`` joins on a mismatch to name the first rows that differ.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from splitsource._api import FixedEnumeratorContext, Source
from splitsource._errors import SinkError, SplitSourceError
from splitsource._fs import resolve_filesystem
from splitsource.copyjob._rowhash import hash_array, hash_rows, lanes
from splitsource.runtime._source_reader import SourceReader
from splitsource.sink._bucketers import decode_values
from splitsource.sink._text import plain_storage
from splitsource.sink.formats import FORMATS

__all__ = ["Plan", "SideDigest", "SourceSpec", "output_file", "output_row", "source_part",
           "source_row"]

_SOURCE_CHUNK = 16_384  # reference rows turned into Arrow arrays at a time


@dataclass(frozen=True)
class Plan:
    """What a row is, for both sides: ``schema`` (the source's), the ``buckets`` columns (named by directory),
    the ``volatile`` ones (compared by null or not), the ``keys`` (what names a row that differs)."""

    schema: pa.Schema
    buckets: tuple[str, ...] = ()
    volatile: frozenset[str] = frozenset()
    keys: tuple[str, ...] = ()
    detail: bool = False
    changes: bool = False  # an incremental copy's files: each row carries its run and change (RUN_COLUMN, ...)

    @property
    def data(self) -> list[pa.Field]:
        return [f for f in self.schema if f.name not in self.buckets]

    def column_hashes(self, arrays: Mapping[str, pa.Array], texts: Mapping[str, pa.Array]) -> dict[str, np.ndarray]:
        """Every compared column's value hashes: data columns from ``arrays``, bucket columns from ``texts``."""
        out = {f.name: hash_array(arrays[f.name], f.name in self.volatile) for f in self.data}
        out.update({b: hash_array(texts[b]) for b in self.buckets})
        return out

    def row_hashes(self, columns: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        return hash_rows([columns[f.name] for f in self.data] + [columns[b] for b in self.buckets], n)

    def key_hashes(self, columns: Mapping[str, np.ndarray], rows: np.ndarray, n: int) -> np.ndarray:
        return hash_rows([columns[k] for k in self.keys], n) if self.keys else rows


@dataclass
class SideDigest:
    """One call's share of a side: rows, the two sums, and with ``detail`` the rows' and keys' hashes in order."""

    rows: int = 0
    first: int = 0
    second: int = 0
    row_hashes: list[np.ndarray] = field(default_factory=list)
    key_hashes: list[np.ndarray] = field(default_factory=list)
    label: str = ""
    runs: list[np.ndarray] = field(default_factory=list)  # an incremental copy's files: each row's run...
    deleted: list[np.ndarray] = field(default_factory=list)  # ...and whether it is a delete
    positions: np.ndarray | None = None  # the rows kept, by their index in the call (None: every row)

    def add(self, plan: Plan, columns: Mapping[str, np.ndarray], n: int) -> None:
        rows = plan.row_hashes(columns, n)
        first, second = lanes(rows)
        self.rows += n
        self.first = (self.first + first) % (1 << 64)
        self.second = (self.second + second) % (1 << 64)
        if plan.detail or plan.changes:
            self.row_hashes.append(rows)
            self.key_hashes.append(plan.key_hashes(columns, rows, n))

    def detail(self) -> tuple[np.ndarray, np.ndarray]:
        """(row hashes, key hashes), in the order read."""
        empty = np.zeros(0, dtype=np.uint64)
        return (np.concatenate(self.row_hashes) if self.row_hashes else empty,
                np.concatenate(self.key_hashes) if self.key_hashes else empty)

    def keep(self, kept: np.ndarray) -> None:
        """Keep only the rows at ``kept`` (indices in the call, ascending): the sums and hashes of those."""
        rows, keys = self.detail()
        self.row_hashes, self.key_hashes, self.positions = [rows[kept]], [keys[kept]], kept
        self.rows = len(kept)
        self.first, self.second = lanes(rows[kept])


# -- the source side ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSpec:
    """How a worker gets the source: its class and options rebuild it (``local`` is the caller's own instance, for
    calls run in this process: a source whose class cannot be imported by name, or a test's patched instance)."""

    cls: type[Source[Any, Any, Any, Any]] | None = None
    options: Any = None
    local: Source[Any, Any, Any, Any] | None = None

    @classmethod
    def of(cls, source: Source[Any, Any, Any, Any], in_process: bool) -> SourceSpec:
        # an instance whose methods were replaced (a test's patch) is not what its class and options rebuild
        patched = any(callable(value) and hasattr(type(source), name) for name, value in vars(source).items())
        if in_process or patched or not importable(type(source)):
            return cls(local=source)
        return cls(type(source), source.options)

    def build(self) -> Source[Any, Any, Any, Any]:
        if self.local is not None:
            return self.local
        assert self.cls is not None
        key = pickle.dumps((self.cls, self.options))
        if key not in _built:  # one instance a worker: a connector reads its metadata once
            _built[key] = self.cls(self.options)
        return _built[key]

    def __getstate__(self) -> dict[str, Any]:
        if self.local is not None:
            raise TypeError("a source in this process does not travel to a worker")
        return {"cls": self.cls, "options": self.options, "local": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


_built: dict[bytes, Source[Any, Any, Any, Any]] = {}


def importable(cls: type) -> bool:
    """Whether a worker process can import ``cls`` by its module and name."""
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return False
    try:
        found: Any = importlib.import_module(cls.__module__)
        for name in cls.__qualname__.split("."):
            found = getattr(found, name)
    except (ImportError, AttributeError):
        return False
    return found is cls


def _reference_rows(source: Source[Any, Any, Any, Any], part: int, parts: int) -> Iterable[tuple[Any, ...]]:
    rows = source.reference_rows(part, parts)
    return rows if rows is not None else _rows_through_emitter(source)


def _rows_through_emitter(source: Source[Any, Any, Any, Any]) -> Iterator[tuple[Any, ...]]:
    """The source read through its own reader and emitter: a connector without ``reference_rows``."""
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    reader = SourceReader(source, enumerator.next_split, name="verify")
    try:
        for batch in reader.read():
            columns = [c.cast(plain_storage(c.type)).to_pylist() for c in batch.columns]
            yield from zip(*columns, strict=True)
    finally:
        reader.close()
        enumerator.close()


def _source_arrays(rows: Sequence[tuple[Any, ...]], plan: Plan) -> dict[str, pa.Array]:
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(plan.schema)
    arrays = {}
    for f, values in zip(plan.schema, columns, strict=True):
        try:
            arrays[f.name] = pa.array(values, plain_storage(f.type))
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            raise SplitSourceError(f"verify: the source's column '{f.name}' holds a value that is not a "
                                   f"{f.type}: {exc}") from None
    return arrays


def _bucket_texts(arrays: Mapping[str, pa.Array], plan: Plan) -> dict[str, pa.Array]:
    """How the sink names the bucket of each row's values (Arrow's cast to string; ``''`` is null)."""
    import pyarrow.compute as pc  # here: a copy's processes never need it

    texts = {}
    for b in plan.buckets:
        typed = arrays[b].cast(plan.schema.field(b).type)
        text = pc.cast(typed, pa.string())
        texts[b] = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    return texts


def _chunks(rows: Iterable[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def source_part(spec: SourceSpec, part: int, parts: int, plan: Plan) -> SideDigest:
    """Part ``part`` of ``parts`` of the source's reference rows, digested."""
    source = spec.build()
    digest = SideDigest()
    for chunk in _chunks(_reference_rows(source, part, parts), _SOURCE_CHUNK):
        arrays = _source_arrays(chunk, plan)
        digest.add(plan, plan.column_hashes(arrays, _bucket_texts(arrays, plan)), len(chunk))
    digest.label = source.reference_label(part, parts) if parts > 1 else ""
    return digest


def source_row(spec: SourceSpec, part: int, parts: int, plan: Plan, index: int) -> tuple[dict[str, Any],
                                                                                         dict[str, int]]:
    """Row ``index`` of a part (as read by :func:`source_part`): its plain values and its columns' hashes."""
    for i, row in enumerate(_reference_rows(spec.build(), part, parts)):
        if i == index:
            arrays = _source_arrays([row], plan)
            hashes = plan.column_hashes(arrays, _bucket_texts(arrays, plan))
            return dict(zip(plan.schema.names, row, strict=True)), {k: int(h[0]) for k, h in hashes.items()}
    raise SplitSourceError(f"verify: the source's part {part + 1} of {parts} has no row {index} any more")


# -- the output side ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputFile:
    output: str  # the output's location as given (its file system: credentials and endpoint included)
    path: str  # the file, in that file system
    relative: str  # the file under the output
    fmt: str
    csv_header: bool = True


def _file_texts(file: OutputFile, plan: Plan, n: int) -> dict[str, pa.Array]:
    values = decode_values(file.relative.rpartition("/")[0], plan.buckets).values()
    return {b: pa.array([v] * n, pa.string()) for b, v in zip(plan.buckets, values, strict=True)}


def output_file(file: OutputFile, plan: Plan) -> SideDigest:
    """One output file, digested as its format's reader reads it."""
    from splitsource.copyjob._protocol import CHANGE_COLUMN, CHANGE_FIELDS, RUN_COLUMN

    fs, _ = resolve_filesystem(file.output)
    digest = SideDigest(label=file.relative)
    fields = plan.data + list(CHANGE_FIELDS) if plan.changes else plan.data
    try:
        for arrays in FORMATS[file.fmt].batches(fs, file.path, fields, file.csv_header):
            n = len(next(iter(arrays.values()))) if arrays else 0
            digest.add(plan, plan.column_hashes(arrays, _file_texts(file, plan, n)), n)
            if plan.changes:
                digest.runs.append(np.asarray(arrays[RUN_COLUMN].to_numpy(zero_copy_only=False), dtype=np.int64))
                digest.deleted.append(np.asarray(arrays[CHANGE_COLUMN].to_numpy(zero_copy_only=False)) == "delete")
    except SinkError:
        raise
    except (ValueError, KeyError, TypeError, pa.ArrowException, UnicodeDecodeError) as exc:
        raise SinkError(f"{file.path}: cannot be read as {file.fmt} of the source's columns: {exc}") from None
    return digest


def output_row(file: OutputFile, plan: Plan, index: int) -> tuple[dict[str, Any], dict[str, int]]:
    """Row ``index`` of an output file: its plain values (bucket columns as their directory's text) and its
    columns' hashes."""
    fs, _ = resolve_filesystem(file.output)
    fields = plan.data
    for i, row in enumerate(FORMATS[file.fmt].rows(fs, file.path, fields, file.csv_header)):
        if i == index:
            arrays = {f.name: pa.array([v], plain_storage(f.type)) for f, v in zip(fields, row, strict=True)}
            texts = _file_texts(file, plan, 1)
            hashes = plan.column_hashes(arrays, texts)
            values = dict(zip([f.name for f in fields], row, strict=True))
            values.update({b: t[0].as_py() for b, t in texts.items()})
            return values, {k: int(h[0]) for k, h in hashes.items()}
    raise SinkError(f"{file.path} has no row {index} any more")
