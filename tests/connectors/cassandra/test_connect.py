"""connect() turns every way the driver fails to connect into one CassandraConnectionError (which the reader then
retries): found by restarting a node ten times in a row, when the driver once reported a bare list of hosts."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from connectors.cassandra import CassandraConnectionError
from connectors.cassandra._options import CassandraOptions
from connectors.cassandra._session import connect
from splitsource import parse_options


@pytest.mark.parametrize("errors", [["127.0.0.5"], {"127.0.0.5:9042": ConnectionRefusedError("refused")}, []])
def test_no_host_available_in_any_shape_is_one_connection_error(errors: Any) -> None:
    from cassandra.cluster import NoHostAvailable

    options = parse_options(CassandraOptions, {"keyspace": "k", "table": "t", "hosts": "127.0.0.5",
                                               "connect_timeout_s": "1"})
    failure = NoHostAvailable("Unable to connect to any servers", errors)
    with mock.patch("cassandra.cluster.Cluster.connect", side_effect=failure), \
            pytest.raises(CassandraConnectionError, match=r"cannot reach Cassandra at 127\.0\.0\.5:9042"):
        connect(options)
