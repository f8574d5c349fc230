"""Which copy may write an output with a checkpoint: the decisions ``splitsource copy`` takes before reading.

Every refusal says what to do, and each piece of advice leads to an exact output (tested): resume with the
checkpoint the output was written with, choose another output, or start over with ``--overwrite``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from splitsource._errors import CheckpointError, OptionsError, OutputOwnedError
from splitsource.copyjob._ownership import LOCK_FILE, new_token, read_owner, write_owner
from splitsource.sink._committer import META_DIR, BucketingGlobalCommitter
from splitsource.sink._formats import resolve_filesystem, write_atomically

__all__ = ["Claim", "IDENTITY_FILE", "check_paths", "claim", "start_over", "undo_unstarted"]

IDENTITY_FILE = "splitsource-copy.json"
ERROR_LOG = "splitsource-copy-error.log"
START_OVER = "--overwrite"
# what the engines' checkpoints hold; offsets and commits: the Spark engine of earlier releases (a streaming query)
_CHECKPOINT_PROGRESS = ("offsets", "commits", "local", "spark")


@dataclass(frozen=True)
class Claim:
    token: str
    resumed: bool
    created_checkpoint: bool  # this run wrote the checkpoint's identity (nothing of it existed before)
    created_owner: bool  # this run made the output its copy's


def check_paths(output: str, checkpoint: str) -> None:
    """Refuse, before anything is written, an output or checkpoint that is a file or cannot be written."""
    for flag, path in (("--output", output), ("--checkpoint", checkpoint)):
        fs, base = resolve_filesystem(path)
        info = fs.get_file_info(base)
        if info.type == pafs.FileType.File:
            raise OptionsError(f"{flag} {path} is a file; give a directory")
        if isinstance(fs, pafs.LocalFileSystem):
            import os

            existing = base
            while not os.path.exists(existing):
                existing = os.path.dirname(existing) or "/"
            if not os.path.isdir(existing):
                raise OptionsError(f"{flag} {path}: {existing} is a file, so the directory cannot be made")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise OptionsError(f"{flag} {path}: no permission to write in {existing}")


def _read_identity(checkpoint: str) -> tuple[dict[str, Any] | None, bool]:
    """(the checkpoint's identity or None, whether the checkpoint holds progress of a copy)."""
    fs, base = resolve_filesystem(checkpoint)
    path = f"{base}/{IDENTITY_FILE}"
    progress = any(fs.get_file_info(f"{base}/{d}").type == pafs.FileType.Directory for d in _CHECKPOINT_PROGRESS)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        if progress:
            raise CheckpointError(f"checkpoint {checkpoint} was not written by splitsource copy (no {IDENTITY_FILE});"
                                  " use another --checkpoint")
        return None, False
    try:
        with fs.open_input_stream(path) as stream:
            found = json.loads(bytes(stream.read()).decode("utf-8"))
        if not isinstance(found, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"checkpoint {checkpoint} is corrupt ({IDENTITY_FILE} is not readable JSON); to start "
                              f"over, run the same copy with {START_OVER}") from None
    return found, progress


def _write_identity(checkpoint: str, identity: Mapping[str, Any]) -> None:
    fs, base = resolve_filesystem(checkpoint)
    fs.create_dir(base, recursive=True)
    write_atomically(fs, f"{base}/{IDENTITY_FILE}", json.dumps(identity, indent=2, sort_keys=True).encode())


def claim(output: str, checkpoint: str, identity: dict[str, Any], committer: BucketingGlobalCommitter) -> Claim:
    """Decide whether this copy may write ``output`` with ``checkpoint``; record it as the output's owner.
    Call it holding the copy's lock."""
    found, progress = _read_identity(checkpoint)
    owner = read_owner(output)
    if found is not None:
        differ = sorted(k for k in set(found) | set(identity) if k != "token" and found.get(k) != identity.get(k))
        if differ:
            raise CheckpointError(
                f"checkpoint {checkpoint} belongs to another copy (it differs in: {', '.join(differ)}; it copies "
                f"{found.get('identity')} to {found.get('output')} as {found.get('format')}); use another "
                "--checkpoint, or re-run that copy")
    if owner is not None and (found is None or found.get("token") != owner["token"]):
        raise OutputOwnedError(
            f"output {output} belongs to another copy (its checkpoint is {owner.get('checkpoint')}, "
            f"format {owner.get('format')}, started {owner.get('created')}); resume it with --checkpoint "
            f"{owner.get('checkpoint')}, write to another --output, or start over with {START_OVER} (deletes what "
            "the output holds)", path=output)
    if found is not None and owner is not None:
        return Claim(str(found["token"]), True, False, False)
    if found is not None and found.get("token") and progress:
        raise OutputOwnedError(
            f"checkpoint {checkpoint} holds the progress of a copy into {output}, but that output no longer holds "
            f"that copy (it was deleted or replaced): resuming would skip rows it lacks; start over with "
            f"{START_OVER}, or use another --checkpoint", path=checkpoint)
    if found is not None and not found.get("token") and found.get("engine") == "local":
        raise CheckpointError(f"checkpoint {checkpoint} was written by an earlier release of the local engine; "
                              f"finish that copy with that release, or start over with {START_OVER}")
    existing = committer.finished_files() or [str(r.seq) for r, _ in committer.records()]
    if existing and not (found is not None and not found.get("token")):
        raise OutputOwnedError(
            f"output {output} already holds data this copy did not write ({len(existing)} file(s) or commits); "
            f"write to another --output, or start over with {START_OVER} (deletes what the output holds)", path=output)
    token = str(found.get("token") or new_token()) if found is not None else new_token()
    _write_identity(checkpoint, {**identity, "token": token})
    write_owner(output, {"token": token, "checkpoint": checkpoint, "format": identity.get("format"),
                         "identity": identity.get("identity"), "created": _now()})
    # a checkpoint of an earlier release (no token) resumes, now owning its output
    return Claim(token, found is not None, found is None, True)


def _now() -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S")


def start_over(output: str, checkpoint: str, committer: BucketingGlobalCommitter) -> None:
    """``--overwrite``: delete every file of the output and the progress in the checkpoint (the locks stay)."""
    found, progress = _read_identity_lenient(checkpoint)
    fs, base = resolve_filesystem(checkpoint)
    if fs.get_file_info(base).type == pafs.FileType.Directory:
        entries = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        foreign = [e.base_name for e in entries if e.base_name not in (IDENTITY_FILE, LOCK_FILE, *_CHECKPOINT_PROGRESS,
                                                                       "metadata", "sources", "state",
                                                                       "splitsource-copy-error.log")]
        if foreign and found is None:
            raise OptionsError(f"--overwrite: checkpoint {checkpoint} holds files splitsource did not write "
                               f"({', '.join(sorted(foreign)[:3])}); use another --checkpoint")
        for entry in entries:
            if entry.base_name == LOCK_FILE:
                continue
            if entry.type == pafs.FileType.Directory:
                fs.delete_dir(entry.path)
            else:
                fs.delete_file(entry.path)
    out_fs, out_base = resolve_filesystem(output)
    for path in committer.finished_files():
        out_fs.delete_file(path)
    committer.sweep()
    for info in out_fs.get_file_info(pafs.FileSelector(out_base, allow_not_found=True)):
        if info.base_name == META_DIR:
            for inner in out_fs.get_file_info(pafs.FileSelector(info.path, allow_not_found=True)):
                if inner.base_name != LOCK_FILE:
                    (out_fs.delete_dir if inner.type == pafs.FileType.Directory else out_fs.delete_file)(inner.path)
        elif info.type == pafs.FileType.Directory:
            out_fs.delete_dir(info.path)  # bucket directories, emptied above
        else:
            out_fs.delete_file(info.path)  # _SUCCESS


def _read_identity_lenient(checkpoint: str) -> tuple[dict[str, Any] | None, bool]:
    try:
        return _read_identity(checkpoint)
    except CheckpointError:
        return {}, True  # corrupt, or a splitsource checkpoint without its identity: ours to remove


def undo_unstarted(output: str, checkpoint: str, claimed: Claim, committer: BucketingGlobalCommitter) -> None:
    """A copy that failed before its first commit leaves nothing half-made: the checkpoint and the owner it
    created are removed (a retry, with either engine, starts clean)."""
    if any(True for _ in committer.records()):
        return
    if claimed.created_checkpoint:
        fs, base = resolve_filesystem(checkpoint)
        for entry in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
            if entry.base_name in (LOCK_FILE, ERROR_LOG):  # the error message points at the log: it stays
                continue
            (fs.delete_dir if entry.type == pafs.FileType.Directory else fs.delete_file)(entry.path)
    if claimed.created_owner:
        fs, base = resolve_filesystem(output)
        committer.sweep()
        for name in ("owner.json", "copy.json"):
            path = f"{base}/{META_DIR}/{name}"
            if fs.get_file_info(path).type == pafs.FileType.File:
                fs.delete_file(path)
