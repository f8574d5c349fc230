"""The runtime API: what drives connectors, apart from what connectors implement (Flink's connector-base).

- :class:`SourceReader`: one reader's fetcher thread, bounded queue, record emitter and retry-from-state loop;
- :func:`read_splits`: a reader task's body (splits in, Arrow batches of one schema out);
- :class:`InProcessRuntime` / :func:`read_local`: an enumerator and N reader threads in this process, with split
  requests, add-back and checkpoints (what :mod:`splitsource.testing` runs connectors on).

No pyspark here: Spark's partitions (:mod:`splitsource.spark`) and the local copy engine (:mod:`splitsource.copyjob`)
both run readers through this package.
"""

from splitsource._planning import RetryPolicy
from splitsource.runtime._local import Checkpoint, InProcessRuntime, RunResult, read_local
from splitsource.runtime._read import conform_batch, read_splits
from splitsource.runtime._source_reader import ReaderMetrics, SourceReader, call_with_retry

__all__ = [
    "Checkpoint",
    "InProcessRuntime",
    "ReaderMetrics",
    "RetryPolicy",
    "RunResult",
    "SourceReader",
    "call_with_retry",
    "conform_batch",
    "read_local",
    "read_splits",
]
