"""What the PostgreSQL catalog says of a table: its columns as Arrow types, its key, its relations and sizes.

Each column is read one of four ways (the type table is in docs/postgres.md):

- **natively**, where Arrow has the exact type (integers, floats, bool, text, bytea, date, timestamp[tz], time):
  the ADBC driver decodes the server's binary values into Arrow in C; and ``uuid``, whose 16 bytes the reader
  formats as the server's text (cheaper on both sides than the server's ``uuid::text``);
- **as a decimal**: ``numeric(p,s)`` with ``p`` up to 38 (a domain over one too) as Arrow's ``decimal128(p,s)``,
  as Spark's JDBC source gives ``DecimalType(p,s)``; an unconstrained ``numeric`` only where the ``decimal``
  option names a precision and scale for it; and ``money`` as ``decimal128(19, s)``, ``s`` its locale's fractional
  digits (``lc_monetary``, the planner's, which readers set). Read as the server's text and parsed exactly by the
  reader, which refuses a value the decimal cannot hold (NaN, infinity, a value past the option's precision or
  scale) in one line naming ``text_columns``, never rounding it;
- **as a list**: a one-dimensional array of any of those types as Arrow's ``list<T>``, NULL items kept (Spark's
  JDBC source gives ``ArrayType``); the reader refuses, in one line naming ``text_columns``, an array of more
  dimensions or whose first index is not 1, when it meets one (each page selects the check beside the array);
- **as the server's own text** everywhere else (unconstrained numeric, json, arrays of other types, composites,
  ranges, intervals, network, geometric and bit types, enums, ...): ``column::text``, the value exactly as
  PostgreSQL prints it.

Sessions set ``DateStyle`` ISO, ``TimeZone`` UTC, ``IntervalStyle``, ``extra_float_digits`` and ``bytea_output``
(see :func:`session_options`), so text is the same whatever the server's defaults, and key values round-trip as
text between the planner's session and the readers'.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connectors.postgres._options import MAX_DECIMAL_PRECISION, decimal_precision
from splitsource import OptionsError, SplitSourceError

__all__ = ["Column", "PostgresConnectionError", "Table", "describe", "described", "ident", "literal", "one_line",
           "server_words", "session_options"]

# base type name -> Arrow type, for the types read natively
_NATIVE: dict[str, pa.DataType] = {
    "int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(), "float4": pa.float32(), "float8": pa.float64(),
    "bool": pa.bool_(), "text": pa.string(), "varchar": pa.string(), "bpchar": pa.string(), "name": pa.string(),
    "bytea": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"), "time": pa.time64("us"),
}
# base type -> ((low, high): the driver's values, as integers, of every value the column's Arrow type holds, low
# included and high not, None: open; what a value outside is). Arrow's timestamp[us] counts microseconds from 1970
# in an int64, which ends in 294247, and PostgreSQL's ends in 294276; its date32 holds no infinity; its time64 ends
# before midnight, and PostgreSQL's time holds 24:00:00. The driver moves PostgreSQL's epoch (2000) to Arrow's
# (1970) without an overflow check, so ±infinity and every time after Arrow's last wrap round to below the first
# value PostgreSQL holds (4714-11-24 BC), where no value it holds lands: the reader checks each page for them (a
# compare per value, instead of a condition the server evaluates on every row).
_LAST_TIMESTAMP = "294247-01-10 04:00:54.775807"
_FIRST_TIMESTAMP_US = -210866803200000000  # 4714-11-24 00:00:00 BC, PostgreSQL's first timestamp, from 1970
_FIRST_DATE = -2440588  # 4714-11-24 BC, PostgreSQL's first date, in days from 1970
_DAY_US = 86_400_000_000
_BEYOND_ARROW: dict[str, tuple[tuple[int | None, int | None], str]] = {
    "date": ((_FIRST_DATE, None), "infinity"),
    "timestamp": ((_FIRST_TIMESTAMP_US, None), f"infinity or a time after {_LAST_TIMESTAMP}"),
    "timestamptz": ((_FIRST_TIMESTAMP_US, None), f"infinity or a time after {_LAST_TIMESTAMP}+00"),
    "time": ((None, _DAY_US), "24:00:00"),
}
MONEY_PRECISION = 19  # the digits of an int64, which a money value is in its locale's smallest unit
# key columns: orderable types whose text form casts back to the same value
_KEY_TYPES = {"int2", "int4", "int8", "numeric", "text", "varchar", "bpchar", "uuid", "date", "timestamp",
              "timestamptz"}


# the kinds of relation a copy reads (pg_class.relkind): a table, a partitioned table, a materialized view; and the
# names of those it refuses
_READ_KINDS = {"r", "p", "m"}
_KINDS = {"v": "a view", "f": "a foreign table", "i": "an index", "I": "a partitioned index", "S": "a sequence",
          "c": "a composite type", "t": "a TOAST table"}


class PostgresConnectionError(SplitSourceError, ConnectionError):
    """PostgreSQL could not be reached, refused the login or a privilege, or has no such table. ``transient``: the
    server may answer a retry (it was unreachable, restarting or shutting down), as ``_session.transient`` decided
    from the driver's error."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class PostgresLoginError(PostgresConnectionError, OptionsError):
    """A wrong password or user, a privilege missing, or a table the login does not see: a usage error (exit 2)."""


def session_options(lc_monetary: str = "") -> str:
    """libpq's ``options`` for every session of the connector: text output independent of the server's defaults;
    ``lc_monetary``: the locale whose number of fractional digits a ``money`` value is counted in (the planner's,
    which a reader's session then shares: the same stored amount is another value in another locale)."""
    options = ("-c DateStyle=ISO,YMD -c TimeZone=UTC -c IntervalStyle=postgres -c extra_float_digits=1 "
               "-c bytea_output=hex")
    if lc_monetary:
        options += " -c lc_monetary=" + lc_monetary.replace("\\", "\\\\").replace(" ", "\\ ")
    return options


def one_line(exc: BaseException) -> str:
    """The first line of a driver's message (libpq's carry a DETAIL and a caret line after it)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def server_words(exc: BaseException) -> str:
    """What the server said in a driver's error: the first line after libpq's ``ERROR:`` (the driver's and libpq's
    prefixes, the query and the caret line left out), or the error's first line."""
    first = one_line(exc)
    return first.partition("ERROR:")[2].strip() or first


def ident(name: str) -> str:
    """``name`` quoted as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """``text`` as an SQL string literal (sessions keep standard_conforming_strings on, the default since 9.1)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Column:
    """One column as the connector reads it: ``select`` is its expression in the readers' SELECT; ``uuid_bytes``:
    the driver gives a uuid's 16 bytes, which the reader formats as the server's text."""

    name: str
    type_name: str  # as PostgreSQL writes it: integer, numeric(10,2), text[], ...
    base: str  # the base type's name (a domain's underlying type)
    arrow: pa.DataType
    select: str
    nullable: bool
    uuid_bytes: bool = False
    # an array read as Arrow's list of ``base``'s type: the SQL of a boolean true for an array the list would not
    # hold as it is (more than one dimension, which the driver flattens, or a first index other than 1, which it
    # drops or fails on), which ``select`` reads as NULL and a page selects beside it; "" for any other column
    shape_check: str = ""

    @property
    def listed(self) -> bool:
        return bool(self.shape_check)

    @property
    def value_type(self) -> pa.DataType:
        """The Arrow type of one value: the column's, or its list's items'."""
        return self.arrow.value_type if self.listed else self.arrow

    @property
    def beyond_arrow(self) -> tuple[tuple[int | None, int | None], str] | None:
        """For a natively read column whose server type holds values its Arrow type cannot: the range ``(low,
        high)`` of the driver's values (an array's items), as integers, that its Arrow type holds (low included,
        high not, None: open), and what a value outside it is, for the message; else None."""
        if self.value_type == pa.string() or self.base not in _BEYOND_ARROW:
            return None
        return _BEYOND_ARROW[self.base]

    @property
    def decimal(self) -> bool:
        """Whether the column (an array's items) is read as the server's text and parsed into its Arrow decimal by
        the reader."""
        return bool(pa.types.is_decimal(self.value_type))

    @property
    def as_key_text(self) -> bool:
        """Whether the Arrow value, as a Python ``str``, is the server's text of the value (a key's text)."""
        return bool(pa.types.is_integer(self.arrow)) or self.arrow == pa.string()


@dataclass(frozen=True)
class Table:
    """A table as planned and read: ``relations`` are the relations holding its rows (the leaf partitions of a
    partitioned table, else the table itself), each as a quoted regclass."""

    label: str  # schema.table, for messages
    qualified: str  # quoted, for SQL
    columns: tuple[Column, ...]
    key: tuple[Column, ...]  # () when the table has no usable key
    relations: tuple[str, ...]
    server_version: int
    catalog: str  # what the catalog said, as JSON: see :func:`described`
    lc_monetary: str = ""  # the planner's, which readers set (session_options)
    origin: tuple[str, str] = ("", "")  # the cluster's system identifier, and the database
    row_bytes: int = 100  # bytes on disk of a row, on average (sizes a key range's pages)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow, c.nullable) for c in self.columns])

    @property
    def shape(self) -> str:
        """A digest of the columns' names, types, Arrow types and how they are read: a column added, dropped or
        retyped changes it, and so does a column read as another Arrow type or text (a copy made before numerics
        were decimals, or inet lost its /32)."""
        return hashlib.sha256(repr([(c.name, c.type_name, str(c.arrow), c.select) for c in self.columns]).encode()
                              ).hexdigest()[:16]

    @property
    def key_names(self) -> tuple[str, ...]:
        """For each key column, the page column holding its text: the column itself where it is read and its value
        is its text (an integer, a string), else ``__k<i>``, which a key range's page adds as ``column::text``."""
        read = {c.name for c in self.columns if c.as_key_text}
        return tuple(c.name if c.name in read else f"__k{i}" for i, c in enumerate(self.key))


def describe(conn: Any, table: str, columns: Sequence[str], text_columns: Sequence[str], decimal: str = "") -> Table:
    """Describe ``table`` over ``conn`` (a :class:`~connectors.postgres._session.Connection`): its columns
    (``columns``: a subset; ``text_columns``: read as text), its key and its relations."""
    try:
        found = conn.row("SELECT to_regclass(%s)::oid::int8, to_regclass(%s)::text", table, table)
    except Exception as exc:  # the driver's: a session lost is an OperationalError, any other error is the name's
        if type(exc).__name__ == "OperationalError":
            raise
        raise PostgresLoginError(f"option 'table': PostgreSQL cannot take {table!r} for a table's name: "
                                 f"{server_words(exc)}") from None
    if found[0] is None:
        raise PostgresLoginError(f"option 'table': no table {table} in this database (as the login sees it)")
    oid, qualified = found
    label, kind, heirs = conn.row(
        "SELECT n.nspname || '.' || c.relname, c.relkind::text, (SELECT string_agg(i.inhrelid::regclass::text, ', ' "
        "ORDER BY i.inhrelid::regclass::text) FROM pg_inherits i WHERE i.inhparent = c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s::oid", oid)
    if kind not in _READ_KINDS:  # a view, a foreign table: no key, and no blocks of its own (no ctid)
        raise PostgresLoginError(f"option 'table': {label} is {_KINDS.get(kind, 'no table')}, which has no rows of "
                                 "its own to split by key or block: give a table, a partitioned table or a "
                                 "materialized view (of it, say)")
    if heirs and kind != "p":  # a read of it holds their rows, which neither its key nor its blocks keep apart
        raise PostgresLoginError(f"option 'table': tables inherit from {label} ({heirs}), and a read of it holds "
                                 "their rows too, which its key does not keep apart from its own: copy each of them")
    if not conn.row("SELECT has_table_privilege(%s::oid, 'SELECT')", oid)[0]:
        raise PostgresLoginError(f"PostgreSQL: permission denied for table {qualified}: the login needs SELECT on "
                                 "it (GRANT SELECT ON ... TO ...)")
    rows = conn.rows(
        """SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
                  CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END AS domain_of,
                  (SELECT b.typname::text FROM pg_type b WHERE b.oid = coalesce(nullif(t.typbasetype, 0), a.atttypid)),
                  NOT a.attnotnull
           FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
           WHERE a.attrelid = %s::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum""", oid)
    leaves = conn.rows(
        """SELECT t.relid::regclass::text, c.relkind::text FROM pg_partition_tree(%s::oid) t
           JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf ORDER BY t.relid::regclass::text""", oid)
    foreign = [name for name, leaf in leaves if leaf not in _READ_KINDS]
    if foreign:  # its rows would be left out of every block range, without a word
        raise PostgresLoginError(f"option 'table': {label} has a foreign table among its partitions "
                                 f"({', '.join(foreign[:3])}), whose rows are another server's: give its other "
                                 "partitions, each as a table")
    catalog = {
        "label": label,
        "qualified": qualified,
        "columns": [list(r) for r in rows],
        "keys": _keys(conn, oid),
        "relations": [name for name, _ in leaves] or [qualified],
    }
    # in one round trip: the server's version; a money value's number of fractional digits (its locale's) and that
    # locale, which readers then set; which cluster and database this is (Source.origin)
    version, scale, lc_monetary, system, database = conn.row(
        "SELECT current_setting('server_version_num')::int, scale('0'::money::numeric), "
        "current_setting('lc_monetary'), system_identifier::text, current_database()::text FROM pg_control_system()"
    )
    # the bytes on disk of a row, on average (sizes a key range's pages)
    relations = ", ".join(f"{literal(r)}::regclass" for r in catalog["relations"])
    size, tuples = conn.row("SELECT sum(pg_table_size(c.oid))::int8, sum(greatest(c.reltuples, 0))::float8 "
                            f"FROM pg_class c WHERE c.oid IN ({relations})")
    catalog.update(version=version, money=[scale, lc_monetary], origin=[system, database],
                   row_bytes=max(1, int(size / tuples)) if tuples else 100)
    return _table(table, catalog, json.dumps(catalog), columns, text_columns, decimal)


def described(text: str, columns: Sequence[str], text_columns: Sequence[str], decimal: str = "") -> Table:
    """The table the catalog described as ``text`` (:attr:`Table.catalog`, which a copy's planner hands its readers
    as option ``described``: a reader's process asks the catalog nothing)."""
    try:
        catalog = json.loads(text)
        return _table(catalog["label"], catalog, text, columns, text_columns, decimal)
    except (ValueError, KeyError, TypeError, IndexError):
        raise OptionsError("connector 'postgres': option 'described' is not a table's description (a copy sets "
                           "it for its readers; leave it empty)") from None


def _table(name: str, catalog: dict[str, Any], text: str, columns: Sequence[str], text_columns: Sequence[str],
           decimal: str) -> Table:
    as_text = set(text_columns)
    chosen_decimal = decimal_precision(decimal)
    unconstrained = pa.decimal128(*chosen_decimal) if chosen_decimal else None
    money_scale, lc_monetary = catalog["money"]
    money = pa.decimal128(MONEY_PRECISION, money_scale)
    every = {r[0]: _column(r[0], r[1], r[2], r[3], r[4], r[0] in as_text, unconstrained, money)
             for r in catalog["columns"]}
    unknown = sorted((as_text | set(columns)) - set(every))
    if unknown:
        raise OptionsError(f"connector 'postgres': {name} has no column {', '.join(unknown)}; it has "
                           f"{', '.join(every)}")
    chosen = tuple(every[n] for n in columns) if columns else tuple(every.values())
    # the first whose columns are all of key types: a unique index less a column is no key (its rows repeat)
    key = next((tuple(every[n] for n in names) for names in catalog["keys"]
                if all(every[n].base in _KEY_TYPES for n in names)), ())
    return Table(catalog["label"], catalog["qualified"], chosen, key, tuple(catalog["relations"]),
                 int(catalog["version"]), text, lc_monetary, tuple(catalog["origin"]),
                 int(catalog.get("row_bytes", 100)))


_NUMERIC = re.compile(r"numeric\((\d+),(-?\d+)\)")
def _decimal(type_name: str, domain_of: str | None, unconstrained: pa.Decimal128Type | None) -> pa.DataType | None:
    """The decimal a numeric column is read as: its own precision and scale where Arrow's decimal128 holds them (a
    precision up to 38, a scale from 0 to the precision), the ``decimal`` option's for an unconstrained one; None:
    read it as text."""
    found = _NUMERIC.fullmatch(domain_of or type_name)
    if found is None:
        return unconstrained if (domain_of or type_name) == "numeric" else None
    precision, scale = int(found[1]), int(found[2])
    if precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
        return pa.decimal128(precision, scale)
    return None


def _list(name: str, type_name: str, domain_of: str | None, element: str, nullable: bool,
          unconstrained: pa.Decimal128Type | None) -> Column | None:
    """A one-dimensional array of a type read natively or as a decimal, as Arrow's list of that type (Spark's JDBC
    source gives ``ArrayType``); None: read it as text. Its values' decimals come as text (``::text[]``)."""
    declared = domain_of or type_name
    if not declared.endswith("[]"):
        return None
    if element == "numeric":
        item = _decimal(declared.removesuffix("[]"), None, unconstrained)
        value = f"{ident(name)}::text[]"
    else:
        item = pa.string() if element == "uuid" else _NATIVE.get(element)
        value = f"{ident(name)}::{domain_of}" if domain_of is not None else ident(name)
    if item is None:
        return None
    check = f"(array_ndims({value}) > 1 OR array_lower({value}, 1) <> 1)"
    return Column(name, type_name, element, pa.list_(item), f"CASE WHEN {check} THEN NULL ELSE {value} END",
                  nullable, element == "uuid", check)


def _column(name: str, type_name: str, domain_of: str | None, base: str, nullable: bool, as_text: bool,
            unconstrained: pa.Decimal128Type | None, money: pa.Decimal128Type) -> Column:
    listed = _list(name, type_name, domain_of, base[1:], nullable, unconstrained) \
        if base.startswith("_") and not as_text else None
    if listed is not None:
        return listed
    decimal = _decimal(type_name, domain_of, unconstrained) if base == "numeric" and not as_text else None
    if base == "money" and not as_text:
        decimal = money  # its int64 of cents (of its locale's fraction) exactly: 19 digits
    if decimal is not None:
        text = f"{ident(name)}::numeric::text" if base == "money" else f"{ident(name)}::text"
        return Column(name, type_name, base, decimal, text, nullable)
    uuid = base == "uuid" and not as_text
    native = pa.string() if uuid else _NATIVE.get(base)
    if native is None or as_text:
        # inet through its output function, as psql, JDBC and ADBC show it (a host without its /32), not text(inet)
        # (format() makes NULL an empty string, which an inet's text never is)
        text = f"nullif(format('%s', {ident(name)}), '')" if base == "inet" else f"{ident(name)}::text"
        return Column(name, type_name, base, pa.string(), text, nullable)
    if domain_of is not None:  # a domain: read as its base type
        return Column(name, type_name, base, native, f"{ident(name)}::{domain_of}", nullable, uuid)
    return Column(name, type_name, base, native, ident(name), nullable, uuid)


def _keys(conn: Any, oid: int) -> list[list[str]]:
    """The column lists that may key the table, best first: the primary key's, then each unique index's on not-null
    columns (no expression, no predicate), narrowest first; a valid index only (a failed ``CREATE UNIQUE INDEX
    CONCURRENTLY`` leaves one that enforces nothing)."""
    rows = conn.rows(
        """SELECT array_agg(a.attname::text ORDER BY k.ord), bool_and(a.attnotnull), i.indisprimary
           FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
           WHERE i.indrelid = %s::oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
           GROUP BY i.indexrelid, i.indisprimary ORDER BY i.indisprimary DESC, count(*), i.indexrelid""",
        oid)
    return [list(names) for names, not_null, _ in rows if not_null]
