"""The driver JVM's class archive (splitsource.spark._jvm): recorded by the first Spark-engine copy of a machine
beside its work, mapped by the next copy's JVM (proved with ``-Xshare:on``, under which a JVM that cannot map it
does not start), keyed by what it depends on, and gone with a copy that is stopped while it is being recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from splitsource.spark import _jvm
from tests.splitsource.copyjob.test_copy import finished

pytestmark = [pytest.mark.spark]
CLI = [sys.executable, "-m", "splitsource.cli"]


def ids(out: Path) -> list[int]:
    files = sorted(str(out / f) for f in finished(out))
    return sorted(ds.dataset(files, format="parquet").to_table(columns=["id"]).column("id").to_pylist())


def copy(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A Spark-engine copy of 3,000 generator rows (ids 0-2999) in a child process with ``env``."""
    return subprocess.run([*CLI, "copy", "--connector", "generator", "-o", "rows=3000", "-o", "columns=id:bigint",
                           "--output", str(out), "--quiet"], capture_output=True, text=True, env=env, timeout=300)


def environment(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", _jvm.SWITCH_ENV)}
    return {**env, "SPLITSOURCE_CACHE": str(cache), **extra}


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line holds ``text`` (zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_the_key_follows_java_spark_and_the_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPLITSOURCE_CACHE", str(tmp_path))
    monkeypatch.delenv(_jvm.SWITCH_ENV, raising=False)
    monkeypatch.delenv(_jvm.RECORD_ENV, raising=False)
    path = _jvm.archive_path()
    assert path is not None and path.parent == tmp_path / "jvm" and path.name.startswith("spark-driver-")
    assert _jvm.driver_options() == [], "no archive yet: the JVM starts as before"
    assert _jvm.recorder() is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert _jvm.driver_options()[0] == f"-XX:SharedArchiveFile={path}"
    assert _jvm.recorder() is None, "recorded already"

    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core.jar").write_bytes(b"one")
    monkeypatch.setenv("SPARK_HOME", str(jars.parent))
    other = _jvm.archive_path()
    assert other is not None and other != path, "another Spark installation needs its own archive"
    (jars / "spark-core.jar").write_bytes(b"changed")
    assert _jvm.archive_path() != other, "a jar replaced in place invalidates the archive"

    monkeypatch.setenv(_jvm.SWITCH_ENV, "off")
    assert _jvm.archive_path() is None and _jvm.recorder() is None and _jvm.driver_options() == []
    monkeypatch.setenv(_jvm.RECORD_ENV, str(tmp_path / "x.jsa"))
    assert _jvm.driver_options()[0] == f"-XX:ArchiveClassesAtExit={tmp_path / 'x.jsa'}"


def test_the_first_copy_records_the_archive_and_the_next_one_maps_it(tmp_path: Path) -> None:
    cache = tmp_path / "a cache"  # a space: the options reach the JVM through Spark's launcher intact
    env = environment(cache)
    first = copy(tmp_path / "one", env)
    assert first.returncode == 0, first.stderr[-3000:]
    archives = list((cache / "jvm").glob("spark-driver-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 10 * 2**20, list((cache / "jvm").iterdir())
    assert not list((cache / "jvm").glob("recording-*")), "the recording's directory is left behind"
    assert ids(tmp_path / "one") == list(range(3000))

    # -Xshare:on: a JVM that cannot map its archive refuses to start, so a copy that finishes has mapped it
    strict = {**env, "JAVA_TOOL_OPTIONS": "-Xshare:on"}
    second = copy(tmp_path / "two", strict)
    assert second.returncode == 0, second.stderr[-3000:]
    assert ids(tmp_path / "two") == list(range(3000))
    assert list((cache / "jvm").glob("spark-driver-*.jsa")) == archives

    # the control: the same check on an archive the JVM cannot map fails the copy
    archives[0].chmod(0o644)
    archives[0].write_bytes(b"not an archive")
    broken = copy(tmp_path / "three", strict)
    assert broken.returncode != 0 and "shared archive" in broken.stdout + broken.stderr, broken.stderr[-2000:]
    # without -Xshare:on the JVM ignores an archive it cannot map, and the copy runs as before
    tolerant = copy(tmp_path / "four", env)
    assert tolerant.returncode == 0 and ids(tmp_path / "four") == list(range(3000)), tolerant.stderr[-2000:]


def test_a_copy_stopped_while_it_records_takes_the_recording_with_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # 200,000 rows at 5,000 rows/s: the copy still runs when its recording has begun
    proc = subprocess.Popen([*CLI, "copy", "--connector", "generator", "-o", "rows=200000", "-o",
                             "max_rows_per_second=5000", "--output", str(tmp_path / "out"), "--quiet"],
                            env=environment(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        recording: list[int] = []
        while not recording:
            assert proc.poll() is None, "the copy ended before its recording began: " + proc.communicate()[1]
            assert time.monotonic() < deadline, "no recording began"
            dirs = list((cache / "jvm").glob("recording-*")) if (cache / "jvm").is_dir() else []
            recording = processes_mentioning(str(dirs[0])) if dirs else []
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "terminated" in err
    left = processes_mentioning(str(cache / "jvm"))
    assert not left, f"processes of the recording outlived the copy: {left}"
    assert list((cache / "jvm").iterdir()) == [], "a recording that was stopped left files or an archive"


def test_a_recording_that_fails_is_not_tried_again_by_every_copy(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark installation without jars: the recording child cannot start Spark and exits without an archive."""
    spark_home = tmp_path / "no-spark"
    (spark_home / "jars").mkdir(parents=True)
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    monkeypatch.setenv("SPLITSOURCE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(_jvm.SWITCH_ENV, raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    rec = _jvm.recorder()
    assert rec is not None
    rec.start()
    assert not rec.finish(), "an archive from a Spark installation without jars"
    marker = _jvm.failed_marker(rec.path)
    assert marker.is_file() and "exit" in marker.read_text(), list(rec.path.parent.iterdir())
    assert not rec.path.exists() and not list(rec.path.parent.glob("recording-*"))
    assert _jvm.recorder() is None, "every copy would try (and fail) again"
    assert _jvm.recorder(retry_failed=True) is not None, "the explicit command cannot try again"
    assert _jvm.driver_options() == []
