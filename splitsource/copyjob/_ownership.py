"""One owner per output: which copy an output belongs to, and the lock a running copy holds.

- **Ownership.** ``owner.json`` in the output's records (``<output>.bucketing``) names the copy that writes the
  output: a random token, its checkpoint and its identity (source, format, bucketing). The same token is in the
  checkpoint's identity file. A copy whose checkpoint does not carry the output's token (another copy, a checkpoint
  moved aside, emptied or deleted) is refused: resuming the output's rows from a fresh checkpoint would write them
  a second time. A checkpoint whose output lost its owner file, or the files its newest commit made (the output
  was deleted or replaced), is refused too: resuming would skip the rows that output no longer holds.
  ``overwrite`` removes what the old copy committed and starts afresh.
- **Lock.** A running copy holds ``lock.json`` in its output's records and in its checkpoint:
  created atomically (``O_EXCL``) with the process's host, pid and start time, removed when the copy ends. A lock
  left by a process that is provably gone (same host, no such pid, or a pid reused by another process) is taken
  over; any other lock refuses the second copy with one line naming the first.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from splitsource._errors import CheckpointError, LockedError, OptionsError
from splitsource._fs import Store, resolve_filesystem
from splitsource.sink._committer import LOCK_FILE, OWNER_FILE, BucketingGlobalCommitter
from splitsource.sink._files import join

__all__ = ["CopyLock", "new_token", "read_owner", "write_owner"]



def new_token() -> str:
    return uuid.uuid4().hex


def read_owner(records: BucketingGlobalCommitter) -> dict[str, Any] | None:
    """The owner file in an output's records (None: no copy owns the output)."""
    path = join(records.meta, OWNER_FILE)
    try:
        found = json.loads(records.fs.read_text(path))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{path} is corrupt; the output's owner is unknown: use another option 'output', or "
                              "option 'overwrite' to delete what it holds and start over") from None
    if not isinstance(found, dict) or "token" not in found:
        raise CheckpointError(f"{path} is not an owner file splitsource wrote; use another option 'output'")
    return found


def write_owner(records: BucketingGlobalCommitter, owner: Mapping[str, Any]) -> None:
    records.fs.make_dirs(records.meta)
    records.fs.write(join(records.meta, OWNER_FILE), json.dumps(owner, indent=2, sort_keys=True).encode())


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


def check_one_writer(places: list[tuple[str, str]], single_writer: bool) -> None:
    """Refuse a place on a store that cannot create a file only where none exists (a lock there is a check then a
    write: two copies started together could both take it), unless the user vouches for a single writer
    (``single_writer``); S3 is probed, since a compatible store may ignore ``If-None-Match``."""
    from splitsource._s3 import conditional_create_enforced

    for what, directory in places:
        fs, base = resolve_filesystem(directory)
        if fs.local:
            continue
        fs.make_dirs(base)
        enforced = fs.conditional is not None and conditional_create_enforced(fs.conditional, base, fs.fs)
        if enforced:
            continue
        why = ("ignores If-None-Match on PutObject" if fs.conditional is not None
               else "cannot create a file only where none exists")
        if not single_writer:
            raise OptionsError(f"{what}: the store {why}, so two copies started together could both write it; "
                               "run one copy at a time there and say so with option 'single_writer' "
                               "(option 'single_writer')")
        print(f"splitsource copy: {what}: the store {why}; relying on single_writer (one copy at a time)",
              file=sys.stderr, flush=True)


class CopyLock:
    """Locks for the places a copy writes (``(what, directory)`` pairs, ``what`` naming it in errors), taken in
    order and released in reverse."""

    def __init__(self, places: list[tuple[str, str]], command: str) -> None:
        self._places = places
        self._holder = this_holder(command)
        self._held: list[tuple[Store, str]] = []

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
        fs.make_dirs(base)
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
    def _create(fs: Store, path: str, data: bytes) -> bool:
        # where the store has no exclusive create (object stores) this is a check then a write: best effort,
        # documented in docs/operations.md
        for _ in range(5):
            try:
                return fs.create(path, data)
            except FileNotFoundError:  # a failed copy removed the empty directory just now: make it again
                fs.make_dirs(path.rsplit("/", 1)[0])
        raise LockedError(f"cannot create {path}: its directory keeps disappearing", path=path)

    @staticmethod
    def _read(fs: Store, path: str) -> Holder | None:
        try:
            return Holder(**json.loads(fs.read_text(path)))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, UnicodeDecodeError):
            # half written: by a process killed mid-write (old: its writer is gone), or being written right now
            return _GONE if _stale_unreadable(fs, path) else _BEING_WRITTEN

    @staticmethod
    def _break(fs: Store, path: str) -> None:
        aside = f"{path}.stale-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            fs.move(path, aside)  # atomic: of two processes taking over, one moves it, the other finds nothing
            fs.delete(aside)
        except (FileNotFoundError, OSError):
            pass

    def release(self) -> None:
        while self._held:
            fs, path = self._held.pop()
            try:
                if self._read(fs, path) == self._holder:
                    fs.delete(path)
            except OSError:
                pass


_GONE = Holder(socket.gethostname(), -1, "", "", "")  # no process has pid -1: always gone
_BEING_WRITTEN = Holder("", -2, "", "", "")


def _stale_unreadable(fs: Store, path: str) -> bool:
    """An unreadable lock older than a few seconds, or older than this machine's last boot, was left half written
    by a killed process or a power loss (a lock is never synced: its holder is gone after either)."""
    info = fs.info(path)
    if info is None or info.mtime is None:
        return True
    return time.time() - info.mtime > 5 or info.mtime < _boot_time()


def _boot_time() -> float:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0
