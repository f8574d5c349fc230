"""A Cassandra connector whose first page of each split times out once, as a page does when its coordinator waits on
a replica that just died (a real server cannot be made to time out one chosen page on demand).

The page is asked of the real server; when it is the first page of a split and the split has not timed out yet,
the driver's ``ReadTimeout`` is raised instead, and ``<proof>/timeout-<split>`` is written (the proof it happened).
Everything else is the real connector, so what the reader does next is what it does in production.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.cassandra import CassandraOptions, CassandraSource
from connectors.cassandra._reader import CassandraSplitReader
from connectors.cassandra._splits import CassandraSplit
from splitsource import option


@dataclass(frozen=True)
class FirstPageTimeoutOptions(CassandraOptions):
    proof: str = option("", doc="directory for one file per timeout")


class _FirstPageTimeoutReader(CassandraSplitReader):
    def _request(self, split: CassandraSplit, page_size: int) -> Any:
        from cassandra import ConsistencyLevel, ReadTimeout

        options = self._options
        assert isinstance(options, FirstPageTimeoutOptions)
        proof = Path(options.proof) / f"timeout-{hashlib.sha1(split.split_id.encode()).hexdigest()[:12]}"
        if self._queue.position is None and not proof.exists():
            proof.write_text(f"{split.split_id} {page_size}")
            raise ReadTimeout("(test) the coordinator timed out waiting for a replica",
                              consistency=ConsistencyLevel.LOCAL_ONE, required_responses=1, received_responses=0)
        return super()._request(split, page_size)


class FirstPageTimeoutSource(CassandraSource):
    options_class = FirstPageTimeoutOptions

    def create_split_reader(self) -> CassandraSplitReader:
        return _FirstPageTimeoutReader(self.options, self.select_cql(), self.token_of)
