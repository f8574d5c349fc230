"""Which copy may write an output with a checkpoint: the decisions ``splitsource copy`` takes before reading.

Every refusal says what to do, and each piece of advice leads to an exact output (tested): resume with the
checkpoint the output was written with, choose another output, or start over with ``--overwrite``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from splitsource._errors import CheckpointError, OptionsError, OutputOwnedError
from splitsource._fs import Entry, Location, is_temporary
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
from splitsource.copyjob._ownership import new_token, read_owner, write_owner
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PartNames, join

__all__ = ["Claim", "IDENTITY_FILE", "check_paths", "claim", "start_over", "undo_unstarted"]


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
            import os

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
    differ = sorted(k for k in set(found) | set(identity) if k != "token" and found.get(k) != identity.get(k))
    if differ == ["schema"]:
        change = _schema_change(found.get("schema") or [], identity["schema"])
        raise CheckpointError(f"the source's columns changed since this copy started ({change}): its table keeps "
                              "one schema; finish the copy from a source with the columns it started with, or copy "
                              "to a new path")
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
    import time

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
