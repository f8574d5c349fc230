"""One owner per output: which copy may write an output with a checkpoint, and the lease a running copy holds.

Every decision ``splitsource copy`` takes about its places before it reads lives here, in four parts:

- **Ownership.** ``owner.json`` in the output's records (``<output>.bucketing``) names the copy that writes the
  output: a random token, its checkpoint and its identity (source, format, bucketing). The same token is in the
  checkpoint's identity file. A copy whose checkpoint does not carry the output's token (another copy, a checkpoint
  moved aside, emptied or deleted) is refused: resuming the output's rows from a fresh checkpoint would write them
  a second time. A checkpoint whose output lost its owner file, or the files its newest commit made (the output
  was deleted or replaced), is refused too: resuming would skip the rows that output no longer holds. A writer that
  is not a copy (``df.write.format("bucketing")``) is refused an output a copy owns (:func:`refuse_if_owned`).
- **Claim** (:func:`claim`): holding the lease, a copy reads both records and takes the output, resumes it, or is
  refused; every refusal says what to do, and each piece of advice leads to an exact output (tested): resume with
  the checkpoint the output was written with, choose another output, or start over with ``--overwrite``.
- **Overwrite** (:func:`start_over`) removes what the old copy committed and starts afresh, and never a file no
  copy writes; a copy that fails before its first commit leaves nothing half-made (:func:`undo_unstarted`).
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
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from splitsource._errors import CheckpointError, LeaseLostError, LockedError, OptionsError, OutputOwnedError
from splitsource._fs import Entry, Location, Store, is_temporary
from splitsource._names import (
    ERROR_LOG,
    FINISHED_FILE,
    IDENTITY_FILE,
    LOCK_BREAK,
    LOCK_FILE,
    OWNER_FILE,
    SINK_DESCRIPTION,
    VALID_LENGTH,
)
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PartNames, join

__all__ = ["DEFAULT_LEASE_S", "Claim", "CopyLock", "check_one_writer", "check_paths", "claim", "new_token",
           "read_owner", "refuse_if_owned", "start_over", "undo_unstarted", "write_owner"]

DEFAULT_LEASE_S = 60.0
MARKER_STALE_S = 10.0  # a takeover marker this old was left by a copy that died between marking and removing
TORN_SETTLE_S = 2.0  # how long a young unreadable lock is read again: one being written now is whole within it


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


def refuse_if_owned(records: BucketingGlobalCommitter, who: str) -> None:
    """Refuse a writer that is not a copy (``who`` names it) an output a copy owns or is writing."""
    for name, what in ((OWNER_FILE, "belongs to"), (LOCK_FILE, "is being written by")):
        path = join(records.meta, name)
        if not records.fs.exists(path):
            continue
        detail = ""
        try:
            found = json.loads(records.fs.read_text(path))
            if isinstance(found, dict) and found.get("checkpoint"):
                detail = f" (its checkpoint is {found['checkpoint']})"
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        raise OutputOwnedError(f"{records.base} {what} a splitsource copy{detail}: {who} does not write into a "
                               "copy's output; write to another path", path=records.base)


# -- the claim ---------------------------------------------------------------------------------------------------

START_OVER = "option 'overwrite'"
# the engines' directories in a checkpoint: a copy's progress
_CHECKPOINT_PROGRESS = ("local", "spark")


@dataclass(frozen=True)
class Claim:
    token: str
    resumed: bool
    created_checkpoint: bool  # this run wrote the checkpoint's identity (nothing of it existed before)
    created_owner: bool  # this run made the output its copy's


def check_paths(output: Location, checkpoint: Location) -> None:
    """Refuse, before anything is written, an output or checkpoint that is a file or cannot be written."""
    for flag, place in (("option 'output'", output), ("option 'checkpoint'", checkpoint)):
        fs, base, path = place.store, place.path, place.shown
        if fs.is_file(base):
            raise OptionsError(f"{flag} {path} is a file; give a directory")
        if fs.local:
            existing = base
            while not os.path.exists(existing):
                existing = os.path.dirname(existing) or "/"
            if not os.path.isdir(existing):
                raise OptionsError(f"{flag} {path}: {existing} is a file, so the directory cannot be made")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise OptionsError(f"{flag} {path}: no permission to write in {existing}")


def _read_identity(place: Location) -> tuple[dict[str, Any] | None, bool]:
    """(the checkpoint's identity or None, whether the checkpoint holds progress of a copy)."""
    fs, base, checkpoint = place.store, place.path, place.shown
    path = f"{base}/{IDENTITY_FILE}"
    progress = any(fs.is_dir(f"{base}/{d}") for d in _CHECKPOINT_PROGRESS)
    if not fs.exists(path):
        if progress:
            raise CheckpointError(f"checkpoint {checkpoint} was not written by splitsource copy (no {IDENTITY_FILE});"
                                  " use another option 'checkpoint'")
        return None, False
    found = fs.read_record(path, lambda: CheckpointError(
        f"checkpoint {checkpoint} is corrupt ({IDENTITY_FILE} is not readable JSON); to start over, run the same "
        f"copy with {START_OVER}"))
    return found, progress


def _write_identity(checkpoint: Location, identity: Mapping[str, Any]) -> None:
    checkpoint.store.make_dirs(checkpoint.path)
    data = json.dumps(identity, indent=2, sort_keys=True).encode()
    checkpoint.store.write(checkpoint.child(IDENTITY_FILE).path, data)


def _schema_change(was: list[str], now: list[str]) -> str:
    """The columns that differ between two schemas given as ``name: type`` texts."""
    old = dict(c.split(": ", 1) for c in was)
    new = dict(c.split(": ", 1) for c in now)
    parts = [f"{n} added" for n in new if n not in old] + [f"{n} removed" for n in old if n not in new]
    parts += [f"{n} {old[n]} -> {new[n]}" for n in new if n in old and old[n] != new[n]]
    return ", ".join(parts) or "their order"


def claim(output_place: Location, checkpoint_place: Location, identity: dict[str, Any],
          committer: BucketingGlobalCommitter) -> Claim:
    """Decide whether this copy may write ``output`` with ``checkpoint``; record it as the output's owner.
    Call it holding the copy's lock."""
    output, checkpoint = output_place.shown, checkpoint_place.shown
    found, progress = _read_identity(checkpoint_place)
    owner = read_owner(committer)
    if found is not None:
        _check_same_copy(checkpoint, found, identity)
    if owner is not None and found is None and owner.get("checkpoint") == checkpoint:
        raise OutputOwnedError(
            f"output {output} belongs to a copy whose checkpoint {checkpoint} is not there any more (moved or "
            f"deleted; format {owner.get('format')}, started {owner.get('created')}): resume it with option "
            f"'checkpoint' where that checkpoint is now, write to another option 'output', or start over with "
            f"{START_OVER} (deletes what the output holds)", path=output)
    if owner is not None and (found is None or found.get("token") != owner["token"]):
        raise OutputOwnedError(
            f"output {output} belongs to another copy (its checkpoint is {owner.get('checkpoint')}, "
            f"format {owner.get('format')}, started {owner.get('created')}); resume it with option 'checkpoint' "
            f"{owner.get('checkpoint')}, write to another option 'output', or start over with {START_OVER} "
            "(deletes what the output holds)", path=output)
    if found is not None and owner is not None:
        _check_still_there(output, committer)
        return Claim(str(found["token"]), True, False, False)
    if found is not None and found.get("token") and progress:
        raise OutputOwnedError(
            f"checkpoint {checkpoint} holds the progress of a copy into {output}, but that output no longer holds "
            f"that copy (it was deleted or replaced): resuming would skip rows it lacks; start over with "
            f"{START_OVER}, or use another option 'checkpoint'", path=checkpoint)
    existing = committer.finished_files() or [str(r.seq) for r, _ in committer.records()]
    if existing:
        raise OutputOwnedError(
            f"output {output} already holds data this copy did not write ({len(existing)} file(s) or commits); "
            f"write to another option 'output', or start over with {START_OVER} (deletes what the output holds)",
            path=output)
    token = str(found.get("token") or new_token()) if found is not None else new_token()
    _write_identity(checkpoint_place, {**identity, "token": token})
    write_owner(committer, {"token": token, "checkpoint": checkpoint, "format": identity.get("format"),
                         "identity": identity.get("identity"), "created": _now()})
    return Claim(token, found is not None, found is None, True)


def _check_same_copy(checkpoint: str, found: Mapping[str, Any], identity: Mapping[str, Any]) -> None:
    """Refuse a checkpoint made by another copy: another source (``origin``), other columns, other options."""
    if found.get("origin") != identity.get("origin"):
        raise CheckpointError(
            f"checkpoint {checkpoint} was made reading {_origin_text(found.get('origin') or {})}, and this copy "
            f"reads {_origin_text(identity.get('origin') or {})}: resuming would mix two sources in one output; "
            "point the copy at the cluster it started from, or use another option 'checkpoint' and option 'output'")
    # a checkpoint from before the key was kept ("key") is not compared by it
    differ = sorted(k for k in set(found) | set(identity) if k != "token" and found.get(k) != identity.get(k)
                    and (k != "key" or k in found))
    if "key" in differ:
        raise CheckpointError(f"the source's key changed since this copy started, from ({', '.join(found['key'])}) "
                              f"to ({', '.join(identity.get('key') or ())}): each run applies its rows by the key, "
                              "and the output's rows were applied by the first; copy to a new path")

    def unshaped(which: Mapping[str, Any]) -> Any:  # a connector's identity without its table's shape
        inner = which.get("identity")
        return {k: v for k, v in inner.items() if k != "shape"} if isinstance(inner, Mapping) else inner

    if "schema" in differ and set(differ) <= {"schema", "identity", "source"} and unshaped(found) == unshaped(
            identity):
        change = _schema_change(found.get("schema") or [], identity["schema"])
        raise CheckpointError(f"the source's columns changed since this copy started ({change}): its table keeps "
                              "one schema; finish the copy from a source with the columns it started with, or copy "
                              "to a new path")
    if "incremental" in differ:
        made = "with" if found.get("incremental") else "without"
        raise CheckpointError(f"checkpoint {checkpoint} was made by a copy {made} --incremental, and this one is "
                              f"{'not' if made == 'with' else 'incremental'}: run it as it started, or copy to a new "
                              "output and checkpoint")
    if differ:
        raise CheckpointError(
            f"checkpoint {checkpoint} belongs to another copy (it differs in: {', '.join(differ)}; it copies "
            f"{found.get('identity')} to {found.get('output')} as {found.get('format')}); use another "
            "option 'checkpoint', or re-run that copy")


def _check_still_there(output: str, committer: BucketingGlobalCommitter) -> None:
    """Refuse to resume into an output whose last committed files are gone (deleted or replaced)."""
    lost = committer.lost_files()
    if lost:
        raise OutputOwnedError(
            f"output {output} no longer holds that copy (the {len(lost)} file(s) it committed last are gone, "
            f"e.g. {committer._relative(lost[0])}: it was deleted or replaced): resuming would skip rows it "
            f"lacks; start over with {START_OVER}, or use another option 'output' and option 'checkpoint'",
            path=output)


def _origin_text(origin: Mapping[str, Any]) -> str:
    parts = [f"{k} {v!r}" for k, v in sorted(origin.items()) if v not in ("", None)]
    return ", ".join(parts) or "an unnamed source"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def start_over(output: Location, checkpoint: Location, committer: BucketingGlobalCommitter) -> None:
    """``--overwrite``: delete what copies write in the output (part files, bucket directories left empty,
    ``_SUCCESS``), the output's records and the progress in the checkpoint (the locks stay). Refused, before
    anything is deleted, when either holds a file no copy writes: ``--overwrite`` never deletes a user's own
    files."""
    fs, base = checkpoint.store, checkpoint.path
    out_fs, out_base = output.store, output.path
    checkpoint_entries = fs.list(base) if fs.is_dir(base) else []
    output_files = [e for e in out_fs.list(out_base, recursive=True) if not e.is_dir]
    _refuse_strangers(output.shown, checkpoint.shown, checkpoint_entries, output_files, committer)
    for entry in checkpoint_entries:
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir:
            fs.delete_dir(entry.path)
        else:
            fs.delete(entry.path)
    lock = join(committer.meta, LOCK_FILE)
    records = [e for e in out_fs.list(committer.meta, recursive=True) if not e.is_dir] \
        if out_fs.is_dir(committer.meta) else []
    for entry in output_files + records:
        if entry.path != lock:
            out_fs.delete(entry.path)
    for root in (out_base, committer.meta):
        if not out_fs.is_dir(root):
            continue
        for entry in sorted(out_fs.list(root, recursive=True), key=lambda e: -len(e.path)):
            if entry.is_dir and entry.path != committer.meta:
                out_fs.remove_empty_dirs(entry.path)  # bucket directories and the log, emptied above


def _refuse_strangers(output: str, checkpoint: str, checkpoint_entries: list[Entry], output_files: list[Entry],
                      committer: BucketingGlobalCommitter) -> None:
    """``--overwrite`` deletes a copy's own files only: refuse, before deleting anything, if either place holds
    another's."""
    foreign = [e.name for e in checkpoint_entries if e.name not in _CHECKPOINT_NAMES and not is_temporary(e.name)
               and not e.name.startswith(f"{LOCK_FILE}{LOCK_BREAK}")]  # a lease's takeover marker
    if foreign:
        raise OptionsError(f"option 'overwrite': checkpoint {checkpoint} holds files splitsource copy did "
                           f"not write ({', '.join(sorted(foreign)[:3])}{', ...' if len(foreign) > 3 else ''}); "
                           "move them away or use another option 'checkpoint'")
    ours = _copy_names(committer)
    strangers = [e.path for e in output_files if not ours(e.path)]
    if strangers:
        shown = ", ".join(committer._relative(p) for p in sorted(strangers)[:3])
        raise OptionsError(f"option 'overwrite': output {output} holds {len(strangers)} file(s) "
                           f"splitsource copy does not write ({shown}{', ...' if len(strangers) > 3 else ''}); "
                           "it deletes only a copy's own files: move them away or use another option 'output'")


# what a copy's checkpoint holds (either engine): anything else in it is someone else's
_CHECKPOINT_NAMES = frozenset({IDENTITY_FILE, LOCK_FILE, ERROR_LOG, FINISHED_FILE, "plans", "splits",
                               *_CHECKPOINT_PROGRESS})


def _copy_names(committer: BucketingGlobalCommitter) -> Callable[[str], bool]:
    """Whether a file under the output is one a copy (or the bucketing sink) writes, with the part names of the
    sink now and of the copy that wrote the output (the ``copy.json`` of its records)."""
    fs, base = committer.fs, committer.base
    layouts = [committer.names]
    try:
        found = json.loads(fs.read_text(join(committer.meta, SINK_DESCRIPTION)))
        layouts.append(PartNames(str(found["part_prefix"]), str(found["part_suffix"])))
    except (OSError, ValueError, KeyError, TypeError):
        pass

    def ours(path: str) -> bool:
        relative = path[len(base) + 1:]
        name = relative.rsplit("/", 1)[-1]
        if path.startswith(committer.meta + "/") or relative == "_SUCCESS" or is_temporary(name):
            return True
        if any(n.parse_transient(name) is not None for n in layouts):
            return True
        if name.startswith("_") and name.endswith(VALID_LENGTH):
            return True
        return any(n.parse_finished(name) is not None for n in layouts)

    return ours


def undo_unstarted(checkpoint: Location, claimed: Claim, committer: BucketingGlobalCommitter) -> None:
    """A copy that failed before its first commit leaves nothing half-made: the checkpoint and the owner it
    created are removed (a retry, with either engine, starts clean)."""
    if any(True for _ in committer.records()):
        return
    if claimed.created_checkpoint:
        fs = checkpoint.store
        for entry in fs.list(checkpoint.path):
            if entry.name in (LOCK_FILE, ERROR_LOG):  # the error message points at the log: it stays
                continue
            (fs.delete_dir if entry.is_dir else fs.delete)(entry.path)
    if claimed.created_owner:
        committer.sweep()
        for name in (OWNER_FILE, SINK_DESCRIPTION):
            committer.fs.delete(join(committer.meta, name))


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
            holder = self._read_settled(fs, path)
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

    def _read_settled(self, fs: Store, path: str) -> Holder | _Torn | None:
        """The lock at ``path``, read again while it is young and unreadable: a copy creating or renewing it now (an
        exclusive create, then its bytes; or an object store that lists an object before its body, or shows a body
        cut short while it is overwritten) is whole a moment later."""
        found = self._read(fs, path)
        deadline = time.monotonic() + TORN_SETTLE_S
        while (isinstance(found, _Torn) and time.time() - found.mtime < self._holder.lease_s
               and time.monotonic() < deadline):
            time.sleep(0.05)
            found = self._read(fs, path)
        return found

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
                        found = self._read_settled(fs, path)  # a read torn by the store is not another copy's lock
                        if not (isinstance(found, Holder) and found.lease == holder.lease):
                            self._lost = self._lost or self._loss(what, found)
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
                found = self._read_settled(fs, path)
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
