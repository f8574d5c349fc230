"""A worker process of the local copy engine: reads groups of splits and writes them into pending part files.

Started by :mod:`splitsource.copyjob._local` as ``python -m splitsource.copyjob._worker``. Frames on stdin and stdout
are pickled (8-byte length, then the payload). The first frame names the file that what the worker prints goes to
and the copy's connector (``{"log": path or None, "connector": name}``: the engine starts its workers before it
knows its checkpoint), which the worker loads while the coordinator plans. Per batch:

- the coordinator sends a :class:`~splitsource.copyjob._protocol.TaskSpec`;
- the worker runs :func:`~splitsource.copyjob._protocol.run_task`, which asks for splits one at a time, as a
  FLIP-27 reader does (``{"next": True, "rows": rows written so far}``, answered ``{"split": bytes or None}``),
  and writes their rows into its part files;
- after the answer None it closes its files as pending files and answers the task (``{"ok": TaskOutcome}`` or
  ``{"error": ...}``).

It ends at end of input, and (on Linux) when its parent dies, so a killed copy leaves no worker behind.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import traceback
from typing import IO, Any

__all__ = ["ONE_BLAS_THREAD", "end_early", "read_frame", "start", "start_early", "take_early", "write_frame"]

_LENGTH = struct.Struct(">Q")

# numpy's OpenBLAS starts a thread per core at import, which spin for 0.05-0.15 s of CPU in a process that does no
# linear algebra and runs beside one worker per core: the command's process and every worker set it (a user's own
# setting wins)
ONE_BLAS_THREAD = ("OPENBLAS_NUM_THREADS", "1")


def start() -> subprocess.Popen[bytes]:
    """A new worker process, its stdin and stdout the frames' pipes; what it prints before its first frame (a
    broken install's traceback) goes to this process's stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # Arrow's pool: the tasks choose it (run_task)
    env.setdefault(*ONE_BLAS_THREAD)
    return subprocess.Popen([sys.executable, "-m", "splitsource.copyjob._worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)


_EARLY: list[subprocess.Popen[bytes]] = []


def start_early() -> None:
    """Start a worker now, for the local engine this process makes later to take (:func:`take_early`): the
    command line does, before it imports pyarrow and the copy, so the worker's own imports run beside them."""
    _EARLY.append(start())


def take_early() -> list[subprocess.Popen[bytes]]:
    """The workers :func:`start_early` started, now the caller's."""
    taken = _EARLY[:]
    _EARLY.clear()
    return taken


def end_early() -> None:
    """Kill the workers started early that no engine took (the copy failed before it made one)."""
    for proc in take_early():
        proc.kill()
        proc.wait()


def write_frame(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next frame, or None at end of input."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    data = stream.read(length)
    if len(data) < length:
        return None
    return pickle.loads(data)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (best effort; other systems rely on end of input)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the call took effect
            os._exit(1)
    except (OSError, AttributeError):
        pass


def _load_early(connector: str) -> None:
    """Load ``connector`` now, not when the first task asks for it (its modules and the scan of the installed
    connectors: about 25 ms on the path of a short copy). A connector that does not load fails its task instead,
    which says why in one line."""
    from splitsource._planning import load_connector

    try:
        load_connector(connector)
    except Exception:  # noqa: BLE001, S110 - the task loads it again, and reports the error
        pass


def _log_to(path: str | None) -> None:
    """From now on, what this process prints (stderr, and stdout's descriptor) is appended to ``path``, or goes
    nowhere."""
    sys.stderr.flush()
    fd = os.open(path or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    os.close(fd)


def main() -> int:
    _die_with_parent()
    # imported now, while the coordinator plans the first batch, not when its first task arrives
    from splitsource.copyjob._protocol import run_task

    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of connectors must not corrupt the frames
    sys.stdout = sys.stderr
    tasks = sys.stdin.buffer

    def ask(rows: int) -> bytes | None:
        write_frame(answers, {"next": True, "rows": rows})
        reply = read_frame(tasks)
        if reply is None:
            raise SystemExit(0)  # the coordinator is gone
        split: bytes | None = reply["split"]
        return split

    first = read_frame(tasks)
    if first is None:
        return 0
    _log_to(first["log"])
    _load_early(first["connector"])
    while (task := read_frame(tasks)) is not None:
        try:
            answer: dict[str, Any] = {"ok": run_task(task, ask)}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the coordinator, whole
            from splitsource._errors import SplitSourceError

            message = str(exc) if isinstance(exc, SplitSourceError) else f"{type(exc).__name__}: {exc}"
            answer = {"error": message, "detail": traceback.format_exc()}
        write_frame(answers, answer)
    return 0


if __name__ == "__main__":
    code = main()
    # every file is written and every answer sent: skip the interpreter's teardown (its modules, its drivers'
    # threads and pools), a tenth of a second the copy would wait for at its end
    sys.stderr.flush()
    os._exit(code)
