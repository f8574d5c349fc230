"""Connections to PostgreSQL: ADBC's, for the catalog, the plan, the snapshot and the pages; errors in one line."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectors.postgres._catalog import PostgresConnectionError, PostgresLoginError, literal, one_line, session_options
from connectors.postgres._options import PostgresOptions, conninfo

__all__ = ["Connection", "connect", "driver_error", "login_error", "snapshot_gone", "transient"]

# the most bytes of Arrow the driver puts in one batch: above a page's, so a page comes in one batch, used as it is
BATCH_BYTES = 1 << 30

# SQLSTATE classes a login or privilege problem raises: a usage error, not worth a retry
_LOGIN_STATES = {"28P01", "28000", "42501", "3D000"}
# SQLSTATEs a retry may cure: the server shutting down or starting (57P0x), too many connections, a serialization
# failure; and class 08, the connection's own failures
_TRANSIENT_STATES = {"57P01", "57P02", "57P03", "57P05", "53300", "40001"}


def connect(options: PostgresOptions, lc_monetary: str = "") -> Connection:
    """A connection with the connector's session settings (and ``lc_monetary``, a reader's); a refusal is a one-line
    error."""
    return Connection(conninfo(options, options=session_options(lc_monetary)), options)


def sql_value(value: object) -> str:
    """A parameter of :meth:`Connection.rows` as SQL: NULL, a number as written, anything else a string literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return literal(str(value))


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE the server sent with ``exc`` (psycopg's or ADBC's), None when the server sent none."""
    return getattr(exc, "sqlstate", None) or getattr(getattr(exc, "diag", None), "sqlstate", None) or None


def transient(exc: BaseException) -> bool:
    """Whether a retry may cure the driver's error ``exc``: a SQLSTATE the server sends while it restarts or sheds
    load, a failed connection (class 08), or a driver's OperationalError that carries no SQLSTATE at all: the
    server said nothing, the connection was refused, reset or cut (how libpq's words for it read depends on the
    instant: "server closed the connection", "could not receive data from server: Connection reset by peer")."""
    state = sqlstate(exc)
    if state is not None:
        return state in _TRANSIENT_STATES or state.startswith("08")
    return type(exc).__name__ == "OperationalError"


def login_error(exc: BaseException, options: PostgresOptions) -> PostgresConnectionError:
    """``exc`` from connecting or the first query as a one-line connector error (no password in it)."""
    state = sqlstate(exc)
    text = one_line(exc)
    if options.password:
        text = text.replace(options.password.reveal(), "***")
    if "SSL" in text or "certificate" in text or "no encryption" in text:  # untrusted, or TLS required: no retry
        return PostgresLoginError(f"PostgreSQL: {text} (see the options sslmode, sslrootcert, sslcert, sslkey)")
    if state in _LOGIN_STATES or "password authentication failed" in text or "permission denied" in text \
            or "pg_hba.conf" in text:
        return PostgresLoginError(f"PostgreSQL: {text}")
    return PostgresConnectionError(f"PostgreSQL: {text}", transient=transient(exc))


@contextlib.contextmanager
def errors_in_one_line(options: PostgresOptions) -> Iterator[None]:
    """The drivers' errors raised inside (ADBC's; psycopg's, where it is loaded: ``verify``'s) as one-line connector
    errors."""
    try:
        yield
    except Exception as exc:
        if not driver_error(exc):
            raise
        raise login_error(exc, options) from None


def driver_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the drivers' own errors (ADBC's; psycopg's, where it is loaded)."""
    import adbc_driver_manager

    psycopg = sys.modules.get("psycopg")
    return isinstance(exc, adbc_driver_manager.Error) or psycopg is not None and isinstance(exc, psycopg.Error)


# what the server answers SET TRANSACTION SNAPSHOT when the snapshot cannot be imported any more: its exporting
# transaction ended, so its file is gone ("invalid snapshot identifier", 22023), or its process is no longer running
# ("could not import the requested snapshot", 55000)
_SNAPSHOT_GONE = {"22023": "invalid snapshot identifier", "55000": "could not import the requested snapshot"}


def snapshot_gone(exc: BaseException) -> bool:
    """Whether ``exc``, raised by ``SET TRANSACTION SNAPSHOT``, is the server saying the snapshot is gone (and not a
    lost connection, a terminated backend or any other failure)."""
    message = str(exc)
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        return state in _SNAPSHOT_GONE and _SNAPSHOT_GONE[state] in message
    return any(words in message for words in _SNAPSHOT_GONE.values())


# libpq's words for a session that ended under a query: the server closed it (terminated, crashed, restarting), or
# the network did
_SESSION_LOST = ("FATAL:", "server closed the connection", "could not receive data from server",
                 "no connection to the server", "connection to server was lost", "SSL SYSCALL error")


def _stream_error(exc: OSError) -> Exception:
    """An error the driver met while a query's rows streamed (the query runs as ``COPY``, whose failure comes there,
    not from its execution) as the driver's own error class, which pyarrow's stream loses: an ``OperationalError``
    (retried: :func:`transient`) for a lost session, a ``DatabaseError`` for anything else (a division by zero on
    some row, a cancel); libpq's message is kept, and with it no SQLSTATE (the stream carries none)."""
    import adbc_driver_manager

    text = str(exc)
    if any(words in text for words in _SESSION_LOST):
        return adbc_driver_manager.OperationalError(text, status_code=adbc_driver_manager.AdbcStatusCode.IO)
    return adbc_driver_manager.DatabaseError(text, status_code=adbc_driver_manager.AdbcStatusCode.UNKNOWN)


# a process's ADBC databases, by connection string: the driver logs in once when it opens a database (and closes that
# session), then again for each connection; one database per server and user makes every connection after the first
# one login (measured: 20 to 40 ms each on a loopback server). ADBC's objects allow one caller at a time, and a
# connection's opening and closing touch its database: both hold the lock
_DATABASES: dict[str, Any] = {}
_DATABASES_LOCK = threading.Lock()


def _open(uri: str) -> Any:
    """A new ADBC connection to ``uri``, through the process's database for it."""
    import adbc_driver_manager
    import adbc_driver_postgresql

    with _DATABASES_LOCK:
        if uri not in _DATABASES:  # a database that failed to open is not kept: the next connection tries again
            _DATABASES[uri] = adbc_driver_postgresql.connect(
                uri, db_kwargs={"adbc.postgresql.type_resolver_mode": "builtin"})
        return adbc_driver_manager.AdbcConnection(_DATABASES[uri])


class Connection:
    """One ADBC connection and its statement, through the driver manager's own API (its DB-API layer imports
    pyarrow.dataset, and polars where installed: a tenth of a second in every process that reads). The planner's
    catalog queries go through it too (:meth:`rows`): psycopg's import alone is 0.19 s of CPU, more than pyarrow's,
    on the path of every copy; psycopg serves ``verify`` only (``reference_rows``).

    The driver knows the built-in types from its own table (``type_resolver_mode=builtin``) instead of reading
    ``pg_type`` and every column of ``pg_attribute`` at each connection (measured: 0.07 s on an empty database, 1.0 s
    on one of 5,000 tables, against 0.02 s): a reader asks only for built-in types, every other one as ``::text``."""

    def __init__(self, uri: str, options: PostgresOptions) -> None:
        import adbc_driver_manager

        self._handles: list[Any] = []
        try:
            self._handles.append(_open(uri))
        except Exception as exc:  # the driver's own error classes
            self.close()
            raise login_error(exc, options) from None
        self._statement = adbc_driver_manager.AdbcStatement(self._handles[0])
        self._handles.append(self._statement)
        self._statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_BYTES)})

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """The rows of a catalog query, as Python values; each ``%s`` in ``sql`` is a parameter, given as a literal
        (:func:`sql_value`)."""
        if params:
            first, *parts = sql.split("%s")
            sql = first + "".join(sql_value(p) + part for p, part in zip(params, parts, strict=True))
        batch = self.query(sql)
        return list(zip(*(column.to_pylist() for column in batch.columns), strict=True)) if batch.num_columns else []

    def row(self, sql: str, *params: object) -> tuple[Any, ...]:
        """The one row of a query that returns one (:meth:`rows`)."""
        (found,) = self.rows(sql, *params)
        return found

    def execute(self, sql: str) -> None:
        self._statement.set_sql_query(sql)
        self._statement.execute_update()

    def query(self, sql: str) -> pa.RecordBatch:
        """The query's rows as one record batch: the driver's own when the page came in one (it does up to
        ``BATCH_BYTES``), else the driver's batches copied into one."""
        self._statement.set_sql_query(sql)
        stream, _ = self._statement.execute_query()
        try:
            result = pa.RecordBatchReader.from_stream(stream).read_all()
        except OSError as exc:
            raise _stream_error(exc) from None
        batches = result.to_batches()
        if len(batches) == 1:
            return batches[0]
        return pa.RecordBatch.from_arrays([c.combine_chunks() for c in result.columns], schema=result.schema)

    def cancel(self) -> None:
        """Ask the server to cancel the statement running now (from another thread); a finished one is left be."""
        try:
            self._statement.cancel()
        except Exception:  # noqa: BLE001 - a connection closed meanwhile has nothing to cancel
            pass

    def close(self) -> None:
        with _DATABASES_LOCK:
            for handle in reversed(self._handles):
                try:
                    handle.close()
                except Exception:  # noqa: BLE001 - a connection already lost closes with an error
                    pass
            self._handles = []
