"""Connections to PostgreSQL: psycopg for the catalog, planning and the snapshot; errors in one line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from connectors.postgres._catalog import PostgresConnectionError, PostgresLoginError, session_options
from connectors.postgres._options import PostgresOptions, conninfo

__all__ = ["connect", "login_error", "one_line", "transient"]

# SQLSTATE classes a login or privilege problem raises: a usage error, not worth a retry
_LOGIN_STATES = {"28P01", "28000", "42501", "3D000"}
# SQLSTATEs a retry may cure: the server shutting down or starting (57P0x), too many connections, a serialization
# failure; and class 08, the connection's own failures
_TRANSIENT_STATES = {"57P01", "57P02", "57P03", "57P05", "53300", "40001"}


def connect(options: PostgresOptions) -> Any:
    """A psycopg connection with the connector's session settings; a refusal is a one-line error."""
    import psycopg

    try:
        return psycopg.connect(conninfo(options, options=session_options()), autocommit=True)
    except psycopg.Error as exc:
        raise login_error(exc, options) from None


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


def one_line(exc: BaseException) -> str:
    """The first line of a driver's message (libpq's carry a DETAIL and a caret line after it)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


@contextlib.contextmanager
def errors_in_one_line(options: PostgresOptions) -> Iterator[None]:
    """psycopg errors raised inside as one-line connector errors."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        raise login_error(exc, options) from None
