"""The generator connector: deterministic synthetic rows (``connector=generator``), on the short path."""

from connectors.generator._source import GeneratorOptions, GeneratorSource, generate_batch

__all__ = ["GeneratorOptions", "GeneratorSource", "generate_batch"]
