"""The Apache Cassandra connector (``connector=cassandra``): a whole table by token range, resumable by page."""

from connectors.cassandra._source import (
    CassandraConnectionError,
    CassandraOptions,
    CassandraPosition,
    CassandraSource,
    CassandraSplit,
)
from connectors.cassandra._tokens import PlanEntry, TokenRange, build_plan, ring_ranges, split_range

__all__ = [
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
