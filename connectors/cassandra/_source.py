"""CassandraSource: a whole table, read by token range, page by page, resumable from the driver's paging state.

The source is the glue (FLIP-27's ``Source``): it reads the table's metadata once, and hands each part what it
needs: the enumerator a plan function (``_enumerator``, ``_planner``), the reader the options and its query
(``_reader``), the serializers their versions (``_splits``). Options: ``_options`` (``splitsource options
--connector cassandra`` prints them).

Example::

    (spark.read.format("splitsource").option("connector", "cassandra")
     .option("keyspace", "shop").option("table", "orders").load())
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from connectors.cassandra._cql import (
    _WRITETIME_TYPE,
    _cell_converter,
    _cell_metadata,
    _check_can_read,
    _check_where,
    _cql_literal,
    _prepare_metadata,
    _quote,
)
from connectors.cassandra._enumerator import CassandraEnumerator
from connectors.cassandra._options import CassandraOptions
from connectors.cassandra._planner import _bounds, gather_estimates, plan_ring
from connectors.cassandra._reader import CassandraEmitter, CassandraSplitReader, _Raw
from connectors.cassandra._reference import reference_rows, reference_selector
from connectors.cassandra._session import (
    CassandraConnectionError,
    CassandraTimeoutError,
    CassandraUnavailableError,
    check_tls_options,
    connect,
    shared_session,
    table_metadata,
)
from connectors.cassandra._splits import (
    CASSANDRA_POSITION_SERIALIZER,
    CASSANDRA_SPLIT_SERIALIZER,
    CassandraPosition,
    CassandraSplit,
)
from connectors.cassandra._tokens import PlanEntry, TokenRange
from connectors.cassandra._types import arrow_type, column_converter, kind, select_expression
from serializers import SimpleVersionedSerializer
from splitsource import Changes, EnumeratorState, OptionsError, Predicate, Source, SplitEnumeratorContext

__all__ = ["CassandraSource"]

log = logging.getLogger("splitsource.cassandra")


class CassandraSource(Source[CassandraSplit, CassandraPosition, _Raw, CassandraOptions]):
    """A whole Cassandra table (or a projection of it); see the module docstring for options."""

    name = "cassandra"
    options_class = CassandraOptions

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        if not self.options.host_list:
            raise OptionsError("option 'hosts': give at least one host")
        check_tls_options(self.options)
        self._meta: tuple[list[str], list[str], pa.Schema, list[Any]] | None = None
        self._clustering: list[str] = []
        self._volatile: list[str] = []
        self._kinds: dict[str, str] = {}
        self._cluster_name = ""
        self._ring_bounds: tuple[int, int] | None = None

    def _metadata(self) -> tuple[list[str], list[str], pa.Schema, list[Any]]:
        """(partition key columns in schema order, selectors of the wanted columns, Arrow schema, converters)."""
        if self._meta is None:
            cluster, session, table = table_metadata(self.options)
            self._cluster_name = str(cluster.metadata.cluster_name or "")
            pk = [c.name for c in table.partition_key]
            _check_can_read(session, self.options, pk)
            self._clustering = [c.name for c in table.clustering_key]
            wanted = list(self.options.columns) or list(table.columns)
            unknown = [c for c in wanted if c not in table.columns]
            if unknown:
                raise OptionsError(
                    f"option 'columns': {', '.join(unknown)} not in {self.options.keyspace}.{self.options.table}; "
                    f"columns: {', '.join(table.columns)}"
                )
            meta = _cell_metadata(cluster, table, self.options)
            extra = [f"{fn}({_quote(c)})" for fn, c, _ in meta]
            prepared = _prepare_metadata(session, f"SELECT {', '.join([*(_quote(c) for c in wanted), *extra])} "
                                         f"FROM {_quote(self.options.keyspace)}.{_quote(self.options.table)} "
                                         "LIMIT 1", bool(meta))
            types = [col[3] for col in prepared.result_metadata][:len(wanted)]  # (keyspace, table, name, type)
            selectors = [select_expression(t, _quote(n)) for n, t in zip(wanted, types, strict=True)] + extra
            if self.options.where:
                _check_where(session, self._select(pk, selectors), self.options.where)
            unit = self.options.timestamp_unit
            fields = [pa.field(n, arrow_type(t, unit), nullable=True) for n, t in zip(wanted, types, strict=True)]
            converters = [column_converter(t, n, unit) for n, t in zip(wanted, types, strict=True)]
            for function, _, name in meta:
                cell_type = _WRITETIME_TYPE if function == "WRITETIME" else pa.int32()
                fields.append(pa.field(name, cell_type, nullable=True))
                converters.append(_cell_converter(cell_type))
            schema = pa.schema(fields)
            self._volatile = [name for function, _, name in meta if function == "TTL"]
            self._kinds = {n: kind(t) for n, t in zip(wanted, types, strict=True)}
            self._meta = (pk, selectors, schema, converters)
        return self._meta

    def _select(self, pk: Sequence[str], selectors: Sequence[str], where: str | None = None) -> str:
        token = f"token({', '.join(_quote(c) for c in pk)})"
        where = self.options.where if where is None else where
        where = f" AND {where}" if where else ""
        return (
            f"SELECT {', '.join(selectors)} FROM {_quote(self.options.keyspace)}."
            f"{_quote(self.options.table)} WHERE {token} > ? AND {token} <= ?{where}"
        )

    def select_cql(self) -> str:
        """The query of a split: its token range (two bind markers) and the ``where`` option."""
        pk, selectors, _, _ = self._metadata()
        return self._select(pk, selectors)

    def restrictions(self) -> list[str]:
        """The WHERE clauses that select what this source reads, for a plain scan (verify): one per interval of
        ``token_range`` (with ``where``), or ``where`` alone, or none (the whole table)."""
        if not self.options.token_range:
            return [self.options.where] if self.options.where else []
        pk = self._metadata()[0]
        token = f"token({', '.join(_quote(c) for c in pk)})"
        lo, hi = self._partitioner_bounds()
        where = f" AND {self.options.where}" if self.options.where else ""
        return [f"{token} > {r.start} AND {token} <= {r.end}{where}" for r in self.options.token_intervals(lo, hi)]

    def _partitioner_bounds(self) -> tuple[int, int]:
        return _bounds(shared_session(self.options)[0])

    def schema(self) -> pa.Schema:
        return self._metadata()[2]

    def token_of(self, session: Any, rows: Sequence[Sequence[Any]]) -> str:
        """``token <t>`` of the partition most of ``rows`` (a page as read) are in, asked of the server; a
        description without it when the partition key is not among the columns read or cannot be bound."""
        pk, _, schema, _ = self._metadata()
        names = schema.names
        if not all(c in names for c in pk):
            return "token unknown (the partition key is not among the columns read)"
        indices = [names.index(c) for c in pk]
        row_keys = [[row[i] for i in indices] for row in rows]
        shown = [repr(key) for key in row_keys]  # repr: values of any type hash
        values = row_keys[shown.index(Counter(shown).most_common(1)[0][0])]
        table = f"{_quote(self.options.keyspace)}.{_quote(self.options.table)}"
        keys = ", ".join(_quote(c) for c in pk)
        where = " AND ".join(f"{_quote(c)} = ?" for c in pk)
        try:
            lookup = session.prepare(f"SELECT token({keys}) FROM {table} WHERE {where} LIMIT 1")
            found = session.execute(lookup, values).one()
        except Exception as exc:  # noqa: BLE001 - a report, never a failure of the read
            return f"token unknown ({type(exc).__name__})"
        return f"token {found[0]}" if found else "token unknown (the partition is gone)"

    def plan(self) -> tuple[PlanEntry, ...]:
        """Read the ring and every node's size estimates (all nodes at once, a bounded number in flight), and size
        each range (see :func:`plan_ring`)."""
        o = self.options
        cluster, session, _ = table_metadata(o)
        token_map = cluster.metadata.token_map

        def replicas(end: int) -> tuple[str, ...]:
            return tuple(sorted(str(h.endpoint) for h in token_map.get_replicas(o.keyspace,
                                                                                 token_map.token_class(end))))

        rows = gather_estimates(session, list(cluster.metadata.all_hosts()), o)
        return plan_ring((t.value for t in token_map.ring), replicas, rows, _bounds(cluster), o)

    def create_enumerator(self, context: SplitEnumeratorContext) -> CassandraEnumerator:
        return CassandraEnumerator(self.plan, context)

    def restore_enumerator(
        self, context: SplitEnumeratorContext, state: EnumeratorState[CassandraSplit, CassandraPosition]
    ) -> CassandraEnumerator:
        return CassandraEnumerator(self.plan, context, state.position, state.pending)

    def create_split_reader(self) -> CassandraSplitReader:
        return CassandraSplitReader(self.options, self.select_cql(), self.token_of)

    def create_record_emitter(self) -> CassandraEmitter:
        _, _, schema, converters = self._metadata()
        return CassandraEmitter(schema, converters, self.key_columns())

    def split_serializer(self) -> SimpleVersionedSerializer[CassandraSplit]:
        return CASSANDRA_SPLIT_SERIALIZER

    def position_serializer(self) -> SimpleVersionedSerializer[CassandraPosition]:
        return CASSANDRA_POSITION_SERIALIZER

    def incremental(self) -> Changes:
        """Refused: Cassandra keeps no exact record of what changed since an instant (docs/cassandra.md)."""
        raise OptionsError("connector 'cassandra' cannot copy only what changed (--incremental): a cell's writetime "
                           "is not a change record (hints and repairs deliver old writetimes late, and clocks skew), "
                           "so a run by writetime would lose rows; copy the table whole (docs/cassandra.md)")

    def is_transient(self, error: BaseException) -> bool:
        from cassandra import OperationTimedOut, ReadFailure, ReadTimeout, Unavailable
        from cassandra.cluster import NoHostAvailable
        from cassandra.connection import ConnectionException

        transient = (ReadTimeout, Unavailable, ReadFailure, OperationTimedOut, NoHostAvailable, ConnectionException,
                     CassandraConnectionError, CassandraTimeoutError, CassandraUnavailableError, ConnectionError)
        return isinstance(error, transient) or super().is_transient(error)

    def push_predicates(self, predicates: Sequence[Predicate]) -> tuple[Mapping[str, str], Sequence[int]]:
        """Take what Cassandra serves without ALLOW FILTERING: equality or IN on every partition-key column
        (the scan becomes reads of those partitions), and then, clustering column by clustering column in order,
        equalities and finally one column's range. Anything else stays with Spark. The restriction is added to
        ``where`` and checked by preparing the query; if the server refuses it, nothing is pushed."""
        pk, selectors, _, _ = self._metadata()
        literal = {i: _cql_literal(p.value, self._kinds.get(p.column, ""), p.op) for i, p in enumerate(predicates)}
        usable = [i for i in literal if literal[i] is not None]

        def on(column: str, ops: set[str]) -> list[int]:
            return [i for i in usable if predicates[i].column == column and predicates[i].op in ops]

        taken: list[int] = []
        for column in pk:
            found = on(column, {"=", "in"})
            if not found:
                return {}, ()  # a partial partition key: the server would have to filter
            taken.append(found[0])
        for column in self._clustering:
            equal = on(column, {"="})
            if equal:
                taken.append(equal[0])
                continue
            taken.extend(on(column, {"<", "<=", ">", ">="}))
            break
        clauses = [f"{_quote(predicates[i].column)} {predicates[i].op.upper()} {literal[i]}" for i in taken]
        where = " AND ".join([self.options.where, *clauses] if self.options.where else clauses)
        try:
            _check_where(shared_session(self.options)[1], self._select(pk, selectors, where), where)
        except OptionsError as exc:
            log.info("not pushing %s to Cassandra: %s", where, exc)
            return {}, ()
        return {"where": where}, taken

    def volatile_columns(self) -> Sequence[str]:
        """The ``<col>_ttl`` columns: a TTL counts down between the copy and ``verify``."""
        self._metadata()
        return list(self._volatile)

    def identity(self) -> dict[str, Any]:
        o = self.options
        identity = {"connector": self.name, "keyspace": o.keyspace, "table": o.table, "columns": ",".join(o.columns)}
        # a partial export is another copy: its checkpoint is refused for another subset (absent when unset, so
        # the checkpoints of whole-table copies keep their fingerprint)
        if o.token_range:
            identity["token_range"] = o.token_range
        if o.where:
            identity["where"] = o.where
        for name in ("writetime_columns", "ttl_columns"):  # they add columns: another copy
            if getattr(o, name):
                identity[name] = getattr(o, name)
        return identity

    def origin(self) -> dict[str, Any]:
        """The cluster read (its ``cluster_name``) and the data centre read from: a checkpoint made against one
        cluster is refused against another that has a table of the same name."""
        self._metadata()
        return {"cluster": self._cluster_name, "local_dc": self.options.local_dc}

    def reference_rows(self, part: int = 0, parts: int = 1) -> Iterator[tuple[Any, ...]]:
        """A plain scan of the table through the driver (see ``connectors.cassandra._reference``); part ``part`` of
        ``parts`` is a run of the ring's tokens (of ``token_range``'s, when set) of equal width."""
        _, selectors, schema, _ = self._metadata()
        # the plain columns, and WRITETIME()/TTL() as the read path asks for them: the values are the server's
        expressions = [s if s.startswith(("WRITETIME(", "TTL(")) else reference_selector(_quote(n), self._kinds.get(n))
                       for n, s in zip(schema.names, selectors, strict=True)]
        cluster, session = connect(self.options, schema_metadata=False)
        try:
            if parts > 1:
                self._ring_bounds = _bounds(cluster)
            restrictions = self.restrictions() if parts <= 1 else self._part_restrictions(part, parts)
            if parts > 1 and not restrictions:
                return  # a part of no width: a token range narrower than the parts
            yield from reference_rows(session, self.options.keyspace, self.options.table, expressions,
                                      self.options.fetch_size, restrictions, self.options.timestamp_unit)
        finally:
            cluster.shutdown()

    def _part_ranges(self, part: int, parts: int) -> list[TokenRange]:
        """Part ``part`` of ``parts`` of the tokens read: the ranges of ``token_intervals`` laid end to end and cut
        at equal widths, so the parts are disjoint and together every token once."""
        lo, hi = self._ring_bounds or self._partitioner_bounds()
        self._ring_bounds = (lo, hi)
        intervals = self.options.token_intervals(lo, hi)
        total = sum(r.width for r in intervals)
        begin, end = total * part // parts, total * (part + 1) // parts
        ranges, offset = [], 0
        for r in intervals:
            low, high = max(begin - offset, 0), min(end - offset, r.width)
            if low < high:
                ranges.append(TokenRange(r.start + low, r.start + high))
            offset += r.width
        return ranges

    def _part_restrictions(self, part: int, parts: int) -> list[str]:
        pk = self._metadata()[0]
        token = f"token({', '.join(_quote(c) for c in pk)})"
        where = f" AND {self.options.where}" if self.options.where else ""
        return [f"{token} > {r.start} AND {token} <= {r.end}{where}" for r in self._part_ranges(part, parts)]

    def reference_label(self, part: int, parts: int) -> str:
        return " and ".join(f"token({r.start},{r.end}]" for r in self._part_ranges(part, parts)) or "no tokens"

    def key_columns(self) -> list[str]:
        """The primary key: the partition key's columns, then the clustering columns."""
        pk = self._metadata()[0]
        return [*pk, *self._clustering]
