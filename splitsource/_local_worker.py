"""A worker process of the local copy engine: reads groups of splits and writes them into pending part files.

Started by :mod:`splitsource._local_copy` as ``python -m splitsource._local_worker``. Frames on stdin and stdout
are pickled (8-byte length, then the payload); anything a task prints goes to stderr. Per batch:

- the coordinator sends a task (options, sink, worker index);
- the worker asks for splits one at a time, as a FLIP-27 reader does (``{"next": True, "rows": rows written so
  far}``, answered ``{"split": bytes or None}``) and writes their rows into its part files;
- after the answer None it closes its files as pending files and answers the task (``{"ok": ...}`` or
  ``{"error": ...}``).

It ends at end of input, and (on Linux) when its parent dies, so a killed copy leaves no worker behind.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["read_frame", "run_task", "write_frame"]

_LENGTH = struct.Struct(">Q")


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


def run_task(task: dict[str, Any], ask: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Read the splits the coordinator hands out (``ask``) and write their rows through the sink's writer."""
    from serializers import read_envelope, write_envelope
    from splitsource._api import Split
    from splitsource._spark_reader import build_source, check_executor, read_splits
    from splitsource.sink._files import PENDING_FILE_SERIALIZER
    from splitsource.sink._options import parse_sink_options
    from splitsource.sink._writer import write_files

    options = task["options"]
    check_executor(task["environment"])
    _, source = build_source(options)
    serializer = source.split_serializer()
    progress = {"rows": 0, "splits": 0}

    def next_split() -> Split | None:
        data = ask({"next": True, "rows": progress["rows"]}).get("split")
        if data is None:
            return None
        progress["splits"] += 1
        split: Split = read_envelope(serializer, data)
        return split

    def counted() -> Iterator[pa.RecordBatch]:
        for batch in read_splits(options, next_split, None, f"worker-{task['index']}"):
            progress["rows"] += batch.num_rows
            yield batch

    files = write_files(parse_sink_options(task["sink"]), counted(), task["index"])
    return {"files": [write_envelope(PENDING_FILE_SERIALIZER, f) for f in files],
            "rows": sum(f.rows for f in files), "splits": progress["splits"]}


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


def main() -> int:
    _die_with_parent()
    # imported now, while the coordinator plans the first batch, not when its first task arrives
    import splitsource._spark_reader  # noqa: F401
    import splitsource.sink._writer  # noqa: F401

    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of connectors must not corrupt the frames
    sys.stdout = sys.stderr
    tasks = sys.stdin.buffer

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        write_frame(answers, request)
        reply = read_frame(tasks)
        if reply is None:
            raise SystemExit(0)  # the coordinator is gone
        return dict(reply)

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
    sys.exit(main())
