"""A user's own connector, outside this project's packages, used through format('splitsource')."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from connectors.generator import GeneratorSource
from splitsource import RecordEmitter


class SquaresSource(GeneratorSource):
    """The generator under another name, with one fixed column: proves module:Class resolution end to end."""

    name = "squares"

    def __init__(self, options: object) -> None:
        raw = dict(options) if isinstance(options, dict) else {}
        raw.setdefault("columns", "id:bigint")
        super().__init__(raw)


class OneUlpOffGenerator(GeneratorSource):
    """The generator with a planted conversion bug: its emitter moves every ``score`` by one unit in the last place,
    the kind of error a float on the conversion path makes."""

    def create_record_emitter(self) -> RecordEmitter[Any, Any]:
        from tests.splitsource.fakes import RewritingEmitter

        return RewritingEmitter(super().create_record_emitter(), "score", lambda column: pa.array(
            [None if v is None else math.nextafter(v, math.inf) for v in column.to_pylist()], pa.float64()))
