"""Bounded copy jobs: a whole source into bucketed files, exactly once, resumable after a kill at any moment.

A :class:`Copy`, built once from a copy's checked options (:func:`splitsource.copy`), takes ownership of the output
and checkpoint (:mod:`splitsource.copyjob._ownership`), and hands the run to an engine, which runs the batch
protocol (:mod:`splitsource.copyjob._protocol`: plan a batch of splits, write pending files, commit once per batch
id) until the source is done: the Spark engine (:mod:`splitsource.spark._copy`, one Spark job per batch) or the
local engine (:mod:`splitsource.copyjob._local`, worker processes, no JVM).
Re-running the same copy resumes from the checkpoint: committed splits are never read again; a batch in flight
when the job died is read again and its earlier files, never committed, are swept. The call returns only after the
last batch is committed and ``_SUCCESS`` is written (FLIP-147: a bounded job reports success only once its last
data is committed).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from splitsource._api import Changes
from splitsource._errors import LeaseLostError, OptionsError
from splitsource._fs import Location, locate, redact, sibling_uri
from splitsource._names import FINISHED_FILE, RECORDS_SUFFIX, SINK_DESCRIPTION
from splitsource._offsets import UNSIZED_SPLITS_PER_BATCH, source_fingerprint
from splitsource._planning import read_settings
from splitsource.copyjob._deletes import RunChanges, RunDeletes
from splitsource.copyjob._ownership import (
    DEFAULT_LEASE_S,
    Claim,
    CopyLock,
    check_one_writer,
    check_paths,
    claim,
    start_over,
    undo_unstarted,
)
from splitsource.copyjob._protocol import CopyRun, Engine, EngineResult, copy_writer_id, run_query_id
from splitsource.copyjob._words import counted, size
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import join
from splitsource.sink._options import BucketingSinkOptions, parse_sink_options

__all__ = ["Copy", "CopySettings", "CopySummary", "Progress", "default_checkpoint"]


@dataclass(frozen=True)
class CopySummary:
    """What a finished copy reports."""

    rows: int  # rows committed by this run
    total_rows: int  # rows committed by the copy over all its runs
    files: int
    bytes: int
    splits: int
    batches: int
    seconds: float
    rows_per_s: float
    resumed: bool
    output: str
    checkpoint: str
    retries: int = 0  # transient read errors resumed from the split state, this run
    throttled_s: float = 0.0  # seconds readers slept to keep to the read rate limit, this run (summed)
    split_rows: dict[str, int] = field(default_factory=dict)  # rows per split committed by this run
    events: dict[str, int] = field(default_factory=dict)  # what readers met and coped with, by kind (page_shrunk)
    event_details: list[str] = field(default_factory=list)  # the first 100 of them, one line each
    unsized: bool = False  # batches were cut by count: the connector's splits estimate no size
    run: int = 0  # an incremental copy's run (1: its first, a full copy); 0: not incremental
    run_rows: int = 0  # rows that run committed (over every call of it: a run killed and resumed)
    changes: str = ""  # what an incremental run reads: "appends" or "upserts" (Changes)
    since: dict[str, Any] = field(default_factory=dict)  # the instant the run read the changes after (run 2 on)
    instant: dict[str, Any] = field(default_factory=dict)  # the instant this run read at: the next one's since
    # an upserts run's rows by what they did to the output, by key (-1: not told apart: deletes not looked for)
    inserted: int = -1
    updated: int = -1
    deleted: int = -1

    def text(self) -> str:
        if self.run > 1 and self.run_rows == 0 and self.deleted <= 0:
            return (f"run {self.run}: nothing changed since run {self.run - 1} ({_instant(self.since)}): nothing "
                    f"committed; {counted(self.total_rows, 'row')} in {self.output}")
        lines = [
            f"copy finished: {counted(self.total_rows, 'row')} in {counted(self.files, 'file')} "
            f"({size(self.bytes)}), {counted(self.splits, 'split')}",
            f"this run: {counted(self.rows, 'row')} in {counted(self.batches, 'batch', 'batches')}, "
            f"{self.seconds:.1f} s, {self.rows_per_s:,.0f} rows/s"
            f"{' (resumed from the checkpoint)' if self.resumed else ''}",
        ]
        if self.retries or self.throttled_s or self.events:
            events = ", ".join(f"{kind} {count}" for kind, count in sorted(self.events.items()))
            lines.append(f"readers: {counted(self.retries, 'transient error')} resumed, {self.throttled_s:.1f} s "
                         f"throttled{f'; events: {events}' if events else ''}")
            lines += [f"  {detail}" for detail in self.event_details[:10]]
        if self.run:
            rows = counted(self.run_rows, "row")
            kind = f"{rows} added" if self.changes == "appends" else \
                f"{rows} added or changed (upserts by key; deletes are not seen)" if self.deleted < 0 else \
                f"{counted(self.inserted, 'row')} inserted, {self.updated:,} updated and {self.deleted:,} deleted " \
                "(by key)"
            lines.insert(0, f"run {self.run} of an incremental copy, at {_instant(self.instant)}: " + (
                "a full copy" if self.run == 1 else f"{kind} since run {self.run - 1} ({_instant(self.since)})"))
        if self.unsized:
            lines.append(f"batches: {UNSIZED_SPLITS_PER_BATCH} splits each, since the connector's splits estimate "
                         "no size (Split.estimated_size_bytes is 0)")
        lines += [f"output:     {self.output}", f"checkpoint: {self.checkpoint}"]
        return "\n".join(lines)


def _instant(instant: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in instant.items()) or "?"


class Progress:
    """Splits done of the estimated total, rows, rows/s and ETA: a bar on a terminal, a log line every
    ``interval`` seconds otherwise."""

    def __init__(self, stream: TextIO | None = None, interval: float = 10.0, tty: bool | None = None) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._interval = interval
        self._last = 0.0
        self._started = time.monotonic()
        self._first_splits: int | None = None  # splits done before this run (a resumed copy)

    def update(self, splits: int, total: int, rows: int, final: bool = False) -> None:
        now = time.monotonic()
        elapsed = max(now - self._started, 1e-6)
        rate = rows / elapsed
        if self._first_splits is None:
            self._first_splits = splits
        done_now = splits - self._first_splits  # the ETA comes from this run's pace only
        eta = ""
        if done_now > 0 and splits < total:
            eta = f"ETA {_clock(elapsed * (total - splits) / done_now)}"
        shown_total = str(total) if total > 0 else "?"
        text = f"{splits}/{shown_total} splits  {rows:,} rows  {rate:,.0f} rows/s  {eta}".rstrip()
        if self._tty:
            width = 30
            done = int(width * splits / total) if total > 0 else 0
            self._stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {text}\033[K" + ("\n" if final else ""))
            self._stream.flush()
        elif final or now - self._last >= self._interval:
            self._stream.write(f"splitsource copy: {text}\n")
            self._stream.flush()
            self._last = now


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def default_checkpoint(output: str) -> str:
    """``<output>.checkpoint`` beside the output: visible, and never inside what readers read (a URI's query
    string stays at its end)."""
    return sibling_uri(output, ".checkpoint")


def _remove_if_empty(places: list[Location]) -> None:
    """Directories this run made, if the failed run left them empty: removed bottom-up with ``rmdir``, which
    fails on anything another copy has put there meanwhile (local file systems only)."""
    for place in places:
        place.store.remove_empty_dirs(place.path)


@dataclass(frozen=True)
class CopySettings:
    """A copy's options, checked once where they come in: the read tasks' options, the sink's, the two locations
    (absolute) and how the copy takes its output."""

    read_options: Mapping[str, str]  # the connector's and the framework's, lower-cased
    sink_raw: Mapping[str, str]  # the bucketing sink's, ``path`` included
    output: str
    checkpoint: str
    overwrite: bool = False
    single_writer: bool = False
    lease_s: float = DEFAULT_LEASE_S
    incremental: bool = False  # each run after the first copies only what changed since the one before
    deletes: bool = True  # and deletes the keys the source holds no more, where the connector sees them


class Copy:
    """One copy, built once from its settings: its places (the output, its records and the checkpoint, each
    resolved once), the source (connected: a missing table or an unreachable host fails here, in one line), the
    sink and its committer; :meth:`run` takes its steps in order: check the table, name the copy, check its
    places, lock, claim (or overwrite), resume or run the engine, summarise."""

    def __init__(self, settings: CopySettings, engine: Engine, progress: Progress | None) -> None:
        self.settings, self.engine, self.progress = settings, engine, progress
        self.sink = parse_sink_options({**engine.sink_defaults, **settings.sink_raw})
        self.output, self.checkpoint = locate(settings.output), locate(settings.checkpoint)
        check_paths(self.output, self.checkpoint)
        self.read = read_settings(settings.read_options)
        self.framework, self.source = self.read.framework, self.read.source()
        self.changes = self.source.incremental() if settings.incremental else None  # refused before connecting
        self.schema = self.source.schema()
        self.marked = self.changes is not None and self.sink.table_format == "none"  # rows get run and change
        self.since: dict[str, Any] = {}  # an incremental run's: the instant of the run before
        self.resumed: bool | None = None  # whether this call resumes its run (None: whether it resumed the copy)
        self.deletes: RunDeletes | None = None  # an incremental run's deletes (found at its first plan)
        self.changed: RunChanges | None = None  # what the run changed by key (None: deletes not looked for)
        self.rows_before_run = 0  # rows the copy committed in its runs before this call's (next_run)
        if self.changes is Changes.UPSERTS and self.sink.table_format != "none" and self.sink.bucketer != "none":
            raise OptionsError(f"--incremental into a {self.sink.table_format} table applies each run's rows by key, "
                               "into a table without partitions: leave out the bucketer")
        if self.changes is Changes.UPSERTS:
            left_out = [k for k in self.source.key_columns() if k not in self.schema.names]
            if left_out:  # refused before the first run: a later one could not apply its rows
                raise OptionsError(f"--incremental applies each run's rows by the source's key "
                                   f"({', '.join(self.source.key_columns())}), but the columns read leave out "
                                   f"{', '.join(left_out)}: read it too (option 'columns')")
            if settings.deletes:
                RunDeletes.check(self.source.key_columns(), self.sink)
        self.committer = self.sink.committer(self.output)
        # an incremental copy's table gets each run as one commit, at the run's end (run_engine)
        self.committer.run_at_once = self.changes is not None and self.committer.table is not None
        self.records = Location(self.sink.metadata or sibling_uri(self.output.uri, RECORDS_SUFFIX),
                                self.committer.fs, self.committer.meta)
        self.places = [(f"output {self.output.shown}", self.records),
                       (f"checkpoint {self.checkpoint.shown}", self.checkpoint)]

    def run(self, started: float) -> CopySummary:
        table = self.committer.table
        if table is not None:  # partition columns a table cannot hold fail now, not in a task
            table.check_schema(self.schema, self.sink.make_bucketer().columns)
        identity = self.identity()
        made = [p for p in (self.output, self.checkpoint, self.records) if not p.store.exists(p.path)]
        self.check_places(made)
        failed, owned = True, False
        try:
            with CopyLock(self.places, command=f"splitsource copy --engine {self.engine.name}",
                          lease_s=self.settings.lease_s) as lock:
                owned = True
                self.committer.fence = lock.check
                claimed, result, rows_before = self.owned_run(identity)
            failed = False
        except LeaseLostError:
            owned = False  # what it made is the copy's that took over now: it touches nothing more
            raise
        finally:
            if failed and owned:  # a copy refused by another's lock must not touch what that copy is making
                _remove_if_empty(made)
        return self.summary(result, claimed, rows_before, started)

    def identity(self) -> dict[str, Any]:
        """What makes this copy this copy: a checkpoint of another is refused."""
        sink, source = self.sink, self.source
        identity: dict[str, Any] = {
            "version": 1, "connector": self.framework.connector, "identity": source.identity(),
            "source": source_fingerprint(source), "output": self.output.shown, "format": sink.format,
            "bucketer": sink.bucketer, "bucket_columns": sink.bucket_columns}
        if sink.table_format != "none":
            identity["table_format"] = sink.table_format  # a resumed copy does not change the kind of output
            if self.settings.overwrite:
                raise OptionsError(f"--overwrite does not start a {sink.table_format} table over: the table keeps "
                                   "its history, which a copy may not delete; remove the table (its directory and "
                                   "<output>.bucketing) yourself, or copy to a new path")
        if sink.table_format != "none" or self.changes:
            identity["schema"] = [f"{f.name}: {f.type}" for f in self.schema]  # ...nor its table's or runs' schema
        if self.changes:
            identity["incremental"] = True  # nor a copy's runs become incremental, or stop being
        if self.changes is Changes.UPSERTS:
            identity["key"] = list(self.source.key_columns())  # ...nor the key its runs are applied by
        origin = dict(source.origin())
        if origin:
            identity["origin"] = origin
        if self.engine.name != "spark":
            identity["engine"] = self.engine.name  # the engines' checkpoints differ: one's is refused by the other
        return identity

    def check_places(self, made: list[Location]) -> None:
        """One writer per place, and (on a cluster) executors that see what this process sees: before any claim.
        The directories this checking made are removed again if it fails."""
        checked = False
        try:
            check_one_writer(self.places, self.settings.single_writer)
            self.engine.check_storage(self.places)
            checked = True
        finally:
            if not checked:
                _remove_if_empty(made)

    def owned_run(self, identity: dict[str, Any]) -> tuple[Claim, EngineResult, int]:
        """Holding the lock: overwrite or claim the output, then resume or run; a copy that fails before its first
        commit leaves nothing half-made."""
        output, checkpoint, committer = self.output, self.checkpoint, self.committer
        if self.settings.overwrite:
            start_over(output, checkpoint, committer)
        claimed = claim(output, checkpoint, identity, committer)
        try:
            _describe_output(self.sink, committer, self.changes)
            run = self.next_run(claimed)
            rows_before = self.rows_before_run + self.run_rows(claimed.token, run.run)
            result = run.finished or self.run_engine(run.copy_run)
            return claimed, result, rows_before
        except LeaseLostError:
            raise  # what it made is the copy's that took over now: it touches nothing more
        except BaseException:
            undo_unstarted(checkpoint, claimed, committer)
            raise

    def next_run(self, claimed: Claim) -> _NextRun:
        """What this call runs: the copy's run 1, resumed or started; a finished copy's result (its re-run starts
        no engine, no JVM: nothing to do); for an incremental copy whose last run finished, the run after it (or
        that run resumed), which reads what changed since the instant the finished one read at."""
        checkpoint, committer = self.checkpoint, self.committer
        marker = finished_marker(checkpoint, claimed.token) if claimed.resumed else None
        number, read, source = 1, self.read, self.source
        if self.changes is not None and marker is not None:
            number, self.since = marker.run + 1, dict(marker.instant)
            self.rows_before_run = marker.rows if marker.rows is not None else sum(
                self.run_rows(claimed.token, n) for n in range(1, number))  # a marker from before it kept them
            read = self.read.since(self.since)
            source = read.source(built=self.source)  # the table described once
            if self.changes is Changes.UPSERTS:  # a table's commits of this run replace their keys' rows
                committer.upsert_keys = tuple(source.key_columns())
                if self.settings.deletes:
                    self.deletes = RunDeletes(number, self.schema, committer, self.sink, checkpoint, marker.held)
            started = committer.last_stream_batch(run_query_id(self.engine.name, claimed.token, number)) is not None
            self.resumed = started  # a run that committed a batch before this call is resumed
        elif marker is not None and marker.seq == _latest_stream_seq(committer):
            return _NextRun(marker.run, finished=EngineResult(marker.taken, marker.total, 0, run=marker.run,
                                                               instant=marker.instant))
        return _NextRun(number, CopyRun(source, read, self.sink, committer, checkpoint, claimed.token,
                                        self.progress.update if self.progress is not None else None, number,
                                        marked=self.marked,
                                        first_plan=self.deletes.find if self.deletes is not None else None))

    def run_engine(self, run: CopyRun | None) -> EngineResult:
        """Run the engine, then (before the run is marked finished: a kill in between does this again on the
        re-run) apply the run's deletes and publish an incremental run into its table."""
        assert run is not None
        result = self.engine.run(run)
        query = run_query_id(self.engine.name, run.token, run.run)
        deletes = self.deletes
        self.changed = deletes.applied(query) if deletes is not None else None
        deleted = self.changed.deleted if self.changed is not None else None
        if deletes is not None and deleted is not None and self.committer.table is None:
            deletes.commit_to_files(query, copy_writer_id(run.token), deleted)
        if self.committer.run_at_once:
            self.committer.publish_run(query, deleted)
        held: dict[str, Any] = {}  # what the output holds now, for the next run's deletes (none: it reads it)
        if deletes is not None and self.changed is not None:
            held = deletes.keep_held(query, self.changed)
        elif deletes is not None and not self.committer.query_rows(query):
            held = deletes.held  # a run that found nothing changed: the output is as the run before left it
        mark_finished(self.checkpoint, run.token, self.committer, result,
                      self.rows_before_run + self.run_rows(run.token, run.run), held)
        if self.changes is Changes.UPSERTS:
            RunDeletes.prune(self.checkpoint, held)
        return result

    def run_rows(self, token: str, run: int) -> int:
        """Rows the copy committed in its run ``run`` (the runs before are counted in the last one's marker: an
        hourly copy's runs are thousands, and each asks the commit log)."""
        return self.committer.query_rows(run_query_id(self.engine.name, token, run))

    def summary(self, result: EngineResult, claimed: Claim, rows_before: int, started: float) -> CopySummary:
        """What the copy reports, written into ``_SUCCESS`` as it is marked finished: an incremental run's rows are
        the run's (resumed or not), a copy's those this call committed."""
        committer, stats = self.committer, result.stats
        this_run = self.run_rows(claimed.token, result.run)
        total_rows = self.rows_before_run + this_run
        files = committer.finished_entries()
        size = sum(e.size or 0 for e in files)
        rows, seconds = total_rows - rows_before, time.monotonic() - started
        run_rows = this_run if self.changes else 0
        changed = self.changed
        by_key = (-1, -1, -1) if changed is None else (changed.inserted, changed.updated, changed.deleted.num_rows)
        summary = CopySummary(rows, total_rows, len(files), size, result.taken, result.batches, seconds,
                              rows / seconds if seconds > 0 else 0.0,
                              claimed.resumed if self.resumed is None else self.resumed, self.output.shown,
                              self.checkpoint.shown, stats.retries, round(stats.throttled_s, 3),
                              dict(sorted(stats.split_rows.items())), stats.events, stats.event_details,
                              result.unsized, result.run if self.changes else 0, run_rows,
                              self.changes.value if self.changes else "", self.since, dict(result.instant),
                              *by_key)
        if self.progress is not None:
            self.progress.update(result.taken, max(result.taken, result.total), rows, final=True)
        committer.end_of_input(json.dumps(asdict(summary)).encode())
        return summary


def _latest_stream_seq(committer: BucketingGlobalCommitter) -> int:
    return max((r.seq for r, _ in committer.records() if r.kind == "stream"), default=0)


@dataclass(frozen=True)
class _NextRun:
    """What a call of a copy runs: run ``run`` through the engine, or nothing (``finished``: the copy's result)."""

    run: int
    copy_run: CopyRun | None = None
    finished: EngineResult | None = None


@dataclass(frozen=True)
class Finished:
    """``<checkpoint>/finished.json``: the engine ran the source to its end (for an incremental copy: its run
    ``run``), when the output's newest commit record was ``seq``; ``instant``: where the source stood for that run
    (the next incremental run reads the changes after it); ``held``: what the output held after it, for the next run's
    deletes (:meth:`splitsource.copyjob._deletes.RunDeletes.keep_held`); ``rows``: the rows the copy committed in its
    runs 1 to ``run`` (None: a marker written before it was kept)."""

    token: str
    seq: int
    taken: int
    total: int
    run: int = 1
    instant: Mapping[str, Any] = field(default_factory=dict)
    held: Mapping[str, Any] = field(default_factory=dict)
    rows: int | None = None


def mark_finished(checkpoint: Location, token: str, committer: BucketingGlobalCommitter,
                  result: EngineResult, rows: int, held: Mapping[str, Any] | None = None) -> None:
    """Record that the engine ran the source to its end, with the output's newest commit record at that moment
    and ``rows``, the rows the copy committed in its runs so far (``held``: an incremental run's, what the output
    holds after it: :meth:`RunDeletes.keep_held`)."""
    marker = Finished(token, _latest_stream_seq(committer), result.taken, result.total, result.run,
                      dict(result.instant), dict(held or {}), rows)
    checkpoint.store.write(checkpoint.child(FINISHED_FILE).path, json.dumps(asdict(marker)).encode())


def finished_marker(checkpoint: Location, token: str) -> Finished | None:
    """What the checkpoint says the last finished run was, if it says so for this copy (``token``); None: no run
    finished (or an unreadable marker: the engine decides, from the output's commit log)."""
    try:
        found = json.loads(checkpoint.store.read_text(checkpoint.child(FINISHED_FILE).path))
        marker = Finished(str(found["token"]), int(found["seq"]), int(found["taken"]), int(found["total"]),
                          int(found.get("run", 1)), dict(found.get("instant") or {}), dict(found.get("held") or {}),
                          None if found.get("rows") is None else int(found["rows"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return marker if marker.token == token else None


def _describe_output(sink: BucketingSinkOptions, records: BucketingGlobalCommitter, changes: Changes | None) -> None:
    """Write copy.json into the output's records: how the files are laid out, for ``splitsource verify``;
    ``changes``: an incremental copy's (its files' rows carry their run and change; a table's rows are applied by
    key)."""
    records.fs.make_dirs(records.meta)
    description = {"format": sink.format, "bucketer": sink.bucketer, "bucket_columns": sink.bucket_columns,
                   "csv_header": sink.csv_header, "part_prefix": sink.part_prefix,
                   "part_suffix": sink.names.suffix, "changes": changes.value if changes else ""}
    if sink.table_format != "none":
        description.update(table_format=sink.table_format, iceberg_catalog=redact(sink.iceberg_catalog))
    records.fs.write(join(records.meta, SINK_DESCRIPTION), json.dumps(description, indent=2).encode())

