"""A worker process of the local copy engine: reads groups of splits and writes them into pending part files.

Started by :mod:`splitsource._local_copy` as ``python -m splitsource._local_worker``. It takes tasks from stdin and
answers on stdout, one pickled frame each (8-byte length, then the payload); anything the task prints goes to
stderr. It ends at end of input, and (on Linux) when its parent dies, so a killed copy leaves no worker behind.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback
from typing import IO, Any

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


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Read one group of splits (in order) and write their rows through the bucketing sink's writer."""
    from serializers import read_envelope, write_envelope
    from splitsource._spark_reader import SplitsPartition, build_source, read_partition
    from splitsource.sink._files import PENDING_FILE_SERIALIZER
    from splitsource.sink._options import parse_sink_options
    from splitsource.sink._writer import write_files

    options = task["options"]
    _, source = build_source(options)
    serializer = source.split_serializer()
    splits = tuple(read_envelope(serializer, data) for data in task["splits"])
    partition = SplitsPartition(splits, tuple(task["python"]), task["version"])
    files = write_files(parse_sink_options(task["sink"]), read_partition(options, partition, None), task["index"])
    return {"files": [write_envelope(PENDING_FILE_SERIALIZER, f) for f in files],
            "rows": sum(f.rows for f in files), "splits": len(splits)}


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
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of connectors must not corrupt the frames
    sys.stdout = sys.stderr
    tasks = sys.stdin.buffer
    while (task := read_frame(tasks)) is not None:
        try:
            answer: dict[str, Any] = {"ok": run_task(task)}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the coordinator, whole
            from splitsource._errors import SplitSourceError

            message = str(exc) if isinstance(exc, SplitSourceError) else f"{type(exc).__name__}: {exc}"
            answer = {"error": message, "detail": traceback.format_exc()}
        write_frame(answers, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
