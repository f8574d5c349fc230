"""The bucketing sink: exactly-once part files with Flink BucketingSink semantics (FLIP-143 roles).

The core (:class:`BucketingSinkWriter`, :class:`FileCommitter`, :class:`BucketingGlobalCommitter`) does not
depend on Spark; ``format("bucketing")`` (:class:`BucketingDataSource`) runs it in Spark batch and streaming
writes. States, guarantees and options: ``docs/sink.md``.
"""

from splitsource.sink._bucketers import (
    BasePathBucketer,
    Bucketer,
    ColumnBucketer,
    DateTimeBucketer,
    encode_segment,
    encode_value,
)
from splitsource.sink._committer import (
    COMMIT_RECORD_SERIALIZER,
    BucketingGlobalCommitter,
    CommitRecord,
    FileCommitter,
)
from splitsource.sink._files import (
    PENDING_FILE_SERIALIZER,
    WRITER_STATE_SERIALIZER,
    InProgressFile,
    PartNames,
    PendingFile,
    WriterState,
)
from splitsource.sink._open_table import open_table
from splitsource.sink._options import BucketingSinkOptions, parse_sink_options
from splitsource.sink._tables import TABLE_FORMATS, TableFormat
from splitsource.sink._writer import BucketingSinkWriter
from splitsource.sink.formats import FORMATS, FileFormat
from splitsource.sink.formats.jsonl import encode_json_lines

__all__ = [
    "COMMIT_RECORD_SERIALIZER",
    "FORMATS",
    "PENDING_FILE_SERIALIZER",
    "TABLE_FORMATS",
    "WRITER_STATE_SERIALIZER",
    "BasePathBucketer",
    "Bucketer",
    "BucketingGlobalCommitter",
    "BucketingSinkOptions",
    "BucketingSinkWriter",
    "ColumnBucketer",
    "CommitRecord",
    "DateTimeBucketer",
    "FileCommitter",
    "FileFormat",
    "InProgressFile",
    "PartNames",
    "PendingFile",
    "TableFormat",
    "WriterState",
    "encode_json_lines",
    "encode_segment",
    "encode_value",
    "open_table",
    "parse_sink_options",
]
