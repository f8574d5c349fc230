"""What a Cassandra-to-Parquet copy loads into each of its processes (issue 16: the local copy's memory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# The coordinator's and a worker's imports, then the work a worker does on a timestamp column: convert the
# driver's epoch milliseconds, write them to a Parquet part file and read it back.
_COPY = """
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from cassandra import cqltypes
import splitsource.cli, splitsource.copyjob._local, splitsource.copyjob._worker, splitsource.copyjob._protocol
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
