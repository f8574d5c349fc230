"""The committing side of the bucketing sink: FLIP-143's ``Committer`` and ``GlobalCommitter``, and the commit log.

Commit protocol (the driver runs it; Spark's ``commit``)::

    1. recover     finish every logged commit that is not marked done (idempotent)
    2. decide      write the commit record <base>/_bucketing/log/<seq>.commit  (atomic rename: the commit point)
    3. finish      rename each pending file to its finished name; for an overwrite, delete the files replaced
    4. sweep       remove in-progress and pending files that no commit lists (failed or speculative attempts)
    5. done        write <seq>.done, drop records beyond the retention, write _SUCCESS (batch writes)

A crash before 2 leaves only transient files, which the next sweep removes. A crash after 2 is finished by the
next run's step 1, from the record alone. Nothing listed in a record is ever deleted, and a finished file is never
touched again (except by an overwrite, which lists what it replaces in its record).

Streaming: a record carries the query id and batch id; a batch id at or below the last one committed by the same
query is a replay (a restarted query re-runs its last batch) and its new files are discarded, not committed twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from serializers import MsgpackRecordSerializer, SerializationError, read_envelope, write_envelope
from splitsource._errors import SinkError
from splitsource.sink._files import PartNames, PendingFile, join
from splitsource.sink._formats import write_atomically

__all__ = [
    "COMMIT_RECORD_SERIALIZER",
    "BucketingGlobalCommitter",
    "CommitRecord",
    "FileCommitter",
    "META_DIR",
]

META_DIR = "_bucketing"


@dataclass(frozen=True)
class CommitRecord:
    """The global committable: everything one commit makes visible, written down before any rename."""

    seq: int
    kind: str  # "append", "overwrite" or "stream"
    write_id: str  # the batch write's id, or the streaming query's id
    batch_id: int  # the streaming batch id; -1 for batch writes
    files: tuple[PendingFile, ...]
    replaced: tuple[str, ...] = ()  # overwrite: finished files (relative to the base) this commit deletes
    total_rows: int = 0  # rows committed by this write (or streaming query) so far, this commit included
    total_files: int = 0

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def _file_fields(f: PendingFile) -> list[object]:
    return [f.bucket, f.task, f.counter, f.rows, f.size]


COMMIT_RECORD_SERIALIZER: MsgpackRecordSerializer[CommitRecord] = MsgpackRecordSerializer(
    "BucketingCommitRecordSerializer",
    1,
    to_fields=lambda r: [r.seq, r.kind, r.write_id, r.batch_id, [_file_fields(f) for f in r.files], list(r.replaced),
                         r.total_rows, r.total_files],
    from_fields=lambda v: CommitRecord(
        int(v[0]), str(v[1]), str(v[2]), int(v[3]),
        tuple(PendingFile(str(f[0]), str(f[1]), int(f[2]), int(f[3]), int(f[4])) for f in v[4]),
        tuple(str(p) for p in v[5]), int(v[6]), int(v[7]),
    ),
)


class FileCommitter:
    """FLIP-143 ``Committer``: pending → finished by rename. Idempotent; returns the files to retry."""

    def __init__(self, fs: pafs.FileSystem, base: str, names: PartNames) -> None:
        self._fs, self._base, self._names = fs, base, names

    def commit(self, files: Iterable[PendingFile]) -> list[PendingFile]:
        retry = []
        for f in files:
            pending, finished = f.pending_path(self._base, self._names), f.finished_path(self._base, self._names)
            if _exists(self._fs, pending):
                try:
                    self._fs.move(pending, finished)
                except OSError:
                    retry.append(f)
            elif not _exists(self._fs, finished):
                raise SinkError(f"commit cannot find {pending} nor {finished}: a committed part file was removed "
                                "from the output by something other than this sink")
        return retry


@dataclass
class BucketingGlobalCommitter:
    """FLIP-143 ``GlobalCommitter`` of the bucketing sink, over the commit log in ``<base>/_bucketing/log``."""

    fs: pafs.FileSystem
    base: str
    names: PartNames
    retention: int = 10
    max_attempts: int = 5
    _committer: FileCommitter = field(init=False)

    def __post_init__(self) -> None:
        self._committer = FileCommitter(self.fs, self.base, self.names)
        self._log = join(self.base, META_DIR, "log")

    # -- the log -----------------------------------------------------------------------------------------------

    def records(self) -> list[tuple[CommitRecord, bool]]:
        """Every retained record, oldest first, with whether it is done."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self._log, allow_not_found=True))
        except OSError as exc:
            raise SinkError(f"cannot list the commit log {self._log}: {exc}") from None
        names = {i.base_name for i in infos}
        out = []
        for name in sorted(n for n in names if n.endswith(".commit")):
            path = join(self._log, name)
            with self.fs.open_input_stream(path) as stream:
                data = stream.read()
            try:
                record = read_envelope(COMMIT_RECORD_SERIALIZER, data)
            except SerializationError as exc:
                raise SinkError(f"commit log record {path} is unreadable ({exc}); the output's commit history "
                                "is damaged: move the output aside rather than writing into it") from None
            out.append((record, name.replace(".commit", ".done") in names))
        return out

    # -- FLIP-143 ----------------------------------------------------------------------------------------------

    def combine(self, files: Sequence[PendingFile], *, kind: str, write_id: str, batch_id: int = -1) -> CommitRecord:
        replaced: tuple[str, ...] = ()
        if kind == "overwrite":
            listed = {f.finished_path(self.base, self.names) for f in files}
            replaced = tuple(sorted(self._relative(p) for p in self.finished_files() if p not in listed))
        records = self.records()
        seq = records[-1][0].seq + 1 if records else 1
        previous = [r for r, _ in records if r.write_id == write_id and kind == "stream" == r.kind]
        rows, count = sum(f.rows for f in files), len(files)
        if previous:
            rows, count = rows + previous[-1].total_rows, count + previous[-1].total_files
        return CommitRecord(seq, kind, write_id, batch_id, tuple(files), replaced, rows, count)

    def filter_recovered_committables(self, records: Iterable[tuple[CommitRecord, bool]]) -> list[CommitRecord]:
        """The logged records whose commit did not finish."""
        return [record for record, done in records if not done]

    def recover(self) -> list[CommitRecord]:
        """Finish every logged commit not marked done; returns them."""
        pending = self.filter_recovered_committables(self.records())
        for record in pending:
            self._finish(record)
        return pending

    def commit(self, record: CommitRecord) -> None:
        """Make ``record``'s files finished, exactly once (steps 2-5 of the module docstring except sweep)."""
        path = join(self._log, f"{record.seq:020d}.commit")
        self.fs.create_dir(self._log, recursive=True)
        write_atomically(self.fs, path, write_envelope(COMMIT_RECORD_SERIALIZER, record))
        self._finish(record)

    def last_stream_record(self, query_id: str) -> CommitRecord | None:
        """The newest retained record of streaming query ``query_id``."""
        found = [r for r, _ in self.records() if r.kind == "stream" and r.write_id == query_id]
        return found[-1] if found else None

    def last_stream_batch(self, query_id: str) -> int | None:
        """The highest batch id committed by streaming query ``query_id`` (None if none is retained)."""
        ids = [r.batch_id for r, _ in self.records() if r.kind == "stream" and r.write_id == query_id]
        return max(ids) if ids else None

    def commit_batch(self, files: Sequence[PendingFile], *, query_id: str, batch_id: int,
                     before_commit: Callable[[], None] | None = None) -> CommitRecord | None:
        """Commit batch ``batch_id`` of streaming query ``query_id`` once (step 3 of the batch protocol, see
        :mod:`splitsource.copyjob._protocol`): finish what a crash left logged; a replay of a batch this query
        already committed has its new files deleted (they are duplicates) and returns None; otherwise the files are
        committed and, every task of the batch having ended, what is still transient is swept as an orphan.
        ``before_commit`` runs only for a batch about to be committed, before its commit record is written."""
        self.recover()
        last = self.last_stream_batch(query_id) if query_id else None
        if last is not None and batch_id <= last:
            self.delete_pending(files)
            return None
        record = self.combine(files, kind="stream", write_id=query_id, batch_id=batch_id)
        if before_commit is not None:
            before_commit()
        self.commit(record)
        self.sweep(keep=())
        return record

    def delete_pending(self, files: Iterable[PendingFile]) -> None:
        """Remove the pending files of uncommitted (aborted or replayed) work; already gone is fine."""
        for f in files:
            try:
                self.fs.delete_file(f.pending_path(self.base, self.names))
            except OSError:
                pass

    def end_of_input(self, summary: bytes) -> None:
        """A bounded write is complete: write ``_SUCCESS`` (Hadoop's marker that the output is whole)."""
        write_atomically(self.fs, join(self.base, "_SUCCESS"), summary)

    # -- sweeping ----------------------------------------------------------------------------------------------

    def sweep(self, keep: Iterable[PendingFile] = (), buckets: Iterable[str] | None = None) -> list[str]:
        """Delete in-progress and pending files not in ``keep`` (orphans of failed or speculative attempts and of
        writes that never committed). Only call it when no task of this output is writing."""
        kept = {(f.bucket, f.task, f.counter) for f in keep}
        roots = [join(self.base, b) if b else self.base for b in buckets] if buckets is not None else [self.base]
        removed = []
        for root in dict.fromkeys(roots):
            for info in self._walk(root, recursive=buckets is None):
                parsed = self.names.parse_transient(info.base_name)
                if parsed is None:
                    continue
                bucket = self._relative(info.path.rsplit("/", 1)[0]) if "/" in info.path else ""
                if (bucket, parsed.task, parsed.counter) in kept:
                    continue
                self.fs.delete_file(info.path)
                removed.append(info.path)
        return removed

    def finished_files(self) -> list[str]:
        return [i.path for i in self._walk(self.base, recursive=True)
                if not i.base_name.startswith(("_", ".")) and i.type == pafs.FileType.File]

    # -- internals ---------------------------------------------------------------------------------------------

    def _walk(self, root: str, recursive: bool) -> list[pafs.FileInfo]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(root, recursive=recursive, allow_not_found=True))
        except OSError as exc:
            raise SinkError(f"cannot list {root}: {exc}") from None
        meta = join(self.base, META_DIR)
        return [i for i in infos if i.type == pafs.FileType.File and not i.path.startswith(meta + "/")]

    def _relative(self, path: str) -> str:
        prefix = self.base.rstrip("/") + "/"
        return path[len(prefix):] if path.startswith(prefix) else ("" if path == self.base else path)

    def _finish(self, record: CommitRecord) -> None:
        todo: list[PendingFile] = list(record.files)
        for _ in range(self.max_attempts):
            todo = self._committer.commit(todo)
            if not todo:
                break
        if todo:
            raise SinkError(f"commit {record.seq}: could not finish {len(todo)} part file(s), e.g. "
                            f"{todo[0].pending_path(self.base, self.names)}; re-running the write finishes them")
        for relative in record.replaced:
            target = join(self.base, relative)
            if _exists(self.fs, target):
                self.fs.delete_file(target)
        write_atomically(self.fs, join(self._log, f"{record.seq:020d}.done"), b"")
        self._prune()

    def _prune(self) -> None:
        records = self.records()
        done = [r for r, is_done in records if is_done]
        for record in done[: max(0, len(records) - self.retention)]:
            for suffix in (".commit", ".done"):
                path = join(self._log, f"{record.seq:020d}{suffix}")
                if _exists(self.fs, path):
                    self.fs.delete_file(path)


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)

