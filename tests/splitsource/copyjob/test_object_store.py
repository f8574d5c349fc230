"""Copies to an S3-compatible store (SeaweedFS on loopback, started by scripts/s3server.py): exact output, one
owner when two copies start together, and a store without conditional creates refused unless vouched for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import ROOT, await_setup

pytestmark = pytest.mark.slow

ROWS = 4000
COPY = ["copy", "--connector", "generator", "-o", f"rows={ROWS}", "-o", "split_rows=250", "--engine", "local",
        "--workers", "1", "--quiet"]

# Both copies stop right before they create the output's lock, until both are there: the interleaving that makes
# a check-then-write lock fail (both checked, neither created yet); "plain" takes the store's condition away from
# both locks (and meets at the checkpoint's lock too), and holds each copy between its check and its write until
# both have checked: two processes let go at once were not always close enough (one failed CI run on 41590d2).
RACER = textwrap.dedent("""
    import os, sys, time
    from splitsource import _fs
    from splitsource.cli import main

    gate, me, plain = sys.argv[1], sys.argv[2], sys.argv[3] == "plain"
    original = _fs.Store.create

    def meet(name):
        os.makedirs(os.path.join(gate, name), exist_ok=True)
        open(os.path.join(gate, name, me), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(os.path.join(gate, name))) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)

    def create(self, path, data):
        lock = "output" if path.endswith(".bucketing/lock.json") else "checkpoint"
        if lock == "output":
            meet("output")
        if plain and path.endswith("lock.json"):
            self.conditional = None
            if lock == "checkpoint":
                meet("checkpoint")
            exists = self.exists

            def checked(p):
                found = exists(p)
                if p == path:
                    meet(lock + "-checked")
                return found

            self.exists = checked
            try:
                return original(self, path, data)
            finally:
                del self.exists
        return original(self, path, data)

    _fs.Store.create = create
    sys.exit(main(sys.argv[4:]))
""")


def _ids(uri: str, fmt: str = "parquet") -> list[int]:
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    data = ds.dataset(path, filesystem=fs, format="json" if fmt == "jsonl" else fmt)
    return sorted(data.to_table(columns=["id"])["id"].to_pylist())


def _race(tmp_path: Path, uri: str, mode: str) -> list[subprocess.CompletedProcess[str]]:
    gate = tmp_path / f"gate-{uri.rsplit('/', 1)[1]}"
    gate.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(gate), name, mode, *COPY, "--output", uri],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for name in ("a", "b")]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert sorted(os.listdir(gate / "output")) == ["a", "b"], "the two copies did not both reach the lock"
    return done


def test_a_copy_to_s3_is_exact_and_readers_see_only_committed_rows(s3: Any) -> None:
    from splitsource.cli import main

    uri = s3.uri("exact")
    assert main([*COPY, "--output", uri]) == 0
    assert main(["verify", "--connector", "generator", "-o", f"rows={ROWS}", "-o", "split_rows=250",
                 "--output", uri]) == 0
    assert _ids(uri) == list(range(ROWS))


# DuckDB reads S3 through its httpfs extension, which it downloads at first use; the package index carries it for
# DuckDB 1.4 (LTS) only, so scripts/test.sh installs that pair apart from the venv (whose DuckDB is newer)
DUCKDB_S3 = ROOT / ".venv" / "duckdb-s3"
DUCKDB_QUERY = textwrap.dedent("""
    import glob, os, sys
    import duckdb
    extension = glob.glob(os.path.join(sys.argv[1], "duckdb_ext", "extensions", "*", "*", "httpfs.duckdb_extension"))
    con = duckdb.connect()
    con.load_extension(extension[0])
    endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1]
    con.execute(f"CREATE SECRET (TYPE s3, KEY_ID '{os.environ['AWS_ACCESS_KEY_ID']}', "
                f"SECRET '{os.environ['AWS_SECRET_ACCESS_KEY']}', REGION '{os.environ['AWS_REGION']}', "
                f"ENDPOINT '{endpoint}', URL_STYLE 'path', USE_SSL false)")
    print(duckdb.__version__, *con.sql(f"SELECT count(*), count(DISTINCT id), min(id), max(id) "
                                      f"FROM read_parquet('{sys.argv[2]}/**')").fetchone())
""")


SPARK_QUERY = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for key, value in json.loads(sys.argv[1]).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    df = spark.read.parquet(sys.argv[2])
    print("ROWS", df.count(), df.select("id").distinct().count(), df.agg({"id": "min"}).first()[0],
          df.agg({"id": "max"}).first()[0])
    spark.stop()
""")


def test_readers_pointed_at_the_s3_output_read_exactly_the_committed_rows(s3: Any) -> None:
    """Spark (s3a://), pyarrow.dataset, Polars and DuckDB, each with its plainest call on the output's prefix and
    the endpoint passed as its users pass it: the output holds data files only (the sink's records are beside it)."""
    import polars as pl

    from splitsource.cli import main

    uri = s3.uri("readers")
    assert main([*COPY, "--output", uri]) == 0
    assert _ids(uri) == list(range(ROWS))
    options = {"aws_endpoint_url": s3.env["AWS_ENDPOINT_URL"], "aws_access_key_id": s3.env["AWS_ACCESS_KEY_ID"],
               "aws_secret_access_key": s3.env["AWS_SECRET_ACCESS_KEY"], "aws_region": s3.env["AWS_REGION"],
               "aws_allow_http": "true"}
    polars_ids = pl.read_parquet(uri + "/", storage_options=options)["id"].to_list()
    assert sorted(polars_ids) == list(range(ROWS))
    await_setup("packages", "s3a-jars")
    assert (DUCKDB_S3 / ".complete").exists(), "scripts/test.sh installs DuckDB's S3 reader into .venv/duckdb-s3"
    env = {**os.environ, "PYTHONPATH": str(DUCKDB_S3)}
    duck = subprocess.run([sys.executable, "-c", DUCKDB_QUERY, str(DUCKDB_S3), uri], capture_output=True, text=True,
                          env=env, timeout=120)
    assert duck.returncode == 0, duck.stderr[-2000:]
    version, count, distinct, low, high = duck.stdout.split()
    assert version.startswith("1.4") and (int(count), int(distinct), int(low), int(high)) == (ROWS, ROWS, 0,
                                                                                              ROWS - 1)
    from scripts.s3server import spark_s3a_conf

    conf = json.dumps(spark_s3a_conf(s3.env))  # hadoop-aws from the cache (scripts/test.sh fetches it)
    spark = subprocess.run([sys.executable, "-c", SPARK_QUERY, conf, uri.replace("s3://", "s3a://")],
                           capture_output=True, text=True, timeout=300)
    assert spark.returncode == 0, spark.stderr[-3000:]
    assert f"ROWS {ROWS} {ROWS} 0 {ROWS - 1}" in spark.stdout, spark.stdout


def test_two_copies_started_together_never_both_write(s3: Any, tmp_path: Path) -> None:
    from splitsource.cli import main

    for trial in range(10):
        uri = s3.uri(f"race-{trial}")
        first, second = _race(tmp_path, uri, "conditional")
        outcomes = sorted((first.returncode, second.returncode))
        assert outcomes == [0, 1], (first.stderr[-2000:], second.stderr[-2000:])
        loser = first if first.returncode else second
        assert "is in use by another copy" in loser.stderr, loser.stderr[-2000:]
        assert main([*COPY, "--output", uri]) == 0  # the re-run finds it finished
        assert _ids(uri) == list(range(ROWS)), f"trial {trial}"


def test_without_the_stores_condition_the_same_race_takes_the_lock_twice(s3: Any, tmp_path: Path) -> None:
    # the proof that the race above is real: a check-then-write lets both copies take the lock
    first, second = _race(tmp_path, s3.uri("race-plain"), "plain")
    took = [p for p in (first, second) if "is in use by another copy" not in p.stderr]
    assert len(took) == 2, (first.stderr[-2000:], second.stderr[-2000:])


def test_a_store_that_ignores_if_none_match_is_refused_unless_vouched_for(s3: Any,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from splitsource import _s3
    from splitsource.cli import main

    monkeypatch.setattr(_s3.ConditionalCreate, "create", _ignores_the_condition)
    uri = s3.uri("no-condition")
    assert main([*COPY, "--output", uri]) == 2
    err = capsys.readouterr().err
    assert "ignores If-None-Match on PutObject, so two copies started together could both write it" in err
    assert "--single-writer" in err and len(err.strip().splitlines()) == 1
    assert main([*COPY, "--output", uri, "--single-writer"]) == 0
    assert "relying on single_writer" in capsys.readouterr().err
    assert _ids(uri) == list(range(ROWS))


def _ignores_the_condition(self: Any, path: str, data: bytes) -> bool:
    import pyarrow.fs as pafs

    fs, inner = pafs.FileSystem.from_uri(f"s3://{path}")
    with fs.open_output_stream(inner) as stream:  # what a store without the condition does: overwrite
        stream.write(data)
    return True


def test_on_s3_a_part_is_uploaded_pending_and_copied_once_at_commit(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    from splitsource import _fs
    from splitsource.sink import BucketingGlobalCommitter, parse_sink_options
    from splitsource.sink._writer import write_files

    uri = s3.uri("copied-once")
    opened, moved = [], []
    open_output, move = _fs.Store.open_output, _fs.Store.move
    monkeypatch.setattr(_fs.Store, "open_output", lambda self, path: (opened.append(path), open_output(self, path))[1])
    monkeypatch.setattr(_fs.Store, "move", lambda self, src, dst: (moved.append((src, dst)), move(self, src, dst))[1])
    for fmt in ("parquet", "jsonl"):
        options = parse_sink_options({"path": f"{uri}-{fmt}", "format": fmt, "bucketer": "none",
                                      "part_size_mb": "0.001"})
        rows = pa.RecordBatch.from_arrays([pa.array(range(5000), pa.int64())], names=["id"])
        files = write_files(options, [rows.slice(i, 1000) for i in range(0, 5000, 1000)], 0)
        store, base = _fs.resolve_filesystem(options.path)
        committer = BucketingGlobalCommitter(store, base, options.names)
        committer.commit(committer.combine(files, kind="append", write_id="test"))
        assert len(files) > 1, "the test wants several parts (part_size_mb rolls them)"
        assert [p for p in opened if p.endswith(".in-progress")] == []  # straight to the pending name
        parts = [(src, dst) for src, dst in moved if src.endswith(".pending")]
        assert len(parts) == len(files) and len({dst for _, dst in parts}) == len(files)  # one copy each
        assert len(moved) == len(parts)  # and nothing else was moved
        assert _ids(f"{uri}-{fmt}", fmt) == list(range(5000))
        opened.clear()
        moved.clear()


def test_a_part_on_s3_must_fit_one_copy_request(s3: Any) -> None:
    from splitsource import OptionsError
    from splitsource.sink import parse_sink_options

    with pytest.raises(OptionsError, match="option 'part_size_mb'.*5 GiB"):
        parse_sink_options({"path": s3.uri("too-big"), "part_size_mb": "6000"})
    parse_sink_options({"path": "/tmp/local-output", "part_size_mb": "6000"})  # a local rename has no limit


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_copies_to_s3_killed_many_times_end_exact(s3: Any, engine: str) -> None:
    from splitsource._fs import resolve_filesystem
    from tests.splitsource.copyjob.kill_points import ENGINE_POINTS
    from tests.splitsource.copyjob.test_copy import GEN, kill_and_rerun, run

    uri = s3.uri(f"storm-{engine}")
    # 30 splits of 2,000 rows: a batch each, room for ten kills (the kills' restarts, not the rows, take the time)
    source = [a.replace("split_rows=4000", "split_rows=2000") for a in GEN]
    args = ["copy", *source, "--output", uri, "--max-splits-per-batch", "1", "--quiet", "--engine", engine]
    # ten kills of the local engine at every named point, most of the whole process group, every third of the
    # coordinator alone; two of the Spark engine where its tasks run, the second of the coordinator alone
    if engine == "local":
        stdout = kill_and_rerun(args, uri, kills=10, seed=29, coordinator_alone=lambda k: k % 3 == 2)
    else:
        stdout = kill_and_rerun(args, uri, kills=2, seed=29, coordinator_alone=lambda k: k == 1, points=ENGINE_POINTS)
    assert "copy finished: 60,000 rows" in stdout
    check = run(["verify", *source, "--output", uri])
    assert check.returncode == 0 and check.stdout.startswith("MATCH"), check.stdout + check.stderr
    store, base = resolve_filesystem(uri)
    left = [e.path for e in store.list(base, recursive=True) if e.name.endswith((".pending", ".in-progress"))]
    assert left == [], left  # no partial or pending object left behind
    assert store.uploads is not None and store.uploads.list("lake", base.partition("/")[2] + "/") == []
    assert _ids(uri) == list(range(60_000))


# A writer of a part on S3, killed mid-upload: pyarrow has sent parts of a multipart upload, not completed it.
HALF_UPLOAD = textwrap.dedent("""
    import os, sys, time
    import pyarrow.fs as pafs
    fs, path = pafs.FileSystem.from_uri(sys.argv[1])
    stream = fs.open_output_stream(path)
    for _ in range(4):
        stream.write(os.urandom(8 << 20))
    stream.flush()
    print("uploading", flush=True)
    time.sleep(120)
""")


def _half_upload(uri: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HALF_UPLOAD, uri], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "uploading"
    finally:
        proc.kill()
        proc.wait()


def test_a_writer_killed_mid_upload_leaves_an_incomplete_upload_that_the_next_sweep_aborts(s3: Any) -> None:
    from splitsource._fs import resolve_filesystem
    from splitsource.sink import BucketingGlobalCommitter, PartNames

    store, base = resolve_filesystem(s3.uri("half"))
    assert store.uploads is not None and store.uploads.usable
    mine = "00000-aaaaaaaaaaaa-1111"  # <partition>-<writer>-<attempt token>, as a copy names its tasks
    other = "00001-bbbbbbbbbbbb-2222"  # a task of another writer, alive as far as anyone knows
    _half_upload(s3.uri(f"half/dt=1/_part-{mine}-0.pending"))
    _half_upload(s3.uri(f"half/_part-{other}-0.pending"))
    foreign = s3.uri("half/notes.bin.upload")
    _half_upload(foreign)  # not a name the sink writes: never touched
    listed = sorted(u.key for u in store.uploads.list("lake", "half/"))
    assert listed == [f"half/_part-{other}-0.pending", f"half/dt=1/_part-{mine}-0.pending", "half/notes.bin.upload"], \
        "the killed writers left no incomplete upload: the fault did not happen"
    assert not [e for e in store.list(base, recursive=True) if not e.is_dir]  # invisible to a listing of objects

    committer = BucketingGlobalCommitter(store, base, PartNames())
    committer.sweep(keep=(), owner="aaaaaaaaaaaa")  # a writer's own sweep: another live writer's upload stays
    assert sorted(u.key for u in store.uploads.list("lake", "half/")) == [f"half/_part-{other}-0.pending",
                                                                          "half/notes.bin.upload"]
    committer.sweep(keep=())  # a copy's sweep (it owns the output): every transient upload
    assert [u.key for u in store.uploads.list("lake", "half/")] == ["half/notes.bin.upload"]
    store.uploads.abort("lake", store.uploads.list("lake", "half/")[0])
