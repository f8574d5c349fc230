"""Offsets (version 2): the read's plan stored once, offsets holding a cursor whose size does not grow with the
plan; an enumerator that does not cut the same splits again is refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from connectors.cassandra import CassandraSource
from connectors.cassandra._tokens import PlanEntry
from connectors.generator import GeneratorSource
from splitsource._errors import CheckpointError
from splitsource._fs import locate
from splitsource._offsets import (
    _LIVE,
    PlanStore,
    initial_offset,
    next_offset,
    offset_splits,
    source_fingerprint,
)
from splitsource._planning import BatchLimit
from tests.splitsource.full_api import RowsSource

MIN, MAX = -(2**63), 2**63 - 1


class RingSource(CassandraSource):
    """A Cassandra source whose plan is a synthetic ring of ``ranges`` ranges (no server: planning only)."""

    ranges = 20_000

    def plan(self) -> tuple[PlanEntry, ...]:
        step = (MAX - MIN) // self.ranges
        bounds = [MIN + i * step for i in range(self.ranges)] + [MAX]
        pairs = zip(bounds, bounds[1:], strict=False)
        return tuple(PlanEntry(a, b, 1 + i % 3, 1_000_000) for i, (a, b) in enumerate(pairs))


def ring_source() -> RingSource:
    return RingSource({"hosts": "127.0.0.1", "keyspace": "ks", "table": "t"})


def drain(source: Any, store: PlanStore, limit: BatchLimit) -> tuple[list[dict[str, Any]], list[str]]:
    """Every offset of the read, and the split ids in the order the batches took them."""
    fingerprint = source_fingerprint(source)
    offsets = [initial_offset(source, fingerprint, 2, store)]
    ids: list[str] = []
    while (end := next_offset(source, fingerprint, offsets[-1], 2, limit, store)) is not None:
        offsets.append(end)
        ids.extend(s.split_id for s in offset_splits(source, end))
    return offsets, ids


def test_a_large_plan_is_stored_once_and_offsets_stay_small(tmp_path: Path) -> None:
    source = ring_source()
    offsets, ids = drain(source, PlanStore(locate(str(tmp_path / "plans"))), BatchLimit(max_splits=400))
    plans = list((tmp_path / "plans").iterdir())
    assert len(plans) == 1 and plans[0].stat().st_size > 500_000, "the plan is written once, whole"
    sizes = [len(json.dumps(o)) for o in offsets]
    assert max(sizes) < 64 * 1024, f"an offset holds the plan ({max(sizes)} bytes)"
    assert len(ids) == len(set(ids)) == sum(1 + i % 3 for i in range(RingSource.ranges)), "each split once"


def test_without_a_plan_location_the_plan_travels_in_each_offset(tmp_path: Path) -> None:
    source = GeneratorSource({"rows": "100", "split_rows": "10"})
    offsets, ids = drain(source, PlanStore(), BatchLimit(max_splits=3))
    assert all("plan_state" in o for o in offsets) and len(ids) == 10


# by count; and by size, where the ring's splits (1,000,000, 500,000 or 333,333 bytes) rarely fill a batch exactly
LIMITS = {"splits": BatchLimit(max_splits=2000), "bytes": BatchLimit(max_bytes=1_000_000_000)}


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("restart_every", [1, 3])
def test_a_restart_restores_the_enumerator_from_the_plan_and_takes_the_same_splits(tmp_path: Path,
                                                                                   restart_every: int,
                                                                                   limit: str) -> None:
    source = ring_source()
    store = PlanStore(locate(str(tmp_path / "plans")))
    fingerprint = source_fingerprint(source)
    expected = drain(source, store, LIMITS[limit])[1]
    offset = initial_offset(source, fingerprint, 2, store)
    ids: list[str] = []
    restarts = batches = 0
    while True:
        if batches % restart_every == 0:
            _LIVE.keep(("nothing", "", 0), ring_source().create_enumerator(None))  # a new process: nothing kept
            restarts += 1
        end = next_offset(ring_source(), fingerprint, json.loads(json.dumps(offset)), 2, LIMITS[limit], store)
        if end is None:
            break
        ids.extend(s.split_id for s in offset_splits(source, end))
        offset, batches = end, batches + 1
    assert restarts > 5, "the test must restart between batches"
    assert ids == expected


def test_a_batch_by_size_holds_at_most_its_limit() -> None:
    """Sixty equal splits under a limit of 25.5 of them: 25 in each batch (never a 26th that goes over it), then the
    rest; under a limit smaller than one split, each split is a batch of its own."""
    options = {"rows": "60000", "split_rows": "1000"}
    first = RowsSource(options).create_enumerator(None).next_split()  # type: ignore[arg-type]
    assert first is not None and first.estimated_size_bytes > 0
    split = first.estimated_size_bytes

    def batches(limit: int) -> list[int]:
        source = RowsSource(options)
        fingerprint = source_fingerprint(source)
        offsets = [initial_offset(source, fingerprint, 2, PlanStore())]
        while (end := next_offset(source, fingerprint, offsets[-1], 2, BatchLimit(max_bytes=limit), PlanStore())):
            offsets.append(end)
        ids = [s.split_id for o in offsets[1:] for s in offset_splits(source, o)]
        assert ids == [f"generator-{i}" for i in range(60)], "each split once, in order"
        return [len(offset_splits(source, o)) for o in offsets[1:]]

    assert batches(split * 51 // 2) == [25, 25, 10]
    assert batches(split // 2) == [1] * 60


def test_a_missing_or_corrupt_plan_is_one_clear_refusal(tmp_path: Path) -> None:
    source = RowsSource({"rows": "100", "split_rows": "10"})
    store = PlanStore(locate(str(tmp_path / "plans")))
    fingerprint = source_fingerprint(source)
    first = next_offset(source, fingerprint, initial_offset(source, fingerprint, 2, store), 2,
                        BatchLimit(max_splits=3), store)
    assert first is not None
    _LIVE.keep(("nothing", "", 0), source.create_enumerator(None))
    (plan,) = (tmp_path / "plans").iterdir()
    plan.write_bytes(plan.read_bytes()[:-1] + b"x")
    with pytest.raises(CheckpointError, match="does not match its digest"):
        next_offset(source, fingerprint, first, 2, BatchLimit(max_splits=3), store)
    plan.unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        next_offset(source, fingerprint, first, 2, BatchLimit(max_splits=3), store)
    with pytest.raises(CheckpointError, match="no plan_location is set"):
        next_offset(source, fingerprint, first, 2, BatchLimit(max_splits=3), PlanStore())
    inline = next_offset(source, fingerprint, initial_offset(source, fingerprint, 2, PlanStore()), 2,
                         BatchLimit(max_splits=3), PlanStore())
    assert inline is not None and "plan_state" in inline
    _LIVE.keep(("nothing", "", 0), source.create_enumerator(None))
    with pytest.raises(CheckpointError, match="offset cannot be read"):  # Spark's log is not validated first
        next_offset(source, fingerprint, {**inline, "plan_state": "!!"}, 2, BatchLimit(max_splits=3), PlanStore())


def test_an_enumerator_that_cuts_other_splits_from_the_same_plan_is_refused(tmp_path: Path) -> None:
    store = PlanStore(locate(str(tmp_path / "plans")))
    source = RowsSource({"rows": "100", "split_rows": "10"})
    fingerprint = source_fingerprint(source)
    first = next_offset(source, fingerprint, initial_offset(source, fingerprint, 2, store), 2,
                        BatchLimit(max_splits=3), store)
    assert first is not None
    _LIVE.keep(("nothing", "", 0), source.create_enumerator(None))
    # the batch the checkpoint says was read is not what the plan gives again (as if the enumerator changed)
    other = RowsSource({"rows": "100", "split_rows": "11"})
    tampered = {**first, "batch": [base64.b64encode(b).decode() for b in _envelopes(other, 3)]}
    with pytest.raises(CheckpointError, match="not deterministic"):
        next_offset(source, fingerprint, tampered, 2, BatchLimit(max_splits=3), store)


def _envelopes(source: Any, count: int) -> list[bytes]:
    from serializers import write_envelope

    enumerator = source.create_enumerator(None)
    enumerator.start()
    return [write_envelope(source.split_serializer(), enumerator.next_split()) for _ in range(count)]


def test_a_fresh_start_prunes_the_plans_no_offset_refers_to(tmp_path: Path) -> None:
    store = PlanStore(locate(str(tmp_path / "plans")))
    source = ring_source()
    source.ranges = 10
    old = initial_offset(source, "ring", 2, store)
    source.ranges = 20  # the same source whose size estimates changed: another plan
    new = initial_offset(source, "ring", 2, store)
    assert old["plan"] != new["plan"] and len(list((tmp_path / "plans").glob("*.plan"))) == 2
    store.prune(keep=new["plan"])
    assert [p.name for p in (tmp_path / "plans").iterdir()] == [f"{new['plan']}.plan"]
    assert store.get(new)  # the kept plan still reads back whole


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_copy_started_afresh_leaves_only_its_own_plan(tmp_path: Path, engine: str,
                                                        request: pytest.FixtureRequest) -> None:
    """An earlier start that stopped before its first offset left a plan of another digest in the checkpoint."""
    from splitsource import copy

    out = tmp_path / "out"
    stray = Path(f"{out}.checkpoint") / "plans" / f"{'0' * 32}.plan"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"a plan of an abandoned start")
    settings: dict[str, Any] = {"workers": 1} if engine == "local" else {"spark": request.getfixturevalue("spark")}
    summary = copy("generator", {"rows": "3000", "split_rows": "1000"}, str(out), engine=engine, **settings)
    assert summary.total_rows == 3000
    assert not stray.exists(), "the abandoned start's plan is still there"
    assert len(list(stray.parent.glob("*.plan"))) == 1, "the copy's own plan must stay"
