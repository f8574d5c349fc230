"""The in-process runtime, without Spark: one enumerator, N reader threads, dynamic split requests and add-back.

It is what the conformance kit (:mod:`splitsource.testing`) runs connectors on, and a quick way to read a source
in plain Python (``read_local(source)``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pyarrow as pa

from splitsource._api import EnumeratorState, FixedEnumeratorContext, Source, Split, SplitEnumerator
from splitsource._errors import OptionsError
from splitsource._planning import ReadRate, RetryPolicy, build_source
from splitsource.runtime._source_reader import SourceReader

__all__ = ["Checkpoint", "InProcessRuntime", "RunResult", "read_local"]

SplitT = TypeVar("SplitT", bound=Split)


@dataclass(frozen=True)
class Checkpoint(Generic[SplitT]):
    """A consistent cut: the enumerator's state and the remaining splits of every reader."""

    enumerator: EnumeratorState[SplitT, Any]
    reader_splits: tuple[SplitT, ...]


@dataclass
class RunResult(Generic[SplitT]):
    """Batches emitted by a run (per reader), and the checkpoint if the run was stopped early."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    checkpoint: Checkpoint[SplitT] | None = None
    split_requests: int = 0
    reader_failures: int = 0
    retries: int = 0

    def table(self, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=schema)


class InProcessRuntime(Generic[SplitT]):
    """Runs ``source`` with ``parallelism`` reader threads that request splits one at a time.

    - ``restore``: start from a :class:`Checkpoint` instead of a fresh plan (the enumerator is restored from its
      state and the readers' remaining splits are added back first);
    - ``fail_readers``: reader index → number of batches after which that reader "crashes": its remaining splits
      are added back to the enumerator and a fresh reader takes its place;
    - ``stop_after_batches``: stop every reader once that many batches were emitted in total and return a
      checkpoint of what is left.
    """

    def __init__(
        self,
        source: Source[SplitT, Any, Any, Any],
        parallelism: int = 2,
        *,
        restore: Checkpoint[SplitT] | None = None,
        retry: RetryPolicy | None = None,
        queue_capacity: int = 2,
        rate: ReadRate | None = None,
    ) -> None:
        self._source = source
        self._rate = rate.shared(parallelism) if rate is not None else None
        self._parallelism = parallelism
        self._retry = retry or RetryPolicy(initial_backoff=0.01, max_backoff=0.05)
        self._queue_capacity = queue_capacity
        context = FixedEnumeratorContext(parallelism)
        self.enumerator: SplitEnumerator[SplitT, Any]
        if restore is None:
            self.enumerator = source.create_enumerator(context)
        else:
            self.enumerator = source.restore_enumerator(context, restore.enumerator)
            self.enumerator.add_splits_back(restore.reader_splits)
        self._lock = threading.Lock()

    def run(
        self, *, fail_readers: Mapping[int, int] | None = None, stop_after_batches: int | None = None
    ) -> RunResult[SplitT]:
        result: RunResult[SplitT] = RunResult()
        failures = dict(fail_readers or {})
        stop = threading.Event()
        errors: list[BaseException] = []
        leftovers: list[SplitT] = []
        self.enumerator.start()

        def request() -> SplitT | None:
            with self._lock:
                result.split_requests += 1
                return self.enumerator.next_split()

        def run_reader(index: int) -> None:
            while True:
                reader = SourceReader(
                    self._source, request, queue_capacity=self._queue_capacity, retry=self._retry,
                    rate=self._rate, name=f"reader-{index}",
                )
                crash_after = failures.pop(index, None)
                emitted = 0
                crashed = False
                try:
                    for batch in reader.read():
                        with self._lock:
                            result.batches.append(batch)
                            emitted += 1
                            if stop_after_batches is not None and len(result.batches) >= stop_after_batches:
                                stop.set()
                        if stop.is_set():
                            break
                        if crash_after is not None and emitted >= crash_after:
                            crashed = True
                            break
                except BaseException as exc:
                    errors.append(exc)
                    stop.set()
                    return
                remaining = reader.snapshot_splits()
                reader.close()
                with self._lock:
                    result.retries += reader.metrics.retries
                    if crashed:
                        result.reader_failures += 1
                        self.enumerator.add_splits_back(remaining)
                    else:
                        leftovers.extend(remaining)
                if not crashed:
                    return

        threads = [
            threading.Thread(target=run_reader, args=(i,), name=f"local-reader-{i}", daemon=True)
            for i in range(self._parallelism)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        if stop.is_set():
            result.checkpoint = Checkpoint(self.enumerator.snapshot_state(), tuple(leftovers))
        self.enumerator.close()
        return result


def read_local(source: Source[Any, Any, Any, Any] | Mapping[str, str], parallelism: int = 2) -> pa.Table:
    """Read the whole source with the in-process runtime and return one table (row order is not defined).
    ``source``: a :class:`~splitsource.Source`, or the options ``spark.read.format("splitsource")`` takes
    (``{"connector": "generator", "rows": "10"}``)."""
    if isinstance(source, Mapping):
        _, source = build_source(source)
    elif not isinstance(source, Source):
        raise OptionsError(f"read_local takes a Source or a mapping of options, not {type(source).__name__}")
    result = InProcessRuntime(source, parallelism).run()
    return result.table(source.schema())


