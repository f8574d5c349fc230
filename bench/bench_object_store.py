#!/usr/bin/env python3
"""The 1M-row benchmark table copied to the local disk and to an S3 API server on loopback (SeaweedFS, started by
scripts/s3server.py), with both engines, in one run: the cost of an object store's commit (each part uploaded
under its pending name, then copied once to its final name) and its lock and log records (conditional creates).

Every copy's rows are counted before its time counts; medians of ``--repeat`` rounds; the ratio is object store
over local disk (target: at most 1.3).

    python bench/bench_object_store.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import Measured, record_run, run  # noqa: E402
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE, ensure_cassandra, ensure_loaded  # noqa: E402
from scripts import s3server  # noqa: E402

PORT = 18833  # the S3 server's first port (the tests use 18533-18632)


def _rows(output: str) -> int:
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(output) if "://" in output else (pafs.LocalFileSystem(), output)
    return int(ds.dataset(path, filesystem=fs, format="parquet").count_rows())


def _remove(output: str) -> None:
    import pyarrow.fs as pafs

    for target in (output, f"{output}.checkpoint", f"{output}.bucketing"):  # the records sit beside the output
        if "://" in target:
            fs, path = pafs.FileSystem.from_uri(target)
            fs.delete_dir(path)
        else:
            shutil.rmtree(target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ensure_loaded(args.rows, ensure_cassandra())
    copy = [sys.executable, "-m", "splitsource.cli", "copy", "--connector", "cassandra", "-o", f"hosts={HOSTS}",
            "-o", f"keyspace={KEYSPACE}", "-o", f"table={TABLE}", "--quiet"]
    runs: dict[str, list[Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp:
        env = s3server.start(Path(tmp, "s3"), port=PORT, bucket="lake")
        os.environ.update(env)
        try:
            for round_ in range(1, args.repeat + 1):
                for engine in ("local", "spark"):
                    for where, output in (("local disk", str(Path(tmp, "out"))),
                                          ("S3 server", f"s3://lake/bench-{round_}-{engine}")):
                        name = f"{engine} engine -> {where}"
                        measured = run([*copy, "--engine", engine, "--output", output])
                        rows = _rows(output) if measured.returncode == 0 else -1
                        if rows != args.rows:
                            raise SystemExit(f"{name}: {rows} rows instead of {args.rows}:\n"
                                             f"{measured.output[-3000:]}")
                        runs.setdefault(name, []).append(measured)
                        print(f"round {round_}: {name:32s} {measured.seconds:7.2f} s", flush=True)
                        _remove(output)
        finally:
            s3server.stop(Path(tmp, "s3"))
    results: dict[str, dict[str, object]] = {}
    for name, measured in runs.items():
        wall = statistics.median(m.seconds for m in measured)
        results[name] = {"wall_s": round(wall, 2), "rows_per_s": round(args.rows / wall),
                         "peak_rss_mb": round(max(m.peak_rss_mb for m in measured)),
                         "runs_s": [round(m.seconds, 2) for m in measured]}
    for engine in ("local", "spark"):
        s3_wall = results[f"{engine} engine -> S3 server"]["wall_s"]
        disk_wall = results[f"{engine} engine -> local disk"]["wall_s"]
        ratio = round(float(s3_wall) / float(disk_wall), 2)  # type: ignore[arg-type]
        results[f"{engine} engine -> S3 server"]["ratio_to_local_disk"] = ratio
        print(f"{engine} engine: S3 / local disk = {ratio:.2f} (target <= 1.3)")
    record_run("object_store", {"rows": args.rows, "repeat": args.repeat, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
