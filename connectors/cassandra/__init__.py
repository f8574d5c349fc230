"""The Apache Cassandra connector (``connector=cassandra``): a whole table by token range, resumable by page."""

from connectors.cassandra._options import CassandraOptions
from connectors.cassandra._session import (
    CassandraAuthenticationError,
    CassandraAuthorizationError,
    CassandraConnectionError,
)
from connectors.cassandra._source import CassandraSource
from connectors.cassandra._splits import CassandraPosition, CassandraSplit
from connectors.cassandra._tokens import PlanEntry, TokenRange, build_plan, ring_ranges, split_range

__all__ = [
    "CassandraAuthenticationError",
    "CassandraAuthorizationError",
    "CassandraConnectionError",
    "CassandraOptions",
    "CassandraPosition",
    "CassandraSource",
    "CassandraSplit",
    "PlanEntry",
    "TokenRange",
    "build_plan",
    "ring_ranges",
    "split_range",
]
