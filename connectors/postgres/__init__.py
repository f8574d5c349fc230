"""The PostgreSQL connector (``connector=postgres``): a table at one instant, by key or block ranges, resumable
by page; on the public connector API's short path, KeyRangeSource (``pip install 'splitsource[postgres]'``)."""

from connectors.postgres._catalog import PostgresConnectionError, PostgresLoginError
from connectors.postgres._options import PostgresOptions
from connectors.postgres._source import PostgresSource

__all__ = ["PostgresConnectionError", "PostgresLoginError", "PostgresOptions", "PostgresSource"]
