"""A crash simulator under the storage door, in the spirit of ALICE, CrashMonkey and LazyFS.

:class:`Recorder` is installed as the door's tracer (``splitsource._fs.set_tracer``) while a real copy or write runs
on the local disk: it logs every write, sync, rename, unlink and directory sync under one root, with the bytes a
file held when the door last touched it.

:func:`crash_states` replays that log into a model of a file system (inodes, directory entries) and, after every
operation, builds the states a power loss could leave there:

- directory entries: as they are now, or as of each directory's last sync (unsynced creations, renames and
  unlinks undone, directory by directory: a rename between two directories can lose the file or keep both names);
- file data: as written, as of the file's last sync (never synced: empty), or torn (the synced part and some of
  what came after).

Those choices are made for the whole tree at once (six uniform variants: everything as written, everything as of
its last sync, everything torn at half), and, as ALICE and CrashMonkey explore reorderings, independently per
directory and per file: ``MIXED_PER_POINT`` sampled states after every operation, each directory keeping or losing
its unsynced entries and each file kept, lost or torn at a random point (a quarter, a half, three quarters, or any
byte) by a seeded draw, so one unsynced change survives while another is lost. A SIGKILL is the state with
everything kept. States are deduplicated by content.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Recorder:
    """The door's tracer: keeps the operations under ``root`` (paths made relative to it)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve())
        self.ops: list[tuple[Any, ...]] = []

    def _rel(self, path: str) -> str | None:
        path = os.path.abspath(path)
        if path == self.root:
            return ""
        if path.startswith(self.root + "/"):
            return path[len(self.root) + 1:]
        return None

    def __call__(self, kind: str, *args: Any) -> None:
        paths = [self._rel(a) for a in args if isinstance(a, str)]
        if any(p is None for p in paths):
            return
        if kind == "write":
            self.ops.append(("write", paths[0], bytes(args[1])))
        elif kind == "data":
            self.ops.append(("data", paths[0], Path(args[0]).read_bytes()))
        elif kind == "rename":
            self.ops.append(("rename", paths[0], paths[1]))
            if os.path.isfile(args[1]):  # what the file holds now (written through a stream, maybe never synced)
                self.ops.append(("data", paths[1], Path(args[1]).read_bytes()))
        elif kind == "truncate":
            self.ops.append(("truncate", paths[0], int(args[1])))
        else:  # sync, mkdir, unlink, rmdir, syncdir, skipped (a sync left out)
            self.ops.append((kind, paths[0]))

    def mark(self, label: str) -> None:
        """A point in the log the checks need (``returned``: the operation reported success)."""
        self.ops.append(("mark", label))


@dataclass
class _Inode:
    is_dir: bool
    data: bytes = b""
    synced: bytes | None = None  # file bytes as of the last sync (None: never synced)
    entries: dict[str, int] = field(default_factory=dict)
    synced_entries: dict[str, int] = field(default_factory=dict)


class _Model:
    def __init__(self) -> None:
        self.inodes: dict[int, _Inode] = {0: _Inode(True)}
        self.next = 1

    def _parent(self, path: str) -> tuple[_Inode, str]:
        parts = path.split("/")
        node = self.inodes[0]
        for part in parts[:-1]:
            node = self.inodes[node.entries[part]]
        return node, parts[-1]

    def lookup(self, path: str) -> int | None:
        if path == "":
            return 0
        try:
            parent, name = self._parent(path)
        except KeyError:
            return None
        return parent.entries.get(name)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind in ("mark", "skipped"):  # a test's mark; a sync left out (test_each_sync_is_needed)
            return
        if kind == "write":
            found = self.lookup(op[1])
            if found is not None:
                self.inodes[found].data = op[2]
            else:
                parent, name = self._parent(op[1])
                parent.entries[name] = self._new(_Inode(False, data=op[2]))
        elif kind == "data":
            found = self.lookup(op[1])
            if found is not None:
                self.inodes[found].data = op[2]
        elif kind == "sync":
            found = self.lookup(op[1])
            if found is not None:
                self.inodes[found].synced = self.inodes[found].data
        elif kind == "mkdir":
            parent, name = self._parent(op[1])
            parent.entries[name] = self._new(_Inode(True))
        elif kind == "rename":
            source, name = self._parent(op[1])
            inode = source.entries.pop(name)
            target, new = self._parent(op[2])
            target.entries[new] = inode
        elif kind in ("unlink", "rmdir"):
            parent, name = self._parent(op[1])
            parent.entries.pop(name, None)
        elif kind == "syncdir":
            found = self.lookup(op[1])
            if found is not None:
                self.inodes[found].synced_entries = dict(self.inodes[found].entries)
        elif kind == "truncate":
            found = self.lookup(op[1])
            if found is not None:
                self.inodes[found].data = self.inodes[found].data[: op[2]]

    def _new(self, inode: _Inode) -> int:
        number = self.next
        self.next += 1
        self.inodes[number] = inode
        return number

    def state(self, dirs: str, data: str, rng: random.Random | None = None) -> dict[str, bytes | None]:
        """Path -> bytes (None for a directory) under one crash choice (see the module docstring); with ``rng``,
        ``dirs`` and ``data`` are drawn for each directory and each file instead."""
        out: dict[str, bytes | None] = {}

        def visit(number: int, prefix: str, seen: frozenset[int]) -> None:
            node = self.inodes[number]
            kept = dirs if rng is None else rng.choice(("current", "synced"))
            entries = node.entries if kept == "current" else node.synced_entries
            for name, child in sorted(entries.items()):
                inode = self.inodes[child]
                path = f"{prefix}{name}"
                if inode.is_dir:
                    if child in seen:
                        continue
                    out[path] = None
                    visit(child, path + "/", seen | {child})
                elif rng is None:
                    out[path] = _file_bytes(inode, data)
                else:
                    out[path] = _file_bytes(inode, rng.choice(("current", "synced", "torn")),
                                            rng.choice((0.25, 0.5, 0.75, rng.random())))

        visit(0, "", frozenset({0}))
        return out


def _file_bytes(inode: _Inode, data: str, torn_at: float = 0.5) -> bytes:
    synced = inode.synced or b""
    if data == "current":
        return inode.data
    if data == "synced":
        return synced
    if inode.data.startswith(synced):  # torn: the synced part and some of what came after it
        return inode.data[: len(synced) + int((len(inode.data) - len(synced)) * torn_at)]
    if synced.startswith(inode.data):  # cut back since its sync (a truncate): its length is anywhere between
        return synced[: len(inode.data) + int((len(synced) - len(inode.data)) * torn_at)]
    return inode.data[: int(len(inode.data) * torn_at)]


MIXED_PER_POINT = 1  # sampled states with independent choices per directory and file, after every operation
VARIANTS = [("current", "current"), ("current", "synced"), ("current", "torn"), ("synced", "current"),
            ("synced", "synced"), ("synced", "torn")]


@dataclass(frozen=True)
class CrashState:
    """One state a crash could leave: after ``point`` operations, with the files ``files``; what was marked
    before the crash must be there whatever the variant (it had reported success)."""

    point: int
    variant: tuple[str, str]
    marks: frozenset[str]  # the recorder's marks before the crash (``returned``: the operation reported success)
    files: dict[str, bytes | None]

    def describe(self) -> str:
        return f"crash after operation {self.point}, directories {self.variant[0]}, data {self.variant[1]}"

    def build(self, root: Path) -> None:
        """Write this state under ``root`` (which must not exist), every file dated an hour ago: the crash
        happened before this boot."""
        root.mkdir(parents=True)
        old = time.time() - 3600
        for path, data in sorted(self.files.items()):
            target = root / path
            if data is None:
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        for path in sorted(self.files, reverse=True):
            os.utime(root / path, (old, old))


def base_ops(files: dict[str, bytes | None]) -> list[tuple[Any, ...]]:
    """Operations that make ``files`` (a crash state) exist, every byte and entry synced: what a disk holds after
    the reboot, before the next run recovers it."""
    ops: list[tuple[Any, ...]] = []
    for path, data in sorted(files.items()):
        ops += [("mkdir", path)] if data is None else [("write", path, data), ("sync", path)]
    ops += [("syncdir", path) for path, data in sorted(files.items()) if data is None] + [("syncdir", "")]
    return ops


def crash_states(ops: list[tuple[Any, ...]], mixed: int = MIXED_PER_POINT, start: int = 0,
                 variants: list[tuple[str, str]] = VARIANTS) -> Iterator[CrashState]:
    """Every distinct state a crash could leave, at every point of ``ops`` (the recorded operations) from
    ``start`` on: the uniform ``variants`` and ``mixed`` sampled ones per point (seeded: the same states every
    run)."""
    model = _Model()
    seen: set[str] = set()
    marks: frozenset[str] = frozenset()
    for point in range(len(ops) + 1):
        if point > 0:
            op = ops[point - 1]
            model.apply(op)
            if op[0] == "mark":
                marks = marks | {op[1]}
                continue
            if op[0] == "skipped":
                continue
        if point < start:
            continue
        rng = random.Random(point)
        choices = [(variant, model.state(*variant)) for variant in variants]
        choices += [(("mixed", f"draw {k}"), model.state("", "", rng)) for k in range(mixed)]
        for variant, files in choices:
            key = hashlib.sha256(repr((sorted(marks), sorted(files.items()))).encode()).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            yield CrashState(point, variant, marks, files)
