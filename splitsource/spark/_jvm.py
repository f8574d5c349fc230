"""The driver JVM's class archive: the classes a Spark-engine copy's driver loads, recorded once per machine and
mapped by every later start (Java's class data sharing, JEP 350 dynamic archives, Java 13+).

Spark's driver loads about 10,000 classes from some 250 jars before a copy's first task runs; from an archive it
maps them instead, and the session starts about 1.5 s sooner on this project's 2-core machine (2.9 s -> 1.4 s,
docs/benchmarks.md). The archive is only valid for the Java, the Spark jars and the class path it was recorded
with: it lives in ``$SPLITSOURCE_CACHE/jvm/`` (default ``~/.cache/splitsource/jvm/``) under a name digested from
those, and a JVM that cannot map it anyway (a jar changed in place) ignores it and loads its classes as before.

Recording: a child process (a process group of its own, at low priority) starts the copy's session and runs one
job of the shape a Spark-engine copy runs (``python -m splitsource.spark._session --record``); its JVM writes the
archive at its exit (``-XX:ArchiveClassesAtExit``); the archive is moved into place only once that JVM has exited,
so a half-written archive is never used. The first Spark-engine copy on a machine records it beside its own work
(and waits for it, at most :data:`RECORD_TIMEOUT_S`, before it returns);
``scripts/setup.sh`` records it ahead (``python -m splitsource.spark._jvm``). A recording that fails leaves
``<archive>.failed`` (what its child printed) and copies do not try again; that command does.
``SPLITSOURCE_JVM_ARCHIVE=off``
neither records nor uses one. Only the copy's own session uses the archive, and only when the user did not set
``PYSPARK_SUBMIT_ARGS`` (then the JVM's command line is theirs).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from splitsource._version import __version__

__all__ = ["RECORD_TIMEOUT_S", "SWITCH_ENV", "Recorder", "archive_path", "driver_options", "ensure_archive",
           "failed_marker", "recorder"]

SWITCH_ENV = "SPLITSOURCE_JVM_ARCHIVE"  # "off": neither record nor use the archive
RECORD_ENV = "SPLITSOURCE_JVM_RECORD"  # set for the recording child: where its JVM writes the archive at exit
CACHE_ENV = "SPLITSOURCE_CACHE"
RECORD_TIMEOUT_S = 120.0  # a recording takes about 15 s on 2 cores; past this it is killed, and nothing is lost
_STALE_S = 3600.0  # a recording directory this old belongs to a recorder whose copy was killed
# the JVM prints class-sharing warnings (a class it cannot archive, an archive it cannot map) on stdout
_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def driver_options() -> list[str]:
    """The options that make the driver JVM map the archive (or, in the recording child, write it); none when
    there is no archive yet or it is switched off."""
    recording = os.environ.get(RECORD_ENV)
    if recording:
        return [f"-XX:ArchiveClassesAtExit={recording}", *_QUIET]
    path = archive_path()
    if path is None or not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}", *_QUIET]


def archive_path() -> Path | None:
    """Where the archive for this Java, Spark and class path lives (whether or not it exists yet); None when
    switched off or when there is no Java to start."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return None
    java = _java()
    if java is None:
        return None
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "splitsource")
    return cache / "jvm" / f"spark-driver-{_digest(java)}.jsa"


def recorder(retry_failed: bool = False) -> Recorder | None:
    """A recorder for this machine's archive, or None when there is one already (or it is switched off, or this
    process is itself recording, or a recording failed here before: a copy does not try again on every run, and
    ``python -m splitsource.spark._jvm`` does, with ``retry_failed``)."""
    if os.environ.get(RECORD_ENV):
        return None
    path = archive_path()
    if path is None or path.is_file() or (not retry_failed and failed_marker(path).is_file()):
        return None
    return Recorder(path)


def failed_marker(path: Path) -> Path:
    """Left beside where the archive would be by a recording that failed, with what its child printed."""
    return path.with_name(path.name + ".failed")


class Recorder:
    """Records the archive at ``path`` in a child process group: :meth:`start`, then :meth:`finish` (wait, then move
    the archive into place) or :meth:`stop` (kill the group, keep nothing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}  # before any session set it
        self._lock = threading.Lock()
        self._ended = False  # finished or stopped: a start that comes later (the session was slow) does nothing
        self._proc: subprocess.Popen[bytes] | None = None
        self._directory: Path | None = None
        self._drained = threading.Event()
        self._output = b""

    @property
    def running(self) -> bool:
        return self._proc is not None and not self._drained.is_set()

    @property
    def output(self) -> str:
        """What the child printed (its one-line error when the recording failed)."""
        return self._output.decode(errors="replace")

    def start(self) -> None:
        with self._lock:
            if self._ended or self._proc is not None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _remove_stale(self.path.parent)
                self._directory = Path(tempfile.mkdtemp(prefix="recording-", dir=self.path.parent))
            except OSError:  # a cache that cannot be written: Spark starts without an archive, as before
                self._ended = True
                return
            env = {**self._env, RECORD_ENV: str(self._directory / "classes.jsa")}
            # the child's JVM inherits its stdout: the pipe ends when that JVM has exited, its archive written
            self._proc = subprocess.Popen([sys.executable, "-m", "splitsource.spark._session", "--record"], env=env,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        threading.Thread(target=self._drain, name="splitsource-jvm-archive", daemon=True).start()

    def _drain(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            self._output = self._proc.stdout.read()  # up to the end: the child and its JVM have exited
            self._proc.wait()
        finally:
            self._drained.set()

    def finish(self, timeout: float = RECORD_TIMEOUT_S) -> bool:
        """Wait for the recording (at most ``timeout`` s, then :meth:`stop`) and move the archive into place;
        whether it is there. A recording that failed leaves nothing behind: the next copy tries again."""
        with self._lock:
            self._ended = True
        if self._proc is None:
            return self.path.is_file()
        try:
            if not self._drained.wait(timeout):
                self.stop()
                self._failed(f"no archive after {timeout:.0f} s")
                return False
        except BaseException:  # Ctrl-C or SIGTERM while waiting: the recording goes with the copy
            self.stop()
            raise
        assert self._directory is not None
        recorded = self._directory / "classes.jsa"
        try:
            if self._proc.returncode == 0 and recorded.is_file() and recorded.stat().st_size > 0:
                os.replace(recorded, self.path)
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)
        if not self.path.is_file():
            self._failed(f"exit {self._proc.returncode}, no archive:\n{self.output[-4000:]}")
            return False
        failed_marker(self.path).unlink(missing_ok=True)
        return True

    def _failed(self, why: str) -> None:
        try:
            failed_marker(self.path).write_text(why + "\n")
        except OSError:
            pass

    def stop(self) -> None:
        """Kill the recording's process group (the child, its JVM and that JVM's Python workers) and remove what it
        wrote; returns once the group is gone."""
        with self._lock:
            self._ended = True
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._drained.wait(30.0)
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)


def _java() -> Path | None:
    """The java Spark's launcher starts: ``$JAVA_HOME/bin/java``, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not found or not os.path.isfile(found):
        return None
    return Path(found).resolve()


def _digest(java: Path) -> str:
    """What the archive depends on: this release, the Java installation, Spark's jars and the class path's inputs."""
    spark_home = os.environ.get("SPARK_HOME")
    if not spark_home:
        spec = importlib.util.find_spec("pyspark")
        spark_home = str(Path(spec.origin).parent) if spec and spec.origin else ""
    java_home = java.parent.parent
    files = [java, java_home / "release", java_home / "lib" / "server" / "libjvm.so"]
    jars = Path(spark_home, "jars")
    if jars.is_dir():
        files += sorted(jars.iterdir())
    stats = []
    for f in files:
        try:
            st = f.stat()
            stats.append([str(f), st.st_size, st.st_mtime_ns])
        except OSError:
            stats.append([str(f), None, None])
    env = {k: os.environ.get(k) for k in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
                                          "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")}
    blob = json.dumps({"splitsource": __version__, "files": stats, "env": env}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _remove_stale(directory: Path) -> None:
    """Recording directories left by a copy that was killed while its recorder ran (the recorder ends by itself)."""
    for entry in directory.glob("recording-*"):
        try:
            if time.time() - entry.stat().st_mtime > _STALE_S:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def ensure_archive() -> Path | None:
    """Record this machine's archive now unless it is there (or switched off); where it is, or None."""
    rec = recorder(retry_failed=True)
    if rec is not None:
        rec.start()
        if not rec.finish():
            raise RuntimeError(f"recording the driver JVM's class archive failed: {rec.output.strip()[-2000:]}")
    path = archive_path()
    return path if path is not None and path.is_file() else None


def _main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m splitsource.spark._jvm   (records the driver JVM's class archive, once)",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        path = ensure_archive()
    except RuntimeError as exc:
        print(f"{exc}; Spark starts without it", file=sys.stderr)
        return 1
    if path is None:
        print("jvm archive: switched off, or no java")
    else:
        print(f"jvm archive: {path} ({path.stat().st_size / 2**20:.0f} MiB, {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
