"""Spark Connect, as Spark 4 and hosted Spark users work: a Connect server started for this module from the pyspark
installation (``sbin/start-connect-server.sh --wait``, loopback, ``local[2]``), and a client in another process
(``SparkSession.builder.remote``) that reads ``format("splitsource")``, queries it through a SQL view made with
``USING splitsource``, writes ``format("bucketing")``, and copies a read into the sink; every result compared with
the rows the generator was asked for, the files read back with pyarrow.dataset.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.fixtures import ROOT, await_setup

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROWS = 20_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import pyspark

    home = Path(pyspark.__file__).parent
    port = _free_port()
    logs = tmp_path_factory.mktemp("connect")
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(logs),
           "SPARK_PID_DIR": str(logs), "PYTHONPATH": str(ROOT)}
    out = open(logs / "server.log", "wb")  # noqa: SIM115 - the server's, closed below
    server = subprocess.Popen(
        ["bash", str(home / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC"],
        env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            if server.poll() is not None:
                pytest.fail(f"the Spark Connect server exited with {server.returncode}: "
                            f"{(logs / 'server.log').read_text(errors='replace')[-3000:]}", pytrace=False)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("the Spark Connect server did not listen within 240 s", pytrace=False)
                time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
        out.close()


CLIENT = """
import json, sys
from pyspark.sql import SparkSession
url, out, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = SparkSession.builder.remote(url).getOrCreate()
result = {}
df = spark.read.format("splitsource").option("connector", "generator").option("rows", str(rows)).load()
result["read"] = sorted(r.id for r in df.select("id").collect())
spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW gen USING splitsource OPTIONS (connector 'generator', rows '{rows}')")
result["sql"] = [list(r) for r in spark.sql("SELECT count(*), min(id), max(id) FROM gen WHERE id % 2 = 0").collect()]
spark.range(rows).write.format("bucketing").option("bucketer", "none").mode("append").save(out + "/range")
df.write.format("bucketing").option("bucketer", "none").mode("append").save(out + "/copy")
spark.stop()
print(json.dumps(result))
"""


CLIENT_PACKAGES = ROOT / ".venv" / "connect-client"  # installed by scripts/test.sh, apart from the venv


def test_read_sql_sink_and_a_read_to_sink_copy_through_spark_connect(connect_url: str, tmp_path: Path) -> None:
    await_setup("packages")
    if not (CLIENT_PACKAGES / ".complete").exists():
        pytest.fail(f"the Spark Connect client's packages are not in {CLIENT_PACKAGES}: run scripts/test.sh",
                    pytrace=False)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(CLIENT_PACKAGES)])
    result = subprocess.run([sys.executable, "-c", CLIENT, connect_url, str(tmp_path), str(ROWS)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["read"] == list(range(ROWS))
    assert got["sql"] == [[ROWS // 2, 0, ROWS - 2]]
    assert sorted(ds.dataset(str(tmp_path / "range"), format="parquet").to_table()["id"].to_pylist()) == \
        list(range(ROWS))
    copied = ds.dataset(str(tmp_path / "copy"), format="parquet").to_table()
    assert sorted(copied["id"].to_pylist()) == list(range(ROWS))
