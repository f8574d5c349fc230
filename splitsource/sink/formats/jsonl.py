"""JSON lines part files: a row format, one strict JSON object per line (value text: ``splitsource.sink._text``);
read back as strict JSON split on ``\\n`` only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from splitsource._errors import SinkError
from splitsource._fs import Store
from splitsource.sink._text import json_fragments
from splitsource.sink.formats._base import FileFormat, PartFileWriter
from splitsource.sink.formats._values import from_json

__all__ = ["JsonLinesFormat", "encode_json_lines"]


def encode_json_lines(batch: pa.RecordBatch) -> bytes:
    """Rows as strict JSON objects, one per line ended by ``\\n`` (value text: ``splitsource.sink._text``)."""
    names = [json.dumps(name, ensure_ascii=False) + ":" for name in batch.schema.names]
    columns = [json_fragments(column) for column in batch.columns]
    rows = zip(*columns, strict=True)
    lines = ["{" + ",".join(n + v for n, v in zip(names, row, strict=True)) + "}\n" for row in rows]
    if not columns:
        lines = ["{}\n"] * batch.num_rows
    return "".join(lines).encode("utf-8")


class _JsonLinesWriter(PartFileWriter):
    def write(self, batch: pa.RecordBatch) -> None:
        self._stream.write(encode_json_lines(batch))


def _strict(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (strict JSON has no NaN or infinity)")


class JsonLinesFormat(FileFormat):
    name = "jsonl"
    suffix = ".jsonl"
    bulk = False

    def open(self, stream: Any, schema: pa.Schema, *, compression: str, header: bool, fresh: bool
             ) -> PartFileWriter:
        return _JsonLinesWriter(stream)

    def rows(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[list[Any]]:
        # split on \n only: U+2028 and the other characters str.splitlines() breaks at are legal inside a JSON string
        for number, line in enumerate(fs.read_bytes(path).split(b"\n"), 1):
            if not line:
                continue
            try:
                obj = json.loads(line.decode("utf-8"), parse_constant=_strict)
            except ValueError as exc:
                raise SinkError(f"{path}: line {number} is not valid JSON: {exc}") from None
            yield [from_json(obj.get(f.name), f.type) for f in fields]
