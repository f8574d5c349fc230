"""One owner per output: which copy an output belongs to, and the lock a running copy holds.

- **Ownership.** ``<output>/_bucketing/owner.json`` names the copy that writes the output: a random token, its
  checkpoint and its identity (source, format, bucketing). The same token is in the checkpoint's identity file.
  A copy whose checkpoint does not carry the output's token (another copy, a checkpoint moved aside, emptied or
  deleted) is refused: resuming the output's rows from a fresh checkpoint would write them a second time. A
  checkpoint whose output lost its owner file (the output was deleted or replaced) is refused too: resuming
  would skip the rows that output no longer holds. ``overwrite`` removes what the old copy committed and starts
  afresh.
- **Lock.** A running copy holds ``lock.json`` in its output's ``_bucketing`` directory and in its checkpoint:
  created atomically (``O_EXCL``) with the process's host, pid and start time, removed when the copy ends. A lock
  left by a process that is provably gone (same host, no such pid, or a pid reused by another process) is taken
  over; any other lock refuses the second copy with one line naming the first.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from splitsource._errors import CheckpointError, LockedError
from splitsource.sink._committer import META_DIR
from splitsource.sink._formats import resolve_filesystem, write_atomically

__all__ = ["CopyLock", "new_token", "read_owner", "write_owner"]

OWNER_FILE = "owner.json"
LOCK_FILE = "lock.json"


def new_token() -> str:
    return uuid.uuid4().hex


def read_owner(output: str) -> dict[str, Any] | None:
    fs, base = resolve_filesystem(output)
    path = f"{base}/{META_DIR}/{OWNER_FILE}"
    try:
        with fs.open_input_stream(path) as stream:
            found = json.loads(bytes(stream.read()).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{path} is corrupt; the output's owner is unknown: use another --output, or "
                              "--overwrite to delete what it holds and start over") from None
    if not isinstance(found, dict) or "token" not in found:
        raise CheckpointError(f"{path} is not an owner file splitsource wrote; use another --output")
    return found


def write_owner(output: str, owner: Mapping[str, Any]) -> None:
    fs, base = resolve_filesystem(output)
    fs.create_dir(f"{base}/{META_DIR}", recursive=True)
    write_atomically(fs, f"{base}/{META_DIR}/{OWNER_FILE}", json.dumps(owner, indent=2, sort_keys=True).encode())


# -- the lock ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    started: str  # the process's start time in clock ticks since boot (/proc/<pid>/stat): tells pid reuse apart
    since: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.since} ({self.command})"


def _process_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name in parentheses


def this_holder(command: str) -> Holder:
    pid = os.getpid()
    return Holder(socket.gethostname(), pid, _process_start(pid) or "", time.strftime("%Y-%m-%d %H:%M:%S"),
                  command)


def _gone(holder: Holder) -> bool:
    """True only when the holder is provably not running: on this host, and its pid is free or reused."""
    if holder.host != socket.gethostname():
        return False
    started = _process_start(holder.pid)
    return started is None or (bool(holder.started) and started != holder.started)


class CopyLock:
    """Locks for the places a copy writes (``(what, directory)`` pairs, ``what`` naming it in errors), taken in
    order and released in reverse."""

    def __init__(self, places: list[tuple[str, str]], command: str) -> None:
        self._places = places
        self._holder = this_holder(command)
        self._held: list[tuple[pafs.FileSystem, str]] = []

    def __enter__(self) -> CopyLock:
        try:
            for what, directory in self._places:
                self._take(what, directory)
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _take(self, what: str, directory: str) -> None:
        fs, base = resolve_filesystem(directory)
        fs.create_dir(base, recursive=True)
        path = f"{base}/{LOCK_FILE}"
        data = json.dumps(asdict(self._holder)).encode()
        for _ in range(5):
            if self._create(fs, path, data):
                self._held.append((fs, path))
                return
            holder = self._read(fs, path)
            if holder is _BEING_WRITTEN:
                time.sleep(0.1)
                continue
            if holder is not None and not _gone(holder):
                raise LockedError(f"{what} is in use by another copy: {holder.describe()}; wait for it "
                                  f"to finish, or stop it (if it is gone for good, remove {path})", path=path)
            self._break(fs, path)  # its holder is gone (killed): take over
        raise LockedError(f"cannot lock {what}: {path} keeps changing", path=path)

    @staticmethod
    def _create(fs: pafs.FileSystem, path: str, data: bytes) -> bool:
        if isinstance(fs, pafs.LocalFileSystem):
            for _ in range(5):
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                    break
                except FileExistsError:
                    return False
                except FileNotFoundError:  # a failed copy removed the empty directory just now: make it again
                    os.makedirs(os.path.dirname(path), exist_ok=True)
            else:
                raise LockedError(f"cannot create {path}: its directory keeps disappearing", path=path)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return True
        # object stores have no create-if-absent here: best effort, documented in docs/operations.md
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        with fs.open_output_stream(path) as stream:
            stream.write(data)
        return True

    @staticmethod
    def _read(fs: pafs.FileSystem, path: str) -> Holder | None:
        try:
            with fs.open_input_stream(path) as stream:
                return Holder(**json.loads(bytes(stream.read()).decode("utf-8")))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, UnicodeDecodeError):
            # half written: by a process killed mid-write (old: its writer is gone), or being written right now
            return _GONE if _stale_unreadable(fs, path) else _BEING_WRITTEN

    @staticmethod
    def _break(fs: pafs.FileSystem, path: str) -> None:
        aside = f"{path}.stale-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            fs.move(path, aside)  # atomic: of two processes taking over, one moves it, the other finds nothing
            fs.delete_file(aside)
        except (FileNotFoundError, OSError):
            pass

    def release(self) -> None:
        while self._held:
            fs, path = self._held.pop()
            try:
                if self._read(fs, path) == self._holder:
                    fs.delete_file(path)
            except OSError:
                pass


_GONE = Holder(socket.gethostname(), -1, "", "", "")  # no process has pid -1: always gone
_BEING_WRITTEN = Holder("", -2, "", "", "")


def _stale_unreadable(fs: pafs.FileSystem, path: str) -> bool:
    """An unreadable lock older than a few seconds was left half written by a killed process."""
    info = fs.get_file_info(path)
    return info.mtime is not None and time.time() - info.mtime.timestamp() > 5
