"""The batch protocol of a copy: one protocol, two engines that differ only in who runs the tasks.

Per batch ``n`` of a copy whose query id is ``q``:

1. **plan**: take splits from the enumerator restored at the last offset, up to the batch limit
   (:class:`~splitsource._planning.BatchLimit`: ``max_splits_per_batch`` splits or ``max_bytes_per_batch_mb`` of
   estimated size), and write the offset after them (:func:`splitsource._offsets.next_offset`) *before* any split
   is read: a write-ahead log, so a replay reads exactly the same splits;
2. **write**: reader tasks read the batch's splits and write their rows into pending part files
   (:func:`copy_task`); a task's result is its pending files (the committables);
3. **commit**: the committables of every task are committed once as stream batch ``n`` of query ``q``
   (:meth:`~splitsource.sink.BucketingGlobalCommitter.commit_batch`); a replay of a batch already committed is
   discarded, and what is still transient is swept.

Who runs it: the coordinator (:func:`splitsource.copyjob._coordinator.run_batches`, in the copy's own process) plans
and commits for both engines; the engines differ only in who runs step 2 (their task pool):

=========  ===================================================  ==========================================
step       Spark engine (:mod:`splitsource.spark._copy`)        local engine (:mod:`splitsource.copyjob._local`)
=========  ===================================================  ==========================================
plan       the coordinator; offsets in                          the coordinator; offsets in
           ``<checkpoint>/spark/offsets/``                      ``<checkpoint>/local/offsets/``
write      the tasks of one Spark job, one per packed group of  worker processes asking for splits one by one
           splits
commit     the coordinator                                      the coordinator
=========  ===================================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from splitsource._api import Source, Split
from splitsource.runtime._read import read_splits
from splitsource.runtime._source_reader import MAX_EVENTS, ReaderMetrics
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PendingFile
from splitsource.sink._options import BucketingSinkOptions
from splitsource.sink._writer import write_files

__all__ = ["CopyRun", "EngineResult", "ProgressFn", "ReadStats", "TaskResult", "copy_task", "copy_writer_id",
           "task_report"]

ProgressFn = Callable[[int, int, int], None]  # (splits done, estimated total splits or -1, rows this run)


def copy_writer_id(token: str) -> str:
    """A copy's id in its part files' names (from its ownership token): ``verify`` reports any data file without
    it as written by someone else."""
    return "".join(c for c in token if c.isalnum())[:12]


@dataclass(frozen=True)
class CopyRun:
    """What the copy job hands an engine once it owns the output: everything but who runs the tasks.

    An engine is a module with ``run_copy(run: CopyRun, **settings) -> EngineResult`` (``splitsource.copyjob._local``,
    ``splitsource.spark._copy``); it runs the protocol above until the source is done or the run fails."""

    source: Source[Any, Any, Any, Any]
    read_options: Mapping[str, str]  # the connector's options and the framework's
    sink_raw: Mapping[str, str]  # the bucketing sink's options, ``path`` included
    committer: BucketingGlobalCommitter
    checkpoint: str
    token: str  # the copy's ownership token: its query id in the output's commit log
    progress: ProgressFn | None
    rows_before: int  # rows committed by earlier runs of the copy


@dataclass
class ReadStats:
    """What the read tasks of committed batches met, added up: for the summary."""

    retries: int = 0  # transient errors resumed from the split state
    throttled_s: float = 0.0  # seconds readers slept to keep to the read rate limit
    split_rows: dict[str, int] = field(default_factory=dict)  # rows per split id
    events: dict[str, int] = field(default_factory=dict)  # the readers' ReadEvents by kind
    event_details: list[str] = field(default_factory=list)  # the first MAX_EVENTS of them, one line each

    def add(self, report: Mapping[str, Any]) -> None:
        """Add one task's report (:func:`task_report`)."""
        self.retries += int(report["retries"])
        self.throttled_s += float(report["throttled_s"])
        self.split_rows.update({str(k): int(v) for k, v in report["split_rows"].items()})  # a replay: its last read
        for kind, count in report["events"].items():
            self.events[str(kind)] = self.events.get(str(kind), 0) + int(count)
        self.event_details.extend(str(d) for d in report["event_details"][:MAX_EVENTS - len(self.event_details)])


def task_report(metrics: ReaderMetrics) -> dict[str, Any]:
    """A task's reader metrics as plain JSON-able data, for the engine that adds them up (:class:`ReadStats`)."""
    return {"retries": metrics.retries, "throttled_s": metrics.throttled_s, "split_rows": dict(metrics.split_rows),
            "events": dict(metrics.event_counts), "event_details": [str(e) for e in metrics.events]}


@dataclass(frozen=True)
class EngineResult:
    taken: int  # splits of the source committed, over all runs
    total: int  # the enumerator's estimate of all splits (-1: unknown)
    batches: int  # batches committed by this run
    stats: ReadStats = field(default_factory=ReadStats)  # of the batches this run committed


@dataclass(frozen=True)
class TaskResult:
    """What one copy task hands to the commit: its pending files, and what it read."""

    files: tuple[PendingFile, ...]
    rows: int
    splits: int
    metrics: ReaderMetrics = field(default_factory=ReaderMetrics)


def copy_task(options: Mapping[str, str], sink: BucketingSinkOptions, next_split: Callable[[], Split | None],
              index: int, name: str, on_progress: Callable[[int, int, bool, ReaderMetrics], None] | None = None,
              *, readers: int = 1, writer_id: str = "") -> TaskResult:
    """Step 2: read the splits ``next_split`` hands out (None: no more) and write their rows, in the source's own
    Arrow schema, into pending files of task ``index``. ``on_progress(splits finished, rows read, final, metrics)``
    after
    each batch and once at the end; ``readers``: the copy's tasks that run at once, sharing its read rate limit.
    On any failure the task's in-progress files are removed and the error
    propagates: nothing of it is committed."""
    splits = 0
    rows = 0
    metrics = ReaderMetrics()

    def counted_split() -> Split | None:
        nonlocal splits
        split = next_split()
        splits += split is not None
        return split

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in read_splits(options, counted_split, None, name, readers, metrics):
            rows += batch.num_rows
            if on_progress is not None:  # a reader asks for its next split once the one before is finished
                on_progress(max(splits - 1, 0), rows, False, metrics)
            yield batch

    files = tuple(write_files(sink, batches(), index, writer_id))
    if on_progress is not None:
        on_progress(splits, rows, True, metrics)
    return TaskResult(files, sum(f.rows for f in files), splits, metrics)
