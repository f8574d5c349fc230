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

from splitsource._api import Source, Split, SplitReader, SplitState
from splitsource._errors import ProtocolError, SplitReadError, SplitSourceError

__all__ = ["ReaderMetrics", "RetryPolicy", "SourceReader"]

log = logging.getLogger("splitsource.reader")

SplitT = TypeVar("SplitT", bound=Split)
RawT = TypeVar("RawT")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient fetch error is retried from the split state.

    ``max_attempts`` counts attempts in a row without progress (an emitted batch resets the count); the wait before
    attempt ``n`` is ``min(initial_backoff * 2**(n-1), max_backoff)`` seconds.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.2
    max_backoff: float = 10.0

    def backoff(self, attempt: int) -> float:
        return float(min(self.initial_backoff * (2 ** (attempt - 1)), self.max_backoff))


@dataclass
class ReaderMetrics:
    """Counters a reader keeps, for progress and summaries."""

    rows: int = 0
    batches: int = 0
    bytes: int = 0
    retries: int = 0
    finished_splits: list[str] = field(default_factory=list)


_END = ("end",)


class SourceReader(Generic[SplitT, RawT]):
    """Reads splits from ``next_split`` through a fetcher thread and yields Arrow batches from :meth:`read`.

    Contract:

    - the fetcher thread calls ``SplitReader.fetch`` and puts results into a queue of ``queue_capacity`` items,
      blocking when it is full (backpressure: a slow consumer never makes the reader buffer the source);
    - the consuming thread (the one iterating :meth:`read`) owns every :class:`SplitState`: it creates it when a
      split is assigned and the emitter advances it batch by batch;
    - a fetch error the source declares transient is retried: the reader waits until every batch fetched before
      the error has been emitted, closes the split reader, and opens a new one on ``state.to_split()`` of each
      unfinished split, so nothing is repeated or skipped. After ``retry.max_attempts`` attempts in a row without
      progress, or on any other error, :class:`SplitReadError` names the split(s) and chains the cause;
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
        name: str = "reader",
    ) -> None:
        if queue_capacity < 1:
            raise ProtocolError("queue_capacity must be at least 1")
        self._source = source
        self._next_split = next_split
        self._retry = retry or RetryPolicy()
        self._name = name
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=queue_capacity)
        self._emitter = source.create_record_emitter()
        self._states: dict[str, SplitState[SplitT]] = {}
        self._split_reader: SplitReader[SplitT, RawT] | None = None
        self._fetcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._started = False
        self._orphans: list[SplitT] = []  # taken from next_split by a stopped fetcher, never started
        self.metrics = ReaderMetrics()

    # -- fetcher thread -------------------------------------------------------------------------------------------

    def _put(self, item: tuple[Any, ...]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fetch_loop(self, reader: SplitReader[SplitT, RawT], unfinished: set[str]) -> None:
        try:
            while not self._stop.is_set():
                if not unfinished:
                    split = self._next_split()
                    if split is None:
                        self._put(_END)
                        return
                    if not self._put(("assign", split)):
                        return
                    unfinished.add(split.split_id)
                    reader.add_splits([split])
                result = reader.fetch()
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
        reader = self._source.create_split_reader()
        self._split_reader = reader
        if resume:
            reader.add_splits(resume)
        unfinished = {s.split_id for s in resume}
        self._fetcher = threading.Thread(
            target=self._fetch_loop, args=(reader, unfinished), name=f"{self._name}-fetcher", daemon=True
        )
        self._fetcher.start()

    def _stop_fetcher(self) -> list[SplitT]:
        """Stop the fetcher, close its split reader, and return splits it took but the consumer never saw."""
        self._stop.set()
        if self._split_reader is not None:
            try:
                self._split_reader.wake_up()
            except Exception:  # best effort: close() below still runs
                log.debug("wake_up failed", exc_info=True)
        unseen: list[SplitT] = []
        while self._fetcher is not None and self._fetcher.is_alive():
            unseen.extend(self._drain())
            self._fetcher.join(timeout=0.05)
        unseen.extend(self._drain())
        if self._split_reader is not None:
            reader, self._split_reader = self._split_reader, None
            reader.close()
        self._fetcher = None
        self._stop = threading.Event()
        return unseen

    def _drain(self) -> list[SplitT]:
        taken: list[SplitT] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken
            if item[0] == "assign":
                taken.append(item[1])

    # -- consuming thread -----------------------------------------------------------------------------------------

    def read(self) -> Iterator[pa.RecordBatch]:
        """Yield the Arrow batches of every split ``next_split`` hands out, until it returns ``None``."""
        if self._started:
            raise ProtocolError(f"{self._name}: read() called twice")
        self._started = True
        self._start_fetcher([])
        failures = 0
        try:
            while True:
                item = self._queue.get()
                kind = item[0]
                if kind == "batch":
                    state = self._states.get(item[1])
                    if state is None:
                        raise ProtocolError(f"{self._name}: batch for split '{item[1]}' that is not assigned")
                    out = self._emitter.emit(item[2], state)
                    failures = 0
                    if out is not None and out.num_rows:
                        self.metrics.rows += out.num_rows
                        self.metrics.batches += 1
                        self.metrics.bytes += out.nbytes
                        yield out
                elif kind == "assign":
                    split = item[1]
                    if split.split_id in self._states:
                        raise ProtocolError(f"{self._name}: split '{split.split_id}' assigned twice")
                    self._states[split.split_id] = self._source.create_split_state(split)
                elif kind == "finished":
                    if self._states.pop(item[1], None) is not None:
                        self.metrics.finished_splits.append(item[1])
                elif kind == "error":
                    failures += 1
                    self._handle_error(item[1], failures)
                elif kind == "end":
                    return
        finally:
            self.close()

    def _handle_error(self, error: BaseException, attempt: int) -> None:
        split_ids = ", ".join(self._states) or "(none assigned)"
        unseen = self._stop_fetcher()
        for split in unseen:  # taken by the failed fetcher, never started: they resume from the start
            self._states[split.split_id] = self._source.create_split_state(split)
        if isinstance(error, SplitSourceError) and not isinstance(error, SplitReadError):
            raise error
        if not self._source.is_transient(error):
            raise SplitReadError(f"reading split(s) {split_ids} failed: {error}") from error
        if attempt >= self._retry.max_attempts:
            raise SplitReadError(
                f"reading split(s) {split_ids} failed after {attempt} attempts: {error}"
            ) from error
        wait = self._retry.backoff(attempt)
        log.warning(
            "%s: transient error on split(s) %s (attempt %d of %d), resuming from split state in %.1fs: %s",
            self._name, split_ids, attempt, self._retry.max_attempts, wait, error,
        )
        self.metrics.retries += 1
        time.sleep(wait)
        self._start_fetcher([state.to_split() for state in self._states.values()])

    def snapshot_splits(self) -> list[SplitT]:
        """The remaining work of this reader: unfinished splits as of the last emitted batch.

        Stops the fetcher first. Used by runtimes to give a failed reader's splits back to the enumerator.
        """
        if self._fetcher is not None:
            self._orphans.extend(self._stop_fetcher())
        return [state.to_split() for state in self._states.values()] + self._orphans

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fetcher is not None or self._split_reader is not None:
            self._orphans.extend(self._stop_fetcher())
