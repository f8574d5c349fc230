"""What the crash tests record, and what every crash state of it must end as.

Four scenarios, each a real run of the framework's own code on the local disk, with no JVM:

- ``copy-local`` and ``copy-spark``: ``splitsource.copyjob.copy`` of 300 generator rows in 3 batches of 2 splits,
  into two buckets (``flag=true``, ``flag=false``), through the coordinator. ``copy-local`` runs the local engine's
  protocol (offsets directory, query id, writer id) with its read tasks in this process (two per batch), as the
  engine's workers run ``run_task``. ``copy-spark`` runs the Spark engine itself (``SparkEngine`` and its task
  pool: the job per batch, the tasks' function, their progress reports in the checkpoint and their clearing) on a
  stand-in for the Spark scheduler that runs a job's partitions in this process: only the scheduler is not
  Spark's, since a power loss cannot be recorded under a JVM's writes;
- ``sink-batch``: three ``df.write.format("bucketing")`` appends of two tasks each, through the sink's own writer
  classes;
- ``sink-stream``: a ``writeStream.format("bucketing")`` query committing batches 0, 1 and 2 of two tasks each.

``python -m tests.splitsource.crash_scenarios SCENARIO ROOT TRACE`` records one scenario under ROOT into TRACE in a
process of its own, so that every lock it leaves names a process that is gone, as after a power loss.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from splitsource._fs import Location

ROWS = 300
SPLIT_ROWS = 50
BATCH_SPLITS = 2
GEN_OPTIONS = {"rows": str(ROWS), "split_rows": str(SPLIT_ROWS), "columns": "id:bigint,flag:boolean",
               "null_fraction": "0"}
SCENARIOS = ("copy-local", "copy-spark", "sink-batch", "sink-stream", "sink-restore")
QUERY = "crash-query"
WRITES = 3  # sink scenarios: writes (batch) or batches (stream) of TASKS tasks of TASK_ROWS rows
TASKS = 2
TASK_ROWS = 50


# -- an engine whose tasks run in this process ---------------------------------------------------------------------

class InlineTasks:
    """A task pool (see ``splitsource.copyjob._coordinator.TaskPool``) running a batch's read tasks here, two per
    batch, each on half of its splits."""

    def run(self, batch: Any, progress: Callable[[int, int], None]) -> list[Any]:
        from dataclasses import replace

        from splitsource.copyjob._protocol import run_task

        encoded = [batch.encoded[s.split_id] for s in batch.splits]
        results = []
        for index in range(2):
            mine = list(reversed(encoded[index::2]))

            def ask(rows: int, mine: list[bytes] = mine) -> bytes | None:
                return mine.pop() if mine else None

            results.append(run_task(replace(batch.task, index=index, readers=1), ask))
        return results

    def close(self) -> None:
        pass


class InlineEngine:
    """An engine (``splitsource.copyjob._protocol.Engine``) whose tasks run in this process, with the coordinator
    under the Spark engine's directory and query id (``name`` spark) or the local engine's (local)."""

    sink_defaults: dict[str, str] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    def check_storage(self, places: list[tuple[str, Location]]) -> None:
        pass

    def run(self, run: Any) -> Any:
        from splitsource.copyjob._coordinator import run_batches

        return run_batches(run, InlineTasks(), self.name)

    def close(self) -> None:
        pass


class _InlineJob:
    """``sc.parallelize(groups, n).mapPartitionsWithIndex(f).collect()``, run here: partition ``i`` holds group
    ``i``."""

    def __init__(self, groups: list[Any], function: Callable[[int, Any], Any] | None = None) -> None:
        self._groups, self._function = groups, function

    def mapPartitionsWithIndex(self, function: Callable[[int, Any], Any]) -> _InlineJob:  # noqa: N802 - Spark's
        return _InlineJob(self._groups, function)

    def collect(self) -> list[Any]:
        assert self._function is not None
        return [row for index, group in enumerate(self._groups) for row in self._function(index, iter([group]))]


class InlineSparkContext:
    """The part of a ``SparkContext`` the Spark engine's task pool uses, with jobs run in this process."""

    master = "local[2]"
    defaultParallelism = 2  # noqa: N815 - Spark's name

    def setJobGroup(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def cancelJobGroup(self, *args: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def parallelize(self, groups: list[Any], slices: int) -> _InlineJob:
        assert len(groups) == slices
        return _InlineJob(groups)


class InlineSpark:
    sparkContext = InlineSparkContext()  # noqa: N815 - Spark's name


def copy_once(root: Path, engine: str, overwrite: bool = False) -> Any:
    from splitsource import copy
    from splitsource.spark._copy import SparkEngine

    chosen = SparkEngine(spark=InlineSpark()) if engine == "spark" else InlineEngine(engine)
    return copy("generator", GEN_OPTIONS, str(root / "out"), format="parquet", bucketer="columns",
                sink_options={"bucket_columns": "flag"}, engine=chosen,
                max_splits_per_batch=BATCH_SPLITS, overwrite=overwrite)


# -- the sink's writers ----------------------------------------------------------------------------------------------

def _sink_options(root: Path) -> Any:
    from splitsource.sink._options import parse_sink_options

    return parse_sink_options({"path": str(root / "out"), "format": "parquet", "bucketer": "columns",
                               "bucket_columns": "flag"})


def _rows(first: int) -> pa.RecordBatch:
    ids = pa.array(range(first, first + TASK_ROWS), pa.int64())
    flags = pa.array([i % 2 == 0 for i in range(first, first + TASK_ROWS)], pa.bool_())
    return pa.RecordBatch.from_arrays([ids, flags], names=["id", "flag"])


def write_ids(write: int) -> set[int]:
    return set(range(write * TASKS * TASK_ROWS, (write + 1) * TASKS * TASK_ROWS))


def _messages(root: Path, write: int, writer_id: str, query: str = "", batch: int = -1) -> list[Any]:
    from serializers import write_envelope
    from splitsource.sink._files import PENDING_FILE_SERIALIZER
    from splitsource.sink._writer import write_files
    from splitsource.spark._sink import BucketingCommitMessage

    options = _sink_options(root)
    out = []
    for task in range(TASKS):
        files = write_files(options, [_rows((write * TASKS + task) * TASK_ROWS)], task, writer_id)
        out.append(BucketingCommitMessage(tuple(write_envelope(PENDING_FILE_SERIALIZER, f) for f in files), query,
                                          batch))
    return out


def sink_append(root: Path, write: int) -> None:
    from splitsource.spark._sink import BucketingBatchWriter

    writer = BucketingBatchWriter(_sink_options(root), overwrite=False)
    writer.commit(_messages(root, write, writer.write_id[:12]))


def stream_batch(root: Path, batch: int) -> None:
    from splitsource.spark._sink import BucketingStreamWriter, stream_writer_id

    writer = BucketingStreamWriter(_sink_options(root))
    writer.commit(_messages(root, batch, stream_writer_id(QUERY), QUERY, batch), batch)


# -- a writer restored from its snapshot (Flink's handleRestoredBucketState) ------------------------------------------

def _restore_options(root: Path) -> Any:
    from splitsource.sink._options import parse_sink_options

    return parse_sink_options({"path": str(root / "out"), "format": "jsonl", "bucketer": "none"})


def snapshot_then_fail(root: Path, mark: Callable[[str], None]) -> None:
    """A row-format writer writes the checkpoint's rows and snapshots its state, which goes into a checkpoint file
    written through the door (a state backend's durable write: ``snapshot`` marks it done); then it writes more
    rows and snapshots again, a checkpoint that never completes (its bytes reach the disk past the valid length the
    completed one recorded), and dies."""
    from serializers import write_envelope
    from splitsource._fs import locate
    from splitsource.sink._files import WRITER_STATE_SERIALIZER
    from splitsource.sink._writer import BucketingSinkWriter

    options = _restore_options(root)
    out = locate(options.path)
    writer = BucketingSinkWriter(options, _rows(0).schema, out.store, out.path, task="a")
    writer.write(_rows(0))
    state = write_envelope(WRITER_STATE_SERIALIZER, writer.snapshot_state())
    out.store.write(str(root / "checkpoint"), state)
    mark("snapshot")
    writer.write(_rows(TASK_ROWS))  # dropped by the restore
    writer.snapshot_state()


def restore_and_commit(root: Path) -> None:
    """The job restarted: restore the writer from the checkpoint file (a fresh writer of the same rows when there
    is none) and commit what it recovers as batch 0 of the query; a replay of a batch committed before is
    discarded."""
    from serializers import read_envelope
    from splitsource._fs import locate
    from splitsource.sink._files import WRITER_STATE_SERIALIZER
    from splitsource.sink._writer import BucketingSinkWriter

    options = _restore_options(root)
    out = locate(options.path)
    committer = options.committer(out)
    committer.recover()
    checkpoint = root / "checkpoint"
    if checkpoint.exists():
        state = read_envelope(WRITER_STATE_SERIALIZER, checkpoint.read_bytes())
        writer = BucketingSinkWriter(options, _rows(0).schema, out.store, out.path, state=state)
    else:  # the checkpoint never completed: the job starts over
        writer = BucketingSinkWriter(options, _rows(0).schema, out.store, out.path, task="b")
        writer.write(_rows(0))
    committer.commit_batch(writer.prepare_commit(end_of_input=True), query_id=QUERY, batch_id=0)


def sink_restore(root: Path, mark: Callable[[str], None]) -> None:
    snapshot_then_fail(root, mark)
    restore_and_commit(root)
    mark("write0")


def restored_ids(root: Path) -> list[int]:
    """The ids a reader of the JSON lines output reads (finished part files only), sorted."""
    out = root / "out"
    if not out.exists():
        return []
    dataset = ds.dataset(str(out), format="json")
    if not dataset.files:
        return []
    return sorted(dataset.to_table(columns=["id"]).column("id").to_pylist())


# -- reading back as users do ------------------------------------------------------------------------------------------

def read_ids(out: Path) -> list[int]:
    """The ids a reader of the output directory reads (pyarrow.dataset, Hive partitions), sorted."""
    if not out.exists():
        return []
    dataset = ds.dataset(str(out), format="parquet", partitioning="hive")
    if not dataset.files:
        return []
    table = dataset.to_table(columns=["id"])
    return sorted(table.column("id").to_pylist())


# -- recording -------------------------------------------------------------------------------------------------------

def record(scenario: str, root: Path) -> list[tuple[Any, ...]]:
    """Run ``scenario`` under ``root`` with the door traced; the operations, with marks where it reported
    success."""
    from splitsource import _fs
    from tests.splitsource.crashfs import Recorder

    recorder = Recorder(root)
    _fs.set_tracer(recorder)
    try:
        if scenario.startswith("copy-"):
            copy_once(root, scenario[5:])
            recorder.mark("returned")
        elif scenario == "sink-batch":
            for write in range(WRITES):
                sink_append(root, write)
                recorder.mark(f"write{write}")
        elif scenario == "sink-restore":
            sink_restore(root, recorder.mark)
        else:
            for batch in range(WRITES):
                stream_batch(root, batch)
                recorder.mark(f"write{batch}")
    finally:
        _fs.set_tracer(None)
    return recorder.ops


def main(argv: list[str]) -> int:
    scenario, root, trace, *skipped = argv
    from splitsource import _fs

    _fs._skipped_syncs.update(skipped)
    Path(trace).write_bytes(pickle.dumps(record(scenario, Path(root))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
