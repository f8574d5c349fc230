"""Files where the framework keeps state (checkpoints, plans, the sink's logs): local paths or pyarrow URIs."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs

from splitsource._errors import OptionsError

__all__ = ["read_text", "resolve_filesystem", "write_atomically"]


def resolve_filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The file system and the path inside it: URIs (``s3://``, ``hdfs://``, ``file://``) go to pyarrow as they
    are; anything else is a local path, made absolute."""
    if "://" in path:
        try:
            fs, inner = pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise OptionsError(f"option 'path': cannot open {path!r}: {exc}") from None
        return fs, inner.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(path)


def read_text(fs: pafs.FileSystem, path: str) -> str:
    with fs.open_input_stream(path) as stream:
        return bytes(stream.read()).decode("utf-8")


def write_atomically(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path`` and move it into place."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with fs.open_output_stream(tmp) as stream:
        stream.write(data)
    fs.move(tmp, path)
