"""BucketingSinkWriter: the FLIP-143 ``SinkWriter`` of the bucketing sink (one per task; not thread-safe).

Contract:

- :meth:`write` puts every row in its bucket's in-progress file; at most one in-progress file per bucket and
  writer. A file rolls (closes and becomes pending) when it reaches ``part_size`` or, for the buckets not written
  for ``inactivity`` seconds, at the next call, or, when ``max_open_files`` are open and a new bucket needs one,
  if it is the least recently written.
- memory: the rows buffered by all open files (Parquet row groups being built) stay within ``buffer_mb`` after
  every :meth:`write`: past it, the largest buffer is written out as a row group.
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

import pyarrow as pa
import pyarrow.fs as pafs

from splitsource._errors import SinkError
from splitsource.sink._bucketers import Bucketer
from splitsource.sink._files import InProgressFile, PendingFile, WriterState, join
from splitsource.sink._formats import PartFileWriter, resolve_filesystem, truncate, write_atomically
from splitsource.sink._options import BucketingSinkOptions

__all__ = ["BucketingSinkWriter", "write_files"]


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
        fs: pafs.FileSystem,
        base: str,
        *,
        task: str | None = None,
        state: WriterState | None = None,
        clock: Callable[[], float] = time.time,
        ticker: Callable[[], float] = time.monotonic,
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
        self._file_schema = pa.schema([f for f in schema if f.name not in self._bucketer.columns])
        self._fs = fs
        self._base = base
        self._clock = clock  # processing time, for the date-time bucketer
        self._ticker = ticker  # elapsed time, for inactivity
        self._open: dict[str, _OpenFile] = {}  # in order of their last write: the first is the least recent
        self._pending: list[PendingFile] = []
        self._buffered = 0  # bytes all open files hold in memory (sum of their writers' ``buffered``)
        self.spills = 0  # buffers written out early to keep within buffer_mb
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
        now = self._ticker()
        for bucket, rows in self._bucketer.split(batch, self._clock()):
            if rows.num_rows == 0:
                continue
            current = self._open.get(bucket)
            if current is not None and current.writer.length >= self._options.part_size_bytes:
                self._roll(bucket)
                current = None
            if current is None:
                current = self._open_file(bucket)
            else:
                self._open[bucket] = self._open.pop(bucket)  # now the most recently written
            before = current.writer.buffered
            current.writer.write(rows)
            self._buffered += current.writer.buffered - before
            current.rows += rows.num_rows
            current.last_write = now
            self._keep_to_budget()
        self._roll_inactive(now)

    @property
    def open_files(self) -> int:
        """In-progress files open now; at most ``max_open_files``."""
        return len(self._open)

    @property
    def buffered_bytes(self) -> int:
        """What the open files hold in memory now; at most ``buffer_mb`` after every :meth:`write`."""
        return self._buffered

    def _keep_to_budget(self) -> None:
        """Hudi's whole-buffer budget: while the buffers of all open buckets pass ``buffer_mb``, write out the
        largest one (a row group; the file stays open)."""
        while self._buffered > self._options.buffer_bytes:
            largest = max(self._open.values(), key=lambda f: f.writer.buffered)
            before = largest.writer.buffered
            largest.writer.spill()
            self._buffered -= before - largest.writer.buffered
            self.spills += 1

    def prepare_commit(self, end_of_input: bool = False) -> list[PendingFile]:
        """The files that became pending since the last call; rolls every open file for bulk formats and at the
        end of input, and the ones over size or inactive otherwise."""
        now = self._ticker()
        for bucket in list(self._open):
            current = self._open[bucket]
            if (end_of_input or self._format.bulk or current.writer.length >= self._options.part_size_bytes
                    or now - current.last_write >= self._options.inactivity_s):
                self._roll(bucket)
        pending, self._pending = self._pending, []
        return pending

    def snapshot_state(self) -> WriterState:
        """Flush the open row-format files and return the state to restore from (bulk files never stay open
        across a :meth:`prepare_commit`, so they have nothing to record)."""
        files = []
        for current in self._open.values():
            files.append(InProgressFile(current.bucket, current.counter, current.writer.flush(), current.rows))
        return WriterState(self._task, self._counter, tuple(files))

    def abort(self) -> None:
        """Close open files without making them pending; they stay in-progress for the next sweep to remove."""
        self._buffered = 0
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
        return bool(self._fs.get_file_info(path).type != pafs.FileType.NotFound)

    def _open_file(self, bucket: str) -> _OpenFile:
        while len(self._open) >= self._options.max_open_files:  # roll the least recently written bucket's file
            self._roll(next(iter(self._open)))
        while True:  # a restored counter could meet a file made after the snapshot: never reuse a name
            counter = self._counter
            self._counter += 1
            names = (self._names.in_progress(self._task, counter), self._names.pending(self._task, counter),
                     self._names.finished(self._task, counter))
            if not any(self._exists(self._path(bucket, n)) for n in names):
                break
        self._fs.create_dir(join(self._base, bucket) if bucket else self._base, recursive=True)
        stream = self._fs.open_output_stream(self._path(bucket, names[0]))
        writer = self._format.open(stream, self._file_schema, compression=self._options.compression,
                                   header=self._options.csv_header, fresh=True)
        current = _OpenFile(bucket, counter, writer, last_write=self._ticker())
        self._open[bucket] = current
        return current

    def _roll(self, bucket: str) -> None:
        current = self._open.pop(bucket)
        self._buffered -= current.writer.buffered
        size = current.writer.close()
        source = self._path(bucket, self._names.in_progress(self._task, current.counter))
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
        size = self._fs.get_file_info(in_progress).size or 0
        if size < item.valid_length:
            raise SinkError(f"cannot recover part file {in_progress}: it holds {size} bytes, fewer than the "
                            f"{item.valid_length} committed")
        if size > item.valid_length and not truncate(self._fs, in_progress, item.valid_length):
            marker = self._path(item.bucket, self._names.valid_length(self._task, item.counter))
            write_atomically(self._fs, marker, str(item.valid_length).encode())
        self._fs.move(in_progress, pending)
        self._pending.append(committable)



def write_files(options: BucketingSinkOptions, batches: Iterable[pa.RecordBatch], partition: int) -> list[PendingFile]:
    """One task: write ``batches`` into part files and close them as pending files (the task's committables).

    On any failure the task's in-progress files are removed. Every call has its own token in the file names, so a
    retried or speculative attempt of the same partition never shares a name with another one.
    """
    fs, base = resolve_filesystem(options.path)
    writer: BucketingSinkWriter | None = None
    task = f"{partition:05d}-{uuid.uuid4().hex[:8]}"
    try:
        for batch in batches:
            if writer is None:
                writer = BucketingSinkWriter(options, batch.schema, fs, base, task=task)
            writer.write(batch)
        return writer.prepare_commit(end_of_input=True) if writer is not None else []
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
