"""The local copy engine (``splitsource copy --engine local``): the coordinator of
:mod:`splitsource.copyjob._coordinator` with worker processes on this machine running the read tasks, no JVM.

Worker processes (``python -m splitsource.copyjob._worker``, one per core by default) ask for the batch's splits one
at a time (so the work balances itself, as FLIP-27 readers request splits) and write their rows into pending part
files through the bucketing sink's writer: one file per worker per batch and bucket. Offsets are logged in
``<checkpoint>/local/offsets/``; the copy's batches are named ``local-<token>`` in the output's commit log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import IO

from splitsource._errors import LocalCopyFailed, OptionsError
from splitsource._fs import is_uri, resolve_filesystem
from splitsource._planning import concurrent_readers
from splitsource.copyjob._coordinator import Batch, run_batches
from splitsource.copyjob._failures import failure
from splitsource.copyjob._protocol import CopyRun, EngineResult, TaskOutcome

__all__ = ["LOCAL_DIR", "LocalEngine"]

LOCAL_DIR = "local"  # in the checkpoint: offsets/<batch>, workers.log
# One writer per core on one machine: each worker's default sink budget (the sink's own default, 128 MiB, is sized
# for an executor task). 16 MiB keeps a Parquet row group near 100,000 rows of a typical table; measured on the
# 1M-row benchmark table, the whole copy's peak fell from 712 MB to about 410 MB and it ran no slower.
WORKER_BUFFER_MB = "16"


class _Workers:
    """Worker processes, each running one task at a time; killed all at once when one task fails."""

    def __init__(self, count: int, log_path: str | None) -> None:
        self._log: IO[bytes] | None = open(log_path, "ab") if log_path else None  # noqa: SIM115 - closed by close()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # Arrow's pool: the tasks choose it (run_task)
        self._procs = [
            subprocess.Popen([sys.executable, "-m", "splitsource.copyjob._worker"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE,
                             stderr=self._log if self._log is not None else subprocess.DEVNULL, env=env)
            for _ in range(count)
        ]

    def run(self, batch: Batch, progress: Callable[[int, int], None]) -> list[TaskOutcome]:
        """Run one batch: every worker takes the batch's task and asks for splits until none is left (so the work
        balances itself); ``progress(splits finished, rows written)`` after each request. Returns each worker's
        result."""
        from splitsource.copyjob._worker import read_frame, write_frame

        # every worker asks for the batch's splits: as many read at once as there are splits, up to the pool
        readers = concurrent_readers(batch.framework, len(batch.splits), len(self._procs))
        task = replace(batch.task, readers=readers)
        lock = threading.Lock()
        remaining = [batch.encoded[s.split_id] for s in reversed(batch.splits)]
        rows = [0] * len(self._procs)
        holding = [0] * len(self._procs)  # splits handed to each worker and not known to be finished
        handed = [0]

        def one(index: int) -> TaskOutcome:
            proc = self._procs[index]
            assert proc.stdin is not None and proc.stdout is not None
            current = -1
            try:
                write_frame(proc.stdin, replace(task, index=index))
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
            outcome: TaskOutcome = message["ok"]
            return outcome

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
        try:
            self._close()
        finally:
            if self._log is not None:
                self._log.close()

    def _close(self) -> None:
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


class LocalEngine:
    """The local engine (see :class:`~splitsource.copyjob._protocol.Engine`): ``workers`` processes on this
    machine (0: one per core), no JVM; its tasks write where this process reads, so storage needs no check."""

    name = LOCAL_DIR

    def __init__(self, workers: int = 0) -> None:
        if not 0 <= workers <= MAX_WORKERS:
            raise OptionsError(f"option 'workers': {workers} is not from 0 (one per core) to {MAX_WORKERS}")
        self.workers = workers

    def check_storage(self, places: list[tuple[str, str]]) -> None:
        pass

    def run(self, run: CopyRun) -> EngineResult:
        return _run_copy(run, self.workers)

    def close(self) -> None:
        pass


MAX_WORKERS = 256  # local engine processes: more than any machine this runs on has cores for


def _run_copy(run: CopyRun, workers: int) -> EngineResult:
    workers = workers or os.cpu_count() or 1
    fs, base = resolve_filesystem(run.checkpoint)
    fs.make_dirs(f"{base}/{LOCAL_DIR}")
    log = f"{base}/{LOCAL_DIR}/workers.log" if not is_uri(run.checkpoint) else None
    sink_raw = {"buffer_mb": WORKER_BUFFER_MB, **run.sink_raw}  # a user's buffer_mb wins
    try:
        # started before the first batch is planned: their start-up (a Python, its imports) overlaps the planning
        return run_batches(replace(run, sink_raw=sink_raw), _Workers(workers, log), LOCAL_DIR, parallelism=workers)
    except LocalCopyFailed as exc:
        raise failure(str(exc), exc.detail or str(exc), run.checkpoint) from None
