"""Power loss, not just SIGKILL: every state a crash could leave during a copy or a sink write ends exact, or is
refused in one line; and every sync the storage door makes is needed (leaving any one out makes a state wrong).

The states come from :mod:`tests.splitsource.crashfs` (a recorder under the door and a model of what a file system
keeps after a power loss), the runs and checks from :mod:`tests.splitsource.crash_scenarios`.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from splitsource import _fs
from splitsource._errors import SplitSourceError
from tests.fixtures import ROOT
from tests.splitsource import crash_scenarios as sc
from tests.splitsource.crashfs import CrashState, crash_states

pytestmark = pytest.mark.slow


@pytest.fixture()
def states_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the crash states are built and run: in memory (/dev/shm) where this machine has it, since what a power
    loss keeps is the recorder's model (tests/splitsource/crashfs.py), not the disk's, and each state's run makes
    dozens of syncs (the disk's took 11 s of a scenario's 72); ``tmp_path`` elsewhere."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 1 << 30):
        yield tmp_path
        return
    root = Path(tempfile.mkdtemp(prefix="splitsource-crash-states-", dir=shm))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _record(scenario: str, root: Path, skipped: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    trace = root.parent / f"{root.name}.trace"
    subprocess.run([sys.executable, "-m", "tests.splitsource.crash_scenarios", scenario, str(root), str(trace),
                    *skipped], check=True, cwd=ROOT, timeout=120)
    ops: list[tuple[Any, ...]] = pickle.loads(trace.read_bytes())
    return ops


def _check(scenario: str, state: CrashState, root: Path, next_write: int = sc.WRITES) -> str:
    """Run what follows the crash in ``state`` (built under ``root``); "exact" or "refused: <line>", or an
    AssertionError saying what is wrong. ``next_write``: the batch write that recovers a sink-batch output (after a
    crash during an earlier recovery, a write of its own: an append run twice appends twice)."""
    if scenario == "sink-restore":
        return _check_restore(state, root)
    out = root / "out"
    written = sorted(int(m[5:]) for m in state.marks if m.startswith("write"))
    before = sc.read_ids(out)
    if scenario.startswith("copy-"):
        if "returned" in state.marks:
            assert before == list(range(sc.ROWS)), "a copy that had finished lost rows to the power loss"
        try:
            sc.copy_once(root, scenario[5:])
        except SplitSourceError as exc:
            assert "\n" not in str(exc), f"a refusal of more than one line: {exc}"
            return f"refused: {exc}"
        assert sc.read_ids(out) == list(range(sc.ROWS)), "the copy's re-run did not end with every row once"
        from splitsource._planning import build_source
        from splitsource.copyjob._verify import verify

        _, source = build_source({**sc.GEN_OPTIONS, "connector": "generator"})
        # in this process (workers=1): a pool of verify's worker processes per crash state cost this test minutes;
        # verify's parallel path has tests of its own
        assert verify(source, str(out), workers=1).match, "verify does not say MATCH"
        return "exact"
    for write in written:
        assert sc.write_ids(write) <= set(before), f"write {write} had reported success and lost rows"
    try:
        if scenario == "sink-batch":
            sc.sink_append(root, next_write)  # the next write recovers the output, and is not stuck
        else:
            for batch in range(sc.WRITES):  # the restarted query replays every batch
                sc.stream_batch(root, batch)
    except SplitSourceError as exc:
        assert "\n" not in str(exc), f"a refusal of more than one line: {exc}"
        return f"refused: {exc}"
    ids = sc.read_ids(out)
    assert len(ids) == len(set(ids)), "rows were committed twice"
    present = set(ids)
    if scenario == "sink-batch":
        for write in range(next_write):
            rows = sc.write_ids(write)
            assert rows <= present or not rows & present, f"write {write} is half committed"
        assert sc.write_ids(next_write) <= present, "the write after the crash is missing"
    else:
        assert present == set().union(*(sc.write_ids(b) for b in range(sc.WRITES))), "the stream is not exact"
    return "exact"


def _check_restore(state: CrashState, root: Path) -> str:
    """A writer restored from its snapshot: whatever the crash left, restoring again from the checkpoint (or starting
    over, when it never completed) commits the checkpoint's rows once, and none written after it."""
    if "write0" in state.marks:
        assert sc.restored_ids(root) == list(range(sc.TASK_ROWS)), "a commit that had reported success lost rows"
    try:
        sc.restore_and_commit(root)
    except SplitSourceError as exc:
        assert "\n" not in str(exc), f"a refusal of more than one line: {exc}"
        return f"refused: {exc}"
    assert sc.restored_ids(root) == list(range(sc.TASK_ROWS)), "the restored writer did not commit its rows once"
    return "exact"


def _replay(scenario: str, ops: list[tuple[Any, ...]], root: Path, stop_at: str | None = None,
            start: int = 0, check: Callable[[CrashState, Path], str] | None = None
            ) -> tuple[Counter[str], list[tuple[str, str]]]:
    """Build each crash state of ``ops`` from point ``start`` on, where it was recorded (``root``: paths are kept
    absolute), and check it (``check``, by default :func:`_check` of ``scenario``): the outcomes counted by kind,
    and each state not exact as (kind, description). A state is "refused" (one line from the copy or the sink), or
    "wrong" (a check of the rows failed, or the run after the crash raised anything but a one-line refusal). A
    failure to build a state is the harness's, and is raised, never counted. ``stop_at``: stop at the first state
    of that kind."""
    outcomes: Counter[str] = Counter()
    failures: list[tuple[str, str]] = []
    for state in crash_states(ops, start=start):
        shutil.rmtree(root, ignore_errors=True)
        state.build(root)
        try:
            outcome = check(state, root) if check is not None else _check(scenario, state, root)
            kind = "exact" if outcome == "exact" else "refused"
        except Exception as exc:  # noqa: BLE001 - every way the run after a crash fails is a finding to report
            kind, outcome = "wrong", f"{type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(root, ignore_errors=True)
        outcomes[kind] += 1
        if kind != "exact":
            failures.append((kind, f"{scenario}: {state.describe()}: {outcome}"))
        if kind == stop_at:
            break
    return outcomes, failures


def _every_state(scenario: str, root: Path) -> tuple[int, Counter[str], list[tuple[str, str]]]:
    """Record ``scenario`` under ``root`` and check each of its crash states: operations, outcomes, failures."""
    ops = _record(scenario, root)
    return (len(ops), *_replay(scenario, ops, root))


def test_every_crash_state_ends_exact(states_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    total: Counter[str] = Counter()
    lines = []
    problems: list[str] = []
    # two processes, a scenario each at a time (the states of one scenario share its recorded, absolute paths): the
    # checks are single-threaded Python, and one process took 152 s of the suite on 2 cores; spawned, not forked,
    # since this process may hold a Spark gateway's threads
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = {scenario: pool.submit(_every_state, scenario, states_dir / scenario) for scenario in sc.SCENARIOS}
    for scenario, run in runs.items():
        count, outcomes, failures = run.result()
        total.update(outcomes)
        problems += [text for _, text in failures]
        lines.append(f"  {scenario}: {count} operations, {sum(outcomes.values())} crash states: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    with capsys.disabled():
        print(f"\ncrash states: {sum(total.values())} distinct, "
              + ", ".join(f"{k} {v}" for k, v in sorted(total.items())) + "\n" + "\n".join(lines))
    assert sum(total.values()) >= 200
    assert not problems, f"{len(problems)} crash state(s) not exact:\n" + "\n".join(problems[:20])


_SHOWN_BY = {"mkdir": "sink-batch", "snapshot.file": "sink-restore", "snapshot.dir": "sink-restore",
             "recover.part": "sink-restore"}  # where a sync's need was found (the rest: copy-local, searched first)


# syncs no crash state needs: a rollback's (a rollback is idempotent while its record stands, and the record's
# removal becomes durable only with the log's next write, which syncs the log directory); crashing a recovery at
# every point of its rollbacks without them ends exact. They are kept so that a rollback's deletions are durable when
# it returns, not at some later sync; test_a_crash_during_recovery crashes them
UNPROVEN = ("rollback.dir",)


# the syncs whose absence a crash state shows by a refusal, not by wrong rows: each with the words of that refusal.
# Without the syncs of a writer's snapshot (its in-progress file's data, the directory's entry for it), a restore
# finds the file shorter than the snapshot says was committed, or gone: the recovery can only refuse, and rows the
# checkpoint had promised are lost
SHOWN_BY_A_REFUSAL = {"snapshot.file": "fewer than the", "snapshot.dir": "committed rows cannot be restored"}


@pytest.mark.parametrize("point", [p for p in _fs.SYNC_POINTS if p not in UNPROVEN])
def test_each_sync_is_needed(point: str, states_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Leave one sync out (in the recorded run only; recovery runs whole): some crash state must then go wrong:
    lose or duplicate rows, or fail with more than a one-line refusal. A refusal proves nothing, unless it is the
    one ``SHOWN_BY_A_REFUSAL`` expects for the sync (a refusal that says committed rows are gone); a failure to
    record or build the states is the harness's, and fails the test as such. A sync no state needs would be one
    this test cannot justify."""
    expected, words = ("refused", SHOWN_BY_A_REFUSAL[point]) if point in SHOWN_BY_A_REFUSAL else ("wrong", "")
    found: tuple[str, str] | None = None
    refused: list[str] = []
    # the scenario that showed the need last is searched first (the search stops at the first wrong state, and the
    # others are searched whole before it otherwise: mkdir took 260 s of the suite); every scenario stays in
    for scenario in sorted(sc.SCENARIOS, key=lambda s: s != _SHOWN_BY.get(point)):
        ops = _record(scenario, states_dir / scenario, skipped=(point,))
        # the states before the first sync left out are those of the whole run, which the test above checks
        first = next((i for i, op in enumerate(ops) if op[0] == "skipped"), None)
        if first is None:
            continue  # the scenario never reaches this sync
        _, failures = _replay(scenario, ops, states_dir / scenario, stop_at="wrong", start=first)
        refused += [text for kind, text in failures if kind == "refused"]
        found = next((f for f in failures if f[0] == "wrong" or (f[0] == expected and words in f[1])), None)
        if found:
            break
    with capsys.disabled():
        print(f"\nwithout the sync {point!r}: {found[1] if found else 'no state went wrong'}")
    assert found, (f"no crash state goes wrong without the sync {point!r}"
                   + (f"; {len(refused)} refused, first: {refused[0]}" if refused else ""))


RECOVERIES = ("copy-local", "sink-batch", "sink-stream")  # one crash state of each, its recovery crashed again
SECOND_POINTS = 12  # points of each recovery at which it is crashed (evenly spread)


def test_a_crash_during_recovery_ends_exact(states_dir: Path, capsys: pytest.CaptureFixture[str],
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A second power loss while the next run recovers from the first: a crash state of each scenario that leaves
    recovery to do (killed mid-run) is recovered with the door traced, that recovery is crashed at points spread
    over it, and the run after that must still end exact. The lock a recording in this process leaves is left
    out of the second states (after a power loss its holder is gone, and a copy takes such a lock over)."""
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    sites: set[str] = set()
    for scenario, first, root in _first_crashes(states_dir):
        problems += _crash_the_recovery(scenario, first, root, outcomes, sites, caplog)
    rolled_back = [r for r in caplog.records if "was rolled back" in r.getMessage()]
    with capsys.disabled():
        print(f"\ncrashes during recovery: {sum(outcomes.values())} states, "
              + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    assert sum(outcomes.values()) >= 30, "too few states: the recoveries did too little to crash"
    assert {"sync", "syncdir", "rename"} <= sites, "the recoveries finished no commit: they recovered nothing"
    assert rolled_back, "no recovery rolled a commit back: the rollback path was never crashed"
    assert not problems, f"{len(problems)} state(s) not exact:\n" + "\n".join(problems[:20])


def _first_crashes(tmp_path: Path) -> Iterator[tuple[str, CrashState, Path]]:
    """A crash state of each of ``RECOVERIES`` that leaves recovery to do: mid-run, as a SIGKILL leaves it (logged
    commits to finish) and as a power loss that undid the unsynced renames does (a logged commit whose pending
    files are gone: rolled back)."""
    for scenario in RECOVERIES:
        root = tmp_path / scenario
        ops = _record(scenario, root)
        states = list(crash_states(ops, mixed=0, variants=[("current", "current"), ("synced", "current")]))
        unmarked = sorted({s.point for s in states if not s.marks})  # before the first write reported success
        point = unmarked[len(unmarked) * 2 // 3]
        for first in (s for s in states if s.point == point):
            yield scenario, first, root


def _crash_the_recovery(scenario: str, first: CrashState, root: Path, outcomes: Counter[str], sites: set[str],
                        caplog: pytest.LogCaptureFixture) -> list[str]:
    """Recover ``first`` with the door traced, then crash that recovery at points spread over it and check the
    run after each; the problems found."""
    from splitsource._fs import set_tracer
    from tests.splitsource.crashfs import Recorder, base_ops

    problems: list[str] = []
    shutil.rmtree(root, ignore_errors=True)
    first.build(root)
    recorder = Recorder(root)
    set_tracer(recorder)
    try:
        with caplog.at_level("WARNING"):
            _check(scenario, first, root)
    finally:
        set_tracer(None)
    sites.update(op[0] for op in recorder.ops)
    prefix = base_ops(first.files)
    ops2 = prefix + recorder.ops
    every = max(1, len(recorder.ops) // SECOND_POINTS)
    for second in crash_states(ops2, mixed=1, start=len(prefix)):
        if (second.point - len(prefix)) % every:
            continue
        files = {p: d for p, d in second.files.items() if not p.endswith("lock.json")}
        state = CrashState(second.point, second.variant, first.marks, files)
        shutil.rmtree(root, ignore_errors=True)
        state.build(root)
        try:
            outcome = _check(scenario, state, root, next_write=sc.WRITES + 1)
            outcomes["exact" if outcome == "exact" else "refused"] += 1
            if outcome != "exact":
                problems.append(f"{scenario}: {first.describe()}, then in recovery {state.describe()}: {outcome}")
        except Exception as exc:  # noqa: BLE001 - every way a state can go wrong is a finding
            outcomes["wrong"] += 1
            problems.append(f"{scenario}: {first.describe()}, then in recovery {state.describe()}: "
                            f"{type(exc).__name__}: {exc}")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return problems
