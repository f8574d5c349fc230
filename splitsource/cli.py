"""The ``splitsource`` command: ``copy`` a bounded source into files exactly once, ``verify`` the copy, and list
the ``options``.

Exit codes: 0 success (verify: the output matches), 1 the job failed (verify: mismatch), 2 invalid arguments or
options, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM). Errors are one line on stderr, never a stack trace.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import NoReturn

from splitsource._errors import OptionsError, SplitSourceError
from splitsource._logs import quiet_logging
from splitsource.copyjob._signals import Terminated, on_sigterm
from splitsource.copyjob._worker import ONE_BLAS_THREAD, end_early, start_early

# splitsource.sink._tables.TABLE_FORMATS' names (the command imports no pyarrow to parse its arguments; a test
# checks the two agree)
TABLE_FORMAT_NAMES = ("none", "delta", "iceberg")

__all__ = ["main", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_PIPE = 141  # standard output's reader went away (`| head`): quiet, as a tool killed by SIGPIPE


EXAMPLES = """examples:
  splitsource copy --connector cassandra -o hosts=127.0.0.1 -o keyspace=shop -o table=orders \\
      --output /data/orders --format parquet
  splitsource copy --engine local --connector cassandra -o hosts=127.0.0.1 -o keyspace=shop -o table=orders \\
      --output /data/orders-csv --format csv          # one machine, no JVM
  splitsource verify --connector cassandra -o hosts=127.0.0.1 -o keyspace=shop -o table=orders \\
      --output /data/orders

Killed or failed? Run the same copy command again: it resumes from the checkpoint (default <output>.checkpoint),
reads only what was not committed, and commits every row exactly once.
"""


MAX_WORKERS = 256


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes from 0 (one per core) to "
                                         f"{MAX_WORKERS}")
    return value


def _path(text: str) -> str:
    """A path or URI that is text a file system can hold (a non-UTF-8 name arrives with surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{text.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8") from None
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return text


def _plain(text: str) -> str:
    """Help text in plain words: the docstrings' reStructuredText markup is not for a terminal."""
    return text.replace("``", "")


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise OptionsError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _lease(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds of at least 1")
    return value


def _rate(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of at least 0 (0: no limit)")
        return value

    parse.__name__ = flag  # argparse names the flag in its message
    return parse


def _sink_table() -> str:
    from splitsource._typed_options import options_table
    from splitsource.sink._options import BucketingSinkOptions

    return options_table(BucketingSinkOptions, "text")


def _options(args: argparse.Namespace) -> int:
    """``splitsource options``: the tables, generated from the options' own declarations."""
    from splitsource._planning import FrameworkOptions, load_connector
    from splitsource._registry import installed_connectors
    from splitsource._typed_options import options_table
    from splitsource.sink._options import BucketingSinkOptions

    print("installed connectors (--connector NAME):")
    for name, claims in sorted(installed_connectors().items()):
        for claim in claims:
            conflict = "  (claimed twice: refused)" if len(claims) > 1 else ""
            print(f"  {name:<12} {claim.target}  [{claim.distribution} {claim.version}]{conflict}")
    print("\nframework options (-o KEY=VALUE, any connector):")
    print(options_table(FrameworkOptions, "text"))
    print("\nsink options (--sink-option KEY=VALUE):")
    print(options_table(BucketingSinkOptions, "text"))
    if args.connector:
        source_class = load_connector(args.connector)
        print(f"\n{args.connector} options (-o KEY=VALUE):")
        print(options_table(source_class.options_class, "text"))
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (the usage block is what --help is for), and parts of the help made
    only when it is printed: an epilog (``late_epilog``: the sink's options table imports pyarrow, which a copy's
    command line parses its arguments without), and the installed connectors' names where a help says
    ``{installed}`` (a scan of every installed distribution's metadata)."""

    late_epilog: Callable[[], str] | None = None

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        if self.late_epilog is not None:
            self.epilog = self.late_epilog()
        for action in self._actions:
            if action.help and "{installed}" in action.help:
                from splitsource._registry import installed_connectors

                action.help = action.help.replace("{installed}", ", ".join(sorted(installed_connectors())))
        return super().format_help()


def _parser() -> argparse.ArgumentParser:
    from splitsource._version import __version__

    parser = _Parser(prog="splitsource", description=_plain(__doc__.split("\n\n")[0]),
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"splitsource {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def source_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--connector", required=True,
                       help="an installed connector ({installed}) or module:Class")
        p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                       help="a source option (repeat): `splitsource options --connector NAME` lists them")
        p.add_argument("--output", required=True, type=_path,
                       help="base directory of the output (local path or URI)")

    copy = sub.add_parser("copy", help="copy a whole source into files, exactly once (resumable)",
                          formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    copy.late_epilog = lambda: f"sink options (--sink-option KEY=VALUE):\n{_sink_table()}\n\n{EXAMPLES}"
    source_args(copy)
    copy.add_argument("--format", default="parquet",
                      help="part-file format: parquet (default) or another the sink registers (its option format, "
                           "below)")
    copy.add_argument("--bucketer", default="none", help="none (default), datetime or columns")
    copy.add_argument("--table-format", choices=TABLE_FORMAT_NAMES, default="none",
                      help="land the copy as table commits, one per batch: delta (pip install "
                           "'splitsource[delta]') or iceberg ('splitsource[iceberg]'); the output is the table's "
                           "location (default: none, plain Parquet files)")
    copy.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                      help="a bucketing sink option (repeat), e.g. bucket_columns=country, part_size_mb=128")
    copy.add_argument("--checkpoint", type=_path, help="checkpoint location (default: <output>.checkpoint)")
    copy.add_argument("--engine", choices=("spark", "local"), default="spark",
                      help="spark (default): Spark tasks on --master, one Spark job per batch; local: worker "
                           "processes on this machine, no JVM (faster on one machine); a checkpoint belongs to one "
                           "engine")
    copy.add_argument("--master", default=None, help="Spark master (default local[2]); --engine spark only")
    copy.add_argument("--workers", type=_workers, default=0,
                      help=f"worker processes, at most {MAX_WORKERS} (default: one per core); --engine local only")
    copy.add_argument("--max-splits-per-batch", type=int, default=0,
                      help="splits per committed batch (default: by estimated size, 256 MiB)")
    copy.add_argument("--max-rows-per-second", type=_rate("--max-rows-per-second"), default=0.0, metavar="N",
                      help="read at most N rows per second over the whole copy, shared by its readers (default: "
                           "no limit); for a cluster that serves live traffic")
    copy.add_argument("--max-mb-per-second", type=_rate("--max-mb-per-second"), default=0.0, metavar="N",
                      help="read at most N MiB (of Arrow data) per second over the whole copy (default: no limit)")
    copy.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    copy.add_argument("--summary-json", metavar="FILE",
                      help="also write the outcome as JSON to FILE, for schedulers: status (finished or failed), "
                           "the summary's figures or the error, and the exit code")
    copy.add_argument("--overwrite", action="store_true",
                      help="start over: delete every file of the output and the checkpoint's progress first")
    copy.add_argument("--incremental", action="store_true",
                      help="the first run copies the whole source; each later run (the same command again) copies "
                           "only what changed since the run before (docs/incremental.md)")
    copy.add_argument("--no-deletes", dest="deletes", action="store_false",
                      help="with --incremental: leave in the output the keys the source no longer holds (a run of a "
                           "connector that sees deletes, PostgreSQL, otherwise scans the table's keys for them)")
    copy.add_argument("--single-writer", action="store_true",
                      help="vouch that only this copy writes the output: needed on a store that cannot create a "
                           "file only where none exists (an S3 compatible without If-None-Match, HDFS)")
    copy.add_argument("--lease-s", type=_lease, default=60.0, metavar="S",
                      help="a running copy renews its lease on the output every S/4 seconds; a copy not heard "
                           "from for S seconds is taken over by a re-run from any host (default: 60)")

    verify = sub.add_parser("verify", help="compare the committed output with the source (count and checksum)",
                            allow_abbrev=False)
    source_args(verify)
    verify.add_argument("--checkpoint", metavar="DIR", type=_path,
                        help="the copy's checkpoint, for its rows per split on a mismatch (default: the one the "
                             "output's owner file names)")
    verify.add_argument("--metadata", metavar="DIR", type=_path,
                        help="where the copy kept the output's records, if it was given --sink-option metadata=DIR "
                             "(default: <output>.bucketing)")
    verify.add_argument("--workers", type=_workers, default=0, metavar="N",
                        help="processes reading the source and the output at once (default: one per core; 1: all "
                             "in this process)")

    options = sub.add_parser("options", help="list the options of the framework, the sink and a connector",
                             allow_abbrev=False)
    options.add_argument("--connector", help="also list this connector's options (-o KEY=VALUE)")
    return parser


def _copy(args: argparse.Namespace) -> int:
    from splitsource._copy_call import copy
    from splitsource.copyjob._job import Progress

    summary = copy(
        args.connector, _pairs(args.option, "-o"), args.output, format=args.format, bucketer=args.bucketer,
        sink_options={**_pairs(args.sink_option, "--sink-option"),
                      **({"table_format": args.table_format} if args.table_format != "none" else {})},
        checkpoint=args.checkpoint, master=args.master, max_splits_per_batch=args.max_splits_per_batch,
        max_rows_per_second=args.max_rows_per_second, max_mb_per_second=args.max_mb_per_second,
        progress=None if args.quiet else Progress(), engine=args.engine, workers=args.workers,
        overwrite=args.overwrite,
        single_writer=args.single_writer,
        lease_s=args.lease_s,
        incremental=args.incremental,
        deletes=args.deletes,
    )
    print(summary.text())
    if args.summary_json:
        _write_summary(args.summary_json, {"status": "finished", "exit_code": EXIT_OK, "engine": args.engine,
                                           **asdict(summary)})
    return EXIT_OK


def _write_summary(path: str, outcome: dict[str, object]) -> None:
    """Write ``outcome`` to ``path`` atomically (a scheduler never reads half a file)."""
    from splitsource._fs import resolve_filesystem

    fs, target = resolve_filesystem(path)
    fs.write(target, (json.dumps(outcome, indent=2) + "\n").encode())


def _verify(args: argparse.Namespace) -> int:
    from splitsource._planning import build_source
    from splitsource.copyjob._verify import verify

    _, source = build_source({**_pairs(args.option, "-o"), "connector": args.connector})
    result = verify(source, args.output, args.checkpoint, metadata=args.metadata or "", workers=args.workers)
    print(result.text())
    return EXIT_OK if result.match else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet_logging()
    signal.signal(signal.SIGTERM, on_sigterm)
    os.environ.setdefault(*ONE_BLAS_THREAD)  # before pyarrow imports numpy
    if args.command == "copy" and args.engine == "local":
        # the first worker starts now (its imports beside this process's), and the local engine takes it
        start_early()
    try:
        code, message = _run(args)
    finally:
        end_early()
    if message:
        print(f"splitsource {args.command}: {message}", file=sys.stderr)
    summary_path = getattr(args, "summary_json", None)
    if code != EXIT_OK and summary_path:
        try:
            _write_summary(summary_path, {"status": "failed", "exit_code": code, "error": message})
        except OSError as exc:
            print(f"splitsource {args.command}: cannot write --summary-json {summary_path}: {exc.strerror}",
                  file=sys.stderr)
    return code


# the library names copy()'s own arguments as options; on the command line they are flags
_FLAGS = {f"option '{name}'": "--" + name.replace("_", "-")
          for name in ("master", "workers", "engine", "output", "checkpoint", "overwrite", "single_writer",
                       "incremental")} | {"option 'deletes'": "--no-deletes"}


def _as_flags(message: str) -> str:
    for option, flag in _FLAGS.items():
        message = message.replace(option, flag)
    return message


def _run(args: argparse.Namespace) -> tuple[int, str]:
    """The command's exit code and, when it failed, its one-line message (SPLITSOURCE_DEBUG=1: and the stack
    where it was raised, on standard error)."""
    try:
        return {"copy": _copy, "verify": _verify, "options": _options}[args.command](args), ""
    except BaseException as exc:
        if os.environ.get("SPLITSOURCE_DEBUG"):
            traceback.print_exc()
        return _failure(exc)


def _failure(exc: BaseException) -> tuple[int, str]:
    """The exit code and one-line message of a command that raised ``exc``."""
    if isinstance(exc, BrokenPipeError) and _stdout_gone():
        return EXIT_PIPE, ""
    if isinstance(exc, OptionsError):
        return EXIT_USAGE, _as_flags(str(exc))
    if isinstance(exc, SplitSourceError):  # CheckpointError, CopyError, SinkError, SplitReadError, ...
        return EXIT_FAILED, _as_flags(str(exc))
    if isinstance(exc, OSError):  # a file system refused: permission, no space, a path that is a file
        return EXIT_FAILED, f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}"
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED, "terminated (SIGTERM); run the same command again to resume"
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted; run the same command again to resume"
    if not isinstance(exc, Exception):
        raise exc  # SystemExit and the like: as they are
    # a bug or an error nothing above names: still one line
    return EXIT_FAILED, f"unexpected {type(exc).__name__}: {exc} (SPLITSOURCE_DEBUG=1 shows where)"


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader closed it; if so, what is left to print goes nowhere (a worker's
    pipe that broke is a failure, told as one)."""
    import select

    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return True


def run() -> NoReturn:
    """The ``splitsource`` command: :func:`main` in a process of its own, which ends as an exit would (the threading
    module's exit calls, which end the idle threads of concurrent.futures' pools, then the other threads joined, the
    exit handlers run, the output flushed) but without the interpreter's teardown of every module (pyarrow's,
    numpy's, the drivers'): about 35 ms at the end of each command, a tenth of a 1-row copy. Every file a command
    writes is synced before it returns; nothing is left to a finalizer."""
    code = main()
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own first step of an exit
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_gone():
            raise
        code = code or EXIT_PIPE
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
