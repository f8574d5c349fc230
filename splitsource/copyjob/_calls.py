"""Function calls run in worker processes on this machine's cores: how ``verify`` reads the source and the output
in parallel.

A worker is ``python -m splitsource.copyjob._calls`` (a fresh interpreter, as the local engine's workers are: a
user's script is never imported again, as multiprocessing's spawn would). Frames on stdin and stdout are pickled
(the local engine's framing): ``(function, args)`` in, ``{"ok": result}`` or ``{"error": exception}`` out. Each
worker takes the next call when it has answered the last, so long and short calls balance themselves. A worker
ends at end of input and (on Linux) when its parent dies.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from splitsource._errors import SplitSourceError

__all__ = ["CallPool"]


class CallPool:
    """``workers`` worker processes; :meth:`map` runs calls on them, in any order, and returns results in order."""

    def __init__(self, workers: int) -> None:
        env = {"ARROW_DEFAULT_MEMORY_POOL": "system", **os.environ, "PYTHONUNBUFFERED": "1"}
        self._procs = [subprocess.Popen([sys.executable, "-m", "splitsource.copyjob._calls"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env) for _ in range(max(1, workers))]

    def __enter__(self) -> CallPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    def map(self, calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """Every call's result, in the order of ``calls``. The first failure stops the others and is raised (the
        worker's own exception where it can travel, else a :class:`SplitSourceError` with its message)."""
        from splitsource.copyjob._worker import read_frame, write_frame

        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(calls)):
            todo.put(i)
        results: list[Any] = [None] * len(calls)
        failures: list[BaseException] = []

        def serve(proc: subprocess.Popen[bytes]) -> None:
            assert proc.stdin is not None and proc.stdout is not None
            while not failures:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    write_frame(proc.stdin, calls[i])
                    answer = read_frame(proc.stdout)
                except (OSError, ValueError) as exc:
                    answer = {"error": SplitSourceError(f"a verify worker failed: {exc}")}
                if answer is None:
                    answer = {"error": SplitSourceError(f"a verify worker exited with {proc.wait()}")}
                if "error" in answer:
                    failures.append(answer["error"])
                    return
                results[i] = answer["ok"]

        threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in self._procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise failures[0]
        return results


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a SplitSourceError with its message."""
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if isinstance(copy, BaseException):
            return copy
    except Exception:  # noqa: BLE001 - any exception that cannot travel travels as its message
        pass
    message = str(exc) if isinstance(exc, SplitSourceError) else f"{type(exc).__name__}: {exc}"
    return SplitSourceError(message)


def main() -> int:
    from splitsource._logs import quiet_logging
    from splitsource.copyjob._worker import _die_with_parent, read_frame, write_frame

    _die_with_parent()
    quiet_logging()  # as the command's own process: only splitsource's records reach the terminal, not the driver's
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a connector's prints must not corrupt the frames
    sys.stdout = sys.stderr
    while (call := read_frame(sys.stdin.buffer)) is not None:
        function, args = call
        try:
            answer: dict[str, Any] = {"ok": function(*args)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller, whole
            if os.environ.get("SPLITSOURCE_DEBUG"):
                traceback.print_exc()
            answer = {"error": _portable(exc)}
        write_frame(answers, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
