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
from typing import Any, Protocol, cast

from serializers import write_envelope
from splitsource._api import Split
from splitsource._errors import CheckpointError, CopyError, LeaseLostError
from splitsource._fs import Location
from splitsource._names import OFFSETS_DIR, PLANS_DIR
from splitsource._offsets import (
    START_OVER,
    PlanStore,
    check_offset,
    end_plan,
    initial_offset,
    next_offset,
    offset_splits,
    reader_options,
    source_fingerprint,
    unsized,
    validated,
)
from splitsource._planning import FrameworkOptions, TaskEnvironment, batch_limit
from splitsource.copyjob._ledger import split_counts, write_batch
from splitsource.copyjob._protocol import (
    CopyRun,
    EngineResult,
    ReadStats,
    TaskOutcome,
    TaskSpec,
    copy_writer_id,
    run_query_id,
)

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

    @property
    def framework(self) -> FrameworkOptions:
        return self.task.read.framework


class TaskPool(Protocol):
    """Who runs the read tasks: the local engine's worker processes, or Spark's executors."""

    def run(self, batch: Batch, progress: Callable[[int, int], None]) -> list[TaskOutcome]:
        """Run the batch's read tasks (:func:`splitsource.copyjob._protocol.run_task`) and return each task's
        outcome; ``progress(splits finished, rows written)`` while they run. A failure is a :class:`CopyError`,
        raised once no task of the batch runs any more."""

    def close(self) -> None:
        """Stop what the pool started."""


def run_batches(run: CopyRun, pool: TaskPool, engine: str, parallelism: int = 0) -> EngineResult:
    """Copy every split not committed yet (see the module docstring) with ``pool``; returns what this run did.

    ``engine`` names the engine's directory in the checkpoint and prefixes the copy's query id in the output's
    commit log; ``parallelism``: the readers the enumerator plans for (at least the source options'). The pool is
    closed before this returns."""
    try:
        return _Coordinator(run, pool, engine, parallelism).run()
    finally:
        pool.close()


class _Coordinator:
    """One run of the batch protocol, as two stories: recover, and replay the batch the log says was logged but
    never committed; then plan, write and commit the next batch, until the source is done."""

    def __init__(self, run: CopyRun, pool: TaskPool, engine: str, parallelism: int) -> None:
        self.copy, self.pool, self.committer = run, pool, run.committer
        self.query_id = run_query_id(engine, run.token, run.run)
        # an incremental copy's later runs: a log of their own (batch numbers start again at 0 in each run)
        self.offsets = _OffsetLog(run.checkpoint, engine if run.run == 1 else f"{engine}/run{run.run}")
        self.fingerprint = source_fingerprint(run.source)
        self.parallelism = max(run.read.framework.parallelism, parallelism)
        self.limit = batch_limit(run.read.framework)
        self.plans = PlanStore(run.checkpoint.child(PLANS_DIR))  # the plan once, offsets hold a cursor
        self.task = TaskSpec(run.read, run.sink, TaskEnvironment.current(),
                             copy_writer_id(run.token), run.run if run.marked else 0)
        self.last, self.start = -1, cast("dict[str, Any] | None", None)  # the last committed batch, its offset
        self.done_splits, self.total, self.rows, self.batches = 0, -1, 0, 0
        self.stats, self.unsized = ReadStats(), False

    def run(self) -> EngineResult:
        try:
            self.recover()
            while (end := self.offsets.replayable(self.last + 1) or self.plan_next()) is not None:
                self.write_and_commit(self.last + 1, end)
        finally:
            end_plan(self.fingerprint)
        return EngineResult(int(self.start["taken"]) if self.start else 0, self.total, self.batches, self.stats,
                            self.unsized, dict(self.start.get("instant", {})) if self.start else {}, self.copy.run)

    def recover(self) -> None:
        """Finish or roll back a commit the sink logged, sweep orphans (no task runs now), and start after the last
        batch this copy committed."""
        self.committer.recover()
        last = self.committer.last_stream_batch(self.query_id)
        self.committer.sweep(keep=())
        if last is None:
            return
        self.start = self.offsets.read(last)
        if self.start is None:
            raise CheckpointError(f"checkpoint {self.copy.checkpoint.shown} has no offset for batch {last}, which the "
                                  "output's commit log says it committed; it is incomplete: use the checkpoint the "
                                  "copy was run with")
        self.last = last
        self.done_splits, self.total = int(self.start["taken"]), int(self.start.get("total", -1))

    def plan_next(self) -> dict[str, Any] | None:
        """The offset after the next batch's splits, logged before any of them is read; None: the source is done."""
        if self.start is None:  # a fresh start: no offset refers to a plan yet
            self.start = initial_offset(self.copy.source, self.fingerprint, self.parallelism, self.plans,
                                        self.copy.first_plan)
            self.plans.prune(keep=self.start["plan"])
        end = next_offset(self.copy.source, self.fingerprint, self.start, self.parallelism, self.limit, self.plans)
        if end is not None:
            self.committer.fence()  # a copy that lost its lease logs no offset
            self.offsets.write(self.last + 1, end)
        return end

    def write_and_commit(self, batch_id: int, end: dict[str, Any]) -> None:
        """Read the splits the offset ``end`` names into pending files, and commit them once as ``batch_id``."""
        check_offset(end, self.fingerprint)
        self.total = int(end.get("total", -1))
        splits = tuple(offset_splits(self.copy.source, end))
        self.unsized = self.unsized or unsized(splits, self.limit)
        serializer = self.copy.source.split_serializer()
        encoded = {s.split_id: write_envelope(serializer, s) for s in splits}
        extra = reader_options(self.fingerprint, end)  # what the live enumerator holds for its readers
        task = replace(self.task, read=self.task.read.with_connector(extra))
        results = self.write(Batch(batch_id, splits, encoded, task))
        self.commit(batch_id, encoded, results)
        # the offset before this batch stays: a commit rolled back (its files removed from outside) replays it
        self.offsets.prune(keep_from=batch_id - 1)
        self.last, self.start, self.done_splits = batch_id, end, int(end["taken"])
        self.rows += sum(r.rows for r in results)
        self.batches += 1
        for r in results:
            self.stats.add(r.report)

    def write(self, batch: Batch) -> list[TaskOutcome]:
        try:
            return self.pool.run(batch, self.progress)
        except CopyError:
            self.committer.fence()  # a task failed because a copy that took over swept its files: touch nothing
            self.committer.sweep(keep=())  # no task of the batch runs any more: its files are orphans now
            raise

    def commit(self, batch_id: int, encoded: Mapping[str, bytes], results: list[TaskOutcome]) -> None:
        files = [f for r in results for f in r.files]
        counts = split_counts(encoded, {k: v for r in results for k, v in r.report.split_rows.items()})
        ledger = partial(write_batch, self.copy.checkpoint, self.query_id, batch_id, counts)
        try:
            self.committer.commit_batch(files, query_id=self.query_id, batch_id=batch_id, before_commit=ledger)
        except LeaseLostError:
            self.committer.delete_pending(files)  # its own files only: the copy that took over writes beside them
            raise

    def progress(self, splits_finished: int, batch_rows: int) -> None:
        if self.copy.progress is not None:
            self.copy.progress(self.done_splits + splits_finished, self.total, self.rows + batch_rows)


def parse_offset(text: str, path: str) -> dict[str, Any]:
    """An offset as the coordinator logs it (JSON), checked; a corrupt one is a :class:`CheckpointError`."""
    try:
        parsed = json.loads(text)
    except (ValueError, TypeError):
        raise CheckpointError(f"the checkpoint's offset {path} is corrupt; {START_OVER}") from None
    return validated(parsed)


class _OffsetLog:
    """``<checkpoint>/<engine>/offsets/<batch>``: the offset after each batch, written before the batch is read."""

    def __init__(self, checkpoint: Location, engine: str) -> None:
        self.fs, self.root = checkpoint.store, checkpoint.child(engine, OFFSETS_DIR).path
        self.fs.make_dirs(self.root)

    def read(self, batch: int) -> dict[str, Any] | None:
        path = f"{self.root}/{batch}"
        try:
            text = self.fs.read_text(path)
        except (FileNotFoundError, IsADirectoryError):
            return None
        except UnicodeDecodeError:
            raise CheckpointError(f"the checkpoint's offset {path} is corrupt; {START_OVER}") from None
        return parse_offset(text, path)

    def replayable(self, batch: int) -> dict[str, Any] | None:
        """The offset of ``batch``, the batch after the last committed one, if it can be read. That batch was never
        committed, so nothing of it is in the output: an offset of it that a crash left unreadable (empty, torn) is
        deleted and the batch planned again from the offset before it, with the same splits."""
        try:
            return self.read(batch)
        except CheckpointError:
            path = f"{self.root}/{batch}"
            if not self.fs.exists(path):
                raise
            log.warning("the offset of batch %d, which was never committed, is unreadable (a crash while it was "
                        "written?): planning the batch again", batch)
            self.fs.delete(path)
            return None

    def write(self, batch: int, offset: Mapping[str, Any]) -> None:
        self.fs.write(f"{self.root}/{batch}", json.dumps(offset).encode())

    def prune(self, keep_from: int) -> None:
        for info in self.fs.list(self.root):
            if info.name.isdigit() and int(info.name) < keep_from:
                self.fs.delete(info.path)
