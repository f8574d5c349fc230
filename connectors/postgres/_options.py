"""The PostgreSQL connector's options: one frozen dataclass, parsed once; ``splitsource options --connector
postgres`` prints the table (and docs/postgres.md shows it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitsource import OptionsError, Secret, name_list, option

__all__ = ["PostgresOptions", "conninfo"]


def _split_by(text: str) -> str:
    return text.strip().lower()


@dataclass(frozen=True)
class PostgresOptions:
    table: str = option(doc="the table to read: schema.table, or table (found on the search_path)", parse=str.strip)
    dsn: str = option("", doc="libpq conninfo or postgresql:// URI (empty: PGHOST, PGPORT, PGUSER, PGDATABASE "
                              "and the rest of libpq's environment); a password here is never printed")
    password: Secret = option(Secret(""), doc="password (never printed; else PGPASSWORD or ~/.pgpass, as libpq "
                                              "finds it)")
    sslmode: str = option("", doc="libpq sslmode: disable, allow, prefer, require, verify-ca, verify-full (empty: "
                                  "the dsn's or libpq's default)",
                          choices=("", "disable", "allow", "prefer", "require", "verify-ca", "verify-full"))
    sslrootcert: str = option("", doc="CA certificate(s), PEM, that signed the server's certificate")
    sslcert: str = option("", doc="client certificate, PEM")
    sslkey: str = option("", doc="the client certificate's private key, PEM")
    columns: tuple[str, ...] = option((), doc="comma-separated columns to read, each once (empty: all)",
                                      parse=name_list, shown="")
    where: str = option("", doc="an SQL condition on the table's rows, e.g. \"created >= '2026-01-01'\"; it must "
                                "select the same rows at any instant you mean to read (a bounded range). One the "
                                "server cannot plan on the table is refused when the copy or read is planned",
                        parse=str.strip)
    text_columns: tuple[str, ...] = option((), doc="columns read as the server's own text instead of their Arrow "
                                                   "type (a date or timestamp column that holds infinity, a time "
                                                   "column that holds 24:00:00)", parse=name_list, shown="")
    decimal: str = option("", doc="p,s: read an unconstrained numeric column as decimal128(p,s) (empty: as the "
                                  "server's text); a value it cannot hold exactly is refused, never rounded. A "
                                  "numeric(p,s) column is read as decimal128(p,s) whatever this says",
                          parse=str.strip)
    split_by: str = option("auto", doc="auto: key ranges when the primary key or a unique not-null index has "
                                       "only columns of key types (integers, numeric, text, uuid, date, "
                                       "timestamp), else block ranges; key; blocks (ctid ranges)",
                           choices=("auto", "key", "blocks"), parse=_split_by)
    split_size_mb: float = option(64.0, doc="target split size in MiB (of the table on disk)", minimum=0.01)
    page_rows: int = option(100_000, doc="most rows per fetch (a page of a key range)", minimum=1)
    page_mb: float = option(16.0, doc="most MiB of the table read per fetch (a page of a block range, or "
                                      "page_rows shrunk to it for a key range)", minimum=0.01)
    snapshot: str = option("", doc="read at this exported snapshot (pg_export_snapshot() of a transaction you hold "
                                   "open); empty: a copy exports its own, once, for all its readers", parse=str.strip)
    described: str = option("", doc="the table as a copy's planner described it (JSON), which the copy hands its "
                                    "readers; empty: each process asks the catalog", parse=str.strip)
    tids: str = option("", doc="the places (a tid[] literal) of the rows an incremental run reads, as a copy's "
                               "planner found them in the snapshot it hands its readers; empty: each range is "
                               "scanned for them", parse=str.strip)
    rows: str = option("", doc="the rows an incremental run reads, as a copy's planner read them in the snapshot it "
                               "hands its readers (Arrow IPC, base64); empty: read from the server")
    tid_rows: int = option(100_000, doc="an incremental run that finds at most this many changed rows reads them in "
                                        "one range: up to a page of them read by its planner's scan and handed to "
                                        "its reader; up to 8 pages by their places (ctid), its reader handed the "
                                        "list (about 14 bytes a row); 0: always scan key ranges for them",
                           minimum=0)
    connect_timeout_s: int = option(10, doc="seconds to wait for a connection", minimum=1)

    def __post_init__(self) -> None:
        if not self.table:
            raise OptionsError("connector 'postgres': option 'table' is empty")
        decimal_precision(self.decimal)


MAX_DECIMAL_PRECISION = 38  # Arrow's decimal128


def decimal_precision(text: str) -> tuple[int, int] | None:
    """The ``decimal`` option (``p,s``: the decimal an unconstrained numeric is read as) as (precision, scale)."""
    if not text:
        return None
    found = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", text)
    if not found or not (1 <= int(found[1]) <= MAX_DECIMAL_PRECISION and int(found[2]) <= int(found[1])):
        raise OptionsError(f"connector 'postgres': option 'decimal': {text!r} is not a precision and a scale "
                           f"(p,s, with p from 1 to {MAX_DECIMAL_PRECISION} and s from 0 to p), e.g. 38,10")
    return int(found[1]), int(found[2])


def conninfo(options: PostgresOptions, /, **settings: str) -> str:
    """The libpq connection string of ``options``: the dsn (``key=value`` words or a URI) with the connector's own
    settings and ``settings`` after it, where libpq takes the last of a repeated keyword (libpq reads the environment
    and ~/.pgpass for whatever neither gives). Built here, not by psycopg's ``make_conninfo``: a reader's process
    would import psycopg for it alone."""
    extra = {"application_name": "splitsource", "connect_timeout": str(options.connect_timeout_s)}
    for key in ("sslmode", "sslrootcert", "sslcert", "sslkey"):
        if getattr(options, key):
            extra[key] = getattr(options, key)
    if options.password:
        extra["password"] = options.password.reveal()
    extra.update(settings)
    dsn = options.dsn.strip()
    if dsn.startswith(("postgresql://", "postgres://")):
        from urllib.parse import quote, urlencode

        joint = "" if dsn.endswith(("?", "&")) else "&" if "?" in dsn else "?"
        return dsn + joint + urlencode(extra, quote_via=quote)
    quoted = ("'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'" for value in extra.values())
    return " ".join(([dsn] if dsn else []) + [f"{key}={value}" for key, value in zip(extra, quoted, strict=True)])
