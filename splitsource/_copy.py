"""Bounded copy jobs: a whole source into bucketed files, exactly once, resumable after a kill at any moment.

:func:`copy` wires ``readStream.format("splitsource")`` (micro-batches of splits; the offset is the enumerator
state) to ``writeStream.format("bucketing")`` (each batch committed once, replays discarded) with Spark's own
checkpoint and ``trigger(availableNow=True)``. Each read task writes its rows into pending part files itself and
the stream carries only the committables (one small row per file) to the sink's commit: the rows never cross into
the JVM and back, which was most of a copy's cost. Re-running the same copy resumes from the checkpoint: committed
splits are never read again; a batch in flight when the job died is read again and its earlier files, never
committed, are swept. The call returns only after the last batch is committed and ``_SUCCESS`` is written
(FLIP-147: a bounded job reports success only once its last data is committed).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import pyarrow.fs as pafs

from splitsource._api import _FixedContext
from splitsource._claim import check_paths, claim, start_over, undo_unstarted
from splitsource._errors import OptionsError, SplitSourceError
from splitsource._offsets import source_fingerprint
from splitsource._ownership import CopyLock
from splitsource._signals import deferred, stop_requested
from splitsource._spark_reader import build_source
from splitsource.sink._committer import META_DIR, BucketingGlobalCommitter
from splitsource.sink._formats import resolve_filesystem, write_atomically
from splitsource.sink._options import BucketingSinkOptions, parse_sink_options

__all__ = ["CopyError", "CopySummary", "Progress", "copy", "root_cause"]

SINK_DESCRIPTION = "copy.json"  # in <output>/_bucketing: how verify reads the output back


class CopyError(SplitSourceError):
    """The copy job failed; the message is the root cause, without the JVM's stack."""


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

    def text(self) -> str:
        lines = [
            f"copy finished: {self.total_rows:,} rows in {self.files:,} files ({_size(self.bytes)}), "
            f"{self.splits} splits",
            f"this run: {self.rows:,} rows in {self.batches} batches, {self.seconds:.1f} s, {self.rows_per_s:,.0f} "
            f"rows/s{' (resumed from the checkpoint)' if self.resumed else ''}",
            f"output:     {self.output}",
            f"checkpoint: {self.checkpoint}",
        ]
        return "\n".join(lines)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


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


_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Invalid|Timeout|Unavailable)\w*): (.+)$")


def root_cause(exc: BaseException) -> str:
    """The line a user needs from a Spark exception: our own error's message if there is one, else the last
    Python exception of a worker's traceback (``ArrowInvalid: ...``), else the first line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines()]
    for stripped in reversed(lines):
        for marker in ("Error: ", "Exception: "):
            head, _, message = stripped.partition(marker)
            if message and head.split(".")[0] in ("splitsource", "connectors", "serializers", "cassandra"):
                return message
    if "Traceback (most recent call last)" in text:
        for stripped in reversed(lines):
            match = _EXCEPTION_LINE.match(stripped)
            if match:
                return _clip(f"{match.group(1)}: {match.group(2)}")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return _clip(first)


def _clip(text: str, limit: int = 1000) -> str:
    """One line of at most ``limit`` characters, cut between words (the whole text is in the error log)."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def default_checkpoint(output: str) -> str:
    """``<output>.checkpoint`` beside the output: visible, and never inside what readers read."""
    return output.rstrip("/") + ".checkpoint"


def _exists(path: str) -> bool:
    fs, base = resolve_filesystem(path)
    return bool(fs.get_file_info(base).type != pafs.FileType.NotFound)


def _remove_if_empty(paths: list[str]) -> None:
    """Directories this run made, if the failed run left them empty: removed bottom-up with ``rmdir``, which
    fails on anything another copy has put there meanwhile (local file systems only)."""
    for path in paths:
        if "://" in path or not os.path.isdir(path):
            continue
        for root, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(root)
            except OSError:
                pass


def _spark_session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    quiet = Path(__file__).with_name("resources") / "log4j2-quiet.properties"
    # the driver JVM is started by spark-submit before any SparkConf applies: its own options go on its command
    # line, or Spark prints its default logging banner (left alone when the user set PYSPARK_SUBMIT_ARGS)
    java_options = f"-Dlog4j2.configurationFile=file:{quiet} -XX:TieredStopAtLevel=1"
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options {shlex.quote(java_options)} pyspark-shell")
    try:
        return _start_session(SparkSession, master, quiet)
    except Exception as exc:  # a bad master URL, no Java: one line, not the gateway's stack
        raise OptionsError(f"--master {master}: Spark cannot start: {root_cause(exc)}") from None


def _start_session(SparkSession: Any, master: str, quiet: Path) -> Any:  # noqa: N803 - the class, passed in
    spark = (SparkSession.builder.master(master).appName("splitsource copy")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             # C1 only: a copy's JVM schedules and commits, it runs no heavy code; measured 2 s less start-up
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile=file:{quiet} -XX:TieredStopAtLevel=1")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    return spark


ENGINES = ("spark", "local")
_MASTER = re.compile(r"local(\[[0-9*]+(,[0-9]+)?\])?|local-cluster\[[0-9, ]+\]|(spark|k8s)://\S+|yarn")


def copy(
    connector: str,
    source_options: Mapping[str, str],
    output: str,
    *,
    format: str = "parquet",
    bucketer: str = "none",
    sink_options: Mapping[str, str] | None = None,
    checkpoint: str | None = None,
    master: str = "local[2]",
    max_splits_per_batch: int = 0,
    progress: Progress | None = None,
    spark: Any = None,
    engine: str = "spark",
    workers: int = 0,
    overwrite: bool = False,
) -> CopySummary:
    """Copy the whole source into ``output``, exactly once; resume if a checkpoint of the same copy exists.

    ``engine``: ``spark`` (a Spark streaming query on ``master``) or ``local`` (``workers`` processes on this
    machine, default one per core, no JVM); both commit the same way, a checkpoint belongs to one engine.

    An output has one owner (see ``splitsource._ownership``): a copy holds a lock on its output and checkpoint
    while it runs, and refuses an output another copy owns. ``overwrite`` deletes what the output holds and the
    checkpoint's progress first, and starts afresh.

    Raises :class:`OptionsError` for bad options, :class:`CheckpointError` for a foreign or corrupt checkpoint,
    an output owned by another copy or a running copy, and :class:`CopyError` when the job fails; none of them
    touches committed output.
    """
    started = time.monotonic()
    if engine not in ENGINES:
        raise OptionsError(f"option 'engine': {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "local" and spark is not None:
        raise OptionsError("option 'engine': 'local' runs without Spark; do not pass a Spark session")
    if workers < 0:
        raise OptionsError(f"option 'workers': {workers} is negative")
    if engine == "spark" and spark is None and not _MASTER.fullmatch(master):
        raise OptionsError(f"--master {master!r} is not a Spark master URL: use local[N], spark://HOST:PORT, "
                           "k8s://HOST:PORT or yarn")
    output = output if "://" in output else os.path.abspath(output)
    checkpoint = checkpoint or default_checkpoint(output)
    checkpoint = checkpoint if "://" in checkpoint else os.path.abspath(checkpoint)
    framework_raw = {"connector": connector}
    if max_splits_per_batch:
        framework_raw["max_splits_per_batch"] = str(max_splits_per_batch)
    read_options = {**{k.lower(): str(v) for k, v in source_options.items()}, **framework_raw}
    sink_raw = {"format": format, "bucketer": bucketer, **{k.lower(): str(v) for k, v in (sink_options or {}).items()},
                "path": output}
    sink = parse_sink_options(sink_raw)
    check_paths(output, checkpoint)
    _, source = build_source(read_options)
    source.schema()  # connects now: a missing table or an unreachable host fails here, in one line
    identity = {"version": 1, "connector": connector, "identity": source.identity(),
                "source": source_fingerprint(source), "output": output, "format": sink.format,
                "bucketer": sink.bucketer, "bucket_columns": sink.bucket_columns}
    if engine != "spark":
        identity["engine"] = engine  # the engines' checkpoints differ: one engine's is refused by the other
    made = [p for p in (output, checkpoint) if not _exists(p)]
    committer = _committer(sink)
    failed, locked = True, False
    try:
        with CopyLock([(f"output {output}", f"{output}/{META_DIR}"), (f"checkpoint {checkpoint}", checkpoint)],
                      command=f"splitsource copy --engine {engine}"):
            locked = True
            if overwrite:
                start_over(output, checkpoint, committer)
            claimed = claim(output, checkpoint, identity, committer)
            resumed = claimed.resumed
            try:
                _describe_output(sink)
                rows_before = _committed_rows(committer)
                if engine == "local":
                    splits, total, batches = _copy_locally(read_options, sink_raw, committer, checkpoint, workers,
                                                           progress, claimed.token)
                else:
                    splits, total, batches = _copy_with_spark(source, read_options, sink_raw, committer, checkpoint,
                                                              master, progress, spark, rows_before)
            except BaseException:
                undo_unstarted(output, checkpoint, claimed, committer)
                raise
        failed = False
    finally:
        if failed and locked:  # a copy refused by another's lock must not touch what that copy is making
            _remove_if_empty(made)

    fs, _ = resolve_filesystem(output)
    total_rows = _committed_rows(committer)
    files = committer.finished_files()
    size = sum(fs.get_file_info(p).size or 0 for p in files)
    rows = total_rows - rows_before
    seconds = time.monotonic() - started
    summary = CopySummary(rows, total_rows, len(files), size, splits, batches, seconds,
                          rows / seconds if seconds > 0 else 0.0, resumed, output, checkpoint)
    if progress is not None:
        progress.update(splits, max(splits, total), rows, final=True)
    committer.end_of_input(json.dumps(asdict(summary)).encode())
    return summary


def _copy_locally(read_options: Mapping[str, str], sink_raw: Mapping[str, str], committer: BucketingGlobalCommitter,
                  checkpoint: str, workers: int, progress: Progress | None, token: str) -> tuple[int, int, int]:
    from splitsource._local_copy import LocalCopyFailed, run_local

    try:
        run = run_local(read_options, sink_raw, committer, checkpoint, workers or os.cpu_count() or 1,
                        progress.update if progress is not None else None, query_id=token)
    except LocalCopyFailed as exc:
        raise CopyError(_failure(str(exc), exc.detail or str(exc), checkpoint)) from None
    return run.taken, run.total, run.batches


def _copy_with_spark(source: Any, read_options: Mapping[str, str], sink_raw: Mapping[str, str],
                     committer: BucketingGlobalCommitter, checkpoint: str, master: str, progress: Progress | None,
                     spark: Any, rows_before: int) -> tuple[int, int, int]:
    enumerator = source.create_enumerator(_FixedContext(2))
    enumerator.start()
    total_estimate = enumerator.estimated_total_splits() or -1
    enumerator.close()
    own_session = spark is None
    spark = spark or _spark_session(master)
    batches: set[int] = set()
    last_offset: dict[str, Any] = {"taken": _splits_from_checkpoint(checkpoint), "total": total_estimate}
    # the read tasks write the part files themselves and hand only their committables to the sink's commit
    stream_options = {**read_options, "copy_sink": json.dumps(sink_raw)}
    try:
        frame = spark.readStream.format("splitsource").options(**stream_options).load()
        writer = frame.writeStream.format("bucketing").options(
            **{k: v for k, v in sink_raw.items() if k != "path"}, input="committables")
        query = (writer.option("checkpointLocation", checkpoint).trigger(availableNow=True)
                 .queryName(f"splitsource-copy-{os.getpid()}").start(sink_raw["path"]))
        try:
            committed, seen = rows_before, 0
            with deferred():  # SIGTERM must not interrupt a py4j call: it is handled here, between calls
                while not query.awaitTermination(1.0):
                    if stop_requested():
                        query.stop()
                        break
                    _collect_progress(query, batches, last_offset)
                    if progress is not None:
                        if len(batches) != seen:  # the commit log changes only when a batch commits
                            committed, seen = _committed_rows(committer), len(batches)
                        progress.update(int(last_offset.get("taken", 0)), int(last_offset.get("total", -1)),
                                        committed - rows_before)
            _collect_progress(query, batches, last_offset)
        except KeyboardInterrupt:
            query.stop()
            raise
        error = query.exception()
        if error is not None:
            raise CopyError(_failure(root_cause(error), str(error), checkpoint))
    except SplitSourceError:
        raise
    except Exception as exc:  # Spark's own exceptions: keep the message, drop the JVM stack
        raise CopyError(_failure(root_cause(exc), str(exc), checkpoint)) from None
    finally:
        if own_session:
            spark.stop()
    return int(last_offset.get("taken", 0)), int(last_offset.get("total", -1)), len(batches)


def _failure(cause: str, full: str, checkpoint: str) -> str:
    """The one-line message; the full text (JVM and Python stacks) goes to a log file beside the checkpoint."""
    try:
        fs, base = resolve_filesystem(checkpoint)
        write_atomically(fs, f"{base}/splitsource-copy-error.log", full.encode("utf-8", "replace"))
        return f"{cause} (details: {checkpoint}/splitsource-copy-error.log)"
    except OSError:
        return cause


def _committer(sink: BucketingSinkOptions) -> BucketingGlobalCommitter:
    fs, base = resolve_filesystem(sink.path)
    return BucketingGlobalCommitter(fs, base, sink.names, retention=sink.log_retention)


def _committed_rows(committer: BucketingGlobalCommitter) -> int:
    """Rows the copy has committed over all its runs: the running total of its newest commit record."""
    latest = max((r for r, _ in committer.records() if r.kind == "stream"), key=lambda r: r.seq, default=None)
    return latest.total_rows if latest else 0


def _collect_progress(query: Any, batches: set[int], last_offset: dict[str, Any]) -> None:
    for report in query.recentProgress:
        if int(report["numInputRows"]) > 0:  # Spark's no-op batches carry no data: not batches of the copy
            batches.add(int(report["batchId"]))
        sources = report.get("sources") or []
        if sources and sources[0].get("endOffset"):
            end = sources[0]["endOffset"]
            offset = json.loads(end) if isinstance(end, str) else end
            if int(offset.get("taken", 0)) >= int(last_offset.get("taken", 0)):
                last_offset.update(taken=offset.get("taken", 0), total=offset.get("total", -1))


def _splits_from_checkpoint(checkpoint: str) -> int:
    """Splits taken so far, from the newest offset in Spark's checkpoint (a resumed copy with nothing left)."""
    offsets = Path(checkpoint) / "offsets"
    if not offsets.is_dir():
        return 0
    newest = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name), default=None)
    if newest is None:
        return 0
    for line in reversed(newest.read_text().splitlines()):
        if line.startswith("{") and '"taken"' in line:
            return int(json.loads(line).get("taken", 0))
    return 0


def _describe_output(sink: BucketingSinkOptions) -> None:
    """Write <output>/_bucketing/copy.json: how the files are laid out, for ``splitsource verify``."""
    fs, base = resolve_filesystem(sink.path)
    fs.create_dir(f"{base}/_bucketing", recursive=True)
    description = {"format": sink.format, "bucketer": sink.bucketer, "bucket_columns": sink.bucket_columns,
                   "csv_header": sink.csv_header, "part_prefix": sink.part_prefix,
                   "part_suffix": sink.names.suffix}
    write_atomically(fs, f"{base}/_bucketing/{SINK_DESCRIPTION}", json.dumps(description, indent=2).encode())

