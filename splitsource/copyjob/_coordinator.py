"""The coordinator of a copy: the batch protocol (:mod:`splitsource.copyjob._protocol`) run in the copy's own
process, for both engines, which differ only in the :class:`TaskPool` that runs a batch's read tasks.

Per batch:

1. the offset after the batch (enumerator state + the batch's splits, :mod:`splitsource._offsets`) is written to
   ``<checkpoint>/<engine>/offsets/<batch>`` before any split is read (a write-ahead log);
2. the pool's tasks read the batch's splits and write their rows into pending part files through the bucketing
   sink's writer; each task's result is its pending files (the committables), its rows and its reader report;
3. the coordinator commits the batch's pending files once (``commit_batch``), as stream batch ``<batch>`` of this
   copy's query id, which sweeps what is left; just before the commit record it writes the batch's rows per split
   into the split ledger (:mod:`splitsource.copyjob._ledger`).

A re-run recovers the sink (finishes a logged commit, sweeps orphans), finds the last committed batch of its query
id in the sink's log, and replays the batch after it if its offset was written, so a batch is committed once
and committed splits are never read again. The enumerator runs in the coordinator only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from serializers import write_envelope
from splitsource._api import Split
from splitsource._errors import CheckpointError, CopyError, LeaseLostError
from splitsource._fs import Store, child_uri, resolve_filesystem
from splitsource._offsets import (
    PLANS_DIR,
    START_OVER,
    PlanStore,
    check_offset,
    initial_offset,
    next_offset,
    offset_splits,
    reader_options,
    source_fingerprint,
    unsized,
    validated,
)
from splitsource._planning import FrameworkOptions, TaskEnvironment, batch_limit, build_source
from splitsource.copyjob._ledger import split_counts, write_batch
from splitsource.copyjob._protocol import EngineResult, ProgressFn, ReadStats, TaskOutcome, TaskSpec
from splitsource.sink._committer import BucketingGlobalCommitter

__all__ = ["Batch", "TaskPool", "run_batches"]

log = logging.getLogger("splitsource.copy")


@dataclass(frozen=True)
class Batch:
    """One batch for a pool to run: its splits (and their versioned bytes, for the tasks), and the task each of
    its read tasks runs with (its ``readers`` and ``index`` set by the pool)."""

    batch_id: int
    splits: tuple[Split, ...]
    encoded: Mapping[str, bytes]  # split id -> the split's versioned bytes
    task: TaskSpec
    framework: FrameworkOptions


class TaskPool(Protocol):
    """Who runs the read tasks: the local engine's worker processes, or Spark's executors."""

    def run(self, batch: Batch, progress: Callable[[int, int], None]) -> list[TaskOutcome]:
        """Run the batch's read tasks (:func:`splitsource.copyjob._protocol.run_task`) and return each task's
        outcome; ``progress(splits finished, rows written)`` while they run. A failure is a :class:`CopyError`,
        raised once no task of the batch runs any more."""

    def close(self) -> None:
        """Stop what the pool started."""


OffsetLookup = Callable[[int], "dict[str, Any] | None"]


def run_batches(read_options: Mapping[str, str], sink_raw: Mapping[str, str], committer: BucketingGlobalCommitter,
                checkpoint: str, pool: TaskPool, progress: ProgressFn | None, *, query_id: str, directory: str,
                parallelism: int = 0, earlier_offset: OffsetLookup | None = None, writer_id: str = ""
                ) -> EngineResult:
    """Copy every split not committed yet (see the module docstring) with ``pool``; returns what this run did.

    ``query_id`` names this copy's batches in the output's commit log; ``directory`` is the engine's directory in
    the checkpoint; ``parallelism``: the readers the enumerator plans for (at least the source options'); and
    ``earlier_offset(batch)`` the offset of a batch an earlier release logged elsewhere (None: not there);
    ``writer_id``: the copy's id in its part files' names (``verify`` tells the copy's files from others by it).
    The pool is closed before this returns."""
    try:
        framework, source = build_source(read_options)
        fingerprint = source_fingerprint(source)
        serializer = source.split_serializer()
        fs, base = resolve_filesystem(checkpoint)
        root = f"{base}/{directory}"
        fs.make_dirs(f"{root}/offsets")
        committer.recover()
        last_committed = committer.last_stream_batch(query_id)
        last = -1 if last_committed is None else last_committed
        committer.sweep(keep=())  # no task runs now: whatever is transient is an orphan of an earlier run
        parallelism = max(framework.parallelism, parallelism)
        limit = batch_limit(framework)
        plans = PlanStore(child_uri(checkpoint, PLANS_DIR))  # the plan once, offsets hold a cursor
        task = TaskSpec(dict(read_options), dict(sink_raw), TaskEnvironment.current(), writer_id)

        def read_offset(batch_id: int) -> dict[str, Any] | None:
            found = _read_offset(fs, root, batch_id)
            if found is None and earlier_offset is not None:
                found = earlier_offset(batch_id)
            return found

        start = read_offset(last) if last >= 0 else None
        if last >= 0 and start is None:
            raise CheckpointError(f"checkpoint {checkpoint} has no offset for batch {last}, which the output's "
                                  "commit log says it committed; it is incomplete: use the checkpoint the copy was "
                                  "run with")
        done_splits, total = (int(start["taken"]), int(start.get("total", -1))) if start else (0, -1)
        rows = 0
        batches = 0
        stats = ReadStats()
        unsized_batches = False

        def batch_progress(splits_finished: int, batch_rows: int) -> None:
            if progress is not None:
                progress(done_splits + splits_finished, total, rows + batch_rows)

        while True:
            batch_id = last + 1
            end = _replayable(fs, root, batch_id, read_offset)  # logged before a batch never committed: replay it
            if end is None:
                if start is None:  # a fresh start: no offset refers to a plan yet
                    start = initial_offset(source, fingerprint, parallelism, plans)
                    plans.prune(keep=start["plan"])
                end = next_offset(source, fingerprint, start, parallelism, limit, plans)
                if end is None:
                    break  # nothing left: the bounded source is done
                committer.fence()  # a copy that lost its lease logs no offset
                _write_offset(fs, root, batch_id, end)
            check_offset(end, fingerprint)
            total = int(end.get("total", -1))
            splits = tuple(offset_splits(source, end))
            unsized_batches = unsized_batches or unsized(splits, limit)
            encoded = {s.split_id: write_envelope(serializer, s) for s in splits}
            extra = reader_options(fingerprint, end)  # what the live enumerator holds for its readers
            batch_task = replace(task, options={**task.options, **extra}) if extra else task
            try:
                results = pool.run(Batch(batch_id, splits, encoded, batch_task, framework), batch_progress)
            except CopyError:
                committer.fence()  # a task failed because a copy that took over swept its files: touch nothing
                committer.sweep(keep=())  # no task of the batch runs any more: its files are orphans now
                raise
            files = [f for r in results for f in r.files]
            split_rows = {k: v for r in results for k, v in r.report.split_rows.items()}
            counts = split_counts(encoded, split_rows)
            try:
                committer.commit_batch(files, query_id=query_id, batch_id=batch_id,
                                       before_commit=partial(write_batch, checkpoint, query_id, batch_id, counts))
            except LeaseLostError:
                committer.delete_pending(files)  # its own files only: the copy that took over writes beside them
                raise
            # the offset before this batch stays: a commit rolled back (its files removed from outside) replays
            # this batch from it
            _prune_offsets(fs, root, keep_from=batch_id - 1)
            last, start = batch_id, end
            done_splits = int(end["taken"])
            rows += sum(r.rows for r in results)
            batches += 1
            for r in results:
                stats.add(r.report)
    finally:
        pool.close()
    return EngineResult(int(start["taken"]) if start else 0, total, batches, stats, unsized_batches)


def parse_offset(text: str, path: str) -> dict[str, Any]:
    """An offset as the coordinator logs it (JSON), checked; a corrupt one is a :class:`CheckpointError`."""
    try:
        parsed = json.loads(text)
    except (ValueError, TypeError):
        raise CheckpointError(f"the checkpoint's offset {path} is corrupt; {START_OVER}") from None
    return validated(parsed)


def _offset_path(root: str, batch: int) -> str:
    return f"{root}/offsets/{batch}"


def _read_offset(fs: Store, root: str, batch: int) -> dict[str, Any] | None:
    path = _offset_path(root, batch)
    try:
        text = fs.read_text(path)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except UnicodeDecodeError:
        raise CheckpointError(f"the checkpoint's offset {path} is corrupt; {START_OVER}") from None
    return parse_offset(text, path)


def _replayable(fs: Store, root: str, batch: int, read: OffsetLookup) -> dict[str, Any] | None:
    """The offset of ``batch``, the batch after the last committed one, if it can be read. That batch was never
    committed, so nothing of it is in the output: an offset of it that a crash left unreadable (empty, torn) is
    deleted and the batch planned again from the offset before it, with the same splits."""
    try:
        return read(batch)
    except CheckpointError:
        path = _offset_path(root, batch)
        if not fs.exists(path):
            raise
        log.warning("the offset of batch %d, which was never committed, is unreadable (a crash while it was "
                    "written?): planning the batch again", batch)
        fs.delete(path)
        return None


def _write_offset(fs: Store, root: str, batch: int, offset: Mapping[str, Any]) -> None:
    fs.write(_offset_path(root, batch), json.dumps(offset).encode())


def _prune_offsets(fs: Store, root: str, keep_from: int) -> None:
    for info in fs.list(f"{root}/offsets"):
        if info.name.isdigit() and int(info.name) < keep_from:
            fs.delete(info.path)

