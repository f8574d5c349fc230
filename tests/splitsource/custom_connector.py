"""A user's own connector, outside this project's packages, used through format('splitsource')."""

from __future__ import annotations

from connectors.generator import GeneratorSource


class SquaresSource(GeneratorSource):
    """The generator under another name, with one fixed column: proves module:Class resolution end to end."""

    name = "squares"

    def __init__(self, options: object) -> None:
        raw = dict(options) if isinstance(options, dict) else {}
        raw.setdefault("columns", "id:bigint")
        super().__init__(raw)
