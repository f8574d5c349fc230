"""The bucketing sink's options, parsed once from Spark's string options."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from splitsource._errors import OptionsError
from splitsource._fs import Location
from splitsource._names import PART_PREFIX
from splitsource._typed_options import REQUIRED, option, parse_options
from splitsource.sink._bucketers import (
    DEFAULT_DATETIME_PATTERN,
    BasePathBucketer,
    Bucketer,
    ColumnBucketer,
    DateTimeBucketer,
)
from splitsource.sink._committer import BucketingGlobalCommitter, check_metadata, metadata_location
from splitsource.sink._files import PartNames
from splitsource.sink._tables import TABLE_FORMATS, table_format
from splitsource.sink.formats import FORMATS, FileFormat

__all__ = ["BucketingSinkOptions", "parse_sink_options"]


def _prefix(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", text):
        raise ValueError("a prefix starts with a letter or digit and holds only letters, digits, '_', '.', '-'")
    return text


def _suffix(text: str) -> str:
    if text and not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ValueError("a suffix holds only letters, digits, '_', '.', '-'")
    return text


@dataclass(frozen=True)
class BucketingSinkOptions:
    """Options of ``format("bucketing")``.

    ``path`` is the base directory (a local path or a ``pyarrow.fs`` URI: ``s3://``, ``hdfs://``, ``file://``).
    """

    path: str = option(REQUIRED, doc="base directory of the output (local path or pyarrow.fs URI)")
    format: str = option("parquet", doc="part-file format", choices=tuple(FORMATS))
    bucketer: str = option("datetime", doc="how rows are put in directories", choices=("datetime", "columns", "none"))
    bucket_format: str = option(DEFAULT_DATETIME_PATTERN, doc="datetime bucketer: pattern of processing time "
                                "(Hive-style dt=2026-11-24/hour=8; Flink's default is yyyy-MM-dd--HH)")
    timezone: str = option("UTC", doc="datetime bucketer: time zone of the pattern")
    bucket_columns: str = option("", doc="columns bucketer: comma-separated column names (Hive-style col=value)")
    part_prefix: str = option(PART_PREFIX, doc="prefix of part-file names", parse=_prefix)
    part_suffix: str = option("", doc="suffix of finished part files (default: .parquet, .jsonl or .csv)",
                              parse=_suffix)
    part_size_mb: float = option(384.0, doc="roll a part file once it reaches this size", minimum=0.001)
    inactivity_s: float = option(60.0, doc="roll a bucket's part file after this long without a write",
                                 minimum=0.0)
    buffer_mb: float = option(128.0, doc="memory budget of a writer task for rows buffered across all its open "
                                         "buckets (Parquet row groups); past it the bucket holding most is written "
                                         "out", minimum=0.001)
    max_open_files: int = option(1000, doc="open in-progress files per writer task; past it the rows of buckets "
                                           "without an open file are sorted out to disk and merged into one file "
                                           "per bucket at the task's end (as Spark's writer falls back to sorting)",
                                 minimum=1)
    compression: str = option("snappy", doc="Parquet compression",
                              choices=("none", "snappy", "zstd", "gzip", "lz4", "brotli"))
    csv_header: bool = option(True, doc="CSV: write a header line at the top of each part file")
    log_retention: int = option(10, doc="commit records kept in the records' log (it never grows past this)",
                                minimum=2)
    metadata: str = option("", doc="where the sink keeps its commit log and records, on the output's store "
                                   "(default: <path>.bucketing, beside the output, which then holds data files only)")
    table_format: str = option("none", doc="publish each commit as a table commit: none (plain files), delta or "
                                           "iceberg (the output path is the table's location; Parquet, bucketer "
                                           "none, which is then the default)", choices=("none", *TABLE_FORMATS))
    iceberg_catalog: str = option("", doc="table_format iceberg: the catalog, sqlite:///<file> or a REST catalog's "
                                          "http(s):// URI (default: SQLite in the records' place, "
                                          "<path>.bucketing/iceberg.db)")
    success_file: bool = option(False, doc="also write an empty _SUCCESS into the output when a bounded write "
                                           "completes (Hadoop's marker, for schedulers that wait for it; DuckDB and "
                                           "Polars then read the output through a glob, <path>/**/*.parquet)")

    @property
    def file_format(self) -> FileFormat:
        return FORMATS[self.format]

    @property
    def names(self) -> PartNames:
        return PartNames(self.part_prefix, self.part_suffix or self.file_format.suffix)

    @property
    def part_size_bytes(self) -> int:
        return max(1, int(self.part_size_mb * 1024 * 1024))

    @property
    def buffer_bytes(self) -> int:
        return max(1, int(self.buffer_mb * 1024 * 1024))

    def committer(self, output: Location | None = None) -> BucketingGlobalCommitter:
        """The global committer of this output (``output``: its path resolved already): its store, its data
        directory and its records' place."""
        fs, base, meta = metadata_location(output or self.path, self.metadata)
        return BucketingGlobalCommitter(fs, base, self.names, retention=self.log_retention, meta=meta,
                                        success_file=self.success_file, table=table_format(self.table_format),
                                        table_catalog=self.iceberg_catalog)

    def make_bucketer(self) -> Bucketer:
        if self.bucketer == "none":
            return BasePathBucketer()
        if self.bucketer == "datetime":
            return DateTimeBucketer(self.bucket_format, self.timezone)
        table = table_format(self.table_format)
        return ColumnBucketer([c.strip() for c in self.bucket_columns.split(",") if c.strip()],
                              in_files=table is not None and table.partition_columns_in_files)


MAX_OBJECT_STORE_PART_MB = 4096  # under S3's 5 GiB CopyObject limit, with room for the row group that rolls it

# Spark passes its own writer options through to the data source; they are Spark's business, not the sink's.
_SPARK_KEYS = ("checkpointlocation", "queryname", "paths")


def parse_sink_options(raw: Mapping[str, str]) -> BucketingSinkOptions:
    options = parse_options(BucketingSinkOptions, raw, context="format('bucketing')", ignore=_SPARK_KEYS)
    table = table_format(options.table_format)
    if table is not None:
        if "bucketer" not in {k.lower() for k in raw}:
            options = replace(options, bucketer="none")  # a table's rows are not put in processing-time folders
        table.require()
        table.check(file_format=options.format, bucketer=options.bucketer, path=options.path,
                    catalog=options.iceberg_catalog)
    elif options.iceberg_catalog:
        raise OptionsError("option 'iceberg_catalog' is only used with table_format 'iceberg'")
    if options.bucket_columns and options.bucketer != "columns":
        raise OptionsError("option 'bucket_columns' is only used with bucketer 'columns' "
                           f"(bucketer is {options.bucketer!r})")
    if options.path.startswith("s3://") and options.part_size_mb > MAX_OBJECT_STORE_PART_MB:
        raise OptionsError(f"option 'part_size_mb': {options.part_size_mb:g} MiB is over "
                           f"{MAX_OBJECT_STORE_PART_MB} on an object store, where a part is copied to its final "
                           "name at commit and one copy request moves at most 5 GiB")
    check_metadata(options.path, options.metadata)  # a root, or a records' place the sink cannot use, fails now
    options.make_bucketer()  # validates the pattern, the zone and the columns list now, not in a task
    return options
