"""The split reader (one page per fetch, resumable by paging state, shrinking pages on timeouts) and the emitter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from connectors.cassandra._options import CassandraOptions
from connectors.cassandra._session import (
    CassandraTimeoutError,
    CassandraUnavailableError,
    RangeReplicas,
    shared_session,
)
from connectors.cassandra._splits import CassandraSplit
from connectors.cassandra._types import exact_protocol_handler
from splitsource import (
    ReadEvent,
    RecordEmitter,
    RecordsBySplits,
    ResumeState,
    SplitQueue,
    SplitReader,
    ValueRangeError,
)

__all__ = ["CassandraEmitter", "CassandraSplitReader"]

MAX_REPLICA_DOWN_RETRIES = 5  # per split: a page that keeps timing out with a replica down then shrinks as usual


# (rows of one page or None, paging state after it, the page size it was read with); rows None: a notice that
# the page size shrank, with nothing read
_Raw = tuple[list[tuple[Any, ...]] | None, bytes | None, int]


class CassandraSplitReader(SplitReader[CassandraSplit, _Raw]):
    """One session and one prepared statement per reader; one page per fetch, resumable by paging state.

    Wide partitions: a page that times out (the coordinator's ``ReadTimeout`` or the client's
    ``OperationTimedOut``) is asked for again from the same paging state with half as many rows, down to
    ``min_fetch_size``; only a timeout at that floor goes to the framework's retry (with its backoff). The split
    keeps its smaller page size for the rest of it, in its state too, so a retry or a resumed copy does not time
    out its way down again. Each shrink is a ``page_shrunk`` event, and the partition the next page starts in a
    ``hot_partition`` event naming its token.

    Lost replicas: each page goes to a live replica of its range first (``range_replicas_first``). A timeout while
    a replica of the split is down (as the driver sees it: its connections closed, or the first one failing; a
    replica still connecting is waited for) is not a wide partition: the page
    is asked for again at the same size, from a live replica, and the summary gets a ``replica_down`` event naming
    the node. ``Unavailable`` (too few replicas alive for ``consistency``) and no live node in ``local_dc`` are
    raised as transient errors that say so, retried by the framework until its budget runs out.
    """

    def __init__(self, options: CassandraOptions, select_cql: str,
                 token_of: Callable[[Any, Sequence[Sequence[Any]]], str]) -> None:
        """``select_cql``: the split query (bound to a split's start and end tokens); ``token_of(session, rows)``:
        the token of the rows' partition, as text (for ``hot_partition`` events)."""
        from cassandra import ConsistencyLevel, OperationTimedOut, ReadTimeout, Unavailable
        from cassandra.cluster import NoHostAvailable

        self._token_of = token_of
        self._options = options
        self._cluster, self._session = shared_session(self._options)
        self._replicas = RangeReplicas(self._cluster, self._session, options.keyspace)
        self._downs = _DownNodes(options.local_dc)
        self._cluster.register_listener(self._downs)
        for host in self._cluster.metadata.all_hosts():  # down before this reader connected
            if host.is_up is False:
                self._downs.on_down(host)
        self._replica_retries: dict[str, int] = {}
        self._session.client_protocol_handler = exact_protocol_handler(raw_uuids=True)  # see cassandra._types
        self._statement = self._session.prepare(select_cql)
        self._statement.consistency_level = getattr(ConsistencyLevel, self._options.consistency)
        self._statement.fetch_size = self._options.fetch_size
        self._timeouts = (ReadTimeout, OperationTimedOut)
        self._unavailable, self._no_host = Unavailable, NoHostAvailable
        # the head split's paging state: where its next page starts (None: at its beginning)
        self._queue: SplitQueue[CassandraSplit, bytes | None] = SplitQueue(lambda split: split.paging_state)
        self._page_sizes: dict[str, int] = {}
        self._shrunk: set[str] = set()  # splits whose next page names the hot partition
        self._woken = threading.Event()

    def add_splits(self, splits: Sequence[CassandraSplit]) -> None:
        self._queue.add(splits)

    def _request(self, split: CassandraSplit, page_size: int) -> Any:
        """One page of ``split`` from the current paging state; None when woken up before it came."""
        done = threading.Event()
        bound = self._statement.bind((split.start, split.end))
        bound.fetch_size = page_size
        bound.replicas = self._replicas.of(split.end)  # read by range_replicas_first
        future = self._session.execute_async(bound, paging_state=self._queue.position,
                                             timeout=self._options.request_timeout_s)
        future.add_callbacks(lambda _: done.set(), lambda _: done.set())
        while not done.wait(0.05):
            if self._woken.is_set():
                self._woken.clear()
                return None  # the page is requested again by the next fetch: reads are idempotent
        return future.result()  # raises the request's error, if any

    def fetch(self) -> RecordsBySplits[_Raw]:
        split = self._queue.head
        if split is None:
            return RecordsBySplits()
        if split.done:
            self._queue.pop()
            return RecordsBySplits.finished_only(split.split_id)
        page_size = self._page_sizes.setdefault(split.split_id, split.page_size or self._options.fetch_size)
        try:
            result = self._request(split, page_size)
        except self._unavailable as exc:
            raise self._unavailable_error(split, exc) from exc
        except self._no_host as exc:
            errors = exc.errors.values() if isinstance(exc.errors, dict) else ()
            unavailable = [e for e in errors if isinstance(e, self._unavailable)]  # after the retry on another host
            if unavailable:
                raise self._unavailable_error(split, unavailable[0]) from exc
            raise self._no_host_error() from exc
        except self._timeouts as exc:
            down = self._unreached(split)
            retries = self._replica_retries.get(split.split_id, 0)
            if down and retries < MAX_REPLICA_DOWN_RETRIES:
                self._replica_retries[split.split_id] = retries + 1
                event = ReadEvent("replica_down", split.split_id, f"{type(exc).__name__} on a page of {page_size} "
                                                                  f"rows while {', '.join(down)} is down; "
                                                                  "read again from a live replica at the same size")
                return RecordsBySplits(events=(event,))
            floor = min(self._options.min_fetch_size, self._options.fetch_size)
            if page_size <= floor:  # the framework retries from the split state, with its backoff
                raise CassandraTimeoutError(
                    f"a page of {page_size} rows (min_fetch_size) timed out ({type(exc).__name__}: {exc}); a "
                    f"partition too wide for request_timeout_s={self._options.request_timeout_s:g}, or a node "
                    "overloaded") from exc
            smaller = max(floor, page_size // 2)
            self._page_sizes[split.split_id] = smaller
            self._shrunk.add(split.split_id)
            event = ReadEvent("page_shrunk", split.split_id, f"{type(exc).__name__} on a page of {page_size} rows; "
                                                             f"reading on from there with pages of {smaller}")
            return RecordsBySplits([(split.split_id, (None, self._queue.position, smaller))], events=(event,))
        if result is None:
            return RecordsBySplits()
        events: tuple[ReadEvent, ...] = ()
        lost = self._downs.take()
        if lost:
            events += tuple(ReadEvent("node_down", split.split_id, f"{address} is down (the driver lost its "
                                                                   "connections); read on from other replicas")
                            for address in lost)
        rows = list(result.current_rows)
        next_state = result.paging_state
        if split.split_id in self._shrunk and rows:
            self._shrunk.discard(split.split_id)
            events += (ReadEvent("hot_partition", split.split_id, f"{self._token_of(self._session, rows)}, "
                                                                 f"read in pages of {page_size} rows"),)
        batches = [(split.split_id, (rows, next_state, page_size))] if rows or next_state is None else []
        if next_state is not None:
            self._queue.position = next_state
            return RecordsBySplits(batches, events=events)
        self._queue.pop()
        self._page_sizes.pop(split.split_id, None)
        return RecordsBySplits(batches, frozenset({split.split_id}), events)

    def _unreached(self, split: CassandraSplit) -> list[str]:
        """The replicas of ``split`` this reader may read from but cannot reach: marked down, or failing to connect.
        A replica still connecting (a node lost just before this reader started, or a live one not yet reached) is
        waited for, up to ``connect_timeout_s``, so that its state and not the race decides."""
        from cassandra.policies import HostDistance

        policy = self._cluster.profile_manager.default.load_balancing_policy  # which nodes it opens pools to
        replicas = [h for h in self._replicas.of(split.end)
                    if self._readable(h) and policy.distance(h) != HostDistance.IGNORED]
        deadline = time.monotonic() + self._options.connect_timeout_s
        while True:
            connected = self._session.get_pool_state()
            unknown = [h for h in replicas if h.is_up is not False and h not in connected]
            if not unknown or time.monotonic() >= deadline:
                return sorted(h.address for h in replicas if h.is_up is False or h in unknown)
            time.sleep(0.01)

    def _readable(self, host: Any) -> bool:
        """Whether this reader may read from ``host``: any node, or with ``local_dc`` only that data centre's (the
        driver does not watch the others: their state says nothing)."""
        return not self._options.local_dc or host.datacenter == self._options.local_dc

    def _unavailable_error(self, split: CassandraSplit, exc: Any) -> CassandraUnavailableError:
        up = sorted(h.address for h in self._replicas.of(split.end) if h.is_up and self._readable(h))
        return CassandraUnavailableError(
            f"consistency {self._options.consistency} needs {exc.required_replicas} replica(s) of "
            f"{split.split_id} alive, the coordinator counts {exc.alive_replicas} (up as this reader sees them: "
            f"{', '.join(up) or 'none'}); bring the nodes back or lower the 'consistency' option")

    def _no_host_error(self) -> CassandraUnavailableError:
        hosts = list(self._cluster.metadata.all_hosts())
        up = sorted(f"{h.address} ({h.datacenter})" for h in hosts if h.is_up)
        where = f"data centre '{self._options.local_dc}' (local_dc)" if self._options.local_dc else "the cluster"
        return CassandraUnavailableError(f"no node of {where} is up to read from; nodes up: {', '.join(up) or 'none'}")

    def wake_up(self) -> None:
        self._woken.set()

    def close(self) -> None:
        self._cluster.unregister_listener(self._downs)  # the session is the process's: it stays open


_reported_down: set[str] = set()  # nodes this process has reported down (readers come and go; one event each)
_reported_lock = threading.Lock()


class _DownNodes:
    """A host state listener (the driver calls it from its own threads): the nodes that went down, each reported
    once a process until it comes back up."""

    def __init__(self, local_dc: str) -> None:
        self._local_dc = local_dc
        self._lock = threading.Lock()
        self._down: list[str] = []

    def on_down(self, host: Any) -> None:
        if self._local_dc and host.datacenter != self._local_dc:
            return  # not a node this reader reads from
        address = str(host.address)
        with _reported_lock:
            if address in _reported_down:
                return
            _reported_down.add(address)
        with self._lock:
            self._down.append(address)

    def take(self) -> list[str]:
        with self._lock:
            down, self._down = self._down, []
        return down

    def on_up(self, host: Any) -> None:
        with _reported_lock:
            _reported_down.discard(str(host.address))

    def on_add(self, host: Any) -> None:
        pass

    def on_remove(self, host: Any) -> None:
        pass


class CassandraEmitter(RecordEmitter[_Raw, ResumeState[CassandraSplit]]):
    """Rows (tuples) to one Arrow batch, column by column; sets the state to the page's paging state."""

    def __init__(self, schema: pa.Schema, converters: Sequence[Any], keys: Sequence[str] = ()) -> None:
        self._schema = schema
        self._converters = converters
        self._keys = [(name, schema.names.index(name)) for name in keys if name in schema.names]

    def emit(self, raw: _Raw, state: ResumeState[CassandraSplit]) -> pa.RecordBatch | None:
        rows, next_state, page_size = raw
        if rows is None:  # the page size shrank; nothing was read
            state.advance(page_size=page_size)
            return None
        state.advance(paging_state=next_state, done=next_state is None, page_size=page_size)
        if not rows:
            return None
        columns = list(zip(*rows, strict=True))
        try:
            arrays = [convert(list(col)) for convert, col in zip(self._converters, columns, strict=True)]
        except ValueRangeError as exc:
            raise ValueRangeError(self._out_of_range(exc, rows), exc.row) from None
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _out_of_range(self, exc: ValueRangeError, rows: Sequence[Any]) -> str:
        """The message of a value out of its Arrow type's range, with the key of its row and the way out."""
        where = ""
        if exc.row is not None and self._keys:
            row = rows[exc.row]
            where = "row " + ", ".join(f"{name}={row[i]!r}" for name, i in self._keys) + ": "
        way = (": Parquet, Spark and tables hold timestamps in microseconds; copy it exactly as text with "
               "-o timestamp_unit=ms and --format jsonl (or csv)" if "timestamp[us]" in str(exc) else "")
        return f"{where}{exc}{way}"
