"""The local copy engine (``splitsource copy --engine local``): the batch protocol of
:mod:`splitsource.copyjob._protocol`, run by worker processes on this machine, with no JVM.

Per batch, as Spark's micro-batch execution does it for the Spark engine:

1. the offset after the batch (enumerator state + the batch's splits, :mod:`splitsource._offsets`) is written to
   ``<checkpoint>/local/offsets/<batch>`` before any split is read (a write-ahead log);
2. worker processes (``python -m splitsource.copyjob._worker``, one per core by default) ask for the batch's splits
   one at a time (so the work balances itself, as FLIP-27 readers request splits) and write their rows into
   pending part files through the bucketing sink's writer: one file per worker per batch and bucket;
3. the coordinator commits the batch's pending files once (``commit_batch``), as stream batch ``<batch>`` of this
   copy's query id (its ownership token), which sweeps what is left; just before the commit record it writes the
   batch's rows per split into the split ledger (:mod:`splitsource.copyjob._ledger`).

A re-run recovers the sink (finishes a logged commit, sweeps orphans), finds the last committed batch of its query
id in the sink's log, and replays the batch after it if its offset was written, so a batch is committed once
and committed splits are never read again. The enumerator runs in the coordinator only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from functools import partial
from typing import IO, Any

from serializers import read_envelope, write_envelope
from splitsource._errors import CheckpointError, LocalCopyFailed
from splitsource._offsets import (
    PLANS_DIR,
    START_OVER,
    PlanStore,
    check_offset,
    initial_offset,
    next_offset,
    offset_splits,
    source_fingerprint,
    validated,
)
from splitsource._planning import TaskEnvironment, batch_limit, build_source, concurrent_readers
from splitsource.copyjob._job import failure
from splitsource.copyjob._ledger import split_counts, write_batch
from splitsource.copyjob._protocol import CopyRun, EngineResult, ProgressFn, ReadStats
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PENDING_FILE_SERIALIZER
from splitsource.sink._formats import read_text, resolve_filesystem, write_atomically

__all__ = ["LOCAL_DIR", "run_copy", "run_local"]

LOCAL_DIR = "local"  # in the checkpoint: offsets/<batch>, workers.log
# One writer per core on one machine: each worker's default sink budget (the sink's own default, 128 MiB, is sized
# for an executor task). 16 MiB keeps a Parquet row group near 100,000 rows of a typical table; measured on the
# 1M-row benchmark table, the whole copy's peak fell from 712 MB to about 410 MB and it ran no slower.
WORKER_BUFFER_MB = "16"


class _Workers:
    """Worker processes, each running one task at a time; killed all at once when one task fails."""

    def __init__(self, count: int, log: IO[bytes] | int) -> None:
        # Arrow's default pool (mimalloc) keeps what a flushed row group freed: the system allocator gives it back,
        # measured 60-70 MB less per worker at the same speed (unless the user chose a pool)
        env = {"ARROW_DEFAULT_MEMORY_POOL": "system", **os.environ, "PYTHONUNBUFFERED": "1"}
        self._procs = [
            subprocess.Popen([sys.executable, "-m", "splitsource.copyjob._worker"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=log, env=env)
            for _ in range(count)
        ]

    def run(self, task: dict[str, Any], splits: list[bytes], progress: Callable[[int, int], None]
            ) -> list[dict[str, Any]]:
        """Run one batch: every worker takes ``task`` and asks for splits until none is left (so the work
        balances itself); ``progress(splits finished, rows written)`` after each request. Returns each worker's
        result."""
        from splitsource.copyjob._worker import read_frame, write_frame

        lock = threading.Lock()
        remaining = list(reversed(splits))
        rows = [0] * len(self._procs)
        holding = [0] * len(self._procs)  # splits handed to each worker and not known to be finished
        handed = [0]

        def one(index: int) -> dict[str, Any]:
            proc = self._procs[index]
            assert proc.stdin is not None and proc.stdout is not None
            current = -1
            try:
                write_frame(proc.stdin, {**task, "index": index})
                while (message := read_frame(proc.stdout)) is not None and "next" in message:
                    with lock:
                        split = remaining.pop() if remaining else None
                        rows[index] = int(message["rows"])
                        holding[index] = 0 if split is None else 1
                        handed[0] += 0 if split is None else 1
                        progress(handed[0] - sum(holding), sum(rows))
                    current = handed[0]
                    write_frame(proc.stdin, {"split": split})
            except OSError:
                message = None
            if message is None:
                code = proc.wait()
                raise LocalCopyFailed(f"a worker process died (exit code {code})"
                                      + (f" while reading split {current} of the batch" if current > 0 else ""))
            if "error" in message:
                raise LocalCopyFailed(message["error"], detail=message.get("detail", ""))
            return dict(message["ok"])

        with ThreadPoolExecutor(max_workers=len(self._procs)) as executor:
            futures = [executor.submit(one, i) for i in range(len(self._procs))]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in finished if f.exception() is not None]
            if failed:
                self.kill()  # the other workers' reads end at once; the batch is not committed
                raise failed[0].exception()  # type: ignore[misc]
            return [f.result() for f in futures]

    def kill(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait()

    def close(self) -> None:
        for proc in self._procs:
            if proc.stdin is not None and not proc.stdin.closed:
                try:
                    proc.stdin.close()  # end of input: the worker exits
                except OSError:
                    pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _offset_path(root: str, batch: int) -> str:
    return f"{root}/offsets/{batch}"


def _read_offset(fs: Any, root: str, batch: int) -> dict[str, Any] | None:
    path = _offset_path(root, batch)
    if fs.get_file_info(path).size is None:
        return None
    try:
        parsed = json.loads(read_text(fs, path))
    except (ValueError, UnicodeDecodeError, TypeError):
        raise CheckpointError(f"the checkpoint's offset {path} is corrupt; {START_OVER}") from None
    return validated(parsed)


def _write_offset(fs: Any, root: str, batch: int, offset: Mapping[str, Any]) -> None:
    write_atomically(fs, _offset_path(root, batch), json.dumps(offset).encode())


def _prune_offsets(fs: Any, root: str, keep_from: int) -> None:
    import pyarrow.fs as pafs

    for info in fs.get_file_info(pafs.FileSelector(f"{root}/offsets", allow_not_found=True)):
        if info.base_name.isdigit() and int(info.base_name) < keep_from:
            fs.delete_file(info.path)


def run_local(read_options: Mapping[str, str], sink_raw: Mapping[str, str], committer: BucketingGlobalCommitter,
              checkpoint: str, workers: int, progress: ProgressFn | None = None, *, query_id: str) -> EngineResult:
    """Copy every split not committed yet (see the module docstring); returns what this run did.

    ``query_id`` names this copy's batches in the output's commit log: the copy's ownership token, kept in both
    the checkpoint and the output, so a checkpoint that lost or changed a file cannot start a second copy."""
    framework, source = build_source(read_options)
    fingerprint = source_fingerprint(source)
    serializer = source.split_serializer()
    fs, base = resolve_filesystem(checkpoint)
    root = f"{base}/{LOCAL_DIR}"
    fs.create_dir(f"{root}/offsets", recursive=True)
    query_id = f"local-{query_id}"
    committer.recover()
    last_committed = committer.last_stream_batch(query_id)
    last = -1 if last_committed is None else last_committed
    committer.sweep(keep=())  # no task runs now: whatever is transient is an orphan of an earlier run
    parallelism = max(framework.parallelism, workers)
    limit = batch_limit(framework)
    plans = PlanStore(f"{checkpoint}/{PLANS_DIR}")  # the plan once, offsets hold a cursor
    sink_raw = {"buffer_mb": WORKER_BUFFER_MB, **sink_raw}  # a user's buffer_mb wins
    task = {"options": dict(read_options), "sink": sink_raw, "environment": TaskEnvironment.current()}
    start = _read_offset(fs, root, last) if last >= 0 else None
    if last >= 0 and start is None:
        raise CheckpointError(f"checkpoint {checkpoint} has no offset for batch {last}, which the output's commit "
                              "log says it committed; it is incomplete: use the checkpoint the copy was run with")
    done_splits, total = (int(start["taken"]), int(start.get("total", -1))) if start else (0, -1)
    rows = 0
    batches = 0
    stats = ReadStats()
    log_path = f"{base}/{LOCAL_DIR}/workers.log"
    log: IO[bytes] | int = open(log_path, "ab") if "://" not in checkpoint else subprocess.DEVNULL  # noqa: SIM115
    # started before the first batch is planned: their start-up (a Python, its imports) overlaps the planning
    pool = _Workers(workers, log)

    def batch_progress(splits_finished: int, batch_rows: int) -> None:
        if progress is not None:
            progress(done_splits + splits_finished, total, rows + batch_rows)

    try:
        while True:
            batch_id = last + 1
            end = _read_offset(fs, root, batch_id)  # logged before a batch that never committed: replay it
            if end is None:
                if start is None:  # a fresh start: no offset refers to a plan yet
                    start = initial_offset(source, fingerprint, parallelism, plans)
                    plans.prune(keep=start["plan"])
                begin = start
                end = next_offset(source, fingerprint, begin, parallelism, limit, plans)
                if end is None:
                    break  # nothing left: the bounded source is done
                _write_offset(fs, root, batch_id, end)
            check_offset(end, fingerprint)
            total = int(end.get("total", -1))
            splits = {s.split_id: write_envelope(serializer, s) for s in offset_splits(source, end)}
            try:
                # every worker asks for the batch's splits: as many read at once as there are splits, up to the pool
                readers = concurrent_readers(framework, len(splits), workers)
                results = pool.run({**task, "readers": readers}, list(splits.values()), batch_progress)
            except LocalCopyFailed:
                committer.sweep(keep=())  # the workers are killed: their files of this batch are orphans now
                raise
            files = [read_envelope(PENDING_FILE_SERIALIZER, f) for r in results for f in r["files"]]
            split_rows = {k: int(v) for r in results for k, v in r["report"]["split_rows"].items()}
            counts = split_counts(splits, split_rows)
            committer.commit_batch(files, query_id=query_id, batch_id=batch_id,
                                   before_commit=partial(write_batch, checkpoint, query_id, batch_id, counts))
            _prune_offsets(fs, root, keep_from=batch_id)
            last, start = batch_id, end
            done_splits = int(end["taken"])
            rows += sum(int(r["rows"]) for r in results)
            batches += 1
            for r in results:
                stats.add(r["report"])
    finally:
        pool.close()
        if not isinstance(log, int):
            log.close()
    return EngineResult(int(start["taken"]) if start else 0, total, batches, stats)


def run_copy(run: CopyRun, *, workers: int = 0) -> EngineResult:
    """The copy job's entry to this engine (see :class:`~splitsource.copyjob._protocol.CopyRun`)."""
    try:
        return run_local(run.read_options, run.sink_raw, run.committer, run.checkpoint,
                         workers or os.cpu_count() or 1, run.progress, query_id=run.token)
    except LocalCopyFailed as exc:
        raise failure(str(exc), exc.detail or str(exc), run.checkpoint) from None
