"""One owner per output: which copy an output belongs to, and the lock a running copy holds.

- **Ownership.** ``owner.json`` in the output's records (``<output>.bucketing``) names the copy that writes the
  output: a random token, its checkpoint and its identity (source, format, bucketing). The same token is in the
  checkpoint's identity file. A copy whose checkpoint does not carry the output's token (another copy, a checkpoint
  moved aside, emptied or deleted) is refused: resuming the output's rows from a fresh checkpoint would write them
  a second time. A checkpoint whose output lost its owner file, or the files its newest commit made (the output
  was deleted or replaced), is refused too: resuming would skip the rows that output no longer holds.
  ``overwrite`` removes what the old copy committed and starts afresh.
- **Lease.** A running copy holds ``lock.json`` in its output's records and in its checkpoint: created only where
  none exists (``O_EXCL``; ``If-None-Match: *`` on S3), naming the process's host, pid and start time, renewed
  every ``lease_s / 4`` seconds, removed when the copy ends. A lease not renewed for ``lease_s`` has expired and is
  taken over by a copy started anywhere, as is at once the lock of a process provably gone from this host; of
  two copies taking over one stale lock, the one that creates its marker (``lock.json.break-<lease>``) removes
  it. Any other lock refuses the second copy with one line naming the first and when its lease runs out. The
  lease is also the copy's fence: :meth:`CopyLock.check` before each offset and commit.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from splitsource._errors import CheckpointError, LeaseLostError, LockedError, OptionsError
from splitsource._fs import Location, Store
from splitsource._names import LOCK_BREAK, LOCK_FILE, OWNER_FILE
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import join

__all__ = ["DEFAULT_LEASE_S", "CopyLock", "new_token", "read_owner", "write_owner"]

DEFAULT_LEASE_S = 60.0
MARKER_STALE_S = 10.0  # a takeover marker this old was left by a copy that died between marking and removing


def new_token() -> str:
    return uuid.uuid4().hex


def read_owner(records: BucketingGlobalCommitter) -> dict[str, Any] | None:
    """The owner file in an output's records (None: no copy owns the output)."""
    path = join(records.meta, OWNER_FILE)
    found = records.fs.read_record(path, lambda: CheckpointError(
        f"{path} is corrupt; the output's owner is unknown: use another option 'output', or option 'overwrite' to "
        "delete what it holds and start over"))
    if found is None:
        return None
    if "token" not in found:
        raise CheckpointError(f"{path} is not an owner file splitsource wrote; use another option 'output'")
    return found


def write_owner(records: BucketingGlobalCommitter, owner: Mapping[str, Any]) -> None:
    records.fs.make_dirs(records.meta)
    records.fs.write(join(records.meta, OWNER_FILE), json.dumps(owner, indent=2, sort_keys=True).encode())


# -- the lease ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """A lease on a place a copy writes: who holds it, and until when unless renewed (``renewed + lease_s``, on the
    writer's wall clock; hosts' clocks must agree to well within ``lease_s``)."""

    host: str
    pid: int
    started: str  # the process's start time in clock ticks since boot (/proc/<pid>/stat): tells pid reuse apart
    since: str
    command: str
    lease: str = ""  # this holding's random id: a re-run of the same process is another holding
    renewed: float = 0.0  # time.time() of the last renewal
    lease_s: float = 0.0

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.since} ({self.command})"

    @property
    def expires(self) -> float:
        return self.renewed + self.lease_s

    def renew(self) -> Holder:
        return replace(self, renewed=time.time())


def _process_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name in parentheses


def this_holder(command: str, lease_s: float) -> Holder:
    pid = os.getpid()
    return Holder(socket.gethostname(), pid, _process_start(pid) or "", time.strftime("%Y-%m-%d %H:%M:%S"),
                  command, uuid.uuid4().hex, time.time(), lease_s)


def _gone(holder: Holder) -> bool:
    """True only when the holder is provably not running: on this host, and its pid is free or reused."""
    if holder.host != socket.gethostname():
        return False
    started = _process_start(holder.pid)
    return started is None or (bool(holder.started) and started != holder.started)


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def check_one_writer(places: list[tuple[str, Location]], single_writer: bool) -> None:
    """Refuse a place on a store that cannot create a file only where none exists (a lock there is a check then a
    write: two copies started together could both take it), unless the user vouches for a single writer
    (``single_writer``); S3 is probed, since a compatible store may ignore ``If-None-Match``."""
    from splitsource._s3 import conditional_create_enforced

    for what, place in places:
        fs, base = place.store, place.path
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
    """Leases on the places a copy writes (``(what, location)`` pairs, ``what`` naming it in errors), taken in
    order, renewed every ``lease_s / 4`` seconds by a thread while the copy runs, and released in reverse.

    A lease not renewed for ``lease_s`` has expired, and a copy started anywhere takes it over, saying so in one
    line; so does a copy on the holder's own host when the holder's process is provably gone. :meth:`check` is the
    fence: it raises :class:`LeaseLostError` once another copy holds a place, and the copy calls it before every
    offset and commit it writes (the commit log's conditional creates arbitrate the instant between the check and
    the write)."""

    def __init__(self, places: list[tuple[str, Location]], command: str, lease_s: float = DEFAULT_LEASE_S) -> None:
        self._places = places
        self._holder = this_holder(command, lease_s)
        self._held: list[tuple[str, Store, str]] = []
        self._broken: list[tuple[Store, str]] = []  # the markers of the stale locks this copy removed
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: str | None = None
        self._tags: dict[str, str] = {}  # a held lock's ETag, where the store updates on If-Match: renewed by one PUT

    def __enter__(self) -> CopyLock:
        try:
            for what, place in self._places:
                self._take(what, place)
        except BaseException:
            self.release()
            raise
        self._renewer = threading.Thread(target=self._renew_until_released, name="splitsource-lease", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _take(self, what: str, place: Location) -> None:
        fs = place.store
        fs.make_dirs(place.path)
        path = place.child(LOCK_FILE).path
        taking_over = ""  # said once this copy holds the lock: of two copies taking it over, one does
        for _ in range(50):
            if self._create(fs, path, json.dumps(asdict(self._holder)).encode()):  # (its ETag kept in _tags)
                self._held.append((what, fs, path))
                if taking_over:
                    _notice(taking_over)
                return
            holder = self._read(fs, path)
            if holder is None:
                continue  # released just now: try again
            if isinstance(holder, _Torn):
                if time.time() - holder.mtime < self._holder.lease_s:
                    raise LockedError(f"{what}: its lock {path} is unreadable: a copy is writing it now, or one was "
                                      f"killed while writing it; if nothing renews it, it is taken over at "
                                      f"{_clock(holder.mtime + self._holder.lease_s)} (lease_s after it was "
                                      "written): retry then", path=path)
                taking_over = (f"{what}: took over a lock left half written at {_clock(holder.mtime)} (a copy "
                               "killed while writing it)")
            elif _gone(holder):
                taking_over = ""  # killed on this host: taken over at once
            elif time.time() < holder.expires:
                raise LockedError(f"{what} is in use by another copy: {holder.describe()}; its lease runs out at "
                                  f"{_clock(holder.expires)} unless it renews it: wait for it to finish, or retry "
                                  "after that", path=path)
            else:
                taking_over = (f"{what}: took over from {holder.describe()}, whose lease expired at "
                               f"{_clock(holder.expires)}")
            self._break(fs, path, holder)
        raise LockedError(f"cannot lock {what}: another copy keeps taking {path} at the same time", path=path)

    def _create(self, fs: Store, path: str, data: bytes) -> bool:
        # where the store has no exclusive create (object stores) this is a check then a write: best effort,
        # documented in docs/operations.md
        for _ in range(5):
            try:
                if not fs.create(path, data):
                    return False
                if fs.conditional is not None:  # its ETag, for renewals by one If-Match PUT each
                    found = fs.conditional.read_tagged(path)
                    if found is not None and found[1] and _holds(found[0], self._holder.lease):
                        self._tags[path] = found[1]
                return True
            except FileNotFoundError:  # a failed copy removed the empty directory just now: make it again
                fs.make_dirs(path.rsplit("/", 1)[0])
        raise LockedError(f"cannot create {path}: its directory keeps disappearing", path=path)

    @staticmethod
    def _read(fs: Store, path: str) -> Holder | _Torn | None:
        try:
            return Holder(**json.loads(fs.read_text(path)))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, UnicodeDecodeError):
            info = fs.info(path)  # half written: being written now, or by a process killed mid-write
            return _Torn(0.0 if info is None or info.mtime is None else info.mtime)

    def _break(self, fs: Store, path: str, stale: Holder | _Torn) -> None:
        """Remove the stale lock ``stale`` at ``path``, unless another copy is removing it: of the copies that read
        the same stale lock, the one that creates the marker ``<path>.break-<its lease>`` (only where none exists:
        the store decides) removes it; the others read the lock again, and find the winner's. A marker older than
        ``MARKER_STALE_S`` belongs to a copy that died between marking and removing: the next generation's marker
        is then taken instead."""
        for generation in range(100):
            marker = _marker(path, stale, generation)
            try:
                won = fs.create(marker, b"")
            except OSError:
                won = False
            if won:
                self._broken.append((fs, marker))
                try:
                    fs.delete(path)
                except OSError:
                    pass
                return
            info = fs.info(marker)
            if info is None or info.mtime is None or time.time() - info.mtime < MARKER_STALE_S:
                time.sleep(0.05)  # another copy is removing it now: read the lock again
                return

    def _renew_until_released(self) -> None:
        interval = max(self._holder.lease_s / 4, 0.05)
        while not self._stop.wait(interval):
            holder = self._holder.renew()
            for what, fs, path in list(self._held):
                try:
                    if not self._renew(fs, path, holder):
                        self._lost = self._lost or self._loss(what, self._read(fs, path))
                except OSError:
                    continue  # the store failed this renewal: the next one tries again
            self._holder = holder

    def _renew(self, fs: Store, path: str, holder: Holder) -> bool:
        """Write the renewed lease; False if another copy holds the lock now. On an object store that updates on
        ``If-Match``, one PUT conditional on the lock's last ETag; elsewhere a read, then a write (never synced)."""
        data = json.dumps(asdict(holder)).encode()
        tag = self._tags.get(path)
        if tag is None or fs.conditional is None:
            found = self._read(fs, path)
            if not (isinstance(found, Holder) and found.lease == holder.lease):
                return False
            fs.write(path, data, durable=False)
            return True
        new = fs.conditional.replace_if(path, data, tag)
        if new is None:  # changed since: by another copy, or by this one's renewal whose answer was lost
            current = fs.conditional.read_tagged(path)
            if current is None or not _holds(current[0], holder.lease):
                return False
            new = fs.conditional.replace_if(path, data, current[1])
        if new is None:
            return False
        if new:
            self._tags[path] = new
        else:  # the store gave no ETag: renew by a read and a write from now on
            del self._tags[path]
        return True

    @staticmethod
    def _loss(what: str, found: Holder | _Torn | None) -> str:
        by = (found.describe() if isinstance(found, Holder) else
              "another copy, which has finished since" if found is None else "another copy")
        return (f"{what} was taken over by {by} after this copy's lease expired (it was paused, or cut off from "
                "the store, for longer than lease_s); this copy stops and commits nothing more")

    def check(self) -> None:
        """The fence: raise :class:`LeaseLostError` if another copy holds any of the places now."""
        for what, fs, path in self._held:
            if self._lost is None:
                found = self._read(fs, path)
                if not (isinstance(found, Holder) and found.lease == self._holder.lease):
                    self._lost = self._loss(what, found)
        if self._lost is not None:
            raise LeaseLostError(self._lost)

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        while self._held:
            _, fs, path = self._held.pop()
            try:
                found = self._read(fs, path)
                # the marker a copy taking this lease over would create first: whoever creates it removes the lock
                if isinstance(found, Holder) and found.lease == self._holder.lease and \
                        fs.create(_marker(path, found, 0), b""):
                    fs.delete(path)
                    fs.delete(_marker(path, found, 0))
            except OSError:
                pass
        while self._broken:
            fs, marker = self._broken.pop()
            try:
                fs.delete(marker)
            except OSError:
                pass


def _holds(data: bytes, lease: str) -> bool:
    """Whether the lock's bytes are the lease ``lease``."""
    try:
        return bool(json.loads(data).get("lease") == lease)
    except (ValueError, AttributeError):
        return False


def _marker(path: str, lock: Holder | _Torn, generation: int) -> str:
    """The file whose creation entitles one copy to remove the lock ``lock`` at ``path``."""
    name = lock.lease if isinstance(lock, Holder) else f"torn-{lock.mtime:.6f}"
    return f"{path}{LOCK_BREAK}{name}" + (f"-{generation}" if generation else "")


@dataclass(frozen=True)
class _Torn:
    """A lock that does not parse, and when it was last written."""

    mtime: float


def _notice(text: str) -> None:
    print(f"splitsource copy: {text}", file=sys.stderr, flush=True)
