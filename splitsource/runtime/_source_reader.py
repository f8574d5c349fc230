"""SourceReader: one reader's fetcher thread, bounded queue, emitter and retry-from-state loop."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pyarrow as pa

from splitsource._api import ReadEvent, RecordEmitter, Source, Split, SplitReader, SplitState
from splitsource._errors import ProtocolError, SplitReadError, SplitSourceError, ValueRangeError
from splitsource._planning import ReadRate, RetryPolicy
from splitsource.runtime._throttle import Throttle

__all__ = ["ReaderMetrics", "SourceReader", "call_with_retry"]

log = logging.getLogger("splitsource.reader")

SplitT = TypeVar("SplitT", bound=Split)
RawT = TypeVar("RawT")
T = TypeVar("T")


def call_with_retry(source: Source[Any, Any, Any, Any], call: Callable[[], T], retry: RetryPolicy, what: str) -> T:
    """``call()`` (something that connects: a schema, an emitter), retried as :class:`RetryPolicy` says while
    ``source.is_transient`` calls its error transient: a task that starts while a node restarts waits for it."""
    attempt, first = 0, time.monotonic()
    while True:
        try:
            return call()
        except Exception as error:
            attempt += 1
            waited = time.monotonic() - first
            if not source.is_transient(error):
                raise
            if retry.gives_up(attempt, waited):
                raise SplitReadError(f"{what} failed after {attempt} attempts over {waited:.1f}s: {error}",
                                     attempts=attempt, waited_s=waited) from error
            wait = retry.backoff(attempt)
            log.warning("%s: transient error (attempt %d, %.0fs so far), retrying in %.1fs: %s", what, attempt,
                        waited, wait, error)
            time.sleep(wait)


@dataclass
class ReaderMetrics:
    """Counters a reader keeps, for progress and summaries."""

    rows: int = 0
    batches: int = 0
    bytes: int = 0
    retries: int = 0  # transient errors resumed from the split state
    throttled_s: float = 0.0  # seconds the reader slept to keep to its read rate
    finished_splits: list[str] = field(default_factory=list)
    split_rows: dict[str, int] = field(default_factory=dict)  # rows emitted per split id, finished or not
    event_counts: dict[str, int] = field(default_factory=dict)  # ReadEvents by kind
    events: list[ReadEvent] = field(default_factory=list)  # the first MAX_EVENTS of them


_END = ("end",)
MAX_EVENTS = 100  # events kept per reader with their detail; all are counted


class SourceReader(Generic[SplitT, RawT]):
    """Reads splits from ``next_split`` through a fetcher thread and yields Arrow batches from :meth:`read`.

    Contract (Flink's ``SourceReaderBase`` and ``SplitFetcherManager``):

    - the consuming thread (the one iterating :meth:`read`) owns the splits: it alone calls ``next_split``,
      registers the split's :class:`SplitState`, and only then hands the split to the fetcher; the emitter
      advances the state batch by batch. A split is never held only by the fetcher, so a snapshot or an add-back
      after any stop or failure sees every split this reader took;
    - the fetcher thread creates the split reader (for a connector, connecting), calls ``SplitReader.fetch`` and
      puts results into a queue of ``queue_capacity`` items, blocking when it is full (backpressure);
    - every error, from creating the split reader as from fetching, goes to ``Source.is_transient``. A transient
      one is retried: the reader waits until every batch fetched before it has been emitted, closes the split
      reader, and starts a new one on ``state.to_split()`` of each unfinished split, so nothing is repeated or
      skipped; it gives up as :class:`RetryPolicy` says, with :class:`SplitReadError` naming the splits, the
      attempts and the time waited, and chaining the cause;
    - with a ``rate`` (this reader's share of the job's read rate), each emitted batch is paced by a
      :class:`~splitsource.runtime._throttle.Throttle`; the bounded queue passes the pace on to the fetcher;
    - :meth:`close` is always safe to call, also from ``finally`` after an error; :meth:`read` calls it when the
      iteration ends or is abandoned.
    """

    def __init__(
        self,
        source: Source[SplitT, Any, RawT, Any],
        next_split: Callable[[], SplitT | None],
        *,
        queue_capacity: int = 4,
        retry: RetryPolicy | None = None,
        rate: ReadRate | None = None,
        name: str = "reader",
        metrics: ReaderMetrics | None = None,
    ) -> None:
        if queue_capacity < 1:
            raise ProtocolError("queue_capacity must be at least 1")
        self._source = source
        self._next_split = next_split
        self._retry = retry or RetryPolicy()
        self._throttle = Throttle(rate) if rate is not None and rate.limited else None
        self._name = name
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=queue_capacity)
        self._inbox: queue.Queue[SplitT | None] = queue.Queue()  # consumer -> fetcher: the next split, or None
        self._emitter: RecordEmitter[RawT, Any] | None = None  # made by read(): it may connect
        self._states: dict[str, SplitState[SplitT]] = {}
        self._split_reader: SplitReader[SplitT, RawT] | None = None
        self._fetcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._started = False
        self.metrics = metrics if metrics is not None else ReaderMetrics()

    # -- fetcher thread -------------------------------------------------------------------------------------------

    def _put(self, item: tuple[Any, ...]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _take(self, inbox: queue.Queue[SplitT | None]) -> tuple[bool, SplitT | None]:
        """The consumer's answer to an ``idle`` request: (True, split or None), or (False, None) when stopped."""
        while not self._stop.is_set():
            try:
                return True, inbox.get(timeout=0.1)
            except queue.Empty:
                continue
        return False, None

    def _fetch_loop(self, resume: list[SplitT], stop: threading.Event, inbox: queue.Queue[SplitT | None]) -> None:
        try:
            reader = self._source.create_split_reader()
            self._split_reader = reader
            if stop.is_set():  # stopped while connecting: _stop_fetcher may have missed the reader
                return
            unfinished = {s.split_id for s in resume}
            if resume:
                reader.add_splits(resume)
            while not stop.is_set():
                if not unfinished:
                    if not self._put(("idle",)):
                        return
                    answered, split = self._take(inbox)
                    if not answered or split is None:
                        return
                    unfinished.add(split.split_id)
                    reader.add_splits([split])
                result = reader.fetch()
                for event in result.events:
                    if not self._put(("event", event)):
                        return
                for split_id, raw in result.batches:
                    if not self._put(("batch", split_id, raw)):
                        return
                for split_id in result.finished:
                    unfinished.discard(split_id)
                    if not self._put(("finished", split_id)):
                        return
        except BaseException as exc:  # handed to the consuming thread, which decides
            self._put(("error", exc))

    def _start_fetcher(self, resume: list[SplitT]) -> None:
        self._stop = threading.Event()
        self._inbox = queue.Queue()
        self._fetcher = threading.Thread(
            target=self._fetch_loop, args=(resume, self._stop, self._inbox), name=f"{self._name}-fetcher",
            daemon=True,
        )
        self._fetcher.start()

    def _stop_fetcher(self) -> None:
        """Stop the fetcher and close its split reader. Queued items are dropped: every split they concern has a
        registered state, which is where a restart or a snapshot continues from."""
        self._stop.set()
        if self._split_reader is not None:
            try:
                self._split_reader.wake_up()
            except Exception:  # best effort: close() below still runs
                log.debug("wake_up failed", exc_info=True)
        while self._fetcher is not None and self._fetcher.is_alive():
            self._drain()
            self._fetcher.join(timeout=0.05)
        self._drain()
        if self._split_reader is not None:
            reader, self._split_reader = self._split_reader, None
            reader.close()
        self._fetcher = None

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    # -- consuming thread -----------------------------------------------------------------------------------------

    def read(self) -> Iterator[pa.RecordBatch]:
        """Yield the Arrow batches of every split ``next_split`` hands out, until it returns ``None``."""
        if self._started:
            raise ProtocolError(f"{self._name}: read() called twice")
        self._started = True
        emitter = self._emitter = call_with_retry(self._source, self._source.create_record_emitter, self._retry,
                                                  f"{self._name}: creating the record emitter")
        self._start_fetcher([])
        failures, failing_since = 0, 0.0
        try:
            while True:
                item = self._queue.get()
                kind = item[0]
                if kind == "batch":
                    state = self._states.get(item[1])
                    if state is None:
                        raise ProtocolError(f"{self._name}: batch for split '{item[1]}' that is not assigned")
                    out = emitter.emit(item[2], state)
                    failures = 0
                    if out is not None and out.num_rows:
                        self.metrics.split_rows[item[1]] = self.metrics.split_rows.get(item[1], 0) + out.num_rows
                        self.metrics.rows += out.num_rows
                        self.metrics.batches += 1
                        self.metrics.bytes += out.nbytes
                        if self._throttle is not None:
                            self._throttle(out.num_rows, out.nbytes)
                            self.metrics.throttled_s = self._throttle.waited
                        yield out
                elif kind == "idle":
                    split = self._next_split()
                    if split is None:
                        self._inbox.put(None)
                        return
                    if split.split_id in self._states:
                        raise ProtocolError(f"{self._name}: split '{split.split_id}' assigned twice")
                    self._states[split.split_id] = self._source.create_split_state(split)
                    self._inbox.put(split)
                elif kind == "event":
                    log.warning("%s: %s", self._name, item[1])
                    if len(self.metrics.events) < MAX_EVENTS:
                        self.metrics.events.append(item[1])
                    self.metrics.event_counts[item[1].kind] = self.metrics.event_counts.get(item[1].kind, 0) + 1
                elif kind == "finished":
                    if self._states.pop(item[1], None) is not None:
                        self.metrics.finished_splits.append(item[1])
                elif kind == "error":
                    failures += 1
                    failing_since = time.monotonic() if failures == 1 else failing_since
                    self._handle_error(item[1], failures, time.monotonic() - failing_since)
        finally:
            self.close()

    def _handle_error(self, error: BaseException, attempt: int, waited: float) -> None:
        held = tuple(self._states)
        split_ids = ", ".join(held) or "(none assigned)"
        self._stop_fetcher()
        if not self._source.is_transient(error):
            if isinstance(error, ValueRangeError) or (isinstance(error, SplitSourceError)
                                                      and not isinstance(error, SplitReadError)):
                raise error  # the connector's own clear error (bad option, missing table, a value): as it is
            raise SplitReadError(f"reading split(s) {split_ids} failed: {error}", split_ids=held,
                                 attempts=attempt) from error
        if self._retry.gives_up(attempt, waited):
            raise SplitReadError(
                f"reading split(s) {split_ids} failed after {attempt} attempts over {waited:.1f}s: {error}",
                split_ids=held, attempts=attempt, waited_s=waited,
            ) from error
        wait = self._retry.backoff(attempt)
        log.warning(
            "%s: transient error on split(s) %s (attempt %d, %.0fs so far, giving up after %d attempts and %.0fs), "
            "resuming from split state in %.1fs: %s",
            self._name, split_ids, attempt, waited, self._retry.max_attempts, self._retry.max_wait, wait, error,
        )
        self.metrics.retries += 1
        time.sleep(wait)
        self._start_fetcher([state.to_split() for state in self._states.values()])

    def snapshot_splits(self) -> list[SplitT]:
        """The remaining work of this reader: unfinished splits as of the last emitted batch.

        Stops the fetcher first. Used by runtimes to give a failed reader's splits back to the enumerator.
        """
        if self._fetcher is not None:
            self._stop_fetcher()
        return [state.to_split() for state in self._states.values()]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fetcher is not None or self._split_reader is not None:
            self._stop_fetcher()
