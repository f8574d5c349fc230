"""The conformance kit catches the connector bugs it exists for: eight kinds, each planted into a small connector
(the generator, as docs/connector-guide.md builds it) by overriding one piece; ``check_all`` must fail on every one
and pass on the unmodified connector."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from connectors.generator._source import (
    GeneratorEmitter,
    GeneratorEnumerator,
    GeneratorSource,
    GeneratorSplit,
    GeneratorSplitReader,
    GeneratorSplitState,
)
from serializers import MsgpackRecordSerializer
from splitsource import testing
from splitsource._api import RecordsBySplits

OPTIONS = {"rows": "2000", "split_rows": "200", "batch_rows": "50", "fetch_delay_ms": "2"}


def expected(source: GeneratorSource) -> pa.Table:
    return pa.Table.from_batches(testing.LocalRuntime(source, 1).run().batches, source.schema())


class LostAddBack(GeneratorSource):
    """restore_enumerator drops the add-back list (the state FLIP-27 checkpoints so that no split is lost)."""

    def restore_enumerator(self, context: Any, state: Any) -> GeneratorEnumerator:
        return GeneratorEnumerator(self.options, context, state.position)


class ReplanOnRestore(GeneratorSource):
    """restore_enumerator plans again from the start (flink-connector-cassandra's bug)."""

    def restore_enumerator(self, context: Any, state: Any) -> GeneratorEnumerator:
        return GeneratorEnumerator(self.options, context, pending=state.pending)


class _SkippingState(GeneratorSplitState):
    def to_split(self) -> GeneratorSplit:
        return GeneratorSplit(self.split.index, min(self.offset + 1, self.split.end), self.split.end,
                              self.split.row_bytes)


class SkipOnResume(GeneratorSource):
    """A resumed split starts one row past where its state says."""

    def create_split_state(self, split: GeneratorSplit) -> GeneratorSplitState:
        return _SkippingState(split)


class _RestartingState(GeneratorSplitState):
    def to_split(self) -> GeneratorSplit:
        return self.split


class RepeatOnResume(GeneratorSource):
    """A resumed split starts over from its first row (the Spark Cassandra Connector's restart-from-zero)."""

    def create_split_state(self, split: GeneratorSplit) -> GeneratorSplitState:
        return _RestartingState(split)


class _StillEmitter(GeneratorEmitter):
    def emit(self, raw: Any, state: Any) -> pa.RecordBatch:
        return raw[1]


class EmitterLeavesState(GeneratorSource):
    """The emitter never moves the split state."""

    def create_record_emitter(self) -> GeneratorEmitter:
        return _StillEmitter()


class _EarlyReader(GeneratorSplitReader):
    def fetch(self) -> RecordsBySplits[Any]:
        split = self._queue.head
        result = super().fetch()
        if split is not None and result.batches and split.split_id not in result.finished:
            self._queue.pop()  # its remaining rows are dropped
            return RecordsBySplits(result.batches, frozenset({split.split_id}))
        return result


class FinishedEarly(GeneratorSource):
    """A split is reported finished after its first batch."""

    def create_split_reader(self) -> GeneratorSplitReader:
        return _EarlyReader(self)


class _OffByOneEnumerator(GeneratorEnumerator):
    def generate_split(self) -> GeneratorSplit | None:
        split = super().generate_split()
        if split is not None and split.end == self._options.rows:
            return GeneratorSplit(split.index, split.start, split.end - 1, split.row_bytes)  # exclusive bound - 1
        return split


class LastRowLost(GeneratorSource):
    """The last split's exclusive upper bound skips the final row (flink-connector-cassandra's maximum token)."""

    def create_enumerator(self, context: Any) -> GeneratorEnumerator:
        return _OffByOneEnumerator(self.options, context)


_LOSSY = MsgpackRecordSerializer(
    "GeneratorSplitSerializer", 1,
    to_fields=lambda s: [s.index, s.end, s.row_bytes],  # drops ``start``: a narrowed split comes back whole
    from_fields=lambda f: GeneratorSplit(int(f[0]), int(f[0]) * 200, int(f[1]), int(f[2])),
)


class SerializerDropsField(GeneratorSource):
    """The split serializer drops a field."""

    def split_serializer(self) -> Any:
        return _LOSSY


MUTANTS = [LostAddBack, ReplanOnRestore, SkipOnResume, RepeatOnResume, EmitterLeavesState, FinishedEarly,
           LastRowLost, SerializerDropsField]


def test_the_kit_passes_the_connector_without_a_planted_bug() -> None:
    source = GeneratorSource(OPTIONS)
    testing.check_all(source, expected(source))


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.__name__ for m in MUTANTS])
def test_the_kit_catches_a_planted_bug(mutant: type[GeneratorSource]) -> None:
    truth = expected(GeneratorSource(OPTIONS))  # the correct rows, not the mutant's own read
    with pytest.raises(AssertionError):
        testing.check_all(mutant(OPTIONS), truth)
