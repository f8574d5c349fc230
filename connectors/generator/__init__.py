"""The generator connector: deterministic synthetic rows (``connector=generator``)."""

from connectors.generator._source import (
    GeneratorOptions,
    GeneratorPosition,
    GeneratorSource,
    GeneratorSplit,
    generate_batch,
)

__all__ = ["GeneratorOptions", "GeneratorPosition", "GeneratorSource", "GeneratorSplit", "generate_batch"]
