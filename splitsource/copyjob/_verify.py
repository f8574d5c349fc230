"""``splitsource verify``: does the committed output hold exactly the source's rows, value for value?

Both sides are reduced to a row count and an order-independent 128-bit checksum, the sums of every row's hash
(:mod:`splitsource.copyjob._rowhash`, vectorized over Arrow columns), computed apart from the copy
(:mod:`splitsource.copyjob._digest`):

- the **source** side from :meth:`Source.reference_rows`: the connector's own client values (the Cassandra
  driver's, the generator's formula in plain Python), never the record emitter that the copy used, read in
  ``parts`` parts by as many worker processes as the machine has cores;
- the **output** side by decoding the files as a reader would (each format's reader in
  :mod:`splitsource.sink.formats`, apart from its writer), a file a call, on the same workers; bucket-column
  values decoded from the directory names.

A lost row, a duplicated row, a changed or dropped value changes the checksum. A connector without
``reference_rows`` is read through its emitter instead; the result then says that it is not independent.

On a mismatch, both sides are read once more keeping each row's hash and its key's hash (``Source.key_columns``),
and joined: the first rows that differ are named by their key, where they are (the source's part, the output's
file and row) and the columns whose values differ. The copy's split ledger (:mod:`splitsource.copyjob._ledger`)
says how many rows each split put into the output; each of those splits is counted in the source again, and the
splits whose counts differ are named.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from serializers import read_envelope
from splitsource._api import Source
from splitsource._errors import OptionsError, SinkError
from splitsource._fs import Store, is_uri, locate, redact, resolve_filesystem, sibling_uri, user_path
from splitsource._names import PART_PREFIX, SINK_DESCRIPTION, SUCCESS_FILE
from splitsource.copyjob._digest import (
    OutputFile,
    Plan,
    SideDigest,
    SourceSpec,
    output_file,
    output_row,
    source_part,
    source_row,
)
from splitsource.copyjob._ledger import read_ledger
from splitsource.copyjob._ownership import read_owner
from splitsource.copyjob._protocol import copy_writer_id
from splitsource.copyjob._words import counted
from splitsource.runtime._source_reader import ReaderMetrics, SourceReader
from splitsource.sink._committer import BucketingGlobalCommitter, metadata_location
from splitsource.sink._files import PartNames, join, writer_of
from splitsource.sink._tables import only_ours, table_format
from splitsource.sink._text import json_fragments, plain_storage

__all__ = ["Digest", "RowDifference", "SplitCheck", "SplitDifference", "VerifyResult", "check_splits", "verify"]

_MOD = 1 << 64
PARTS_PER_WORKER = 4  # the source's parts per worker process: short parts balance the workers' load


@dataclass
class Digest:
    """Row count and order-independent checksum of a multiset of rows (two 64-bit sums of row hashes)."""

    rows: int = 0
    first: int = 0
    second: int = 0

    def add(self, part: SideDigest) -> None:
        self.rows += part.rows
        self.first = (self.first + part.first) % _MOD
        self.second = (self.second + part.second) % _MOD

    @property
    def checksum(self) -> int:
        return self.first << 64 | self.second

    @property
    def hex(self) -> str:
        return f"{self.checksum:032x}"


@dataclass(frozen=True)
class SplitDifference:
    """A split whose rows in the source now differ from the rows the copy committed of it."""

    split_id: str
    copied: int
    source: int


@dataclass(frozen=True)
class SplitCheck:
    """On a mismatch: the copy's split ledger (:mod:`splitsource.copyjob._ledger`) against the source, split by
    split. ``note`` says why there is no check (no ledger); else ``splits`` splits were compared, the copy committed
    ``copied`` rows of them, and ``differ`` are those whose count differs."""

    splits: int = 0
    copied: int = 0
    differ: tuple[SplitDifference, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class RowDifference:
    """A row that differs: ``kind`` is ``changed`` (its key is on both sides with other values), ``missing`` (in
    the source, not in the output), ``unmatched`` (a row of the source no row of the output equals, for a source
    without key columns), ``extra`` (in the output, not in the source) or ``duplicated`` (more often in
    the output than in the source); ``key`` names it, ``columns`` are those whose values differ (changed only),
    each ``(name, source value, output value)``; ``source_at`` and ``output_at`` say where it was read."""

    kind: str
    key: str
    columns: tuple[tuple[str, str, str], ...] = ()
    source_at: str = ""
    output_at: str = ""

    def text(self) -> str:
        where = "; ".join(w for w in (self.source_at and f"source: {self.source_at}",
                                      self.output_at and f"output: {self.output_at}") if w)
        if self.kind == "changed":
            shown = ", ".join(f"column '{name}': source {s}, output {o}" for name, s, o in self.columns)
            what = shown or "values differ"
        else:
            what = {"missing": "missing from the output", "extra": "in the output, not in the source",
                    "unmatched": "in the source, not in the output with these values",
                    "duplicated": "more often in the output than in the source"}[self.kind]
        return f"  {self.key}: {what} ({where})"


_NAMED = 20  # splits named in the text; the JSON-able result has them all
_ROWS_NAMED = 5  # rows that differ named on a mismatch


@dataclass(frozen=True)
class VerifyResult:
    source: Digest
    output: Digest
    independent: bool = True
    splits: SplitCheck | None = None  # on a mismatch only
    foreign: tuple[str, ...] = ()  # data files in the output that no commit of the copy made
    rows: tuple[RowDifference, ...] = ()  # on a mismatch: the first rows that differ
    lost: int = 0  # on a mismatch: rows of the source the output lacks (a changed row among them)
    extra: int = 0  # on a mismatch: rows of the output the source lacks (a changed row among them)

    @property
    def match(self) -> bool:
        return (self.source.rows == self.output.rows and self.source.checksum == self.output.checksum
                and not self.foreign)

    def text(self) -> str:
        verdict = "MATCH" if self.match else "MISMATCH"
        lines = [f"{verdict}: source {counted(self.source.rows, 'row')} (checksum {self.source.hex}), output "
                 f"{counted(self.output.rows, 'row')} (checksum {self.output.hex})"]
        if self.foreign:
            shown = ", ".join(self.foreign[:_NAMED])
            more = f" and {len(self.foreign) - _NAMED:,} more" if len(self.foreign) > _NAMED else ""
            lines.append(f"{len(self.foreign):,} data file(s) in the output were not written by this copy, and "
                         f"every reader of the directory reads them too: {shown}{more}")
        if not self.match and self.source.rows != self.output.rows:
            lines.append(f"the output has {self.output.rows - self.source.rows:+,} rows against the source")
        elif not self.match:
            lines.append("same row count, different rows: values differ, or rows are duplicated and others missing")
        if self.rows:
            lines.append(f"{self.lost:,} row(s) of the source are not in the output as they are in the source, "
                         f"{self.extra:,} of the output not in the source; the first {len(self.rows)}:")
            lines.extend(r.text() for r in self.rows)
        if self.splits is not None:
            lines.extend(self._split_lines(self.splits))
        if not self.independent:
            lines.append("note: this connector has no reference_rows(), so the source side was read through the "
                         "same emitter as the copy; a conversion error would not show")
        return "\n".join(lines)

    def _split_lines(self, check: SplitCheck) -> list[str]:
        if check.note:
            return [f"no per-split counts: {check.note}"]
        if not check.differ:
            lines = [f"every split of the copy ({check.splits:,}) holds as many rows in the source as the copy "
                     "committed of it: values differ, not counts"]
            if check.copied != self.output.rows:
                lines = [f"the copy committed {check.copied:,} rows, the output holds {self.output.rows:,}: files "
                         "were added to or removed from the output after the copy"]
            return lines
        lines = [f"{len(check.differ):,} of {check.splits:,} splits differ (rows committed by the copy, rows in "
                 "the source now):"]
        for d in check.differ[:_NAMED]:
            lines.append(f"  split {d.split_id}: copied {d.copied:,}, source {d.source:,} ({d.source - d.copied:+,})")
        if len(check.differ) > _NAMED:
            lines.append(f"  and {len(check.differ) - _NAMED:,} more")
        return lines


def _bucket_columns(layout: dict[str, Any]) -> list[str]:
    """The columns whose values the output's paths carry instead of its files (none when the files hold them:
    an Iceberg table's files do, and its readers read them there)."""
    table = table_format(str(layout.get("table_format") or "none"))
    if layout.get("bucketer") != "columns" or (table is not None and table.partition_columns_in_files):
        return []
    return [c.strip() for c in str(layout.get("bucket_columns", "")).split(",") if c.strip()]


def _files(fs: Store, base: str) -> list[tuple[str, str]]:
    out = []
    for info in sorted(fs.list(base, recursive=True), key=lambda i: i.path):
        relative = info.path[len(base) + 1:]
        if not info.is_dir and not any(p.startswith(("_", ".")) for p in relative.split("/")):
            out.append((info.path, relative))
    return out


def foreign_files(output: str, layout: dict[str, Any], token: str | None, records: str = "",
                  table_files: Sequence[str] | None = None) -> tuple[str, ...]:
    """The files under ``output`` (DuckDB and Polars read every one; Spark and pyarrow.dataset skip names that
    start with ``_`` or ``.``) that no commit of the copy with ownership ``token`` made: not named as its part
    files are (another writer's, put there by hand, or a transient file of a copy that has not finished). For a
    table, ``table_files`` (its current files: what its readers read) are looked at instead of the directory."""
    names = PartNames(str(layout.get("part_prefix", PART_PREFIX)), str(layout.get("part_suffix", "")))
    mine = copy_writer_id(token) if token else None
    out = []
    for relative in table_files if table_files is not None else _listed(output, records):
        parsed = names.parse_finished(relative.rsplit("/", 1)[-1])
        # a task is <partition>-<token>, or <partition>-<writer>-<token> since writers carry an id
        if parsed is None or not _COPY_TASK.fullmatch(parsed[0]) or writer_of(parsed[0]) not in (None, mine):
            out.append(relative)
    return tuple(out)


def _listed(output: str, records: str) -> list[str]:
    fs, base = resolve_filesystem(output)
    out = []
    for info in sorted(fs.list(base, recursive=True), key=lambda i: i.path):
        relative = info.path[len(base) + 1:]
        if not (info.is_dir or relative == SUCCESS_FILE or (records and info.path.startswith(records + "/"))):
            out.append(relative)
    return out


_COPY_TASK = re.compile(r"\d{5}(-[A-Za-z0-9]+)?-[0-9a-f]+")


def output_records(output: str, metadata: str = "") -> BucketingGlobalCommitter:
    """The records of a copy's output (where its copy.json, owner and commit log are)."""
    fs, base, meta = metadata_location(output, metadata)
    return BucketingGlobalCommitter(fs, base, PartNames(PART_PREFIX, ""), meta=meta)


def read_layout(records: BucketingGlobalCommitter, output: str) -> dict[str, Any]:
    path = join(records.meta, SINK_DESCRIPTION)
    try:
        return dict(json.loads(records.fs.read_text(path)))
    except (FileNotFoundError, NotADirectoryError):  # a wrong path, told apart from a mismatch (exit 1)
        raise OptionsError(f"option 'output' {redact(output)} has no records of a copy ({path} is missing): it was "
                           "not written by splitsource copy") from None
    except OSError as exc:
        raise SinkError(f"{redact(output)} has no readable records of a copy ({path}: {exc}): it was not written "
                        "by splitsource copy") from None
    except (ValueError, UnicodeDecodeError):
        raise SinkError(f"{path} is corrupt") from None


def check_splits(source: Source[Any, Any, Any, Any], output: str, checkpoint: str | None,
                 records: BucketingGlobalCommitter) -> SplitCheck:
    """Count, split by split, the source's rows of every split in the copy's ledger; compare with the ledger."""
    if checkpoint is None:
        owner = read_owner(records)
        if owner is None or not owner.get("checkpoint"):
            return SplitCheck(note=f"{redact(output)} names no checkpoint (its records hold no owner.json)")
        checkpoint = str(owner["checkpoint"])
        default = sibling_uri(output, ".checkpoint")
        if checkpoint == redact(default):  # kept without its credentials: the default beside the output has them
            checkpoint = default
    elif not is_uri(checkpoint):
        checkpoint = os.path.abspath(checkpoint)
    ledger = read_ledger(locate(checkpoint), records.last_stream_batch)
    if ledger is None:
        return SplitCheck(note=f"checkpoint {redact(checkpoint)} has no split ledger (it was removed, or the copy "
                               "was made by a splitsource that kept none)")
    serializer = source.split_serializer()
    pending = iter([read_envelope(serializer, c.split) for c in ledger.values()])
    metrics = ReaderMetrics()
    reader = SourceReader(source, lambda: next(pending, None), name="verify-splits", metrics=metrics)
    try:
        for _ in reader.read():
            pass
    finally:
        reader.close()
    differ = tuple(SplitDifference(c.split_id, c.rows, metrics.split_rows.get(c.split_id, 0))
                   for c in ledger.values() if metrics.split_rows.get(c.split_id, 0) != c.rows)
    return SplitCheck(len(ledger), sum(c.rows for c in ledger.values()), differ)




# -- running both sides ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Work:
    """Both sides' calls: the source's parts, then the output's files."""

    spec: SourceSpec
    parts: int
    files: tuple[OutputFile, ...]
    plan: Plan

    def calls(self, plan: Plan) -> list[tuple[Callable[..., SideDigest], tuple[Any, ...]]]:
        source: list[tuple[Callable[..., SideDigest], tuple[Any, ...]]] = [
            (source_part, (self.spec, part, self.parts, plan)) for part in range(self.parts)]
        return source + [(output_file, (f, plan)) for f in self.files]


def _run(work: _Work, plan: Plan, workers: int) -> tuple[list[SideDigest], list[SideDigest]]:
    """Every call of ``work`` under ``plan``: in ``workers`` processes, or here when the source stays here; an
    incremental copy's output reduced to the newest version of each row."""
    calls = work.calls(plan)
    if work.spec.local is not None or workers <= 1:
        results = [function(*args) for function, args in calls]
    else:
        from splitsource.copyjob._calls import CallPool  # not at import: python -m of it imports this package

        with CallPool(min(workers, len(calls))) as pool:
            results = pool.map(calls)
    if plan.changes:
        _newest_only(results[work.parts:], bool(plan.keys))
    return results[:work.parts], results[work.parts:]


def _newest_only(files: Sequence[SideDigest], by_key: bool) -> None:
    """An incremental copy's files as the source is (docs/incremental.md): of each key's rows, the one of the latest
    run, unless that is a delete (a source without key columns only appends: every row but deletes)."""
    keys = np.concatenate([np.zeros(0, np.uint64), *(f.detail()[1] for f in files)])
    runs = np.concatenate([np.zeros(0, np.int64), *(r for f in files for r in f.runs)])
    kept = ~np.concatenate([np.zeros(0, bool), *(d for f in files for d in f.deleted)])
    if by_key and len(keys):
        order = np.lexsort((runs, keys))  # by key, then run: a key's newest row is its last
        newest = np.ones(len(order), bool)
        newest[:-1] = keys[order][1:] != keys[order][:-1]
        kept[order[~newest]] = False
    start = 0
    for f in files:
        n = len(f.detail()[1])
        f.keep(np.flatnonzero(kept[start:start + n]))
        start += n


def verify(source: Source[Any, Any, Any, Any], output: str | os.PathLike[str],
           checkpoint: str | os.PathLike[str] | None = None,
           metadata: str = "", workers: int = 0) -> VerifyResult:
    """Compare the committed output with the source; on a mismatch, name the first rows that differ and compare
    the copy's rows per split (from the split ledger of ``checkpoint``, by default the one the output's owner file
    names) with the source's. ``metadata``: where the copy kept the output's records, if it was given that sink
    option. ``workers``: processes reading both sides (0: one per core; 1: all in this process)."""
    output = user_path("option 'output'", output)
    checkpoint = None if checkpoint is None else user_path("option 'checkpoint'", checkpoint)
    records = output_records(output, metadata)
    layout = read_layout(records, output)
    owner = read_owner(records)
    records.table = table_format(str(layout.get("table_format", "none")))
    records.table_catalog = str(layout.get("iceberg_catalog", ""))
    # a table's output is the files of its current version (what its readers read), not the directory's
    table_files = records.table.data_files(records) if records.table is not None else None
    foreign = foreign_files(output, layout, str(owner["token"]) if owner else None, records.meta, table_files)
    if foreign and layout.get("changes") == "upserts" and records.table is not None and only_ours(records):
        foreign = ()  # an incremental copy's merges rewrote files under their own names, in commits it tagged
    workers = workers or os.cpu_count() or 1
    probe = source.reference_rows()
    independent = probe is not None
    close = getattr(probe, "close", None)
    if close is not None:
        close()  # a generator, not started
    spec = SourceSpec.of(source, in_process=workers <= 1)
    parts = workers * PARTS_PER_WORKER if independent else 1
    fs, base = resolve_filesystem(output)
    fmt = str(layout["format"])
    header = bool(layout.get("csv_header", True))
    found = [(join(base, r), r) for r in table_files] if table_files is not None else _files(fs, base)
    files = tuple(OutputFile(output, path, relative, fmt, header) for path, relative in found)
    schema = source.schema()
    keys = tuple(k for k in source.key_columns() if k in schema.names)
    plan = Plan(schema, tuple(_bucket_columns(layout)), frozenset(source.volatile_columns()), keys,
                changes=bool(layout.get("changes")) and records.table is None)
    work = _Work(spec, parts, files, plan)
    source_digests, output_digests = _run(work, plan, workers)
    result = VerifyResult(_total(source_digests), _total(output_digests), independent, foreign=foreign)
    if result.match:
        return result
    lost, extra, named = _differences(work, workers)
    return replace(result, rows=named, lost=lost, extra=extra,
                   splits=check_splits(source, output, checkpoint, records))


def _total(digests: Sequence[SideDigest]) -> Digest:
    total = Digest()
    for d in digests:
        total.add(d)
    return total


# -- naming the rows that differ ----------------------------------------------------------------------------------


def _located(digests: Sequence[SideDigest]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row hashes, key hashes, call index, row index in the call) of every row of one side, in reading order."""
    rows, keys, calls, index = [], [], [], []
    for i, d in enumerate(digests):
        r, k = d.detail()
        rows.append(r)
        keys.append(k)
        calls.append(np.full(len(r), i, dtype=np.int64))
        index.append(np.arange(len(r), dtype=np.int64) if d.positions is None else d.positions.astype(np.int64))
    if not rows:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, empty, np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(rows), np.concatenate(keys), np.concatenate(calls), np.concatenate(index)


def _unmatched(mine: tuple[np.ndarray, np.ndarray], theirs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Indices into ``mine`` of the rows (as (row hash, key hash) pairs, a multiset) that ``theirs`` lacks: of n
    equal rows against m on the other side, the last n - m."""
    pairs_mine = np.stack([mine[1], mine[0]], axis=1)
    pairs_theirs = np.stack([theirs[1], theirs[0]], axis=1)
    pairs, inverse, counts = np.unique(pairs_mine, axis=0, return_inverse=True, return_counts=True)
    other, other_counts = np.unique(pairs_theirs, axis=0, return_counts=True)
    pairs, other = np.ascontiguousarray(pairs), np.ascontiguousarray(other)
    found = np.zeros(len(pairs), dtype=np.int64)
    if len(other):
        view = np.dtype([("k", np.uint64), ("r", np.uint64)])
        at = np.searchsorted(other.view(view).ravel(), pairs.view(view).ravel())
        at_clipped = np.minimum(at, len(other) - 1)
        hit = (at < len(other)) & (other[at_clipped] == pairs).all(axis=1)
        found[hit] = other_counts[at_clipped[hit]]
    surplus = counts - np.minimum(counts, found)  # copies of each pair that the other side lacks
    # the occurrences of a pair in reading order; keep those past the other side's count
    order = np.argsort(inverse.ravel(), kind="stable")
    group = inverse.ravel()[order]
    starts = np.searchsorted(group, np.arange(len(pairs)))
    rank = np.arange(len(order)) - starts[group]
    keep = rank >= (counts - surplus)[group]
    return np.sort(order[keep])


def _differences(work: _Work, workers: int) -> tuple[int, int, tuple[RowDifference, ...]]:
    """Read both sides again keeping every row's hashes: the source's rows the output lacks, the output's rows the
    source lacks, and the first few of them named."""
    plan = replace(work.plan, detail=True)
    source_digests, output_digests = _run(work, plan, workers)
    s_rows, s_keys, s_call, s_index = _located(source_digests)
    o_rows, o_keys, o_call, o_index = _located(output_digests)
    labels = [d.label for d in source_digests]
    lost = _unmatched((s_rows, s_keys), (o_rows, o_keys))  # source rows the output lacks
    extra = _unmatched((o_rows, o_keys), (s_rows, s_keys))  # output rows the source lacks
    lost_keys = set(s_keys[lost].tolist())
    source_keys = set(s_keys.tolist())
    output_first: dict[int, int] = {}
    for i in extra.tolist():
        output_first.setdefault(int(o_keys[i]), i)
    named: list[RowDifference] = []
    for i in lost.tolist()[:_ROWS_NAMED]:
        key = int(s_keys[i])
        other = output_first.get(key) if plan.keys else None
        named.append(_name(work, plan, labels, (int(s_call[i]), int(s_index[i])),
                           None if other is None else (int(o_call[other]), int(o_index[other]))))
    for i in extra.tolist():
        if len(named) >= _ROWS_NAMED:
            break
        key = int(o_keys[i])
        if key in lost_keys and plan.keys:
            continue  # named above as changed
        kind = "duplicated" if key in source_keys else "extra"
        named.append(_name(work, plan, labels, None, (int(o_call[i]), int(o_index[i])), kind))
    return len(lost), len(extra), tuple(named)


def _shown(value: Any, t: pa.DataType | None) -> str:
    """A value as a user reads it: the JSON text the sink writes of its type (a timestamp in ISO 8601), cut at 60
    characters."""
    text = repr(value)
    if t is not None and value is not None:
        try:
            text = json_fragments(pa.array([value], plain_storage(t)).cast(t))[0]
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
    return text if len(text) <= 60 else text[:57] + "..."


def _name(work: _Work, plan: Plan, labels: Sequence[str], at_source: tuple[int, int] | None,
          at_output: tuple[int, int] | None, kind: str = "") -> RowDifference:
    """One row that differs, read again from where it is: its key, and the columns whose values differ."""
    source_values: dict[str, Any] = {}
    output_values: dict[str, Any] = {}
    source_hashes: dict[str, int] = {}
    output_hashes: dict[str, int] = {}
    source_at = output_at = ""
    if at_source is not None:
        part, index = at_source
        source_values, source_hashes = source_row(work.spec, part, work.parts, plan, index)
        source_at = labels[part] or (f"part {part + 1} of {work.parts}" if work.parts > 1 else "the source")
    if at_output is not None:
        number, index = at_output
        file = work.files[number]
        output_values, output_hashes = output_row(file, plan, index)
        output_at = f"{file.relative}, row {index + 1:,}"
    values = source_values or output_values
    types = {f.name: f.type for f in plan.schema}
    texts = {} if source_values else {b: None for b in plan.buckets}  # an output row's bucket values are text

    def shown(name: str, value: Any, text_only: bool = False) -> str:
        return _shown(value, None if text_only else types.get(name))

    key_names = plan.keys or tuple(f.name for f in plan.schema)[:4]
    key = ", ".join(f"{k}={shown(k, values.get(k), k in texts)}" for k in key_names)
    key = f"key {key}" if plan.keys else f"row {key}{', ...' if len(plan.schema) > len(key_names) else ''}"
    if at_source is not None and at_output is not None:
        columns = tuple((name, shown(name, source_values.get(name)),
                         shown(name, output_values.get(name), name in plan.buckets))
                        for name in source_hashes if source_hashes[name] != output_hashes.get(name))
        return RowDifference("changed", key, columns, source_at, output_at)
    return RowDifference(kind or ("missing" if plan.keys else "unmatched"), key, (), source_at, output_at)

