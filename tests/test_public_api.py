"""Each package's public API is what its __all__ says, sorted, and importable; and read_local takes what it says."""

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


def test_read_local_takes_a_source_or_the_data_sources_options_and_refuses_anything_else_in_one_line() -> None:
    from connectors.generator import GeneratorSource
    from splitsource import OptionsError, read_local

    by_options = read_local({"connector": "generator", "rows": "25", "split_rows": "10"})
    by_source = read_local(GeneratorSource({"rows": "25", "split_rows": "10"}))
    assert by_options.num_rows == 25 and by_options.sort_by("id").equals(by_source.sort_by("id"))
    with pytest.raises(OptionsError, match="read_local takes a Source or a mapping of options, not str"):
        read_local("generator")  # type: ignore[arg-type]
