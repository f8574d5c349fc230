"""Part-file names and states, the committable (:class:`PendingFile`) and the writer state, with serializers.

A part file lives in its bucket directory and moves through three names::

    _<prefix>-<task>-<counter>.in-progress    being written by one writer (one per bucket and writer at a time)
    _<prefix>-<task>-<counter>.pending        closed, waiting for its commit
    <prefix>-<task>-<counter><suffix>         finished: committed, visible to readers

``<task>`` is the writer's identity: the Spark partition number and a token drawn once per task attempt, so a
retried or speculative attempt never shares a name with another attempt, in this write or any earlier one.
``<counter>`` counts the writer's part files and is never reused (it is part of the writer state). Names starting
with ``_`` are skipped by Spark's and Hive's readers, so only finished files are ever read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from serializers import MsgpackRecordSerializer
from splitsource._names import IN_PROGRESS, PART_PREFIX, PENDING, VALID_LENGTH

__all__ = [
    "IN_PROGRESS",
    "PENDING",
    "PENDING_FILE_SERIALIZER",
    "WRITER_STATE_SERIALIZER",
    "InProgressFile",
    "PartNames",
    "PendingFile",
    "TransientName",
    "WriterState",
    "writer_of",
]



@dataclass(frozen=True)
class TransientName:
    """What the name of an in-progress or pending file says."""

    task: str
    counter: int
    state: str  # IN_PROGRESS or PENDING


@dataclass(frozen=True)
class PartNames:
    """The naming rule for one sink (its prefix and suffix)."""

    prefix: str = PART_PREFIX
    suffix: str = ".parquet"

    def in_progress(self, task: str, counter: int) -> str:
        return f"_{self.prefix}-{task}-{counter}{IN_PROGRESS}"

    def pending(self, task: str, counter: int) -> str:
        return f"_{self.prefix}-{task}-{counter}{PENDING}"

    def finished(self, task: str, counter: int) -> str:
        return f"{self.prefix}-{task}-{counter}{self.suffix}"

    def valid_length(self, task: str, counter: int) -> str:
        return f"_{self.finished(task, counter)}{VALID_LENGTH}"

    def parse_finished(self, name: str) -> tuple[str, int] | None:
        """(task, counter) of a finished part file's name, None for any other name."""
        match = re.fullmatch(rf"{re.escape(self.prefix)}-([A-Za-z0-9][A-Za-z0-9_-]*)-(\d+){re.escape(self.suffix)}",
                             name)
        return (match.group(1), int(match.group(2))) if match else None

    def parse_transient(self, name: str) -> TransientName | None:
        match = re.fullmatch(rf"_{re.escape(self.prefix)}-(.+)-(\d+)(\.in-progress|\.pending)", name)
        if match is None:
            return None
        return TransientName(match.group(1), int(match.group(2)), match.group(3))


def join(*parts: str) -> str:
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts) if p)


@dataclass(frozen=True)
class PendingFile:
    """The committable: one closed part file waiting for its commit, and what it holds."""

    bucket: str
    task: str
    counter: int
    rows: int
    size: int

    def pending_path(self, base: str, names: PartNames) -> str:
        return join(base, self.bucket, names.pending(self.task, self.counter))

    def finished_path(self, base: str, names: PartNames) -> str:
        return join(base, self.bucket, names.finished(self.task, self.counter))


@dataclass(frozen=True)
class InProgressFile:
    """An open row-format part file as of a snapshot: the bytes and rows up to there are the valid prefix."""

    bucket: str
    counter: int
    valid_length: int
    rows: int


@dataclass(frozen=True)
class WriterState:
    """What a writer needs to resume: its identity, next counter and open files' valid lengths."""

    task: str
    next_counter: int
    in_progress: tuple[InProgressFile, ...] = ()


PENDING_FILE_SERIALIZER: MsgpackRecordSerializer[PendingFile] = MsgpackRecordSerializer(
    "PendingFileSerializer",
    1,
    to_fields=lambda f: [f.bucket, f.task, f.counter, f.rows, f.size],
    from_fields=lambda v: PendingFile(str(v[0]), str(v[1]), int(v[2]), int(v[3]), int(v[4])),
)
WRITER_STATE_SERIALIZER: MsgpackRecordSerializer[WriterState] = MsgpackRecordSerializer(
    "BucketingWriterStateSerializer",
    1,
    to_fields=lambda s: [
        s.task, s.next_counter, [[f.bucket, f.counter, f.valid_length, f.rows] for f in s.in_progress]
    ],
    from_fields=lambda v: WriterState(
        str(v[0]), int(v[1]), tuple(InProgressFile(str(f[0]), int(f[1]), int(f[2]), int(f[3])) for f in v[2])
    ),
)


def writer_of(task: str) -> str | None:
    """The writer id in a task name ``<partition>-<writer>-<token>`` (None for names without one)."""
    parts = task.split("-")
    return parts[1] if len(parts) == 3 else None
