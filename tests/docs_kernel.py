"""One Python session per page of the docs: runs the page's python (and sql) blocks one after the other in one
namespace, as a user pasting them into one interpreter would (tests/docs_runner.py starts it).

Frames on stdin: a line ``<kind> <length>`` then ``length`` bytes of UTF-8 source (kind ``python`` or ``sql``).
After each block one line goes to the file descriptor named by the first argument: ``ok`` or ``error``. The
block's output (stdout and stderr, and what the JVM and Spark's workers print, which share the descriptors) goes
wherever the runner points descriptors 1 and 2.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any


def _sql(namespace: dict[str, Any], source: str) -> None:
    spark = namespace.get("spark")
    if spark is None:
        raise RuntimeError("an sql block needs a SparkSession named spark from an earlier python block")
    for statement in (s.strip() for s in source.split(";")):
        if statement:
            spark.sql(statement).show(truncate=False)


def main() -> int:
    control = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    sys.path[0] = os.getcwd()  # as in an interpreter started where the user works, not beside this file
    namespace: dict[str, Any] = {"__name__": "__main__"}
    stdin = sys.stdin.buffer
    while True:
        header = stdin.readline()
        if not header:
            return 0
        kind, length = header.decode().split()
        source = stdin.read(int(length)).decode()
        try:
            if kind == "sql":
                _sql(namespace, source)
            else:
                exec(compile(source, "<docs block>", "exec"), namespace)  # noqa: S102 - running the docs is the point
            status = "ok"
        except BaseException:  # noqa: BLE001 - a block's failure, whatever it is, is the test's result
            traceback.print_exc()
            status = "error"
        sys.stdout.flush()
        sys.stderr.flush()
        control.write(status + "\n")


if __name__ == "__main__":
    sys.exit(main())
