"""Part-file formats, one module each (its writer and the reader ``verify`` uses), registered here: the sink's
``format`` option, the command line and ``verify`` read :data:`FORMATS`. Table formats (Delta, Iceberg), which
publish Parquet part files as table commits, are registered the same way in :mod:`splitsource.sink._tables`."""

from __future__ import annotations

from splitsource.sink.formats._base import FileFormat, PartFileWriter, combine_batches
from splitsource.sink.formats.csv import CsvFormat
from splitsource.sink.formats.jsonl import JsonLinesFormat
from splitsource.sink.formats.parquet import ParquetFormat

__all__ = ["FORMATS", "FileFormat", "PartFileWriter", "combine_batches", "register"]

FORMATS: dict[str, FileFormat] = {}


def register(fmt: FileFormat) -> FileFormat:
    """Add ``fmt`` to the formats the sink writes and ``verify`` reads, under ``fmt.name``."""
    FORMATS[fmt.name] = fmt
    return fmt


for _format in (ParquetFormat(), JsonLinesFormat(), CsvFormat()):
    register(_format)
