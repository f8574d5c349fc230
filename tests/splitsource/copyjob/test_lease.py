"""Retries from anywhere: a copy's lock is a lease. A re-run from another host name (a UTS namespace: a scheduler's
retry on another worker or pod) is refused in one line naming the lease's expiry while the killed copy's lease
runs, and takes over after it, ending exact, on a local disk and on S3, with both engines. A copy paused past its
lease (SIGSTOP) and woken after another copy took over commits nothing, exits with one line, and leaves the output
exact. An unreadable lock is told apart by its age. The ids are checked against the ones the generator made.

No verdict waits on the clock: the leases are long (``LEASE_S``), so a copy started while one is held is refused
however slowly it starts, and a lease runs out when the test says so, by moving its holder's last renewal (or a
torn lock's mtime) into the past, where a stopped or killed holder would have left it."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from tests.fixtures import ROOT
from tests.splitsource.copyjob.test_copy import KILL_POINTS, committed_rows
from tests.splitsource.copyjob.test_copy_misuse import one_line

pytestmark = pytest.mark.slow

ROWS = 40_000
GATED = ["--connector", "tests.splitsource.gated_rows:GatedRowsSource", "-o", f"rows={ROWS}", "-o", "split_rows=4000",
         "-o", "batch_rows=500", "-o", "fetch_delay_ms=20"]
LEASE_S = 600.0  # never runs out by itself during a test: _expire() ends it


def _cli(args: list[str], host: str | None = None) -> list[str]:
    """The command, run under host name ``host`` when given: in UTS and mount namespaces of its own, with ``host``
    in its /etc/hosts, as a pod has (Spark's JVM looks its host name up)."""
    command = [sys.executable, "-m", "splitsource.cli", *args]
    if host is None:
        return command
    return ["unshare", "--uts", "--mount", "sh", "-c",
            f'hostname {host} && mount --bind {_hosts(host)} /etc/hosts && exec "$@"', "sh", *command]


@functools.cache
def _hosts(host: str) -> Path:
    hosts = Path(tempfile.mkdtemp()) / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {host}\n")
    return hosts


def _run(args: list[str], host: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cli(args, host), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _start(args: list[str], held: Path | None = None) -> subprocess.Popen[bytes]:
    """``splitsource args`` in the background; with ``held``, held at the named point ``planned`` of its second batch
    (its first committed, the second's offset logged) until ``held/release`` exists (:mod:`kill_points`)."""
    command = [sys.executable, str(KILL_POINTS), str(held), "planned", *args] if held else _cli(args)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _ids(uri: str) -> list[int]:
    fs, path = pafs.FileSystem.from_uri(uri)
    return sorted(ds.dataset(path, filesystem=fs, format="parquet").to_table(columns=["id"])["id"].to_pylist())


def _lock(out: str) -> dict[str, Any]:
    fs, path = pafs.FileSystem.from_uri(out + ".bucketing/lock.json")
    with fs.open_input_stream(path) as stream:
        return json.loads(stream.read())  # type: ignore[no-any-return]


def _until(what: str, done: Any, proc: subprocess.Popen[bytes] | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert proc is None or proc.poll() is None, f"the copy exited before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.02)


def _expire(out: str) -> None:
    """End the lease on ``out`` now, as the clock would if its holder (killed or stopped: nothing renews it) had
    last renewed it more than ``lease_s`` ago."""
    for records in (".bucketing", ".checkpoint"):
        fs, path = pafs.FileSystem.from_uri(f"{out}{records}/lock.json")
        with fs.open_input_stream(path) as stream:
            held = json.loads(stream.read())
        held["renewed"] = time.time() - held["lease_s"] - 60
        with fs.open_output_stream(path) as stream:
            stream.write(json.dumps(held).encode())


@pytest.mark.parametrize("engine,store", [("local", "disk"), ("local", "s3"), ("spark", "disk")])
def test_a_rerun_from_another_host_waits_for_the_lease_then_finishes_exact(tmp_path: Path, engine: str, store: str,
                                                                           request: pytest.FixtureRequest) -> None:
    out = request.getfixturevalue("s3").uri(f"lease-{engine}") if store == "s3" else str(tmp_path / "out")
    args = ["copy", *GATED, "--output", out, "--engine", engine, "--max-splits-per-batch", "2",
            "--lease-s", str(LEASE_S), "--quiet"]
    first = _start(args)
    _until("a first commit", lambda: committed_rows(out) > 0, first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    held = _lock(out)
    assert held["pid"] != 0 and committed_rows(out) < ROWS, "the kill landed after the copy's end"

    refused = _run(args, host="other-pod")
    expiry = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(held["renewed"] + held["lease_s"]))
    one_line(refused, 1, "is in use by another copy", f"on {held['host']}", f"its lease runs out at {expiry}")

    _expire(out)
    finished = _run(args, host="other-pod")
    assert finished.returncode == 0, finished.stderr
    assert f"took over from pid {held['pid']} on {held['host']}" in finished.stderr, finished.stderr
    assert _ids(out) == list(range(ROWS))  # every row once


@pytest.mark.parametrize("stop", ["between batches", "mid-batch, one task's files pending"])
def test_a_zombie_woken_after_a_takeover_commits_nothing(tmp_path: Path, stop: str) -> None:
    out, gate, held = str(tmp_path / "out"), tmp_path / "gate", tmp_path / "held"
    gate.mkdir()
    held.mkdir()
    # batch 2 is splits 2 and 3 (rows 8,000-15,999), one per worker; the gate holds split 3 at row 14,000 while
    # split 2 ends: its files pending, split 3's in progress, batch 2's offset logged, its commit not made
    gated = [*GATED, "-o", f"gate={gate}", "-o", f"gate_row={14_000 if stop.startswith('mid') else -1}"]
    args = ["copy", *gated, "--output", out, "--engine", "local", "--workers", "2", "--max-splits-per-batch", "2",
            "--lease-s", str(LEASE_S), "--quiet"]
    if stop.startswith("mid"):
        zombie = _start(args)
        _until("the gate", lambda: (gate / "reached").exists(), zombie)
    else:  # held where nothing of it is in flight: a stop mid-write would finish that write when woken
        zombie = _start(args, held)
        _until("the named point", lambda: (held / "reached").exists(), zombie)
    os.killpg(zombie.pid, signal.SIGSTOP)
    try:
        before = committed_rows(out)
        assert before < ROWS
        _expire(out)
        (gate / "release").touch()
        (held / "release").touch()
        taker = _run(args, host="other-pod")
        assert taker.returncode == 0, taker.stderr
        assert "took over from pid" in taker.stderr and "whose lease expired" in taker.stderr, taker.stderr
        after_taker = sorted(p.name for p in (tmp_path / "out.bucketing" / "log").iterdir())
    finally:
        os.killpg(zombie.pid, signal.SIGCONT)
    _, err = zombie.communicate(timeout=120)
    woken = subprocess.CompletedProcess(zombie.args, zombie.returncode, "", err.decode())
    one_line(woken, 1, "was taken over by another copy, which has finished since", "commits nothing more")
    assert sorted(p.name for p in (tmp_path / "out.bucketing" / "log").iterdir()) == after_taker, \
        "the zombie wrote to the commit log after the takeover"
    assert _ids(out) == list(range(ROWS))  # every row once
    leftovers = [p.name for p in Path(out).rglob("*") if p.is_file() and not p.name.startswith("part-")]
    assert leftovers == [], f"the zombie left files in the output: {leftovers}"


def test_an_unreadable_lock_is_judged_by_its_age(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["copy", "--connector", "generator", "-o", "rows=1000", "--output", str(out), "--engine", "local",
            "--lease-s", str(LEASE_S), "--quiet"]
    records = tmp_path / "out.bucketing"
    records.mkdir()
    (records / "lock.json").write_text('{"host": "vm", "pid"')  # a copy killed while writing its lock
    young = _run(args, host="other-pod")
    one_line(young, 1, "its lock", "is unreadable", "killed while writing it", "it is taken over at")
    old = time.time() - 2 * LEASE_S
    os.utime(records / "lock.json", (old, old))
    taken = _run(args, host="other-pod")
    assert taken.returncode == 0, taken.stderr
    assert "took over a lock left half written" in taken.stderr, taken.stderr
    assert _ids(str(out)) == list(range(1000))


def test_two_copies_racing_for_an_expired_lease_one_wins(s3: Any, tmp_path: Path) -> None:
    """A copy killed on another host left its lease on S3; two retries start together and meet right before they
    create the lock (the race of tests/splitsource/copyjob/test_object_store.py): each time exactly one takes the
    expired lease over and finishes, the other is refused in one line, and the output holds every row once."""
    from tests.splitsource.copyjob.test_object_store import ROWS as RACE_ROWS
    from tests.splitsource.copyjob.test_object_store import _race

    for trial in range(10):
        uri = s3.uri(f"expired-{trial}")
        fs, path = pafs.FileSystem.from_uri(uri)
        dead = {"host": "gone-pod", "pid": 4242, "started": "", "since": "2026-11-26 00:00:00",
                "command": "splitsource copy --engine local", "lease": "dead", "renewed": time.time() - 120,
                "lease_s": 60.0}
        for lock in (f"{path}.bucketing/lock.json", f"{path}.checkpoint/lock.json"):
            with fs.open_output_stream(lock) as stream:
                stream.write(json.dumps(dead).encode())
        first, second = _race(tmp_path, uri, "conditional")
        assert sorted((first.returncode, second.returncode)) == [0, 1], (first.stderr[-2000:], second.stderr[-2000:])
        winner, loser = (first, second) if first.returncode == 0 else (second, first)
        assert "took over from pid 4242 on gone-pod" in winner.stderr, winner.stderr[-2000:]
        assert "is in use by another copy" in loser.stderr and "its lease runs out at" in loser.stderr, \
            loser.stderr[-2000:]
        assert _ids(uri) == list(range(RACE_ROWS)), f"trial {trial}"


def test_a_lease_renewal_on_s3_is_one_conditional_put(s3: Any) -> None:
    """Each renewal of a lease on S3 is one PutObject with ``If-Match`` (the lock's last ETag), no read before it;
    and a lock replaced behind the copy's back fails that PUT, so the copy learns at its next renewal that it lost
    the lease."""
    import threading

    from splitsource._errors import LeaseLostError
    from splitsource._fs import locate, resolve_filesystem
    from splitsource.copyjob._ownership import CopyLock
    from tests.splitsource.copyjob.test_store_retries import CuttingProxy

    proxy = CuttingProxy(os.environ["AWS_ENDPOINT_URL"], needle="\0", cuts=0)  # counts, cuts nothing
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        uri = f"s3://lake/renewal?endpoint_override=127.0.0.1:{proxy.server_address[1]}&scheme=http"
        with CopyLock([("output renewal", locate(uri))], command="test", lease_s=0.4) as lock:
            taken = len(proxy.requests)
            deadline = time.monotonic() + 60
            while sum(1 for m, p, _ in proxy.requests[taken:] if "lock.json" in p) < 8:
                assert time.monotonic() < deadline, "no renewals within 60 s"
                time.sleep(0.05)
            renewals = [r for r in proxy.requests[taken:] if "lock.json" in r[1]]
            assert all(m == "PUT" and tag for m, _, tag in renewals), renewals  # one conditional PUT each
            fs, base = resolve_filesystem(uri)
            other = json.loads(fs.read_text(f"{base}/lock.json")) | {"lease": "another-copy", "host": "other-pod"}
            fs.write(f"{base}/lock.json", json.dumps(other).encode())  # another copy took the lease over
            while lock._lost is None:
                assert time.monotonic() < deadline, "the renewal did not notice the lease was taken"
                time.sleep(0.05)
            with pytest.raises(LeaseLostError, match="other-pod"):
                lock.check()
    finally:
        proxy.shutdown()
        proxy.server_close()


# Runs the copy with its create of commit record ``sys.argv[2]`` held at the door, after the fence let it through:
# "stop" stops the whole process there (its lease renewal too, as a long pause would), "wait" waits for the file
# <gate>/release. Either way <gate>/<name>.reached says it got there.
HELD_AT_THE_RECORD = textwrap.dedent("""
    import os, signal, sys, time
    from splitsource import _fs
    from splitsource.cli import main

    gate, record, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    original = _fs.Store.write

    def write(self, path, data, **kwargs):
        if kwargs.get("exclusive") and path.endswith("/" + record):
            open(os.path.join(gate, mode + ".reached"), "w").close()
            if mode == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                deadline = time.monotonic() + 120
                while not os.path.exists(os.path.join(gate, "release")) and time.monotonic() < deadline:
                    time.sleep(0.01)
        return original(self, path, data, **kwargs)

    _fs.Store.write = write
    sys.exit(main(sys.argv[4:]))
""")


def test_a_zombie_stopped_between_its_fence_and_its_commit_record_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """The narrowest window a fence leaves: a copy passes the fence of its second commit and stops right before it
    creates the record. Another copy takes the expired lease over, sweeps the stopped copy's pending files, reads
    the batch again and stops right before creating the same record. The first wakes and creates it first, then
    finds at its next fence that it lost the lease and stops, touching nothing more (it had swept the new holder's
    files as its own orphans, and removed the output's emptied directories). The new holder finds the record
    logged, rolls it back (its files are gone) and commits its own: the output holds every row once."""
    out, gate = str(tmp_path / "out"), tmp_path / "gate"
    gate.mkdir()
    record = f"{1:020d}.commit"  # the second commit: the first, 0, went through
    args = ["copy", *GATED, "--output", out, "--engine", "local", "--workers", "2", "--max-splits-per-batch", "2",
            "--lease-s", str(LEASE_S), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def held(mode: str, host: str | None = None) -> subprocess.Popen[bytes]:
        command = _cli(["__held__"], host)
        command[command.index("-m"):] = ["-c", HELD_AT_THE_RECORD, str(gate), record, mode, *args]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                                env=env)

    zombie = held("stop")
    try:
        _until("the zombie's stop at its record", lambda: (gate / "stop.reached").exists(), zombie)
        _expire(out)
        taker = held("wait", host="other-pod")
        _until("the taker's stop at the same record", lambda: (gate / "wait.reached").exists(), taker)
        assert not (tmp_path / "out.bucketing" / "log" / record).exists()
    finally:
        os.killpg(zombie.pid, signal.SIGCONT)
    _, zombie_err = zombie.communicate(timeout=120)
    one_line(subprocess.CompletedProcess(zombie.args, zombie.returncode, "", zombie_err.decode()), 1,
             "was taken over by pid", "commits nothing more")
    assert (tmp_path / "out.bucketing" / "log" / record).exists(), "the zombie did not create its record first"
    (gate / "release").touch()
    _, err = taker.communicate(timeout=300)
    taker_err = err.decode()
    assert taker.returncode == 0, taker_err
    assert "commit 1 (batch 0 of local-" in taker_err and "was rolled back" in taker_err, taker_err
    assert _ids(out) == list(range(ROWS))  # every row once
    leftovers = [p.name for p in Path(out).rglob("*") if p.is_file() and not p.name.startswith("part-")]
    assert leftovers == [], f"files left in the output: {leftovers}"


def test_a_lock_read_while_its_holder_writes_it_is_read_again_not_taken_for_torn(tmp_path: Path) -> None:
    """A lock is created, then filled (an exclusive create, then its bytes; SeaweedFS lists an object before its
    body): a copy that reads it in between finds no JSON. It reads it again, and is refused by the holder's lease, as
    a copy that read it a moment later would be; not told the lock is unreadable (found by CI: two S3 copies racing
    for an expired lease)."""
    from dataclasses import replace

    from splitsource._errors import LockedError
    from splitsource._fs import Store, locate
    from splitsource.copyjob._ownership import CopyLock, this_holder

    place = locate(str(tmp_path / "out.bucketing"))
    (tmp_path / "out.bucketing").mkdir()
    lock = tmp_path / "out.bucketing" / "lock.json"
    lock.write_bytes(b"")  # created by the holder, its bytes not written yet
    holder = this_holder("the holder", LEASE_S)
    reads: list[bytes] = []

    class Filling(Store):
        def read_bytes(self, path: str) -> bytes:
            data = super().read_bytes(path)
            if path.endswith("lock.json"):
                reads.append(data)
                if len(reads) == 1:  # the holder's write lands right after the first read
                    lock.write_text(json.dumps(dataclasses.asdict(replace(holder, host="holder-pod"))))
            return data

    filling = Filling(pafs.LocalFileSystem())
    with pytest.raises(LockedError, match="is in use by another copy: .*holder-pod"):
        with CopyLock([("output out", replace(place, store=filling))], command="a second copy", lease_s=LEASE_S):
            pass
    assert reads[0] == b"" and len(reads) == 2, reads  # the torn read happened, and was read again
    assert json.loads(lock.read_text())["host"] == "holder-pod"  # the holder's lock is left alone


@pytest.mark.parametrize("path", ["fence", "renewal"])
def test_the_holders_own_lock_read_torn_once_is_read_again_not_taken_for_a_takeover(tmp_path: Path, path: str) -> None:
    """A store that shows a lock cut short while it is overwritten (SeaweedFS did, under the renewal's PUT) gives
    the holder's fence, or its renewal, one unreadable read of its own lock: it reads it again and holds on, where
    it used to stop the copy as "taken over by another copy" (found by CI: an S3 kill storm's last run)."""
    from splitsource._fs import Store, locate
    from splitsource.copyjob._ownership import CopyLock

    place = locate(str(tmp_path / "out.bucketing"))
    (tmp_path / "out.bucketing").mkdir()
    torn: list[bytes] = []  # the torn reads given, once armed
    after: list[bytes] = []  # the lock's reads after the torn one

    class CutShort(Store):
        armed = False

        def read_bytes(self, path: str) -> bytes:
            data = super().read_bytes(path)
            if torn and path.endswith("lock.json"):
                after.append(data)
            if CutShort.armed and path.endswith("lock.json"):
                CutShort.armed = False
                torn.append(data[: len(data) // 2])
                return torn[-1]
            return data

    lease_s = 0.4 if path == "renewal" else LEASE_S  # the renewal every lease_s / 4
    with CopyLock([("output out", dataclasses.replace(place, store=CutShort(pafs.LocalFileSystem())))],
                  command="the copy", lease_s=lease_s) as lock:
        CutShort.armed = True
        if path == "fence":
            lock.check()
        else:
            deadline = time.monotonic() + 30
            while len(after) < 2 and time.monotonic() < deadline:  # read again, then the next renewal's read:
                time.sleep(0.02)  # the torn one's renewal has ended
        assert torn and not torn[0].endswith(b"}"), torn  # the torn read happened
        lock.check()  # still the holder
