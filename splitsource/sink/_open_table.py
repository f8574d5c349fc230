"""Opening the table a copy or a ``table_format`` write made, as its own Python library does."""

from __future__ import annotations

from typing import Any

from splitsource._errors import SinkError
from splitsource._names import TABLE_RECORD
from splitsource.sink._committer import BucketingGlobalCommitter, metadata_location
from splitsource.sink._files import PartNames, join
from splitsource.sink._tables import table_format

__all__ = ["open_table"]


def open_table(path: str, *, metadata: str = "", iceberg_catalog: str = "") -> Any:
    """The table a copy or a ``table_format`` write made at ``path``, as its Python library opens it: a
    ``deltalake.DeltaTable`` or a ``pyiceberg`` table (for ``polars.read_delta(path)`` or
    ``polars.scan_iceberg(open_table(path))``). ``metadata``: the sink's records' place, if the write named one."""
    fs, base, meta = metadata_location(path, metadata)
    committer = BucketingGlobalCommitter(fs, base, PartNames(), meta=meta, table_catalog=iceberg_catalog)
    record = join(meta, TABLE_RECORD)
    found = fs.read_record(record, lambda: SinkError(f"{record} is corrupt: the table's records are damaged"))
    if found is None:
        raise SinkError(f"{path} has no table made by splitsource ({record} is missing)")
    fmt = table_format(str(found.get("format", "")))
    if fmt is None:
        raise SinkError(f"{join(meta, TABLE_RECORD)} names no table format")
    fmt.require()
    committer.table = fmt
    table = fmt.open(committer)
    if table is None:
        raise SinkError(f"{path}: the {fmt.name} table holds no commit yet")
    return table
