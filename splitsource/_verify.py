"""``splitsource verify``: does the committed output hold exactly the source's rows?

Both sides are reduced to a row count and an order-independent checksum: the sum, modulo 2**128, of a 128-bit
BLAKE2b digest of each row's canonical text. The canonical text is what the sink writes for that row: its JSON
line (Parquet and JSON lines outputs) or its parsed CSV fields, plus the bucket-column values read from the path.
A lost row, a duplicated row or a changed value changes the checksum.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from splitsource._api import Source, _FixedContext
from splitsource._errors import SinkError
from splitsource._source_reader import SourceReader
from splitsource._spark_reader import conform_batch, spark_arrow_schema
from splitsource.sink._bucketers import EMPTY_SEGMENT, NULL_SEGMENT
from splitsource.sink._committer import META_DIR
from splitsource.sink._formats import csv_ready, encode_json_lines, resolve_filesystem

__all__ = ["Digest", "VerifyResult", "digest_output", "digest_source", "verify"]

_MOD = 1 << 128


@dataclass
class Digest:
    """Row count and order-independent checksum of a multiset of rows."""

    rows: int = 0
    checksum: int = 0

    def add(self, row: bytes) -> None:
        self.rows += 1
        self.checksum = (self.checksum + int.from_bytes(hashlib.blake2b(row, digest_size=16).digest(), "big")) % _MOD

    @property
    def hex(self) -> str:
        return f"{self.checksum:032x}"


@dataclass(frozen=True)
class VerifyResult:
    source: Digest
    output: Digest

    @property
    def match(self) -> bool:
        return self.source.rows == self.output.rows and self.source.checksum == self.output.checksum

    def text(self) -> str:
        verdict = "MATCH" if self.match else "MISMATCH"
        lines = [f"{verdict}: source {self.source.rows:,} rows (checksum {self.source.hex}), output "
                 f"{self.output.rows:,} rows (checksum {self.output.hex})"]
        if not self.match and self.source.rows != self.output.rows:
            lines.append(f"the output has {self.output.rows - self.source.rows:+,} rows against the source")
        elif not self.match:
            lines.append("same row count, different rows: values differ, or rows are duplicated and others missing")
        return "\n".join(lines)


def _csv_rows(batch: pa.RecordBatch) -> list[bytes]:
    buffer = io.BytesIO()
    pa_csv.write_csv(csv_ready(batch), buffer, write_options=pa_csv.WriteOptions(include_header=False))
    return _parse_csv(buffer.getvalue().decode("utf-8"), header=False)


def _parse_csv(text: str, header: bool) -> list[bytes]:
    rows = list(csv.reader(io.StringIO(text)))
    return [json.dumps(r).encode() for r in (rows[1:] if header else rows)]


def _canonical(batch: pa.RecordBatch, fmt: str) -> list[bytes]:
    if fmt == "csv":
        return _csv_rows(batch)
    return encode_json_lines(batch).splitlines()


def digest_source(source: Source[Any, Any, Any, Any], layout: dict[str, Any]) -> Digest:
    """Read the whole source (one reader, in this process) and digest it as the sink would have written it."""
    digest = Digest()
    bucket_columns = _bucket_columns(layout)
    expected = spark_arrow_schema(source.schema())[1]
    enumerator = source.create_enumerator(_FixedContext(1))
    enumerator.start()
    reader = SourceReader(source, enumerator.next_split, name="verify")
    try:
        for raw in reader.read():
            batch = conform_batch(raw, expected)
            keys = [pc.cast(batch.column(c), pa.string()).to_pylist() for c in bucket_columns]
            data = batch.select([n for n in batch.schema.names if n not in bucket_columns])
            for i, row in enumerate(_canonical(data, layout["format"])):
                digest.add(row + _bucket_suffix([k[i] for k in keys]))
    finally:
        reader.close()
        enumerator.close()
    return digest


def _bucket_columns(layout: dict[str, Any]) -> list[str]:
    if layout.get("bucketer") != "columns":
        return []
    return [c.strip() for c in str(layout.get("bucket_columns", "")).split(",") if c.strip()]


def _bucket_suffix(values: list[str | None]) -> bytes:
    return b"" if not values else b"\x00" + json.dumps(values).encode()


def _path_values(relative_dir: str, columns: list[str]) -> list[str | None]:
    found: dict[str, str | None] = {}
    for segment in relative_dir.split("/"):
        name, eq, value = segment.partition("=")
        if not eq:
            continue
        decoded: str | None = unquote(value)
        if value == NULL_SEGMENT:
            decoded = None
        elif value == EMPTY_SEGMENT:
            decoded = ""
        found[unquote(name)] = decoded
    return [found.get(c) for c in columns]


def read_layout(output: str) -> dict[str, Any]:
    fs, base = resolve_filesystem(output)
    path = f"{base}/{META_DIR}/copy.json"
    try:
        with fs.open_input_stream(path) as stream:
            return dict(json.loads(bytes(stream.read()).decode("utf-8")))
    except FileNotFoundError:
        raise SinkError(f"{output} has no {META_DIR}/copy.json: it was not written by splitsource copy") from None
    except ValueError:
        raise SinkError(f"{path} is corrupt") from None


def digest_output(output: str, layout: dict[str, Any]) -> Digest:
    """Digest every finished part file under ``output`` (what a reader of the directory would read)."""
    fs, base = resolve_filesystem(output)
    digest = Digest()
    columns = _bucket_columns(layout)
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    for info in sorted(infos, key=lambda i: i.path):
        relative = info.path[len(base) + 1:]
        if info.type != pafs.FileType.File or any(p.startswith(("_", ".")) for p in relative.split("/")):
            continue
        suffix = _bucket_suffix(_path_values(relative.rpartition("/")[0], columns))
        fmt = layout["format"]
        if fmt == "parquet":
            with fs.open_input_file(info.path) as f:
                rows = [r for b in pq.ParquetFile(f).iter_batches(65536) for r in _canonical(b, fmt)]
        else:
            with fs.open_input_stream(info.path) as stream:
                text = bytes(stream.read()).decode("utf-8")
            if fmt == "csv":
                rows = _parse_csv(text, header=bool(layout.get("csv_header", True)))
            else:
                rows = [line.encode("utf-8") for line in text.splitlines()]
        for row in rows:
            digest.add(row + suffix)
    return digest


def verify(source: Source[Any, Any, Any, Any], output: str) -> VerifyResult:
    layout = read_layout(output)
    return VerifyResult(digest_source(source, layout), digest_output(output, layout))
