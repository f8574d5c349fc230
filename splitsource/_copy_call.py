"""The user's copy: :func:`copy` checks a copy's options once, makes or takes its engine, and runs one
:class:`~splitsource.copyjob._job.Copy`.

It sits above both engines: the local one (:class:`~splitsource.copyjob.LocalEngine`) and the Spark one
(:class:`~splitsource.spark.SparkEngine`, imported only when named, so a local copy never imports pyspark). An
engine is an object with the small :class:`~splitsource.copyjob.Engine` interface; :func:`engine_named` is the
one place a name (``--engine``, ``copy(engine="spark")``) becomes one.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

from splitsource._errors import OptionsError
from splitsource._fs import user_path
from splitsource.copyjob._job import Copy, CopySettings, CopySummary, Progress, default_checkpoint
from splitsource.copyjob._local import LocalEngine
from splitsource.copyjob._ownership import DEFAULT_LEASE_S
from splitsource.copyjob._protocol import Engine

__all__ = ["ENGINE_NAMES", "copy", "engine_named"]

ENGINE_NAMES = ("spark", "local")


def engine_named(name: str, *, master: str | None = None, spark: Any = None, workers: int = 0) -> Engine:
    """The engine ``name`` with its settings: ``master`` (default ``local[2]``) and ``spark`` for Spark, ``workers``
    for the local one; a setting of the other engine is refused, never ignored."""
    if name not in ENGINE_NAMES:
        raise OptionsError(f"option 'engine': {name!r} is not one of {', '.join(ENGINE_NAMES)}")
    if name == "local":
        if spark is not None:
            raise OptionsError("option 'engine': 'local' runs without Spark; do not pass a Spark session")
        if master is not None:
            raise OptionsError("option 'master' is for option 'engine' spark; the local engine runs on this machine "
                               "(see option 'workers')")
        return LocalEngine(workers=workers)
    if workers:
        raise OptionsError("option 'workers' is for option 'engine' local; on Spark, option 'master' sets the "
                           "parallelism")
    from splitsource.spark._copy import SparkEngine  # pyspark, only for a Spark copy

    return SparkEngine(master=master or "local[2]", spark=spark)


def copy(
    connector: str,
    source_options: Mapping[str, str],
    output: str | os.PathLike[str],
    *,
    format: str = "parquet",
    bucketer: str = "none",
    sink_options: Mapping[str, str] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    master: str | None = None,
    max_splits_per_batch: int = 0,
    max_rows_per_second: float = 0,
    max_mb_per_second: float = 0,
    progress: Progress | None = None,
    spark: Any = None,
    engine: str | Engine = "spark",
    workers: int = 0,
    overwrite: bool = False,
    single_writer: bool = False,
    lease_s: float = DEFAULT_LEASE_S,
    incremental: bool = False,
    deletes: bool = True,
) -> CopySummary:
    """Copy the whole source into ``output``, exactly once; resume if a checkpoint of the same copy exists.
    ``output`` and ``checkpoint`` (default ``<output>.checkpoint``): a local path, as text or a ``pathlib.Path``,
    or a URI.

    ``engine``: ``spark`` (Spark tasks on ``master``, default ``local[2]``, or on ``spark``, one Spark job per
    batch) or ``local`` (``workers`` processes on this machine, default one per core, no JVM), or an
    :class:`Engine` made by the caller (``SparkEngine(master)``, ``LocalEngine(workers)``), which is closed when
    the copy ends; both commit the same way, a checkpoint belongs to one engine. A setting of another engine than
    the one named (``master`` or ``spark`` with ``local``, ``workers`` with ``spark``, any of them with an engine
    made by the caller) is refused with :class:`OptionsError`, never ignored.
    ``max_rows_per_second`` and ``max_mb_per_second`` limit the whole copy's read rate (0: none), shared by the
    readers that run at once; a re-run may change them.

    An output has one owner (see :mod:`splitsource.copyjob._ownership`): a copy holds a lock on its output and
    checkpoint while it runs, and refuses an output another copy owns. ``overwrite`` deletes what the output holds
    and the checkpoint's progress first, and starts afresh. On a store that cannot create a file only where none
    exists (an S3 compatible that ignores ``If-None-Match``, HDFS) the lock cannot exclude a second copy, and the
    copy refuses to start unless ``single_writer`` vouches that only it writes there. The lock is a lease that the
    copy renews every ``lease_s / 4`` seconds: a copy killed (or cut off) for ``lease_s`` is taken over by a re-run
    from any host, and once taken over it commits nothing more.

    ``incremental``: the first run copies the whole source; each later run of the same copy (the same call again)
    copies only what changed since the run before it, at the instant the connector's enumerator reported (see
    docs/incremental.md: each row of the files then carries its run and its change). A connector that cannot
    says why, in an :class:`OptionsError`. ``deletes`` (with ``incremental``): each run after the first also
    deletes from the output the keys the source holds no more, where the connector can see them (PostgreSQL: a
    key-only scan of the table, each run); False: a run leaves them.

    Raises :class:`OptionsError` for bad options, :class:`CheckpointError` for a foreign or corrupt checkpoint,
    an output owned by another copy or a running copy, and :class:`CopyError` when the job fails; none of them
    touches committed output.
    """
    started = time.monotonic()
    if any(k.lower() == "plan_location" for k in source_options):
        raise OptionsError("option 'plan_location' is for streaming reads: a copy keeps its plan in its checkpoint "
                           "(<checkpoint>/plans); leave it out")
    if any(k.lower() == "since" for k in source_options):
        raise OptionsError("option 'since' is what an incremental copy sets itself for each run after its first: "
                           "leave it out, and give incremental=True (--incremental)")
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or not 1 <= lease_s < math.inf:
        raise OptionsError(f"option 'lease_s': {lease_s!r} is not a number of seconds of at least 1 (a lease "
                           "shorter lets another copy take the output over while this one writes)")
    if not deletes and not incremental:
        raise OptionsError("option 'deletes': only an incremental copy's runs delete keys the source no longer "
                           "holds; give incremental=True (--incremental), or leave it out")
    output = user_path("option 'output'", output)
    framework = {"connector": connector, **{k: str(v) for k, v in (
        ("max_splits_per_batch", max_splits_per_batch), ("max_rows_per_second", max_rows_per_second),
        ("max_mb_per_second", max_mb_per_second)) if v}}
    settings = CopySettings(
        read_options={**{k.lower(): str(v) for k, v in source_options.items()}, **framework},
        sink_raw={"format": format, "bucketer": bucketer,
                  **{k.lower(): str(v) for k, v in (sink_options or {}).items()}, "path": output},
        output=output, checkpoint=user_path("option 'checkpoint'", checkpoint or default_checkpoint(output)),
        overwrite=overwrite, single_writer=single_writer, lease_s=lease_s, incremental=incremental,
        deletes=deletes)
    if not isinstance(engine, str) and (master is not None or spark is not None or workers):
        given = [name for name, value in (("master", master), ("spark", spark), ("workers", workers))
                 if value is not None and value != 0]
        raise OptionsError(f"option '{given[0]}' is for an engine copy() makes by name; the engine passed is made "
                           "already: give it its settings when you make it")
    runner = engine_named(engine, master=master, spark=spark, workers=workers) if isinstance(engine, str) else engine
    try:
        return Copy(settings, runner, progress).run(started)
    finally:
        runner.close()
