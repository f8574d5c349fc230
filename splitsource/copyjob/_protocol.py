"""The batch protocol of a copy: one protocol, two engines that differ only in who runs the tasks.

Per batch ``n`` of a copy whose query id is ``q``:

1. **plan**: take splits from the enumerator restored at the last offset, up to the batch limit
   (:class:`~splitsource._planning.BatchLimit`: ``max_splits_per_batch`` splits or ``max_bytes_per_batch_mb`` of
   estimated size), and write the offset after them (:func:`splitsource._offsets.next_offset`) *before* any split
   is read: a write-ahead log, so a replay reads exactly the same splits;
2. **write**: reader tasks read the batch's splits and write their rows into pending part files
   (:func:`run_task`, the one place for both engines); a task's result is a :class:`TaskOutcome`: its pending
   files (the committables), rows and report;
3. **commit**: the committables of every task are committed once as stream batch ``n`` of query ``q``
   (:meth:`~splitsource.sink.BucketingGlobalCommitter.commit_batch`); a replay of a batch already committed is
   discarded, and what is still transient is swept.

Who runs it: the coordinator (:func:`splitsource.copyjob._coordinator.run_batches`, in the copy's own process) plans
and commits for both engines; an :class:`Engine` differs only in who runs step 2 (its task pool):

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

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from splitsource._api import Source, Split, SplitEnumerator
from splitsource._fs import Location
from splitsource._planning import ReadSettings, TaskEnvironment
from splitsource.runtime._read import read_splits
from splitsource.runtime._source_reader import MAX_EVENTS, ReaderMetrics
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PendingFile
from splitsource.sink._options import BucketingSinkOptions
from splitsource.sink._writer import write_files

__all__ = [
    "CHANGE_COLUMN",
    "RUN_COLUMN",
    "AskSplit",
    "CopyRun",
    "Engine",
    "EngineResult",
    "ProgressFn",
    "ReadStats",
    "TaskOutcome",
    "TaskReport",
    "TaskSpec",
    "copy_task",
    "copy_writer_id",
    "run_query_id",
    "run_task",
]

ProgressFn = Callable[[int, int, int], None]  # (splits done, estimated total splits or -1, rows this run)
# a read task's request for its next split: the rows it has written so far in, the split's versioned bytes out (None:
# no split left); asking again says every split handed out before is finished
AskSplit = Callable[[int], "bytes | None"]


def run_query_id(engine: str, token: str, run: int) -> str:
    """Run ``run``'s id in the output's commit log (its batches are committed as 0, 1, ... of it): the engine's and
    the copy's, and for an incremental copy's runs after the first, the run's number."""
    return "-".join((engine, token, *([f"run{run}"] if run > 1 else [])))


def copy_writer_id(token: str) -> str:
    """A copy's id in its part files' names (from its ownership token): ``verify`` reports any data file without
    it as written by someone else."""
    return "".join(c for c in token if c.isalnum())[:12]


@dataclass(frozen=True)
class CopyRun:
    """What the copy job hands an engine once it owns the output: the source (built once, in this process), the
    read's settings (the read tasks build their own source from them) and the sink's, both parsed once, the
    committer (fenced by the copy's lease), the checkpoint, the copy's token, and where progress goes."""

    source: Source[Any, Any, Any, Any]
    read: ReadSettings
    sink: BucketingSinkOptions
    committer: BucketingGlobalCommitter
    checkpoint: Location
    token: str  # the copy's ownership token: its query id in the output's commit log
    progress: ProgressFn | None
    run: int = 1  # which run of an incremental copy this is (its first: 1); the source's ``since`` is set from 2
    marked: bool = False  # each row written gets the run's number and its change (an incremental copy's files)
    # called with the run's enumerator once it planned the run, before its first batch is logged (an incremental
    # run finds its deletes there: splitsource.copyjob._deletes)
    first_plan: Callable[[SplitEnumerator[Any, Any]], None] | None = None



@dataclass(frozen=True)
class TaskSpec:
    """What every read task of a batch runs with (pickled to the local engine's workers and Spark's executors):
    the options parsed once by the copy, never parsed again."""

    read: ReadSettings
    sink: BucketingSinkOptions
    environment: TaskEnvironment  # the planner's interpreter and release: a task on another refuses plainly
    writer: str = ""  # the copy's id in its part files' names
    run: int = 0  # an incremental copy's run: each row gets it and its change (RUN_COLUMN, CHANGE_COLUMN); 0: none
    readers: int = 1  # the copy's tasks that read at once, sharing its read rate limit
    index: int = 0  # this task's number in the batch (its part files' partition)


@dataclass(frozen=True)
class TaskReport:
    """What a task's readers met: added up by :class:`ReadStats` for the summary."""

    retries: int = 0  # transient errors resumed from the split state
    throttled_s: float = 0.0  # seconds readers slept to keep to the read rate limit
    split_rows: Mapping[str, int] = field(default_factory=dict)  # rows per split id
    events: Mapping[str, int] = field(default_factory=dict)  # the readers' ReadEvents by kind
    event_details: tuple[str, ...] = ()  # the first MAX_EVENTS of them, one line each

    @classmethod
    def of(cls, metrics: ReaderMetrics) -> TaskReport:
        return cls(metrics.retries, metrics.throttled_s, dict(metrics.split_rows), dict(metrics.event_counts),
                   tuple(str(e) for e in metrics.events))


@dataclass(frozen=True)
class TaskOutcome:
    """What one read task hands to the commit (step 2's result, from the task to the coordinator): its pending
    files (the committables), its rows and splits, and its report."""

    files: tuple[PendingFile, ...]
    rows: int
    splits: int
    report: TaskReport = field(default_factory=TaskReport)


@dataclass
class ReadStats:
    """What the read tasks of committed batches met, added up: for the summary."""

    retries: int = 0
    throttled_s: float = 0.0
    split_rows: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    event_details: list[str] = field(default_factory=list)

    def add(self, report: TaskReport) -> None:
        self.retries += report.retries
        self.throttled_s += report.throttled_s
        self.split_rows.update(report.split_rows)  # a replay: its last read
        for kind, count in report.events.items():
            self.events[kind] = self.events.get(kind, 0) + count
        self.event_details.extend(report.event_details[:MAX_EVENTS - len(self.event_details)])


@dataclass(frozen=True)
class EngineResult:
    taken: int  # splits of the source committed, over all runs
    total: int  # the enumerator's estimate of all splits (-1: unknown)
    batches: int  # batches committed by this run
    stats: ReadStats = field(default_factory=ReadStats)  # of the batches this run committed
    unsized: bool = False  # batches were cut by count: the connector's splits estimate no size
    instant: Mapping[str, Any] = field(default_factory=dict)  # where the source stood at the run's first plan
    run: int = 1  # which run of the copy this was (CopyRun.run)


class Engine(Protocol):
    """Who runs a copy's read tasks: :class:`~splitsource.copyjob._local.LocalEngine` (worker processes on this
    machine) or :class:`~splitsource.spark._copy.SparkEngine` (Spark's executors). ``copy()`` is handed one (or
    names one), checks storage with it before it claims anything, runs the protocol with it, and closes it."""

    name: str  # its directory in the checkpoint and the prefix of the copy's query id; a checkpoint keeps to one
    sink_defaults: Mapping[str, str]  # sink options its tasks write with unless the user gave them

    def check_storage(self, places: list[tuple[str, Location]]) -> None:
        """Refuse (:class:`~splitsource.OptionsError`) places (``(what, location)``) the tasks cannot share with
        the coordinator: on a cluster, where an executor's writes would not be seen here."""

    def run(self, run: CopyRun) -> EngineResult:
        """Run the batch protocol above until the source is done or the run fails."""

    def close(self) -> None:
        """Stop what the engine started (a Spark session of its own)."""


RUN_COLUMN = "_splitsource_run"  # an incremental copy's files: the run that wrote the row (1, 2, ...)
CHANGE_COLUMN = "_splitsource_change"  # and what the row is: "upsert" (its key's newest version) or "delete"
CHANGE_FIELDS = (pa.field(RUN_COLUMN, pa.int64(), nullable=False), pa.field(CHANGE_COLUMN, pa.string(), nullable=False))


def marked_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of an incremental copy's files: the source's, then the run and the change."""
    return pa.schema([*schema, *CHANGE_FIELDS], metadata=schema.metadata)


def mark_changes(batch: pa.RecordBatch, run: int) -> pa.RecordBatch:
    """``batch`` with the run's number and its change (every row a source reads is an upsert) as two more
    columns."""
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array([run] * n, pa.int64()), pa.array(["upsert"] * n, pa.string())],
        schema=marked_schema(batch.schema))


def run_task(spec: TaskSpec, ask: AskSplit) -> TaskOutcome:
    """Step 2 of the protocol, the one place both engines' tasks run: read the splits ``ask`` hands out (in their
    versioned bytes) and write their rows into pending part files."""
    spec.environment.check()
    with _copy_memory_pool():
        return copy_task(spec, ask)


@contextmanager
def _copy_memory_pool() -> Iterator[None]:
    """Arrow's system allocator for the task, unless the user chose a pool (``ARROW_DEFAULT_MEMORY_POOL``); the
    process's default pool again after it (a Spark worker runs other tasks next).

    Arrow's default pool (mimalloc) hands the pages of a flushed row group back to the system and zeroes new ones
    on the next: on the 5M-row benchmark table a Spark task spent a tenth of its CPU in the kernel's page
    clearing (``perf``: ``clear_page_erms``), and the copy ran 3% slower; the system allocator also keeps a
    worker's memory 60-70 MB lower, at the same speed."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        yield
        return
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)  # buffers keep the pool they came from: freeing them later stays right


_SOURCES: dict[tuple[str, tuple[tuple[str, str], ...], str], Source[Any, Any, Any, Any]] = {}


def _source(read: ReadSettings) -> Source[Any, Any, Any, Any]:
    """The Source of ``read``, built once per process: a worker runs a task per batch with the same settings, and
    building one may ask the source for its schema (PostgreSQL's catalog: a connection and five queries)."""
    key = (read.framework.connector, tuple(sorted(read.connector.items())), read.framework.since)
    if key not in _SOURCES:
        _SOURCES.clear()  # another copy's: one is enough
        _SOURCES[key] = read.source()
    return _SOURCES[key]


def copy_task(spec: TaskSpec, ask: AskSplit) -> TaskOutcome:
    """Read the splits ``ask`` hands out (their versioned bytes; None: no more) and write their rows, in the
    source's own Arrow schema, into pending files of task ``spec.index``; ``spec.readers``: the copy's tasks that
    run at once, sharing its read rate limit. Each request for a split reports the rows written so far. On any
    failure the task's in-progress files are removed and the error propagates: nothing of it is committed."""
    from serializers import read_envelope

    source = _source(spec.read)  # its reader's, and its splits' serializer
    serializer = source.split_serializer()
    splits, rows, metrics = 0, 0, ReaderMetrics()

    def next_split() -> Split | None:
        nonlocal splits
        data = ask(rows)
        if data is None:
            return None
        splits += 1
        split: Split = read_envelope(serializer, data)
        return split

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in read_splits(spec.read.framework, source, next_split, None, f"task-{spec.index}", spec.readers,
                                 metrics):
            rows += batch.num_rows
            yield mark_changes(batch, spec.run) if spec.run else batch

    files = tuple(write_files(spec.sink, batches(), spec.index, spec.writer))
    return TaskOutcome(files, sum(f.rows for f in files), splits, TaskReport.of(metrics))
