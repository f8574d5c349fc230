"""Table formats: the sink's commits published as Delta Lake or Apache Iceberg table commits, exactly once.

The commit log stays the write-ahead record (:mod:`splitsource.sink._committer`). Publishing a logged commit's
part files into the table is one more step of finishing it, after the renames and before its ``.done`` mark::

    decide   <meta>/log/<seq>.commit            the commit point, as for plain files
    finish   rename pending -> finished, sync the directories
    publish  one table commit adding those files, tagged (log id, seq)      <- this module
    done     <meta>/log/<seq>.done

A crash after the table commit and before ``.done`` is finished again by the next run's recovery, which finds its
tag in the table and makes no second commit. The tag is read from the table's own state, in the same commit as the
files, so it holds whatever the history's retention:

- Delta: the commit's ``txn`` action (application id ``splitsource-<log id>``, version ``seq``), read back with
  ``DeltaTable.transaction_version`` (delta-rs, ``pip install 'splitsource[delta]'``).
- Iceberg: the table property ``splitsource.<log id>.seq`` set in the same transaction as ``add_files``
  (pyiceberg, ``pip install 'splitsource[iceberg]'``). The catalog is pyiceberg's SQL catalog on SQLite in the
  records' place (``<meta>/iceberg.db``) unless ``iceberg_catalog`` names one (``sqlite:///...`` or a REST
  catalog's ``http(s)://`` URI).

The log id is made once per output's records (``<meta>/table.json``): records made again from nothing (the
records' place deleted) get a new id, so their commit numbers, starting over, are never taken for ones the table
already holds. The table's schema is the part files' Arrow schema; every commit's schema must equal it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from splitsource._errors import OptionsError, SinkError
from splitsource._fs import Store
from splitsource._names import TABLE_RECORD
from splitsource.sink._bucketers import decode_values
from splitsource.sink._files import PartNames, PendingFile, join


class CommitView(Protocol):
    """What a table commit reads of the sink's commit record (:class:`splitsource.sink.CommitRecord`)."""

    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def write_id(self) -> str: ...
    @property
    def batch_id(self) -> int: ...
    @property
    def files(self) -> tuple[PendingFile, ...]: ...
    @property
    def rows(self) -> int: ...


class CommitterView(Protocol):
    """What a table format reads of the sink's committer (:class:`splitsource.sink.BucketingGlobalCommitter`,
    which imports this module)."""

    fs: Store
    base: str
    meta: str
    names: PartNames
    table: TableFormat | None
    table_catalog: str
    upsert_keys: tuple[str, ...]

__all__ = ["TABLE_FORMATS", "TABLE_RECORD", "TableCommit", "TableFormat", "publish", "table_format"]

TAG = "splitsource"  # prefix of the tags: Delta's application id, Iceberg's properties


@dataclass(frozen=True)
class TableCommit:
    """One table commit as the table's history shows it: its version (Delta) or snapshot id (Iceberg), and the
    tag it carries (None: not made by this sink)."""

    version: int
    seq: int | None
    log_id: str | None
    rows: int


class TableFormat(ABC):
    """A table format the sink publishes its commits into. Subclasses name their package and extra, the names at
    the top of the output the table keeps its own files under, and four operations on the table."""

    name: ClassVar[str]
    package: ClassVar[str]  # the module imported
    extra: ClassVar[str]  # pip install 'splitsource[<extra>]'
    reserved: ClassVar[tuple[str, ...]]  # top-level names of the output that hold the table's metadata

    def require(self) -> None:
        """Refuse, in one line, a table format whose package is not installed."""
        try:
            __import__(self.package)
        except ImportError:
            raise OptionsError(f"table_format {self.name!r} needs the {self.package} package: "
                               f"pip install 'splitsource[{self.extra}]'") from None

    partitions: ClassVar[bool] = False  # bucket columns become the table's identity partitions
    partition_columns_in_files: ClassVar[bool] = False  # the part files hold them too (else only their paths)
    times_of_day: ClassVar[bool] = True  # it has a type for Arrow's time32/time64

    def check(self, *, file_format: str, bucketer: str, path: str, catalog: str) -> None:
        """Refuse what this format cannot hold, before anything is written."""
        if file_format != "parquet":
            raise OptionsError(f"table_format {self.name!r} holds Parquet part files: format {file_format!r} "
                               "cannot go into a table (drop the format option, or the table format)")
        allowed = ("none", "columns") if self.partitions else ("none",)
        if bucketer not in allowed:
            what = ("the table is partitioned by its bucket columns (bucketer 'columns') or not at all (bucketer "
                    "'none')" if self.partitions else "the table is written unpartitioned (bucketer 'none')")
            raise OptionsError(f"table_format {self.name!r}: bucketer {bucketer!r} is refused; {what}")

    def check_schema(self, schema: pa.Schema, partitions: Sequence[str]) -> None:
        """Refuse, before anything is written, what the table cannot hold: timestamps in another unit than
        microseconds (Delta's and Iceberg's), times of day where it has no such type (Delta), partition columns
        whose values it cannot hold as text."""
        for field in schema:
            if not self.times_of_day and _has_type(field.type, pa.types.is_time):
                raise OptionsError(f"column {field.name!r} holds times of day ({field.type}), which a {self.name} "
                                   "table has no type for: have the connector read it as text, or copy into an Iceberg "
                                   "table or files")
            unit = _timestamp_unit(field.type)
            if unit not in (None, "us"):
                raise OptionsError(f"column {field.name!r} holds timestamps in {unit} ({field.type}); a {self.name} "
                                   "table holds microseconds: read them as microseconds (a Cassandra source: drop "
                                   "-o timestamp_unit=ms), or copy them as text (--format jsonl or csv)")
        for name in partitions:
            t = schema.field(name).type
            if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                    or pa.types.is_boolean(t) or pa.types.is_date32(t)):
                raise OptionsError(f"option 'bucket_columns': column {name!r} ({t}) cannot partition a {self.name} "
                                   "table; partition by integer, text, boolean or date columns")

    # a partition value of a date column is a date of years 1 to 9999: Delta's protocol writes it as yyyy-MM-dd
    # text (delta-rs fails on '10183-09-21'), pyiceberg reads it from the file's bounds as a Python date
    _DATES = (-719_162, 2_932_896)  # days from 1970-01-01 to 0001-01-01 and to 9999-12-31

    def check_partition_values(self, batch: pa.RecordBatch, partitions: Sequence[str]) -> None:
        """Refuse, in the task that writes them, partition values the table cannot hold (before any file of them
        becomes pending, so that no commit is logged that the table could not publish): dates past year 9999
        (Cassandra's go on for millions of years)."""
        import pyarrow.compute as pc

        for name in partitions:
            column = batch.column(name)
            if not pa.types.is_date32(column.type) or column.null_count == len(column):
                continue
            low, high = (v.as_py() for v in pc.min_max(column.cast(pa.int32())).values())
            lo, hi = self._DATES
            if low < lo or high > hi:
                days = low if low < lo else high
                raise SinkError(f"column {name!r}: the date {days} days from 1970-01-01 cannot partition a "
                                f"{self.name} table (its partition values are dates of years 1 to 9999); "
                                "partition by another column")

    @abstractmethod
    def open(self, committer: CommitterView) -> Any:
        """The table as its Python library opens it (None: no table yet)."""

    @abstractmethod
    def published(self, committer: CommitterView, log_id: str) -> int:
        """The highest commit number of log ``log_id`` the table holds (-1: none, or no table yet)."""

    @abstractmethod
    def publish(self, committer: CommitterView, log_id: str, record: CommitView,
                schema: pa.Schema | None, deletes: pa.Table | None = None) -> None:
        """Make one table commit adding ``record``'s finished files (an overwrite replaces the table's rows),
        tagged ``(log_id, record.seq)``. ``schema``: the files' schema (None: the record has no file).
        ``deletes``: keys (``committer.upsert_keys``) whose rows the commit removes too, none of them a key of the
        record's rows."""

    @abstractmethod
    def data_files(self, committer: CommitterView) -> list[str]:
        """The files of the table's current version, relative to the output (empty: no table yet)."""

    @abstractmethod
    def read_columns(self, committer: CommitterView, columns: Sequence[str]) -> pa.Table | None:
        """``columns`` of every row of the table's current version (None: no table yet)."""

    @abstractmethod
    def history(self, committer: CommitterView) -> list[TableCommit]:
        """Every commit of the table, oldest first."""


@dataclass(frozen=True)
class Location:
    """Where a table is, as the table libraries name it: a local path or an ``s3://`` URI, with the settings
    that reach the store (the output's: endpoint, region, keys, from its URI or the standard AWS variables)."""

    uri: str
    s3: dict[str, str]

    def child(self, path: str) -> str:
        """The URI of ``path``, a path of the output's store."""
        return f"s3://{path}" if self.s3 else f"file://{os.path.abspath(path)}"

    def relative(self, uri: str, base: str) -> str:
        """``uri`` (as a table lists its files) relative to the output ``base``."""
        for prefix in ("s3://", "s3a://", "file://"):
            uri = uri.removeprefix(prefix)
        return _relative(uri, base if self.s3 else os.path.abspath(base))


def location(committer: CommitterView) -> Location:
    if committer.fs.local:
        return Location(os.path.abspath(committer.base), {})
    if committer.fs.fs.type_name != "s3":
        raise SinkError(f"table formats write to a local or mounted file system or to S3; {committer.base} is on "
                        f"{committer.fs.fs.type_name}")
    from splitsource._s3 import settings_of

    found, env = settings_of(committer.fs.fs), os.environ
    endpoint = found.get("endpoint_override") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or ""
    if endpoint and "://" not in endpoint:
        endpoint = f"{found.get('scheme') or 'https'}://{endpoint}"
    s3 = {"endpoint": endpoint, "region": found.get("region") or env.get("AWS_REGION") or
          env.get("AWS_DEFAULT_REGION") or "us-east-1",
          "access_key": found.get("access_key") or env.get("AWS_ACCESS_KEY_ID") or "",
          "secret_key": found.get("secret_key") or env.get("AWS_SECRET_ACCESS_KEY") or "",
          "session_token": found.get("session_token") or env.get("AWS_SESSION_TOKEN") or ""}
    return Location(f"s3://{committer.base}", {k: v for k, v in s3.items() if v})


PARTITIONS_KEY = b"splitsource.partition_fields"  # in a table's part files: the bucket columns' Arrow fields


def partition_metadata(fields: Sequence[pa.Field]) -> dict[bytes, bytes]:
    """The part files' schema metadata that carries the bucket columns' fields (which the files leave out): their
    Arrow schema in base64 (Parquet's key-value metadata is text: Polars refuses a file whose value is not UTF-8)."""
    return {PARTITIONS_KEY: base64.b64encode(pa.schema(fields).serialize().to_pybytes())} if fields else {}


def _partition_schema(carried: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(carried)))


def _file_schema(committer: CommitterView, record: CommitView) -> pa.Schema | None:
    """The table's schema as the record's files carry it: their columns, then the partition columns."""
    if not record.files:
        return None
    with committer.fs.open_input(record.files[0].finished_path(committer.base, committer.names)) as stream:
        schema = pq.read_schema(stream)
    carried = (schema.metadata or {}).get(PARTITIONS_KEY)
    fields = list(schema.remove_metadata())
    if carried:
        partitions = _partition_schema(carried)
        fields += [f.with_metadata(None) for f in partitions if f.name not in schema.names]
        return pa.schema(fields, metadata={PARTITIONS_KEY: carried})
    return pa.schema(fields)


def partition_columns(schema: pa.Schema | None) -> list[str]:
    carried = (schema.metadata or {}).get(PARTITIONS_KEY) if schema is not None else None
    return list(_partition_schema(carried).names) if carried else []


def _tags(record: CommitView, log_id: str) -> dict[str, str]:
    return {f"{TAG}.log": log_id, f"{TAG}.seq": str(record.seq), f"{TAG}.write-id": record.write_id,
            f"{TAG}.batch-id": str(record.batch_id), f"{TAG}.rows": str(record.rows)}


class DeltaFormat(TableFormat):
    """Delta Lake through delta-rs: the part files become ``add`` actions of one commit with a ``txn`` action."""

    name = "delta"
    package = "deltalake"
    extra = "delta"
    reserved = ("_delta_log",)
    partitions = True
    times_of_day = False  # Delta's types have no time of day

    @staticmethod
    def _app(log_id: str) -> str:
        return f"{TAG}-{log_id}"

    def open(self, committer: CommitterView) -> Any:
        return self._table(committer)

    @staticmethod
    def storage_options(where: Location) -> dict[str, str] | None:
        """delta-rs's settings for the store; on S3, commits are created with conditional puts (If-None-Match),
        which S3 and its compatibles honour, so that two writers never both make one version."""
        if not where.s3:
            return None
        options = {"AWS_REGION": where.s3["region"], "aws_conditional_put": "etag"}
        for key, name in (("endpoint", "AWS_ENDPOINT_URL"), ("access_key", "AWS_ACCESS_KEY_ID"),
                          ("secret_key", "AWS_SECRET_ACCESS_KEY"), ("session_token", "AWS_SESSION_TOKEN")):
            if key in where.s3:
                options[name] = where.s3[key]
        if where.s3.get("endpoint", "").startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        return options

    def _table(self, committer: CommitterView) -> Any:
        from deltalake import DeltaTable

        where = location(committer)
        options = self.storage_options(where)
        if not DeltaTable.is_deltatable(where.uri, storage_options=options):
            return None
        return DeltaTable(where.uri, storage_options=options)

    def published(self, committer: CommitterView, log_id: str) -> int:
        table = self._table(committer)
        if table is None:
            return -1
        version = table.transaction_version(self._app(log_id))
        return -1 if version is None else int(version)

    def publish(self, committer: CommitterView, log_id: str, record: CommitView,
                schema: pa.Schema | None, deletes: pa.Table | None = None) -> None:
        from deltalake import CommitProperties, Transaction
        from deltalake.schema import Schema as DeltaSchema
        from deltalake.transaction import AddAction, create_table_with_add_actions

        now = int(time.time() * 1000)
        partitions = partition_columns(schema)
        # the path as the store names it: delta-rs percent-encodes it into the log itself
        actions = [AddAction(path=_relative(f.finished_path(committer.base, committer.names), committer.base),
                             size=f.size, partition_values=decode_values(f.bucket, partitions),
                             modification_time=now, data_change=True, stats=json.dumps({"numRecords": f.rows}))
                   for f in record.files]
        properties = CommitProperties(custom_metadata=_tags(record, log_id),
                                      app_transactions=[Transaction(self._app(log_id), record.seq)])
        mode = "overwrite" if record.kind == "overwrite" else "append"
        table = self._table(committer)
        if table is None:
            if schema is None:
                return  # nothing to add to a table not made yet: it is made by the first commit with rows
            where = location(committer)
            create_table_with_add_actions(where.uri, DeltaSchema.from_arrow(schema.remove_metadata()), actions,
                                          mode="error", partition_by=partitions or None,
                                          storage_options=self.storage_options(where),
                                          commit_properties=properties)
            return
        table_schema = table.schema().to_arrow()
        if committer.upsert_keys and (schema is not None or deletes is not None):
            # an incremental run's: its rows replace their keys', its deletes remove theirs (a row each, marked)
            if schema is not None:
                _check_schema(self.name, committer.base, pa.schema(table_schema), schema)
            on = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in committer.upsert_keys)
            rows = _rows(committer, record) if record.files else None
            marked, mark = _marked_deletes(rows, deletes, pa.schema(table_schema)), f"s.{_quoted(DELETE_MARK)}"
            table.merge(marked, on, source_alias="s", target_alias="t", commit_properties=properties) \
                .when_matched_delete(predicate=mark) \
                .when_matched_update_all(predicate=f"NOT {mark}", except_cols=[DELETE_MARK]) \
                .when_not_matched_insert_all(predicate=f"NOT {mark}", except_cols=[DELETE_MARK]).execute()
            return
        if schema is not None:
            _check_schema(self.name, committer.base, pa.schema(table_schema), schema)
            if partitions != list(table.metadata().partition_columns):
                raise SinkError(f"the delta table {committer.base} is partitioned by "
                                f"{list(table.metadata().partition_columns)}; this write by {partitions}: write to "
                                "another path")
        table.create_write_transaction(actions, mode, table_schema, partition_by=partitions or None,
                                       commit_properties=properties)

    def read_columns(self, committer: CommitterView, columns: Sequence[str]) -> pa.Table | None:
        table = self._table(committer)
        return None if table is None else table.to_pyarrow_table(columns=list(columns))

    def data_files(self, committer: CommitterView) -> list[str]:
        table = self._table(committer)
        if table is None:
            return []
        where = location(committer)
        return sorted(where.relative(uri, committer.base) for uri in table.file_uris())

    def history(self, committer: CommitterView) -> list[TableCommit]:
        table = self._table(committer)
        if table is None:
            return []
        out = []
        for entry in sorted(table.history(), key=lambda e: int(e["version"])):
            seq = entry.get(f"{TAG}.seq")
            out.append(TableCommit(int(entry["version"]), int(seq) if seq is not None else None,
                                   entry.get(f"{TAG}.log"), int(entry.get(f"{TAG}.rows", 0))))
        return out


class IcebergFormat(TableFormat):
    """Apache Iceberg through pyiceberg: the part files are added (``add_files``, no rewrite) in one transaction
    that also sets the tag property."""

    name = "iceberg"
    package = "pyiceberg"
    extra = "iceberg"
    reserved = ("metadata",)
    partitions = True
    partition_columns_in_files = True  # add_files reads a file's partition from its columns' bounds
    NAMESPACE = "splitsource"

    def check(self, *, file_format: str, bucketer: str, path: str, catalog: str) -> None:
        super().check(file_format=file_format, bucketer=bucketer, path=path, catalog=catalog)
        if catalog and not re.match(r"(sqlite:///|https?://)", catalog):
            raise OptionsError(f"option 'iceberg_catalog': {catalog!r} is neither sqlite:///<file> nor a REST "
                               "catalog's http(s):// URI")
        if not catalog and re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", path) and not path.startswith("file://"):
            raise OptionsError("table_format 'iceberg' on an object store needs option 'iceberg_catalog': the "
                               "default catalog is a SQLite file beside the output, which an object store cannot "
                               "hold (name a local sqlite:///<file> or a REST catalog's http(s):// URI)")

    @staticmethod
    def _io(where: Location) -> dict[str, str]:
        """pyiceberg's FileIO settings for the store (its pyarrow S3 client)."""
        names = {"endpoint": "s3.endpoint", "region": "s3.region", "access_key": "s3.access-key-id",
                 "secret_key": "s3.secret-access-key", "session_token": "s3.session-token"}
        return {names[k]: v for k, v in where.s3.items()}

    def catalog(self, committer: CommitterView) -> Any:
        where = location(committer)
        uri = committer.table_catalog or f"sqlite:///{os.path.abspath(join(committer.meta, 'iceberg.db'))}"
        if uri.startswith("sqlite:///"):
            from pyiceberg.catalog.sql import SqlCatalog

            return SqlCatalog(TAG, uri=uri, warehouse=where.child(committer.meta), **self._io(where))
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(TAG, uri=uri, **self._io(where))

    def identifier(self, committer: CommitterView) -> tuple[str, str]:
        name = re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(committer.base.rstrip("/"))) or "output"
        return (self.NAMESPACE, name)

    def open(self, committer: CommitterView) -> Any:
        return self.table(committer)

    def table(self, committer: CommitterView) -> Any:
        """The output's table as pyiceberg loads it (None: no table yet): ``polars.scan_iceberg(table)``."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        if committer.table_catalog == "" and not committer.fs.exists(join(committer.meta, "iceberg.db")):
            return None
        try:
            return self.catalog(committer).load_table(self.identifier(committer))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    @staticmethod
    def _key(log_id: str) -> str:
        return f"{TAG}.{log_id}.seq"

    def published(self, committer: CommitterView, log_id: str) -> int:
        table = self.table(committer)
        return -1 if table is None else int(table.properties.get(self._key(log_id), -1))

    def publish(self, committer: CommitterView, log_id: str, record: CommitView,
                schema: pa.Schema | None, deletes: pa.Table | None = None) -> None:
        table = self.table(committer)
        partitions = partition_columns(schema)
        if table is None:
            if schema is None:
                return
            catalog = self.catalog(committer)
            catalog.create_namespace_if_not_exists(self.NAMESPACE)
            table = catalog.create_table(self.identifier(committer), schema=schema.remove_metadata(),
                                         location=location(committer).child(committer.base))
        elif schema is not None:
            _check_schema(self.name, committer.base, table.schema().as_arrow(), schema)
        if schema is not None:
            table = self._partition(committer, table, partitions)
        where = location(committer)
        paths = [where.child(f.finished_path(committer.base, committer.names)) for f in record.files]
        with table.transaction() as tx:
            # bounds: none for dates and timestamps (see _temporal_metrics), whole values for the partition
            # columns (add_files reads a file's partition as its column's min, equal to its max)
            wanted = {key: "counts" for key in _temporal_metrics(table.schema())}
            wanted.update({f"{METRICS}{name}": "full" for name in partitions})
            changed = {k: v for k, v in wanted.items() if table.properties.get(k) != v}
            if changed:
                tx.set_properties(changed)
            if record.kind == "overwrite":
                from pyiceberg.expressions import AlwaysTrue

                tx.delete(AlwaysTrue())
            elif committer.upsert_keys and (paths or deletes is not None):
                # the rows' older versions, and the deleted keys' rows, go in the commit that adds the new
                keys = [_rows(committer, record, committer.upsert_keys)] if paths else []
                tx.delete(_key_filter(committer.upsert_keys, keys + ([deletes] if deletes is not None else [])),
                          snapshot_properties=_tags(record, log_id))
            if paths:
                tx.add_files(paths, snapshot_properties=_tags(record, log_id), check_duplicate_files=False)
            tx.set_properties({self._key(log_id): str(record.seq)})

    def _partition(self, committer: CommitterView, table: Any, partitions: Sequence[str]) -> Any:
        """The table partitioned by identity on ``partitions``: a table made just now (no snapshot yet) gets its
        spec; a table partitioned otherwise is refused."""
        spec = table.spec()
        found = [table.schema().find_column_name(f.source_id) for f in spec.fields]
        if found == list(partitions):
            return table
        if found or table.current_snapshot() is not None:
            raise SinkError(f"the iceberg table {committer.base} is partitioned by {found or 'nothing'}; this write "
                            f"by {list(partitions) or 'nothing'}: write to another path")
        with table.update_spec() as update:
            for name in partitions:
                update.add_identity(name)
        return table

    def read_columns(self, committer: CommitterView, columns: Sequence[str]) -> pa.Table | None:
        table = self.table(committer)
        if table is None or table.current_snapshot() is None:
            return None
        return table.scan(selected_fields=tuple(columns)).to_arrow()

    def data_files(self, committer: CommitterView) -> list[str]:
        table = self.table(committer)
        if table is None or table.current_snapshot() is None:
            return []
        where = location(committer)
        return sorted(where.relative(task.file.file_path, committer.base) for task in table.scan().plan_files())

    def history(self, committer: CommitterView) -> list[TableCommit]:
        table = self.table(committer)
        if table is None:
            return []
        out = []
        for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms):
            summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
            seq = summary.get(f"{TAG}.seq")
            out.append(TableCommit(snapshot.snapshot_id, int(seq) if seq is not None else None,
                                   summary.get(f"{TAG}.log"), int(summary.get(f"{TAG}.rows", 0))))
        return out


def _rows(committer: CommitterView, record: CommitView, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of the record's files (``columns`` of them): an upsert's, to apply by key."""
    tables = []
    for f in record.files:
        with committer.fs.open_input(f.finished_path(committer.base, committer.names)) as stream:
            tables.append(pq.read_table(stream, columns=list(columns) if columns else None).replace_schema_metadata())
    return pa.concat_tables(tables)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _key_filter(keys: Sequence[str], tables: Sequence[pa.Table]) -> Any:
    """Iceberg's filter of the rows whose key is one of the rows' of ``tables``."""
    import pyiceberg.expressions

    e: Any = pyiceberg.expressions  # its classes are pydantic models, whose signatures mypy misreads
    if len(keys) == 1:
        return e.In(keys[0], {v for rows in tables for v in rows.column(keys[0]).to_pylist()})
    matches = [e.And(*(e.EqualTo(k, v) for k, v in zip(keys, values, strict=True)))
               for rows in tables for values in zip(*(rows.column(k).to_pylist() for k in keys), strict=True)]
    return matches[0] if len(matches) == 1 else e.Or(*matches)


DELETE_MARK = "__splitsource_delete"  # a Delta merge's source column: the row stands for its key's delete


def _marked_deletes(rows: pa.Table | None, deletes: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """A Delta merge's source: ``rows`` (upserts) and a row for each key of ``deletes`` (its other columns null),
    in ``rows``' columns (else ``schema``'s), with :data:`DELETE_MARK` saying which is which."""
    columns = rows.schema if rows is not None else schema
    marked = pa.schema([*(f.with_nullable(True) for f in columns), pa.field(DELETE_MARK, pa.bool_())])
    parts = []
    if rows is not None:
        parts.append(rows.append_column(DELETE_MARK, pa.array([False] * rows.num_rows, pa.bool_())).cast(marked))
    if deletes is not None:
        n = deletes.num_rows
        parts.append(pa.Table.from_arrays(
            [deletes.column(f.name).cast(f.type) if f.name in deletes.column_names else pa.nulls(n, f.type)
             for f in columns] + [pa.array([True] * n, pa.bool_())], schema=marked))
    return pa.concat_tables(parts)


def _inner_types(t: pa.DataType) -> list[pa.DataType]:
    """The types a list, map or struct type holds (none for any other type)."""
    return ([t.key_type, t.item_type] if pa.types.is_map(t) else [t.value_type] if pa.types.is_list(t)
            or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) else [f.type for f in t]
            if pa.types.is_struct(t) else [])


def _has_type(t: pa.DataType, test: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``t``, or a type it holds at any depth, passes ``test``."""
    return test(t) or any(_has_type(inner, test) for inner in _inner_types(t))


def _timestamp_unit(t: pa.DataType) -> str | None:
    """The unit of the timestamps ``t`` holds, at any depth (a unit other than microseconds, if there are two)."""
    if pa.types.is_timestamp(t):
        return str(t.unit)
    units = {u for u in map(_timestamp_unit, _inner_types(t)) if u is not None}
    return None if not units else sorted(units - {"us"} or units)[0]


METRICS = "write.metadata.metrics.column."  # Iceberg's per-column metrics mode property


def _temporal_metrics(schema: Any) -> list[str]:
    """The metrics properties that keep only counts for every date and timestamp column (nested ones too):
    pyiceberg reads a file's min and max as Python dates, which end at year 9999, where Cassandra's dates and
    timestamps go on for millions of years; those columns get no bounds (readers scan them unpruned)."""
    from pyiceberg.types import DateType, TimestampType, TimestamptzType

    out = []
    for field_id in range(1, schema.highest_field_id + 1):
        try:
            field = schema.find_field(field_id)
        except ValueError:
            continue
        if isinstance(field.field_type, DateType | TimestampType | TimestamptzType):
            out.append(f"{METRICS}{schema.find_column_name(field_id)}")
    return out


def _relative(path: str, base: str) -> str:
    return path[len(base.rstrip("/")) + 1:]


def _check_schema(name: str, base: str, table: pa.Schema, files: pa.Schema) -> None:
    wanted = [(f.name, f.type) for f in table]
    got = [(f.name, f.type) for f in files]
    if [n for n, _ in wanted] != [n for n, _ in got]:
        raise SinkError(f"the {name} table {base} has columns {', '.join(n for n, _ in wanted)}; this write has "
                        f"{', '.join(n for n, _ in got)}: a table keeps one schema; write to another path")


TABLE_FORMATS: dict[str, TableFormat] = {f.name: f for f in (DeltaFormat(), IcebergFormat())}


def table_format(name: str) -> TableFormat | None:
    """The table format called ``name`` ('' or 'none': plain files)."""
    if name in ("", "none"):
        return None
    try:
        return TABLE_FORMATS[name]
    except KeyError:
        raise OptionsError(f"option 'table_format': {name!r} is not one of none, "
                           f"{', '.join(TABLE_FORMATS)}") from None


def log_id(committer: CommitterView, fmt: TableFormat) -> str:
    """The id this output's records tag table commits with, made once (``<meta>/table.json``); records of another
    table format are refused."""
    path = join(committer.meta, TABLE_RECORD)

    def corrupt() -> SinkError:
        return SinkError(f"{path} is corrupt; the output's commit history is damaged: move the output aside rather "
                         "than writing into it")

    found = committer.fs.read_record(path, corrupt)
    if found is None:
        committer.fs.make_dirs(committer.meta)
        body = json.dumps({"format": fmt.name, "log": uuid.uuid4().hex}).encode()
        try:
            committer.fs.write(path, body, exclusive=True)  # durable: a lost id would let a commit be made twice
            found = json.loads(body)
        except FileExistsError:
            found = committer.fs.read_record(path, corrupt)
    if found is None or found.get("format") != fmt.name:
        raise SinkError(f"{committer.base} is a {found.get('format') if found else '?'} table's "
                        f"output; this write asks for table_format {fmt.name!r}: write to another path")
    return str(found["log"])


def only_ours(committer: CommitterView) -> bool:
    """Whether every commit in the output's table carries this output's tag: no other writer changed the table."""
    assert committer.table is not None
    found = committer.fs.read_record(join(committer.meta, TABLE_RECORD), lambda: SinkError("unreadable"))
    return found is not None and all(c.log_id == found.get("log") for c in committer.table.history(committer))


@dataclass(frozen=True)
class _Together:
    """Commit records published as one table commit: the newest's number and tags, every record's files."""

    seq: int
    kind: str
    write_id: str
    batch_id: int
    files: tuple[PendingFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def publish(committer: CommitterView, records: Sequence[CommitView], deletes: pa.Table | None = None) -> bool:
    """Publish ``records`` (oldest first: one, or an incremental copy's run) into the output's table as one commit,
    tagged with the newest's number, leaving out those the table holds already (its tag says up to which number);
    ``deletes``: an incremental run's deleted keys, removed in the same commit (those the table still holds: a
    commit made before a kill removed them already). Returns whether a commit was made."""
    fmt = committer.table
    assert fmt is not None
    log = log_id(committer, fmt)
    held = fmt.published(committer, log)
    todo = [r for r in records if r.seq > held]
    # the run's deletes: every one, with the run's commit; after it (a kill before the run was marked finished),
    # those the table still holds (none: no commit)
    gone = None if deletes is None or not deletes.num_rows else deletes if todo else _held_keys(committer, deletes)
    if not todo and gone is None:
        return False
    last = todo[-1] if todo else None
    record = _Together(held, "stream", records[-1].write_id if records else "", -1, ()) if last is None else \
        last if len(todo) == 1 else _Together(last.seq, last.kind, last.write_id, last.batch_id,
                                              tuple(f for r in todo for f in r.files))
    if not record.files and record.kind != "overwrite" and gone is None:
        return False  # nothing to add (an incremental run with nothing new): no table commit
    fmt.publish(committer, log, record, _file_schema(committer, record), gone)
    return True


def _held_keys(committer: CommitterView, keys: pa.Table) -> pa.Table | None:
    """The rows of ``keys`` that the output's table holds (None: none)."""
    assert committer.table is not None
    names = keys.column_names
    held = committer.table.read_columns(committer, names)
    if held is None or not held.num_rows:
        return None
    held = pa.Table.from_arrays([held.column(n).cast(keys.schema.field(n).type) for n in names], schema=keys.schema)
    found = keys.join(held, names, join_type="left semi")
    return found if found.num_rows else None


def reserved_names(formats: Sequence[TableFormat] = tuple(TABLE_FORMATS.values())) -> frozenset[str]:
    return frozenset(n for f in formats for n in f.reserved)

