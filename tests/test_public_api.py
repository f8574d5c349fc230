"""Each package's public API is what its __all__ says, sorted, and importable."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "name", ["splitsource", "serializers", "connectors.generator", "splitsource.testing", "pyspark_splitsource",
             "splitsource.sink", "pyspark_bucketing", "splitsource.runtime", "splitsource.spark", "splitsource.copyjob"]
)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=lambda s: (not s.isupper(), s)) or exported == sorted(exported)
    for item in exported:
        assert hasattr(module, item), f"{name}.{item} is in __all__ but missing"


def test_framework_never_imports_a_connector() -> None:
    import pathlib

    root = pathlib.Path(importlib.import_module("splitsource").__file__).parent  # type: ignore[arg-type]
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import connectors" not in text and "from connectors" not in text, path
