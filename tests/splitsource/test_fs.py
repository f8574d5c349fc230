"""The storage door: URIs split once and redacted, renames that never replace, durable writes that leave nothing
behind, and no module but the door touching pyarrow.fs."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from splitsource._fs import (
    LOCAL,
    OBJECT_STORE,
    OBJECT_STORE_CONDITIONAL,
    OTHER,
    Store,
    child_uri,
    redact,
    resolve_filesystem,
    set_tracer,
    sibling_uri,
    split_uri,
)
from splitsource.copyjob._job import default_checkpoint
from tests.fixtures import ROOT


def test_a_uri_query_string_stays_at_the_end_of_every_derived_path() -> None:
    uri = "s3://lake/out?endpoint_override=127.0.0.1:9000&scheme=http"
    assert default_checkpoint(uri) == "s3://lake/out.checkpoint?endpoint_override=127.0.0.1:9000&scheme=http"
    assert child_uri(uri, "_bucketing", "log") == \
        "s3://lake/out/_bucketing/log?endpoint_override=127.0.0.1:9000&scheme=http"
    assert split_uri(uri) == ("s3://lake", "/out", "?endpoint_override=127.0.0.1:9000&scheme=http")
    assert default_checkpoint("/data/out/") == "/data/out.checkpoint"
    assert sibling_uri("relative/out", ".x") == os.path.abspath("relative/out") + ".x"


def test_credentials_are_stripped_from_a_uri_before_it_is_shown() -> None:
    assert redact("s3://AKIAKEY:topsecret@lake/out") == "s3://***@lake/out"
    shown = redact("s3://lake/out?access_key=AKIAKEY&secret_key=topsecret&region=eu-west-1")
    assert "topsecret" not in shown and "AKIAKEY" not in shown and "region=eu-west-1" in shown
    assert redact("/data/with@sign") == "/data/with@sign"


def test_a_uri_of_the_same_store_maps_to_its_paths_without_gluing(tmp_path: Path) -> None:
    store, path = resolve_filesystem(f"file://{tmp_path}/out")
    assert store.local and path == f"{tmp_path}/out"
    _, again = resolve_filesystem(f"file://{tmp_path}/out.checkpoint")
    assert again == f"{tmp_path}/out.checkpoint"


def test_capabilities_are_stated_by_the_store() -> None:
    assert Store(pafs.LocalFileSystem()).capabilities == LOCAL
    assert Store(pafs.SubTreeFileSystem("/tmp", pafs.LocalFileSystem())).capabilities == OTHER
    s3 = Store(pafs.S3FileSystem(endpoint_override="127.0.0.1:1", scheme="http", region="us-east-1"))
    assert s3.capabilities == OBJECT_STORE_CONDITIONAL and s3.capabilities.rename_is_copy  # obstore is installed
    assert OBJECT_STORE.rename_is_copy and not OBJECT_STORE.exclusive_create


def test_a_move_never_replaces_an_existing_file(tmp_path: Path) -> None:
    store = Store(pafs.LocalFileSystem())
    (tmp_path / "a").write_text("new")
    (tmp_path / "b").write_text("old")
    with pytest.raises(FileExistsError):
        store.move(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b").read_text() == "old" and (tmp_path / "a").exists()


def test_a_durable_write_syncs_the_file_then_the_directory_and_leaves_no_temporary(tmp_path: Path) -> None:
    seen: list[tuple[str, ...]] = []
    set_tracer(lambda kind, *args: seen.append((kind, *(a for a in args if isinstance(a, str)))))
    try:
        Store(pafs.LocalFileSystem()).write(str(tmp_path / "f"), b"data")
    finally:
        set_tracer(None)
    kinds = [k for k, *_ in seen]
    assert kinds == ["write", "sync", "rename", "syncdir"], seen
    assert os.listdir(tmp_path) == ["f"] and (tmp_path / "f").read_bytes() == b"data"


def test_only_the_storage_door_imports_pyarrow_fs() -> None:
    offenders = []
    for package in ("splitsource", "connectors", "serializers", "pyspark_splitsource", "pyspark_bucketing"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "pyarrow.fs" or n.startswith("pyarrow.fs.") for n in names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == ["splitsource/_fs.py"]
