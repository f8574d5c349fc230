"""A Cassandra connector whose big pages time out, as a wide partition on a loaded node does, on demand.

A real server times out a page only when it happens to be slow, so a test cannot make it time out at an exact
page size. This reader asks the real server for every page, and when a page comes back with more than
``max_page`` rows it raises the driver's ``OperationTimedOut`` instead (the page is dropped, as a client that
gave up on it would). Each timeout writes ``<proof>/timeout-<pid>-<n>`` holding the page size asked for: the proof
the fault happened, and which sizes were asked. Talks only through files, so it works in local-engine workers and
Spark's Python workers alike.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.cassandra import CassandraOptions, CassandraSource
from connectors.cassandra._reader import CassandraSplitReader
from connectors.cassandra._splits import CassandraSplit
from splitsource import option

_timeouts = itertools.count()


@dataclass(frozen=True)
class TimeoutPagesOptions(CassandraOptions):
    max_page: int = option(2000, doc="a page of more rows than this times out", minimum=1)
    proof: str = option("", doc="directory for one file per timeout")


class _TimeoutPagesReader(CassandraSplitReader):
    def _request(self, split: CassandraSplit, page_size: int) -> Any:
        from cassandra import OperationTimedOut

        result = super()._request(split, page_size)
        options = self._options
        assert isinstance(options, TimeoutPagesOptions)
        if result is not None and len(result.current_rows) > options.max_page:
            (Path(options.proof) / f"timeout-{os.getpid()}-{next(_timeouts)}").write_text(str(page_size))
            raise OperationTimedOut(f"(test) a page of {len(result.current_rows)} rows took too long")
        return result


class TimeoutPagesSource(CassandraSource):
    """Also writes the query of each split reader it makes to ``<proof>/select-<pid>-<n>``."""

    options_class = TimeoutPagesOptions

    def create_split_reader(self) -> CassandraSplitReader:
        assert isinstance(self.options, TimeoutPagesOptions)
        (Path(self.options.proof) / f"select-{os.getpid()}-{next(_timeouts)}").write_text(self.select_cql())
        return _TimeoutPagesReader(self.options, self.select_cql(), self.token_of)
