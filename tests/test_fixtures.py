"""The suite's own fixtures: each pytest process searches ports no other one does, however many run (``-n``)."""

from __future__ import annotations

import pytest

from tests.fixtures import worker_ports


@pytest.mark.parametrize("workers", [2, 3, 4])
@pytest.mark.parametrize(("first", "stop", "step"), [(25432, 25532, 1), (18533, 18633, 10)])
def test_each_worker_searches_ports_of_its_own(monkeypatch: pytest.MonkeyPatch, workers: int, first: int, stop: int,
                                               step: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    shares = []
    for index in range(workers):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        shares.append(set(worker_ports(first, stop, step)))
    assert all(shares), shares
    assert sum(len(s) for s in shares) == len(set().union(*shares)), "two workers share a port"
    assert set().union(*shares) <= set(range(first, stop, step))


def test_one_process_searches_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert list(worker_ports(18181, 18281, 10)) == list(range(18181, 18281, 10))
