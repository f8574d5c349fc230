"""The local copy engine (``splitsource copy --engine local``): the coordinator of
:mod:`splitsource.copyjob._coordinator` with worker processes on this machine running the read tasks, no JVM.

Worker processes (``python -m splitsource.copyjob._worker``, up to one per core by default) ask for the batch's
splits one at a time (so the work balances itself, as FLIP-27 readers request splits) and write their rows into
pending part files through the bucketing sink's writer: one file per worker per batch and bucket. Offsets are logged
in ``<checkpoint>/local/offsets/``; the copy's batches are named ``local-<token>`` in the output's commit log.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import replace

from splitsource._errors import LocalCopyFailed, OptionsError
from splitsource._fs import Location
from splitsource._names import LOCAL_DIR, WORKERS_LOG
from splitsource._planning import concurrent_readers
from splitsource.copyjob._coordinator import Batch, run_batches
from splitsource.copyjob._failures import failure
from splitsource.copyjob._protocol import CopyRun, EngineResult, TaskOutcome, TaskSpec

__all__ = ["LOCAL_DIR", "LocalEngine"]

# One writer per core on one machine: each worker's default sink budget (the sink's own default, 128 MiB, is sized
# for an executor task). 16 MiB keeps a Parquet row group near 100,000 rows of a typical table; measured on the
# 1M-row benchmark table, the whole copy's peak fell from 712 MB to about 410 MB and it ran no slower.
WORKER_BUFFER_MB = "16"


class _Handout:
    """A batch's splits, handed to the workers one per request, and the batch's progress from their requests."""

    def __init__(self, encoded: list[bytes], workers: int, progress: Callable[[int, int], None]) -> None:
        self._remaining = encoded[::-1]
        self._rows = [0] * workers
        self._holding = [0] * workers  # splits handed to each worker and not known to be finished
        self._handed = 0
        self._progress = progress
        self._lock = threading.Lock()

    def next(self, worker: int, rows: int) -> tuple[bytes | None, int]:
        """The next split for ``worker``, which has written ``rows`` and finished every split it held (None: no
        split left), and the number of splits handed out so far."""
        with self._lock:
            split = self._remaining.pop() if self._remaining else None
            self._rows[worker] = rows
            self._holding[worker] = 0 if split is None else 1
            self._handed += 0 if split is None else 1
            self._progress(self._handed - sum(self._holding), sum(self._rows))
            return split, self._handed


class _Workers:
    """Up to ``count`` worker processes, each running one task at a time; killed all at once when one task fails.

    One starts at once, so its start-up (a Python, its imports: about 0.4 s of CPU) overlaps the copy's connecting,
    locking and planning; the others when a batch has splits for them. A copy of one split starts one process (on
    2 cores, the second one's start-up took the first one's CPU: a 1-row copy ended 0.15 s sooner without it)."""

    def __init__(self, count: int) -> None:
        from splitsource.copyjob._worker import take_early

        self._count = count
        self._procs = take_early()[:count]
        self._first: dict[str, str | None] | None = None  # every worker's first frame, once known
        self._start(1)

    def _start(self, wanted: int) -> None:
        from splitsource.copyjob._worker import start

        while len(self._procs) < min(wanted, self._count):
            self._procs.append(start())
            if self._first is not None:
                self._greet(self._procs[-1])

    def __len__(self) -> int:
        """How many processes the pool may run: the copy's parallelism."""
        return self._count

    def greet(self, log: str | None, connector: str) -> None:
        """Every worker's first frame, now or when it starts: the file it appends what it prints to from now on
        (None: nowhere), and the connector its tasks read with, which it loads at once (its modules, the installed
        connectors' names), while the coordinator plans the first batch."""
        self._first = {"log": log, "connector": connector}
        for proc in self._procs:
            self._greet(proc)

    def _greet(self, proc: subprocess.Popen[bytes]) -> None:
        from splitsource.copyjob._worker import write_frame

        assert proc.stdin is not None
        try:
            write_frame(proc.stdin, self._first)
        except OSError:
            pass  # a worker already dead: its task's request finds it so, and says how it ended

    def run(self, batch: Batch, progress: Callable[[int, int], None]) -> list[TaskOutcome]:
        """Run one batch: every worker takes the batch's task and asks for splits until none is left (so the work
        balances itself); ``progress(splits finished, rows written)`` after each request. Returns each worker's
        result."""
        # every worker asks for the batch's splits: as many read at once as there are splits, up to the pool
        self._start(len(batch.splits))
        readers = concurrent_readers(batch.framework, len(batch.splits), len(self._procs))
        task = replace(batch.task, readers=readers)
        handout = _Handout([batch.encoded[s.split_id] for s in batch.splits], len(self._procs), progress)
        with ThreadPoolExecutor(max_workers=len(self._procs)) as executor:
            futures = [executor.submit(self._serve, i, replace(task, index=i), handout)
                       for i in range(len(self._procs))]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in finished if f.exception() is not None]
            if failed:
                self.kill()  # the other workers' reads end at once; the batch is not committed
                raise failed[0].exception()  # type: ignore[misc]
            return [f.result() for f in futures]

    def _serve(self, index: int, task: TaskSpec, handout: _Handout) -> TaskOutcome:
        """Hand worker ``index`` the task, then a split per request, until it reports its outcome."""
        from splitsource.copyjob._worker import read_frame, write_frame

        proc = self._procs[index]
        assert proc.stdin is not None and proc.stdout is not None
        current = -1
        try:
            write_frame(proc.stdin, task)
            while (message := read_frame(proc.stdout)) is not None and "next" in message:
                split, current = handout.next(index, int(message["rows"]))
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


class LocalEngine:
    """The local engine (see :class:`~splitsource.copyjob._protocol.Engine`): ``workers`` processes on this
    machine (0: one per core), no JVM, the first started when the engine is made (see :class:`_Workers`) and all
    ended by :meth:`close` (or by the end of its run); its tasks write where this process reads, so storage needs
    no check."""

    name = LOCAL_DIR
    sink_defaults: Mapping[str, str] = {"buffer_mb": WORKER_BUFFER_MB}  # a user's buffer_mb wins

    def __init__(self, workers: int = 0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= MAX_WORKERS:
            raise OptionsError(f"option 'workers': {workers!r} is not a number of processes from 0 (one per core) "
                               f"to {MAX_WORKERS}")
        self.workers = workers
        self._count = workers or os.cpu_count() or 1
        self._pool: _Workers | None = _Workers(self._count)

    def check_storage(self, places: list[tuple[str, Location]]) -> None:
        pass

    def run(self, run: CopyRun) -> EngineResult:
        pool, self._pool = self._pool or _Workers(self._count), None
        return _run_copy(run, pool)

    def close(self) -> None:
        if self._pool is not None:  # never run: end of input ends them
            self._pool.close()
            self._pool = None


MAX_WORKERS = 256  # local engine processes: more than any machine this runs on has cores for


def _run_copy(run: CopyRun, pool: _Workers) -> EngineResult:
    place = run.checkpoint.child(LOCAL_DIR)
    place.store.make_dirs(place.path)
    pool.greet(f"{place.path}/{WORKERS_LOG}" if place.store.local else None, run.read.framework.connector)
    try:
        return run_batches(run, pool, LOCAL_DIR, parallelism=len(pool))
    except LocalCopyFailed as exc:
        raise failure(str(exc), exc.detail or str(exc), run.checkpoint) from None
