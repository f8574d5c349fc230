"""The committing side of the bucketing sink: FLIP-143's ``Committer`` and ``GlobalCommitter``, and the commit log.

Commit protocol (the driver runs it; Spark's ``commit``)::

    1. recover     finish every logged commit that is not marked done (idempotent)
    2. check       every pending file the commit names exists (a record is never written for files that are gone)
    3. decide      write the commit record <meta>/log/<seq>.commit  (durable, atomic: the commit point)
    4. finish      rename each pending file to its finished name (never over an existing file); sync the bucket
                   directories; for an overwrite, delete the files replaced
    4b. publish    with a table format, one table commit adding the files, tagged with the record's number and
                   made only if the table does not hold that tag yet (splitsource.sink._tables); with
                   ``run_at_once`` (an incremental copy's) not here but by ``publish_run`` at the run's end, every
                   record of the run the table lacks in one commit, and the log pruned only then
    5. done        a stream commit's query record <meta>/queries/<query>.json (its last batch id, kept
                   for ever), then <seq>.done; drop done records beyond the retention; <meta>/_SUCCESS (batch
                   writes; and <base>/_SUCCESS with ``success_file``)
    6. sweep       remove in-progress and pending files that no commit lists (failed or speculative attempts): of
                   every writer when the caller owns the output (a copy), else of this writer only

A crash before 3 leaves only transient files, which a later sweep removes. A crash after 3 is finished by the next
run's step 1, from the record alone. Nothing listed in a record is ever deleted, and a finished file is never
replaced (except by an overwrite, which lists what it deletes in its record). A logged commit whose files are gone
(removed by something other than this sink) is rolled back with one warning: its finished files are deleted and
its record too, so a copy replays the batch and a batch write counts as failed, as it was.

The records live in ``<meta>``, by default ``<base>.bucketing`` beside the output (:func:`metadata_location`),
so that the output directory holds data files only and every reader (DuckDB's ``'<base>/**'``, Polars'
``read_parquet(<base>)``) reads it with its plainest call.

Streaming: a record carries the query id and batch id; a batch id at or below the last one committed by the same
query (its query record, which pruning never removes) is a replay, and its new files are discarded, not committed
twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serializers import MsgpackRecordSerializer, SerializationError, read_envelope, write_envelope
from splitsource._errors import OptionsError, SinkError
from splitsource._fs import Entry, Location, Store, as_store, locate, split_uri
from splitsource._names import (
    COMMIT_LOG_DIR,
    COMMIT_SUFFIX,
    DONE_SUFFIX,
    QUERIES_DIR,
    RECORDS_SUFFIX,
    SUCCESS_FILE,
)
from splitsource.sink._files import PartNames, PendingFile, join, writer_of
from splitsource.sink._tables import TableFormat, publish

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "COMMIT_RECORD_SERIALIZER",
    "ORPHAN_AGE_S",
    "BucketingGlobalCommitter",
    "CommitRecord",
    "FileCommitter",
    "check_metadata",
    "metadata_location",
]

log = logging.getLogger("splitsource.sink")

# a transient file this old belongs to a writer that is gone: any writer's sweep removes it
ORPHAN_AGE_S = 24 * 3600.0

_SEGMENT = re.compile(r"[^/\\\x00]+")
_TASK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def check_metadata(path: str, explicit: str = "") -> None:
    """Refuse, without touching the store, a records' place the sink cannot use: one on another store than the
    output, one inside it, or no place at all (the output is the root of a disk or bucket and none is named)."""
    head, inner, query = split_uri(path)
    if explicit:
        other_head, other_inner, other_query = split_uri(explicit)
        if (head, query) != (other_head, other_query):
            raise OptionsError(f"metadata={explicit!r} is on another store than path={path!r}: the sink's records "
                               "must share the output's store (same scheme, bucket and parameters)")
        base, meta = inner.rstrip("/"), other_inner.rstrip("/")
        if meta == base or meta.startswith(base + "/"):
            raise OptionsError(f"metadata={explicit!r} is inside the output {path!r}: readers would take the "
                               "records for data; name a place beside it")
        return
    if inner.strip("/") == "":
        raise OptionsError(f"path={path!r} is a root (of a disk or of a bucket): the sink keeps its records beside "
                           "the output, in <path>.bucketing; write to a directory under it, or name the records' "
                           "place with the metadata option")


def metadata_location(path: str | Location, explicit: str = "") -> tuple[Store, str, str]:
    """``(store, base, meta)`` of the output ``path`` (its text, or its :class:`Location` resolved already): where
    its data files go and where the sink keeps its records. ``explicit`` (the ``metadata`` option) names the
    records' place; by default they are the output's sibling ``<path>.bucketing``. The records share the output's
    store: one client writes both."""
    output = path if isinstance(path, Location) else locate(path)
    check_metadata(output.uri, explicit)
    meta = locate(explicit).path.rstrip("/") if explicit else output.path.rstrip("/") + RECORDS_SUFFIX
    return output.store, output.path, meta


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


def _relative_path(text: str, what: str) -> str:
    """``text`` if it is a relative path that stays under the output (no ``..``, no root, no empty segment)."""
    if text and (text.startswith("/") or any(p in ("", ".", "..") or not _SEGMENT.fullmatch(p)
                                             for p in text.split("/"))):
        raise ValueError(f"{what} {text!r} leaves the output directory")
    return text


def _pending_file(v: Sequence[Any]) -> PendingFile:
    bucket, task = _relative_path(str(v[0]), "bucket"), str(v[1])
    if not _TASK.fullmatch(task):
        raise ValueError(f"task {task!r} is not a writer's name")
    rows, size, counter = int(v[3]), int(v[4]), int(v[2])
    if min(rows, size, counter) < 0:
        raise ValueError("negative counts")
    return PendingFile(bucket, task, counter, rows, size)


def _file_fields(f: PendingFile) -> list[object]:
    return [f.bucket, f.task, f.counter, f.rows, f.size]


def _record(v: Sequence[Any]) -> CommitRecord:
    kind = str(v[1])
    if kind not in ("append", "overwrite", "stream"):
        raise ValueError(f"kind {kind!r}")
    replaced = tuple(_relative_path(str(p), "replaced file") for p in v[5])
    if any(not p for p in replaced):
        raise ValueError("an empty replaced file")
    return CommitRecord(int(v[0]), kind, str(v[2]), int(v[3]), tuple(_pending_file(f) for f in v[4]), replaced,
                        int(v[6]), int(v[7]))


COMMIT_RECORD_SERIALIZER: MsgpackRecordSerializer[CommitRecord] = MsgpackRecordSerializer(
    "BucketingCommitRecordSerializer",
    1,
    to_fields=lambda r: [r.seq, r.kind, r.write_id, r.batch_id, [_file_fields(f) for f in r.files], list(r.replaced),
                         r.total_rows, r.total_files],
    from_fields=_record,
)


class FileCommitter:
    """FLIP-143 ``Committer``: pending → finished by rename. Idempotent; returns the files to retry, and raises
    :class:`_Gone` for a file that is neither pending nor finished."""

    def __init__(self, fs: Store, base: str, names: PartNames) -> None:
        self._fs, self._base, self._names = fs, base, names

    def commit(self, files: Iterable[PendingFile]) -> list[PendingFile]:
        retry = []
        for f in files:
            pending, finished = f.pending_path(self._base, self._names), f.finished_path(self._base, self._names)
            if self._fs.exists(pending):
                try:
                    self._fs.move(pending, finished)
                except FileExistsError:
                    self._collision(f, pending, finished)
                except OSError:
                    retry.append(f)
            elif not self._fs.exists(finished):
                raise _Gone(pending, finished)
        return retry

    def _collision(self, f: PendingFile, pending: str, finished: str) -> None:
        """Both names exist. Where a move is a copy then a delete (object stores), a crash between the two leaves
        both, the same bytes: finish the move. Anywhere else it is another file of the same name: refuse."""
        found = self._fs.info(finished)
        if not self._fs.capabilities.atomic_overwrite and found is not None and found.size == f.size:
            self._fs.delete(pending)
            return
        raise SinkError(f"commit refused: {finished} already exists and no commit of this output logged it; "
                        f"the pending file {pending} would replace it. Move that file out of the output, then "
                        "re-run the write")


class _Gone(Exception):
    def __init__(self, pending: str, finished: str) -> None:
        super().__init__(pending)
        self.pending, self.finished = pending, finished


def _query_name(query_id: str) -> str:
    if _TASK.fullmatch(query_id) and len(query_id) <= 100:
        return f"{query_id}.json"
    return hashlib.sha256(query_id.encode()).hexdigest()[:32] + ".json"


def _unfenced() -> None:
    """A committer's fence when nothing fences it: every commit may go ahead."""


class _CommittedBefore(Exception):
    """A stream batch's commit found the same batch of the same query committed under its number already (by a
    writer that lost the race for it: a copy whose lease this one took over, committing in the instant between
    its fence and its write)."""

    def __init__(self, record: CommitRecord) -> None:
        super().__init__(record.seq)
        self.record = record


@dataclass
class BucketingGlobalCommitter:
    """FLIP-143 ``GlobalCommitter`` of the bucketing sink, over the commit log in ``<meta>/log``: data files
    under ``base``, records under ``meta`` (see :func:`metadata_location`; empty: ``<base>.bucketing``)."""

    fs: Store
    base: str
    names: PartNames
    retention: int = 10
    max_attempts: int = 5
    meta: str = ""
    success_file: bool = False  # also an empty <base>/_SUCCESS when a bounded write completes (Hadoop's marker)
    table: TableFormat | None = None  # publish each commit into this table format (splitsource.sink._tables)
    table_catalog: str = ""  # Iceberg: the catalog's URI (empty: SQLite in the records' place)
    upsert_keys: tuple[str, ...] = ()  # a table's commits replace the rows of these keys (an incremental run's)
    # an incremental copy's: its records reach the table not one by one but at the end of each run, all of the run
    # in one table commit (publish_run); until then the log keeps them, however many
    run_at_once: bool = False
    fence: Callable[[], None] = _unfenced  # called right before each commit record is written: raises to stop a
    # writer that may no longer commit (a copy whose lease another copy took over)
    _committer: FileCommitter = field(init=False)

    def __post_init__(self) -> None:
        self.fs = as_store(self.fs)
        self.base = self.base.rstrip("/") or self.base
        self.meta = self.meta or self.base.rstrip("/") + RECORDS_SUFFIX
        self._committer = FileCommitter(self.fs, self.base, self.names)
        self._log = join(self.meta, COMMIT_LOG_DIR)
        self._queries = join(self.meta, QUERIES_DIR)

    # -- the log -----------------------------------------------------------------------------------------------

    def records(self) -> list[tuple[CommitRecord, bool]]:
        """Every retained record, oldest first, with whether it is done."""
        try:
            entries = self.fs.list(self._log)
        except OSError as exc:
            raise SinkError(f"cannot list the commit log {self._log}: {exc}") from None
        names = {e.name for e in entries}
        out = []
        for name in sorted(n for n in names if n.endswith(COMMIT_SUFFIX) and n[:-len(COMMIT_SUFFIX)].isdigit()):
            path = join(self._log, name)
            try:
                record = read_envelope(COMMIT_RECORD_SERIALIZER, self.fs.read_bytes(path))
            except (SerializationError, ValueError, TypeError, IndexError) as exc:
                raise SinkError(f"commit log record {path} is unreadable ({exc}); the output's commit history "
                                "is damaged: move the output aside rather than writing into it") from None
            except FileNotFoundError:
                continue  # pruned by another writer just now
            out.append((record, name.replace(COMMIT_SUFFIX, DONE_SUFFIX) in names))
        return out

    def query_record(self, query_id: str) -> dict[str, Any] | None:
        """What ``<meta>/queries/`` keeps of streaming query ``query_id``: its last committed batch and
        running totals (None: it never finished a commit here)."""
        path = join(self._queries, _query_name(query_id))
        found = self.fs.read_record(path, lambda: SinkError(
            f"{path} is unreadable; the output's commit history is damaged: move the output aside rather than "
            "writing into it"))
        if found is None or found.get("query") != query_id:
            return None  # a hash shared by another query id: treat as unknown
        return found

    # -- FLIP-143 ----------------------------------------------------------------------------------------------

    def combine(self, files: Sequence[PendingFile], *, kind: str, write_id: str, batch_id: int = -1) -> CommitRecord:
        replaced: tuple[str, ...] = ()
        if kind == "overwrite" and self.table is None:  # a table's overwrite is its own commit; files stay for
            # its earlier versions (time travel) until the table's vacuum or expiry removes them
            listed = {f.finished_path(self.base, self.names) for f in files}
            replaced = tuple(sorted(self._relative(p) for p in self.finished_files() if p not in listed))
        records = self.records()
        seq = records[-1][0].seq + 1 if records else 1
        rows, count = sum(f.rows for f in files), len(files)
        if kind == "stream":
            totals = [(r.seq, r.total_rows, r.total_files) for r, _ in records
                      if r.kind == "stream" and r.write_id == write_id]
            kept = self.query_record(write_id)
            if kept is not None:
                totals.append((int(kept["seq"]), int(kept["total_rows"]), int(kept["total_files"])))
            if totals:
                _, before_rows, before_files = max(totals)
                rows, count = rows + before_rows, count + before_files
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

    def commit(self, record: CommitRecord) -> bool:
        """Make ``record``'s files finished, exactly once (steps 2-5 of the module docstring); committing the same
        record again finishes what is left of it. False: a file of it was gone, and it was rolled back whole."""
        path = join(self._log, f"{record.seq:020d}.commit")
        data = write_envelope(COMMIT_RECORD_SERIALIZER, record)
        try:
            logged = self.fs.read_bytes(path)
        except FileNotFoundError:
            logged = None
        if logged is None:
            self._check_pending(record)
            self.fs.make_dirs(self._log)
            self.fence()
            try:
                self.fs.write(path, data, exclusive=True)  # of two writers racing for a number, one wins
            except FileExistsError:
                logged = self.fs.read_bytes(path)
            else:  # a writer that lost its lease since its fence leaves the record to the one that took over
                self.fence()
        if logged is not None and logged != data:
            other = read_envelope(COMMIT_RECORD_SERIALIZER, logged)
            if record.kind == other.kind == "stream" and (other.write_id, other.batch_id) == (record.write_id,
                                                                                            record.batch_id):
                raise _CommittedBefore(other)  # the same batch, committed by a holder this one took over from
            raise SinkError(f"commit {record.seq}: {path} exists already and logs another commit: another writer "
                            f"is committing into {self.base} at the same time; write to another path")
        return self._finish(record)

    def _check_pending(self, record: CommitRecord) -> None:
        by_bucket: dict[str, set[str]] = {}
        for f in record.files:
            by_bucket.setdefault(f.bucket, set()).add(self.names.pending(f.task, f.counter))
        for bucket, wanted in by_bucket.items():
            directory = join(self.base, bucket) if bucket else self.base
            present = {e.name for e in self.fs.list(directory)}
            missing = sorted(wanted - present)
            if missing:
                raise SinkError(
                    f"commit refused: {len(missing)} pending file(s) it would publish are not in the output, e.g. "
                    f"{join(directory, missing[0])}; the tasks wrote where this process cannot see (executors with "
                    "a local path of their own? use storage the driver and every executor share), or something "
                    "removed them; nothing was committed")

    def last_stream_record(self, query_id: str) -> CommitRecord | None:
        """The newest retained record of streaming query ``query_id``."""
        found = [r for r, _ in self.records() if r.kind == "stream" and r.write_id == query_id]
        return found[-1] if found else None

    def query_rows(self, query_id: str) -> int:
        """Rows streaming query ``query_id`` has committed here, over all its batches (0: none)."""
        totals = [(r.seq, r.total_rows) for r, _ in self.records() if r.kind == "stream" and r.write_id == query_id]
        kept = self.query_record(query_id)
        if kept is not None:
            totals.append((int(kept["seq"]), int(kept["total_rows"])))
        return max(totals)[1] if totals else 0

    def last_stream_batch(self, query_id: str) -> int | None:
        """The highest batch id committed by streaming query ``query_id`` (None if it never committed here), from
        the retained records and the query's own record, which pruning keeps."""
        ids = [r.batch_id for r, _ in self.records() if r.kind == "stream" and r.write_id == query_id]
        kept = self.query_record(query_id)
        if kept is not None:
            ids.append(int(kept["batch"]))
        return max(ids) if ids else None

    def commit_batch(self, files: Sequence[PendingFile], *, query_id: str, batch_id: int,
                     before_commit: Callable[[], None] | None = None, owner: str | None = None
                     ) -> CommitRecord | None:
        """Commit batch ``batch_id`` of streaming query ``query_id`` once (step 3 of the batch protocol, see
        :mod:`splitsource.copyjob._protocol`): finish what a crash left logged; a replay of a batch this query
        already committed has its new files deleted (they are duplicates) and returns None; otherwise the files are
        committed and, every task of the batch having ended, what is still transient is swept as an orphan (only
        ``owner``'s files when given: see :meth:`sweep`). ``before_commit`` runs only for a batch about to be
        committed, before its commit record is written."""
        self.recover()
        last = self.last_stream_batch(query_id) if query_id else None
        if last is not None and batch_id <= last:
            self.delete_pending(files)
            return None
        record = self.combine(files, kind="stream", write_id=query_id, batch_id=batch_id)
        if before_commit is not None:
            before_commit()
        try:
            finished = self.commit(record)
        except _CommittedBefore as before:
            if self._finish(before.record):  # this batch's files duplicate the ones that commit published
                self.delete_pending(files)
                return None
            # a writer this one took over from logged the batch after its files were swept: rolled back, so
            # this writer's files commit it
            finished = self.commit(record)
        if not finished:
            self.fence()  # the files went with a copy that took over: say so
            raise SinkError(f"commit {record.seq}: a part file of batch {batch_id} was removed while it was being "
                            "committed, so the commit was rolled back whole; run the write again to read it again")
        self.fence()  # a writer that lost its lease sweeps nothing: what is transient now is the new holder's
        self.sweep(keep=(), owner=owner)
        return record

    def delete_pending(self, files: Iterable[PendingFile]) -> None:
        """Remove the pending files of uncommitted (aborted or replayed) work; already gone is fine."""
        for f in files:
            try:
                self.fs.delete(f.pending_path(self.base, self.names))
            except OSError:
                pass

    def end_of_input(self, summary: bytes) -> None:
        """A bounded write is complete: write ``<meta>/_SUCCESS`` with its summary, and with ``success_file`` an
        empty ``<base>/_SUCCESS`` (Hadoop's marker that the output is whole, for schedulers that wait for it)."""
        self.fs.write(join(self.meta, SUCCESS_FILE), summary)
        if self.success_file:
            self.fs.write(join(self.base, SUCCESS_FILE), b"")

    # -- sweeping ----------------------------------------------------------------------------------------------

    def sweep(self, keep: Iterable[PendingFile] = (), buckets: Iterable[str] | None = None,
              owner: str | None = None) -> list[str]:
        """Delete in-progress and pending files not in ``keep`` (orphans of failed or speculative attempts and of
        writes that never committed). ``owner``: only the files of that writer (its id in the task names, see
        :func:`~splitsource.sink._writer.write_files`) and those older than ``ORPHAN_AGE_S``; None: every
        writer's, for a caller that owns the output. Only call it when no task of this writer is writing."""
        kept = {(f.bucket, f.task, f.counter) for f in keep}
        roots = [join(self.base, b) if b else self.base for b in buckets] if buckets is not None else [self.base]
        now = time.time()

        def doomed(path: str, since: float | None) -> bool:
            """The sweep's one rule, for files and for the incomplete uploads of files (S3): a transient file
            not kept, of ``owner`` or (any writer's) older than ``ORPHAN_AGE_S``."""
            parsed = self.names.parse_transient(path.rsplit("/", 1)[-1])
            if parsed is None:
                return False
            bucket = self._relative(path.rsplit("/", 1)[0]) if "/" in path else ""
            if (bucket, parsed.task, parsed.counter) in kept:
                return False
            return owner is None or writer_of(parsed.task) == owner or (since is not None
                                                                      and now - since >= ORPHAN_AGE_S)

        removed = []
        for root in dict.fromkeys(roots):
            for info in self._walk(root, recursive=buckets is None):
                if doomed(info.path, info.mtime) and self.fs.delete(info.path):
                    removed.append(info.path)
            if self.fs.uploads is not None:  # a writer killed mid-upload leaves one, billed until aborted
                removed.extend(self.fs.uploads.abort_under(root, buckets is None, doomed))
        return removed

    def lost_files(self) -> list[str]:
        """The finished files of the newest finished commit that the output no longer holds: with the records kept
        beside the output, an output deleted or replaced on its own shows here (nothing else removes them)."""
        done = [r for r, is_done in self.records() if is_done and r.files]
        if not done:
            return []
        paths = [f.finished_path(self.base, self.names) for f in done[-1].files]
        return [p for p in paths if not self.fs.exists(p)]

    def finished_files(self) -> list[str]:
        return [e.path for e in self.finished_entries()]

    def finished_entries(self) -> list[Entry]:
        """The output's part files as one listing gives them, sizes included (no request per file)."""
        return [e for e in self._walk(self.base, recursive=True)
                if not e.name.startswith(("_", ".")) and self._relative(e.path).split("/")[0] not in self._reserved]

    @property
    def _reserved(self) -> frozenset[str]:
        """Top-level names of the output that hold a table's own files (its log, its metadata)."""
        return frozenset(self.table.reserved) if self.table is not None else frozenset()

    # -- internals ---------------------------------------------------------------------------------------------

    def _walk(self, root: str, recursive: bool) -> list[Entry]:
        try:
            entries = self.fs.list(root, recursive=recursive)
        except OSError as exc:
            raise SinkError(f"cannot list {root}: {exc}") from None
        return [e for e in entries if not e.is_dir and not e.path.startswith(self.meta + "/")]

    def _relative(self, path: str) -> str:
        prefix = self.base.rstrip("/") + "/"
        return path[len(prefix):] if path.startswith(prefix) else ("" if path == self.base else path)

    def _finish(self, record: CommitRecord) -> bool:
        """Finish the logged ``record``; False: a file of it was gone, and it was rolled back whole instead."""
        todo: list[PendingFile] = list(record.files)
        try:
            for _ in range(self.max_attempts):
                todo = self._committer.commit(todo)
                if not todo:
                    break
        except _Gone as gone:
            self._roll_back(record, gone)
            return False
        if todo:
            raise SinkError(f"commit {record.seq}: could not finish {len(todo)} part file(s), e.g. "
                            f"{todo[0].pending_path(self.base, self.names)}; re-running the write finishes them")
        for bucket in sorted({f.bucket for f in record.files}):
            self.fs.sync_dir(join(self.base, bucket) if bucket else self.base, "publish.dir")
        if self.table is not None and not self.run_at_once:
            publish(self, [record])  # one table commit, unless the table holds this record's tag already
        for relative in record.replaced:
            self.fs.delete(join(self.base, relative))
        if record.kind == "stream" and record.write_id:
            self._keep_query(record)
        self.fs.write(join(self._log, f"{record.seq:020d}.done"), b"")
        if not self.run_at_once:
            self._prune()
        return True

    def publish_run(self, query_id: str, deletes: pa.Table | None = None) -> bool:
        """With ``run_at_once``: every finished record of streaming query ``query_id`` (a copy's run) that the
        output's table does not hold yet, and the run's ``deletes`` (keys), as one table commit (a reader of the
        table sees the run whole or not at all); returns whether one was made. Then the log is pruned."""
        made = False
        if self.table is not None:
            records = [r for r, done in self.records() if done and r.kind == "stream" and r.write_id == query_id]
            self.fence()  # a copy that lost its lease leaves the run to the one that took over
            made = publish(self, records, deletes)
        self._prune()
        return made

    def _keep_query(self, record: CommitRecord) -> None:
        kept = self.query_record(record.write_id)
        if kept is not None and int(kept["batch"]) >= record.batch_id:
            return
        self.fs.make_dirs(self._queries)
        body = {"query": record.write_id, "batch": record.batch_id, "seq": record.seq,
                "total_rows": record.total_rows, "total_files": record.total_files}
        self.fs.write(join(self._queries, _query_name(record.write_id)), json.dumps(body).encode())

    def _roll_back(self, record: CommitRecord, gone: _Gone) -> None:
        """A logged, unfinished commit one of whose files is gone (removed from outside): undo it whole, so that
        nothing of it is visible and its batch counts as not committed (a copy reads it again)."""
        for f in record.files:
            self.fs.delete(f.finished_path(self.base, self.names))
            self.fs.delete(f.pending_path(self.base, self.names))
        for bucket in sorted({f.bucket for f in record.files}):
            directory = join(self.base, bucket) if bucket else self.base
            if self.fs.exists(directory):
                self.fs.sync_dir(directory, "rollback.dir")  # its finished files' deletions, before the record's
        self.fs.delete(join(self._log, f"{record.seq:020d}.commit"))
        self.fs.sync_dir(self._log, "rollback.dir")
        what = f"batch {record.batch_id} of {record.write_id}" if record.kind == "stream" else "a write"
        log.warning("commit %d (%s) was rolled back: its part file %s is gone (removed from outside the sink, or "
                    "swept by a copy that took over from the one that logged it); it counts as not committed%s",
                    record.seq, what, gone.pending,
                    " and is read again" if record.kind == "stream" else "")

    def _prune(self) -> None:
        records = self.records()
        done = [r for r, is_done in records if is_done]
        for record in done[: max(0, len(records) - self.retention)]:
            for suffix in (COMMIT_SUFFIX, DONE_SUFFIX):
                self.fs.delete(join(self._log, f"{record.seq:020d}{suffix}"))
