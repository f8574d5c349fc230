"""What a Cassandra-to-Parquet copy loads into each of its processes (issue 16: the local copy's memory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# The coordinator's imports (the copy call's, incremental runs' included) and a worker's, then the work a worker does
# on a timestamp column: convert the driver's epoch milliseconds, write them to a Parquet part file and read it back.
_COPY = """
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from cassandra import cqltypes
import splitsource.cli, splitsource._copy_call, splitsource.copyjob._local, splitsource.copyjob._worker
import splitsource.copyjob._protocol
import splitsource.sink, connectors.cassandra
from connectors.cassandra._types import column_converter
from splitsource.sink.formats import FORMATS

column = column_converter(cqltypes.DateType, "at")([0, None, 1_700_000_000_123, -1])
schema = pa.schema([("at", column.type)])
with pa.OSFile(sys.argv[1], "wb") as stream:
    writer = FORMATS["parquet"].open(stream, schema, compression="zstd", header=False, fresh=True)
    writer.write(pa.record_batch([column], schema=schema))
    writer.close()
loaded = "pyarrow.compute" in sys.modules  # before the check below, whose cast loads it
print(pq.read_table(sys.argv[1]).column("at").cast(pa.int64()).to_pylist())
print(loaded)
"""


def test_a_cassandra_copy_to_parquet_does_not_load_pyarrow_compute(tmp_path: Path) -> None:
    # pyarrow.compute costs each process about 9 MB of RSS, three times over in a local copy (a coordinator and
    # two workers); nothing a Cassandra-to-Parquet copy does needs it. The last line would pass if nothing were
    # written: the values read back prove the path ran.
    done = subprocess.run([sys.executable, "-c", _COPY, str(tmp_path / "part.parquet")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    values, loaded = done.stdout.splitlines()
    assert values == str([0, None, 1_700_000_000_123_000, -1000])
    assert loaded == "False", "a module imports pyarrow.compute at its top again: import it where it is used"


_LARGE_PARQUET = """
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from splitsource.sink.formats import FORMATS

rows = 30_000  # past the rows a file's dictionaries are chosen on
batch = pa.record_batch({"id": pa.array(range(rows), pa.int64()), "tag": [f"t{i % 7}" for i in range(rows)]})
with pa.OSFile(sys.argv[1], "wb") as stream:
    writer = FORMATS["parquet"].open(stream, batch.schema, compression="snappy", header=False, fresh=True)
    writer.write(batch)
    writer.close()
print("pyarrow.compute" in sys.modules)
print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)
"""


def test_choosing_a_large_files_dictionaries_does_not_load_pyarrow_compute(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _LARGE_PARQUET, str(tmp_path / "part.parquet")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded, rows = done.stdout.splitlines()
    assert rows == "30000"
    assert loaded == "False", "the Parquet dictionaries' choice loads pyarrow.compute: count without it"
