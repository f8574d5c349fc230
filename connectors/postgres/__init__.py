"""The PostgreSQL connector (``connector=postgres``): a table at one instant, by key or block ranges, resumable
by page; on the public connector API alone (``pip install 'splitsource[postgres]'``)."""

from connectors.postgres._catalog import PostgresConnectionError, PostgresLoginError
from connectors.postgres._options import PostgresOptions
from connectors.postgres._source import PostgresSource
from connectors.postgres._splits import PostgresPosition, PostgresSplit

__all__ = ["PostgresConnectionError", "PostgresLoginError", "PostgresOptions", "PostgresPosition",
           "PostgresSource", "PostgresSplit"]
