"""A copy task's Arrow memory: the system allocator while it runs (both engines' tasks run ``run_task``), unless
the user chose a pool; the process's default pool again after it (a Spark worker runs other tasks next)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from splitsource.copyjob import _protocol
from splitsource.copyjob._protocol import run_task
from tests.fixtures import generator_task


def _run_recording_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Any]:
    seen: list[str] = []
    real = _protocol.copy_task

    def copy_task(*args: Any, **kwargs: Any) -> Any:
        seen.append(pa.default_memory_pool().backend_name)
        return real(*args, **kwargs)

    monkeypatch.setattr(_protocol, "copy_task", copy_task)
    task, remaining = generator_task(tmp_path / "out", "id:bigint,s:string")
    result = run_task(task, lambda rows: remaining.pop() if remaining else None)
    return seen, result


def test_a_copy_task_allocates_from_the_system_pool_and_gives_the_default_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    before = pa.default_memory_pool().backend_name
    assert before != "system", "the test needs another default pool to tell them apart"
    seen, result = _run_recording_pool(tmp_path, monkeypatch)
    assert seen == ["system"]
    assert result.rows == 3000 and result.splits == 3
    assert pa.default_memory_pool().backend_name == before


def test_a_pool_the_user_chose_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")  # read by Arrow at its start: this process's is set
    before = pa.default_memory_pool().backend_name
    seen, _ = _run_recording_pool(tmp_path, monkeypatch)
    assert seen == [before] and pa.default_memory_pool().backend_name == before
