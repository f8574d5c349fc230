"""BucketingSinkWriter: the FLIP-143 ``SinkWriter`` of the bucketing sink (one per task; not thread-safe).

Contract:

- :meth:`write` puts every row in its bucket's in-progress file; at most one in-progress file per bucket and
  writer. A file rolls (closes and becomes pending) when it reaches ``part_size`` or, for the buckets not written
  for ``inactivity`` seconds, at the next call.
- at most ``max_open_files`` files are open. Past it, as Spark falls back from concurrent writers to sorting, the
  rows of buckets without an open file are *sorted out*: each batch's such rows copied into one batch with their
  buckets and, when the memory budget needs it, sorted by bucket and written as a run (an Arrow IPC file named as
  an in-progress file, so that a sweep removes it after a failure). :meth:`prepare_commit` merges the runs bucket
  by bucket, so each of those buckets gets one file, written and rolled in turn, never more open than the cap.
- memory: the rows buffered by all open files (Parquet row groups being built) and the rows sorted out stay within
  ``buffer_mb`` after every :meth:`write`: past it, the largest buffer is written out as a row group, or the
  sorted-out rows as a run when they are the larger. Sorted-out rows past a quarter of the budget are written as a
  run anyway: sorting them copies them once, and that copy is kept small.
- :meth:`prepare_commit` returns the files that became pending since the last call (the committables). Bulk
  formats, and every format when ``end_of_input`` is true, roll all open files first.
- :meth:`snapshot_state` flushes row-format files and records their valid length. A writer built with that state
  (after a crash) cuts each file back to its valid length (or writes a ``.valid-length`` file where the file system
  cannot truncate), makes it pending and returns it from the next :meth:`prepare_commit`: the data of a completed
  checkpoint is kept, what was written after it is dropped.
- counters are never reused: the next counter is part of the state, and a name that already exists is skipped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from splitsource._errors import SinkError
from splitsource._fs import Store, as_store, resolve_filesystem
from splitsource.sink._bucketers import Bucketer
from splitsource.sink._files import InProgressFile, PendingFile, WriterState, join
from splitsource.sink._options import BucketingSinkOptions
from splitsource.sink._tables import partition_metadata, table_format
from splitsource.sink.formats import PartFileWriter, combine_batches

__all__ = ["TOKEN_BITS", "BucketingSinkWriter", "new_task_token", "write_files"]


RUN_BATCH_ROWS = 8192  # rows per batch of a run file: the merge holds one batch per run in memory


@dataclass(frozen=True)
class _Run:
    """Sorted-out rows written to disk, sorted by bucket: the IPC file, and each bucket's rows [start, end)."""

    path: str
    index: tuple[tuple[str, int, int], ...]


class _RunCursor:
    """Reads rows [start, end) of a run file; the merge asks in bucket order, so the batch read last is kept."""

    def __init__(self, file: pa.NativeFile) -> None:
        self._file = file
        self._reader = pa.ipc.open_file(file)
        self._at = -1
        self._batch: pa.RecordBatch | None = None

    def rows(self, start: int, end: int) -> list[pa.RecordBatch]:
        out = []
        for number in range(start // RUN_BATCH_ROWS, (end - 1) // RUN_BATCH_ROWS + 1):
            if number != self._at:
                self._batch, self._at = self._reader.get_batch(number), number
            assert self._batch is not None
            first = number * RUN_BATCH_ROWS
            lo, hi = max(start, first) - first, min(end, first + RUN_BATCH_ROWS) - first
            out.append(self._batch.slice(lo, hi - lo))
        return out

    def close(self) -> None:
        self._file.close()


@dataclass
class _OpenFile:
    bucket: str
    counter: int
    writer: PartFileWriter
    rows: int = 0
    last_write: float = 0.0


class BucketingSinkWriter:
    """Writes Arrow batches into bucketed part files under ``base`` (see the module docstring)."""

    def __init__(
        self,
        options: BucketingSinkOptions,
        schema: pa.Schema,
        fs: Store | Any,
        base: str,
        *,
        task: str | None = None,
        state: WriterState | None = None,
        clock: Callable[[], float] = time.time,
        ticker: Callable[[], float] = time.monotonic,
        unique_task: bool = False,
    ) -> None:
        if (task is None) == (state is None):
            raise SinkError("BucketingSinkWriter needs either a task name or a state to restore")
        self._options = options
        self._names = options.names
        self._format = options.file_format
        self._format.check(schema)
        self._bucketer: Bucketer = options.make_bucketer()
        check = getattr(self._bucketer, "check", None)
        if check is not None:
            check(schema)
        self._file_schema = schema if self._bucketer.in_files else pa.schema(
            [f for f in schema if f.name not in self._bucketer.columns])
        table = table_format(options.table_format)
        # a table's partition values must be ones its readers can read back (an unpartitioned table has none)
        self._check_rows = None if table is None or not self._bucketer.columns else partial(
            table.check_partition_values, partitions=self._bucketer.columns)
        if table is not None:
            table.check_schema(schema, self._bucketer.columns)
            # the bucket columns' names and types, for the table's partition columns (Delta's files leave them out)
            self._file_schema = self._file_schema.with_metadata(
                partition_metadata([schema.field(c) for c in self._bucketer.columns]))
        self._fs = as_store(fs)
        # an object store: an object appears whole when its upload completes, and a rename is a copy; a part is
        # uploaded under its pending name (the in-progress state is the upload itself), so a commit copies it once
        self._direct = self._fs.capabilities.rename_is_copy
        self._base = base
        self._clock = clock  # processing time, for the date-time bucketer
        self._ticker = ticker  # elapsed time, for inactivity
        self._open: dict[str, _OpenFile] = {}  # in order of their last write: the first is the least recent
        self._pending: list[PendingFile] = []
        self._buffered = 0  # bytes all open files hold in memory (sum of their writers' ``buffered``)
        self.spills = 0  # buffers written out early to keep within buffer_mb
        self._sorted: list[tuple[pa.RecordBatch, pa.DictionaryArray]] = []  # rows past max_open_files, buckets
        self._sorted_bytes = 0
        self._runs: list[_Run] = []
        self.runs_written = 0  # runs of sorted-out rows written to disk (they are merged by prepare_commit)
        self._unique = unique_task and state is None
        self._made: set[str] = set()  # bucket directories this writer made
        if state is not None:
            self._task = state.task
            self._counter = state.next_counter
            for item in state.in_progress:
                self._recover(item)
        else:
            assert task is not None
            self._task = task
            self._counter = 0

    @property
    def task(self) -> str:
        return self._task

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._check_rows is not None:
            self._check_rows(batch)
        now = self._ticker()
        out: list[tuple[str, pa.RecordBatch]] = []  # rows of buckets past max_open_files, to sort out
        for bucket, rows in self._bucketer.split(batch, self._clock()):
            if rows.num_rows == 0:
                continue
            current = self._open.get(bucket)
            if current is not None and current.writer.length >= self._options.part_size_bytes:
                self._roll(bucket)
                current = None
            if current is None and len(self._open) >= self._options.max_open_files:
                out.append((bucket, rows))
                continue
            if current is None:
                current = self._open_file(bucket)
            else:
                self._open[bucket] = self._open.pop(bucket)  # now the most recently written
            self._append(current, rows)
            current.last_write = now
        if out:
            self._sort_out(out)
        self._roll_inactive(now)

    @property
    def open_files(self) -> int:
        """In-progress files open now; at most ``max_open_files``."""
        return len(self._open)

    @property
    def buffered_bytes(self) -> int:
        """What the open files and the sorted-out rows hold in memory now; at most ``buffer_mb`` after every
        :meth:`write`."""
        return self._buffered + self._sorted_bytes

    def _append(self, current: _OpenFile, rows: pa.RecordBatch) -> None:
        """Write ``rows`` into an open file, counting what it buffers, and keep to the budget."""
        before = current.writer.buffered
        current.writer.write(rows)
        self._buffered += current.writer.buffered - before
        current.rows += rows.num_rows
        self._keep_to_budget()

    def _keep_to_budget(self) -> None:
        """Hudi's whole-buffer budget: while the buffers of all open buckets and the sorted-out rows pass
        ``buffer_mb``, write out the largest buffer (a row group; the file stays open), or the sorted-out rows as a
        run when they are the larger."""
        if self._sorted_bytes > self._options.buffer_bytes // 4:  # a run is sorted by a copy: keep that small
            self._write_run()
        while self.buffered_bytes > self._options.buffer_bytes:
            largest = max(self._open.values(), key=lambda f: f.writer.buffered, default=None)
            if self._sorted and (largest is None or self._sorted_bytes >= largest.writer.buffered):
                self._write_run()
                continue
            if largest is None:
                break
            before = largest.writer.buffered
            largest.writer.spill()
            self._buffered -= before - largest.writer.buffered
            self.spills += 1

    def _sort_out(self, parts: list[tuple[str, pa.RecordBatch]]) -> None:
        """Keep one batch's rows of buckets without an open file, copied into one batch with each row's bucket
        (slices would keep the whole batch in memory, and a Python object per bucket)."""
        names = [bucket for bucket, _ in parts]
        rows = combine_batches([r for _, r in parts], self._file_schema)
        codes = np.repeat(np.arange(len(parts), dtype=np.int32), [r.num_rows for _, r in parts])
        keys = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names, pa.string()))
        self._sorted.append((rows, keys))
        self._sorted_bytes += rows.nbytes + keys.nbytes
        self._keep_to_budget()

    def _write_run(self) -> None:
        """Write the sorted-out rows, sorted by bucket, into a run file (batches of ``RUN_BATCH_ROWS``), and
        forget them."""
        import pyarrow.compute as pc
        if not self._sorted:
            return
        rows = pa.Table.from_batches([r for r, _ in self._sorted], self._file_schema)
        keys = pa.chunked_array([k.cast(pa.string()) for _, k in self._sorted], pa.string())
        self._sorted, self._sorted_bytes = [], 0
        order = pc.sort_indices(keys)
        runs = pc.run_end_encode(keys.take(order).combine_chunks())
        ordered = rows.take(order).combine_chunks()
        del rows, keys, order
        index, start = [], 0
        for end, bucket in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
            index.append((bucket, start, end))
            start = end
        path = self._path("", self._names.in_progress(self._task, self._next_counter("")))
        with self._fs.open_output(path) as stream, pa.ipc.new_file(stream, self._file_schema) as writer:
            for part in ordered.to_batches(max_chunksize=RUN_BATCH_ROWS):
                writer.write_batch(part)
        self._runs.append(_Run(path, tuple(index)))
        self.runs_written += 1

    def _merge_sorted_out(self) -> None:
        """Write every sorted-out row into its bucket: each bucket's rows of every run into one file, bucket after
        bucket; buckets that have an open file now go first and get them in that file, so a file rolled to make
        room is never needed again."""
        if not self._runs and not self._sorted:
            return
        self._write_run()  # what is still in memory, as one more run: the merge then reads runs only
        cursors = [_RunCursor(self._fs.open_input(run.path)) for run in self._runs]
        where = [{bucket: (start, end) for bucket, start, end in run.index} for run in self._runs]
        buckets = sorted(set().union(*where), key=lambda b: (b not in self._open, b))
        now = self._ticker()
        for bucket in buckets:
            current = self._open.get(bucket)
            was_open = current is not None
            if current is None:
                while len(self._open) >= self._options.max_open_files:  # make room for one
                    self._roll(next(iter(self._open)))
                current = self._open_file(bucket)
            for cursor, found in zip(cursors, where, strict=True):
                if bucket not in found:
                    continue
                for rows in cursor.rows(*found[bucket]):
                    if current.writer.length >= self._options.part_size_bytes:
                        self._roll(bucket)
                        current = self._open_file(bucket)
                    self._append(current, rows)
            current.last_write = now
            if not was_open:
                self._roll(bucket)  # written whole: close it before the next one opens
        for cursor in cursors:
            cursor.close()
        for run in self._runs:
            self._fs.delete(run.path)
        self._runs.clear()

    def prepare_commit(self, end_of_input: bool = False) -> list[PendingFile]:
        """The files that became pending since the last call; rolls every open file for bulk formats, on object
        stores and at the end of input, and the ones over size or inactive otherwise."""
        self._merge_sorted_out()
        now = self._ticker()
        for bucket in list(self._open):
            current = self._open[bucket]
            # on an object store an open file is an unfinished upload, which no state can name: it rolls too
            if (end_of_input or self._format.bulk or self._direct
                    or current.writer.length >= self._options.part_size_bytes
                    or now - current.last_write >= self._options.inactivity_s):
                self._roll(bucket)
        pending, self._pending = self._pending, []
        return pending

    def snapshot_state(self) -> WriterState:
        """Flush the open row-format files and return the state to restore from (bulk files never stay open
        across a :meth:`prepare_commit`, so they have nothing to record)."""
        self._merge_sorted_out()  # sorted-out rows are in no file a state can name: write them into their buckets
        files = []
        for current in self._open.values():
            valid_length = current.writer.flush()
            if not self._direct:  # the state is a promise that these bytes survive: make them durable first
                name = self._names.in_progress(self._task, current.counter)
                self._fs.sync(self._path(current.bucket, name), "snapshot.file")
            files.append(InProgressFile(current.bucket, current.counter, valid_length, current.rows))
        if not self._direct:  # ...and the names it gives them
            for bucket in sorted({f.bucket for f in files}):
                self._fs.sync_dir(join(self._base, bucket) if bucket else self._base, "snapshot.dir")
        return WriterState(self._task, self._counter, tuple(files))

    def abort(self) -> None:
        """Close open files without making them pending; they and the runs stay in-progress for the next sweep to
        remove."""
        self._buffered = 0
        self._sorted, self._sorted_bytes = [], 0
        self._runs.clear()
        for current in self._open.values():
            try:
                current.writer.close()
            except Exception:  # noqa: BLE001 - best effort on an already failing path
                pass
        self._open.clear()

    # -- internals ---------------------------------------------------------------------------------------------

    def _path(self, bucket: str, name: str) -> str:
        return join(self._base, bucket, name)

    def _exists(self, path: str) -> bool:
        return self._fs.exists(path)

    def _next_counter(self, bucket: str) -> int:
        """The next counter, creating ``bucket``'s directory; a restored counter could meet a file made after the
        snapshot: a name in use is never reused."""
        while True:
            counter = self._counter
            self._counter += 1
            if self._unique:  # the task's name holds a token of its own: nobody else made these names
                break
            names = (self._names.in_progress(self._task, counter), self._names.pending(self._task, counter),
                     self._names.finished(self._task, counter))
            if not any(self._exists(self._path(bucket, n)) for n in names):
                break
        if bucket not in self._made:
            self._fs.make_dirs(join(self._base, bucket) if bucket else self._base)
            self._made.add(bucket)
        return counter

    def _open_file(self, bucket: str) -> _OpenFile:
        counter = self._next_counter(bucket)
        name = (self._names.pending if self._direct else self._names.in_progress)(self._task, counter)
        stream = self._fs.open_output(self._path(bucket, name))
        writer = self._format.open(stream, self._file_schema, compression=self._options.compression,
                                   header=self._options.csv_header, fresh=True)
        current = _OpenFile(bucket, counter, writer, last_write=self._ticker())
        self._open[bucket] = current
        return current

    def _roll(self, bucket: str) -> None:
        current = self._open.pop(bucket)
        self._buffered -= current.writer.buffered
        size = current.writer.close()
        if not self._direct:
            source = self._path(bucket, self._names.in_progress(self._task, current.counter))
            self._fs.sync(source, "part.file")  # its bytes are durable before its name says it is complete
            self._fs.move(source, self._path(bucket, self._names.pending(self._task, current.counter)))
        self._pending.append(PendingFile(bucket, self._task, current.counter, current.rows, size))

    def _roll_inactive(self, now: float) -> None:
        limit = self._options.inactivity_s
        for bucket in [b for b, f in self._open.items() if now - f.last_write >= limit]:
            self._roll(bucket)

    def _recover(self, item: InProgressFile) -> None:
        """BucketingSink's handleRestoredBucketState for one file that was open at the snapshot."""
        in_progress = self._path(item.bucket, self._names.in_progress(self._task, item.counter))
        pending = self._path(item.bucket, self._names.pending(self._task, item.counter))
        finished = self._path(item.bucket, self._names.finished(self._task, item.counter))
        committable = PendingFile(item.bucket, self._task, item.counter, item.rows, item.valid_length)
        if self._exists(finished) or self._exists(pending):
            # recovered before (the move is the last step), or finished by a commit: finishing is idempotent
            if self._exists(pending):
                self._pending.append(committable)
            return
        if not self._exists(in_progress):
            raise SinkError(f"cannot recover part file {in_progress}: it is gone (was the output directory "
                            "changed by hand?). Its committed rows cannot be restored.")
        found = self._fs.info(in_progress)
        size = (found.size if found is not None else 0) or 0
        if size < item.valid_length:
            raise SinkError(f"cannot recover part file {in_progress}: it holds {size} bytes, fewer than the "
                            f"{item.valid_length} committed")
        if size > item.valid_length and not self._fs.truncate(in_progress, item.valid_length):
            marker = self._path(item.bucket, self._names.valid_length(self._task, item.counter))
            self._fs.write(marker, str(item.valid_length).encode())
        self._fs.sync(in_progress, "recover.part")  # the cut, durable before the file is named pending
        self._fs.move(in_progress, pending)
        self._pending.append(committable)



TOKEN_BITS = 96


def new_task_token() -> str:
    """A writer's token in its file names: 96 random bits, so that no two writers of an output ever share a name
    (a repeated 32-bit token replaced an earlier batch's file about once in a hundred outputs of 10,000 batches)."""
    return uuid.uuid4().hex[: TOKEN_BITS // 4]


def write_files(options: BucketingSinkOptions, batches: Iterable[pa.RecordBatch], partition: int,
                writer_id: str = "") -> list[PendingFile]:
    """One task: write ``batches`` into part files and close them as pending files (the task's committables).

    On any failure the task's in-progress files are removed. Every call has its own token in the file names, so a
    retried or speculative attempt of the same partition never shares a name with another one; ``writer_id`` (a
    write, a streaming query or a copy: letters and digits) goes into the names too, so that its own sweeps and
    ``verify`` tell its files from any other writer's (``<partition>-<writer_id>-<token>``).
    """
    fs, base = resolve_filesystem(options.path)
    writer: BucketingSinkWriter | None = None
    if writer_id and not writer_id.isalnum():
        raise SinkError(f"writer id {writer_id!r} must be letters and digits")
    task = f"{partition:05d}-{writer_id}-{new_task_token()}" if writer_id else f"{partition:05d}-{new_task_token()}"
    try:
        for batch in batches:
            if writer is None:
                writer = BucketingSinkWriter(options, batch.schema, fs, base, task=task, unique_task=True)
            writer.write(batch)
        return writer.prepare_commit(end_of_input=True) if writer is not None else []
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
