"""The one door to storage: every file the framework reads, writes, renames or deletes goes through a :class:`Store`.

What a store can do is stated once, in its :class:`Capabilities`, and every protocol asks it there instead of
guessing from a URI:

- ``durable_rename``: a rename survives a power loss once its directory is synced, and file data once the file is
  synced (local file systems, HDFS). The door then syncs in the order databases use: write a temporary, sync it,
  rename it into place, sync the directory. On object stores an object is durable once its upload completes, and
  these syncs are no-ops.
- ``exclusive_create``: creating a file fails if it exists, atomically (``O_EXCL``; on S3 a ``PutObject`` with
  ``If-None-Match: *``, see :mod:`splitsource._s3`), so two writers cannot both take a lock.
- ``atomic_overwrite``: a reader sees the old file or the new one, never a mix (rename over an existing name).
- ``truncate``: a file can be cut back to a valid length in place (row-format recovery).

Paths inside a store are plain strings (``/abs/path`` locally, ``bucket/key`` on S3). URIs given by users are split
once (:func:`split_uri`): a query string (``?endpoint_override=...``) stays with the store and is never glued into a
path, and :func:`redact` strips credentials from every URI that is printed, logged or persisted.

Every sync has a name (``SYNC_POINTS``): the crash tests remove them one at a time to show each one is needed (a
rollback's, which no crash state needs, are kept so that its deletions are durable when it returns).

On an object store the idempotent reads (``info``, ``list``, ``read_bytes``: HEAD, LIST, GET) are tried again after
a transient failure (a response cut short, a reset connection), with backoff, within ``READ_RETRY_BUDGET_S``; no
write, create, copy or delete is ever retried here, since a retried conditional create could take what another
writer just took.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode

import pyarrow as pa
import pyarrow.fs as pafs

from splitsource._errors import OptionsError
from splitsource._names import TEMPORARY

if TYPE_CHECKING:
    from splitsource._s3 import ConditionalCreate, MultipartUploads

__all__ = [
    "SYNC_POINTS",
    "Capabilities",
    "Entry",
    "Location",
    "Store",
    "Tracer",
    "as_store",
    "child_uri",
    "is_temporary",
    "is_uri",
    "locate",
    "redact",
    "resolve_filesystem",
    "set_tracer",
    "sibling_uri",
    "split_uri",
]

# every place a sync keeps data across a power loss; see the crash tests (tests/splitsource/test_crash_states.py)
SYNC_POINTS = (
    "write.file",  # a small file's temporary, before it is renamed into place
    "write.dir",  # the directory of a small file renamed into place
    "mkdir",  # the parent of a directory just made
    "part.file",  # a part file's bytes, before it becomes pending (a pending name whose rename a crash undoes is
    # not synced: the commit that names it is rolled back and its batch read again)
    "publish.dir",  # a bucket directory after its pending files were renamed to finished (before the done marker)
    "snapshot.file",  # a row-format file open at a writer's snapshot, up to the valid length the state records
    "snapshot.dir",  # the directories of those files (their names)
    "recover.part",  # a restored file cut back to its valid length, before it becomes pending
    "rollback.dir",  # a rolled-back commit's bucket directories and the log, once its files and record are gone
)
# syncs left out on purpose: the crash tests' mutations, and bench/bench_durability.py's measure of what they cost
# (SPLITSOURCE_BENCH_NO_SYNC=1, never for real data: a power loss can then lose committed rows)
_skipped_syncs: set[str] = set(SYNC_POINTS) if os.environ.get("SPLITSOURCE_BENCH_NO_SYNC") == "1" else set()


@dataclass(frozen=True)
class Capabilities:
    durable_rename: bool
    exclusive_create: bool
    atomic_overwrite: bool
    truncate: bool
    rename_is_copy: bool = False  # an object store: a file appears whole when its upload completes, and a rename
    # copies it (a sink uploads a part under its pending name, so that its commit copies it once)


LOCAL = Capabilities(durable_rename=True, exclusive_create=True, atomic_overwrite=True, truncate=True)
OBJECT_STORE = Capabilities(durable_rename=False, exclusive_create=False, atomic_overwrite=False, truncate=False,
                            rename_is_copy=True)
OBJECT_STORE_CONDITIONAL = Capabilities(durable_rename=False, exclusive_create=True, atomic_overwrite=False,
                                        truncate=False, rename_is_copy=True)
OTHER = Capabilities(durable_rename=False, exclusive_create=False, atomic_overwrite=False, truncate=False)
_OBJECT_STORES = ("s3", "gcs", "abfs")  # pyarrow's type names
HADOOP = Capabilities(durable_rename=True, exclusive_create=False, atomic_overwrite=False, truncate=False)


@dataclass(frozen=True)
class Entry:
    """A file or directory as listed."""

    path: str
    name: str
    is_dir: bool
    size: int | None
    mtime: float | None  # seconds since the epoch


class Tracer(Protocol):
    """Sees every operation that changes a local store (the crash tests record them): ``kind`` is one of
    ``write`` (path, data), ``data`` (path: its bytes are now what the file holds), ``sync`` (path), ``mkdir``,
    ``rename`` (src, dst), ``unlink``, ``rmdir``, ``syncdir`` (path), ``truncate`` (path, length)."""

    def __call__(self, kind: str, *args: Any) -> None: ...


_tracer: Tracer | None = None


def set_tracer(tracer: Tracer | None) -> None:
    """Install (or remove) the :class:`Tracer` of every local store in this process (tests only)."""
    global _tracer
    _tracer = tracer


def _trace(kind: str, *args: Any) -> None:
    if _tracer is not None:
        _tracer(kind, *args)


# -- URIs ------------------------------------------------------------------------------------------------------------

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(\?[^#]*)?$")
_SECRET_KEYS = ("secret", "password", "token", "credential", "key")




def is_temporary(name: str) -> bool:
    """Whether a file name is a temporary :meth:`Store.write` writes before its rename (left behind by a crash)."""
    return name.startswith(".") and TEMPORARY in name and name.rsplit(TEMPORARY, 1)[1].isalnum()


def user_path(flag: str, path: str | os.PathLike[str]) -> str:
    """``path`` (text, or a ``pathlib.Path``) as a copy or verify keeps it: a URI as given, a local path made
    absolute; refused in one line if it is not text a file system can hold."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise OptionsError(f"{flag} {path!r} is not a path")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionsError(f"{flag} {path.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8: give a path "
                           "in UTF-8") from None
    if not path.strip() or "\x00" in path:
        raise OptionsError(f"{flag} {path!r} is not a path")
    return path if is_uri(path) else os.path.abspath(path)


def is_uri(text: str) -> bool:
    return _URI.match(text) is not None


def split_uri(text: str) -> tuple[str, str, str]:
    """``(scheme://authority, path, ?query)`` of a URI; ``("", absolute path, "")`` of a local path."""
    match = _URI.match(text)
    if match is None:
        return "", os.path.abspath(text), ""
    scheme, authority, path, query = match.groups()
    return f"{scheme}://{authority}", path, query or ""


def child_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path (its query string stays at the end)."""
    head, path, query = split_uri(uri)
    joined = "/".join([path.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return f"{head}{joined}{query}"


def sibling_uri(uri: str, suffix: str) -> str:
    """``uri`` with ``suffix`` appended to its last path segment (``out`` -> ``out.checkpoint``)."""
    head, path, query = split_uri(uri)
    return f"{head}{path.rstrip('/')}{suffix}{query}"


def redact(uri: str) -> str:
    """``uri`` without credentials: user info before ``@`` and secret-looking query parameters are replaced by
    ``***``. Local paths are returned as they are."""
    match = _URI.match(uri)
    if match is None:
        return uri
    scheme, authority, path, query = match.groups()
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    if query:
        pairs = [(k, "***" if any(s in k.lower() for s in _SECRET_KEYS) else v)
                 for k, v in parse_qsl(query[1:], keep_blank_values=True)]
        query = "?" + urlencode(pairs, safe="*:/")
    return f"{scheme}://{authority}{path}{query or ''}"


# -- stores ----------------------------------------------------------------------------------------------------------


READ_RETRY_BUDGET_S = 10.0  # an object store's idempotent read is retried for at most this long
_READ_BACKOFF_S = (0.1, 0.4, 1.6, 3.2)
T = TypeVar("T")


def _transient(exc: OSError) -> bool:
    """A failure a retry of an idempotent read may cure: not a missing object, a denied one or a bad path."""
    return not isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError)


class Store:
    """A file system and what it can do (see the module docstring); every operation of the framework on files."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs
        self.local = isinstance(fs, pafs.LocalFileSystem)
        self.conditional: ConditionalCreate | None = None
        self.uploads: MultipartUploads | None = None
        if not self.local:  # imported here: files on this machine never need it (about 6 ms of every process)
            from splitsource._s3 import for_filesystem, uploads_for

            # S3: creates with If-None-Match (splitsource._s3), whose enforcement a copy probes at start
            self.conditional = for_filesystem(fs)
            # S3: the incomplete multipart uploads a killed writer leaves, which a sweep aborts
            self.uploads = uploads_for(fs)
        if self.local:
            self.capabilities = LOCAL
        elif fs.type_name in ("hdfs",):
            self.capabilities = HADOOP
        elif self.conditional is not None:
            self.capabilities = OBJECT_STORE_CONDITIONAL
        elif fs.type_name in _OBJECT_STORES:
            self.capabilities = OBJECT_STORE
        else:
            self.capabilities = OTHER

    def __reduce__(self) -> tuple[Any, ...]:  # to executors: the file system only (clients are made again there)
        return (Store, (self.fs,))

    # -- reading -------------------------------------------------------------------------------------------------

    def _read(self, operation: Callable[[], T]) -> T:
        """``operation``, an idempotent read, tried again on an object store after a transient failure."""
        if self.local:
            return operation()
        deadline = time.monotonic() + READ_RETRY_BUDGET_S
        for wait in (*_READ_BACKOFF_S, None):
            try:
                return operation()
            except OSError as exc:
                if wait is None or not _transient(exc) or time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)
        raise AssertionError("unreachable")

    def info(self, path: str) -> Entry | None:
        info = self._read(lambda: self.fs.get_file_info(path))
        if info.type == pafs.FileType.NotFound:
            return None
        return _entry(info)

    def exists(self, path: str) -> bool:
        return self.info(path) is not None

    def is_file(self, path: str) -> bool:
        found = self.info(path)
        return found is not None and not found.is_dir

    def is_dir(self, path: str) -> bool:
        found = self.info(path)
        return found is not None and found.is_dir

    def list(self, path: str, recursive: bool = False) -> list[Entry]:
        """The entries under ``path`` (none if it does not exist)."""
        infos = self._read(lambda: self.fs.get_file_info(pafs.FileSelector(path, recursive=recursive,
                                                                             allow_not_found=True)))
        return [_entry(i) for i in infos if i.type != pafs.FileType.NotFound]

    def read_bytes(self, path: str) -> bytes:
        def read() -> bytes:
            with self.fs.open_input_stream(path) as stream:
                return bytes(stream.read())

        return self._read(read)

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def read_record(self, path: str, corrupt: Callable[[], Exception]) -> dict[str, Any] | None:
        """The small JSON object at ``path`` (an owner, an identity, a marker: docs/formats.md); None when there is
        none; ``corrupt()`` is raised when its bytes are not a JSON object (torn, or not splitsource's)."""
        try:
            data = self.read_bytes(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            found = json.loads(data.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is one
            raise corrupt() from None
        if not isinstance(found, dict):
            raise corrupt()
        return found

    def open_input(self, path: str) -> Any:
        """A random-access file (for Parquet and Arrow IPC readers)."""
        return self.fs.open_input_file(path)

    def open_mapped(self, path: str) -> Any:
        """:meth:`open_input` of a file nobody writes in place while it is read (one written under its own name
        once): memory-mapped on this machine, so a read of it copies nothing (5M keys of Arrow IPC: 2-4 ms, against
        0.09-0.28 s read into memory)."""
        return pa.memory_map(path) if self.local else self.open_input(path)

    # -- writing -------------------------------------------------------------------------------------------------

    def write(self, path: str, data: bytes, *, durable: bool = True, exclusive: bool = False) -> None:
        """Replace ``path`` by ``data`` atomically: readers see the old bytes or the new, never a part. ``durable``:
        the new bytes survive a power loss once this returns (temporary synced, renamed, directory synced).
        ``exclusive``: never replace, raise :class:`FileExistsError` if ``path`` exists (atomic where the store has
        ``exclusive_create``; a check then a write elsewhere)."""
        if not self.local:
            if exclusive and self.conditional is not None:
                if not self.conditional.create(path, data):
                    raise FileExistsError(errno.EEXIST, "exists", path)
                return
            if exclusive and self.exists(path):
                raise FileExistsError(errno.EEXIST, "exists", path)
            with self.fs.open_output_stream(path) as stream:  # an object appears whole when its upload completes
                stream.write(data)
            return
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}{TEMPORARY}{uuid.uuid4().hex[:12]}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            _trace("write", tmp, data)
            if durable:
                self._fsync_fd(fd, "write.file", tmp)
        finally:
            os.close(fd)
        try:
            if exclusive:
                _rename_noreplace(tmp, path)
            else:
                os.replace(tmp, path)
        except BaseException:
            _silent_unlink(tmp)
            raise
        _trace("rename", tmp, path)
        if durable:
            self.sync_dir(directory, "write.dir")

    def create(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` unless it exists; False if it does. Atomic where the store has
        ``exclusive_create``; elsewhere a check then a write (callers say so to their users)."""
        if not self.local:
            if self.conditional is not None:  # the store decides (If-None-Match: *)
                return self.conditional.create(path, data)
            if self.exists(path):
                return False
            with self.fs.open_output_stream(path) as stream:
                stream.write(data)
            return True
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        _trace("write", path, data)
        return True

    def make_dirs(self, path: str) -> None:
        """Make ``path`` and its missing parents; each one made is durable (its parent synced)."""
        if not self.local:
            self.fs.create_dir(path, recursive=True)
            return
        missing = []
        current = path.rstrip("/") or "/"
        while not os.path.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise
                continue
            _trace("mkdir", directory)
            self.sync_dir(os.path.dirname(directory), "mkdir")

    def open_output(self, path: str) -> Any:
        """A new file's output stream (replaces ``path``); call :meth:`sync` after closing it to make it durable."""
        stream = self.fs.open_output_stream(path)
        _trace("write", path, b"")
        return stream

    def sync(self, path: str, point: str) -> None:
        """Make a closed file's bytes durable (a no-op where the store has no ``durable_rename``)."""
        if not self.local:
            return
        _trace("data", path)
        fd = os.open(path, os.O_RDONLY)
        try:
            self._fsync_fd(fd, point, path)
        finally:
            os.close(fd)

    def sync_dir(self, path: str, point: str) -> None:
        """Make the names in directory ``path`` durable (renames, creations and deletions in it)."""
        if not self.local:
            return
        if point in _skipped_syncs:
            _trace("skipped", path)
            return
        fd = os.open(path or "/", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _trace("syncdir", path)

    @staticmethod
    def _fsync_fd(fd: int, point: str, path: str) -> None:
        if point in _skipped_syncs:
            _trace("skipped", path)
            return
        os.fsync(fd)
        _trace("sync", path)

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``; raises :class:`FileExistsError` rather than replace an existing ``dst``."""
        if self.local:
            _rename_noreplace(src, dst)
            _trace("rename", src, dst)
            return
        if self.exists(dst):
            raise FileExistsError(errno.EEXIST, "exists", dst)
        self.fs.move(src, dst)

    def delete(self, path: str) -> bool:
        """Delete file ``path``; False if it was not there."""
        try:
            if self.local:
                os.unlink(path)
            else:
                self.fs.delete_file(path)
        except FileNotFoundError:
            return False
        _trace("unlink", path)
        return True

    def delete_dir(self, path: str) -> None:
        """Delete directory ``path`` and everything in it (gone already is fine)."""
        if self.local:
            for entry in sorted(self.list(path, recursive=True), key=lambda e: -len(e.path)):
                if entry.is_dir:
                    self._rmdir(entry.path)
                else:
                    self.delete(entry.path)
            self._rmdir(path)
            return
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def _rmdir(self, path: str) -> None:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return
        _trace("rmdir", path)

    def remove_empty_dirs(self, path: str) -> None:
        """Remove ``path`` and the directories under it if they hold no file (local stores; elsewhere directories
        are only key prefixes)."""
        if not self.local or not os.path.isdir(path):
            return
        for root, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(root)
            except OSError:
                continue
            _trace("rmdir", root)

    def truncate(self, path: str, length: int) -> bool:
        """Cut ``path`` to ``length`` bytes where the store can; False where it cannot."""
        if not self.capabilities.truncate:
            return False
        os.truncate(path, length)
        _trace("truncate", path, length)
        return True


def _entry(info: pafs.FileInfo) -> Entry:
    mtime = info.mtime.timestamp() if info.mtime is not None else None
    return Entry(info.path, info.base_name, info.type == pafs.FileType.Directory, info.size, mtime)


def _silent_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
_renameat2: Any = None  # libc's renameat2, False where there is none
_renameat2_lock = threading.Lock()


def _rename_noreplace(src: str, dst: str) -> None:
    """``rename`` that never replaces ``dst`` (Linux ``renameat2(RENAME_NOREPLACE)``; elsewhere a hard link then
    an unlink of ``src``, which fails the same way on an existing ``dst``)."""
    global _renameat2
    with _renameat2_lock:
        if _renameat2 is None:
            try:
                _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
            except (OSError, AttributeError):
                _renameat2 = False
    if _renameat2 is False:
        _link_rename(src, dst)
        return
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL):  # a file system without the flag
        _link_rename(src, dst)
        return
    if code == errno.EEXIST:
        raise FileExistsError(code, os.strerror(code), dst)
    if code == errno.ENOENT:
        raise FileNotFoundError(code, os.strerror(code), src)
    raise OSError(code, os.strerror(code), src)


def _link_rename(src: str, dst: str) -> None:
    os.link(src, dst)
    os.unlink(src)


def as_store(fs: Store | pafs.FileSystem) -> Store:
    return fs if isinstance(fs, Store) else Store(fs)


_STORES: dict[str, tuple[pafs.FileSystem, str]] = {}
_stores_lock = threading.Lock()


def resolve_filesystem(path: str) -> tuple[Store, str]:
    """The store and the path inside it: URIs (``s3://``, ``hdfs://``, ``file://``) go to pyarrow, split once and
    kept; anything else is a local path, made absolute."""
    if not is_uri(path):
        return Store(pafs.LocalFileSystem()), os.path.abspath(path)
    head, inner_path, query = split_uri(path)
    with _stores_lock:
        cached = _STORES.get(f"{head}{query}")
    if cached is None:
        try:
            fs, inner = pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise OptionsError(f"cannot open {redact(path)}: {str(exc).replace(path, redact(path))}") from None
        # the store's root as pyarrow sees it, to map later paths of the same store without parsing them again
        stem = inner_path.rstrip("/")
        prefix = inner.rstrip("/")[: len(inner.rstrip("/")) - len(stem)] if inner.rstrip("/").endswith(stem) else ""
        with _stores_lock:
            _STORES[f"{head}{query}"] = (fs, prefix)
        return Store(fs), inner.rstrip("/")
    fs, prefix = cached
    return Store(fs), (prefix + inner_path).rstrip("/")


@dataclass(frozen=True)
class Location:
    """A place given as text, resolved once (:func:`locate`): the text (a URI as given, a local path made
    absolute), its store, and the path inside the store. Pass it on, not its text: every use then shares one store
    (one client, one probe of what it can do) instead of resolving the text again."""

    uri: str
    store: Store
    path: str

    @property
    def shown(self) -> str:
        """The text without credentials: for every message, log and record."""
        return redact(self.uri)

    def child(self, *parts: str) -> Location:
        """The place ``parts`` below this one, on the same store."""
        names = [p.strip("/") for p in parts if p]
        return Location(child_uri(self.uri, *names), self.store, "/".join([self.path.rstrip("/"), *names]))

    def sibling(self, suffix: str) -> Location:
        """This place with ``suffix`` appended to its last segment (``out`` -> ``out.checkpoint``)."""
        return Location(sibling_uri(self.uri, suffix), self.store, self.path.rstrip("/") + suffix)


def locate(text: str) -> Location:
    """``text`` resolved once into a :class:`Location`."""
    store, path = resolve_filesystem(text)
    return Location(text if is_uri(text) else path, store, path)
