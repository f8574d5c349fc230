"""What the copy's foreachBatch function hands back to Spark when a batch fails, checked with Spark's own test of
whether a query was stopped (``StreamExecution.isInterruptionException``), in the JVM."""

from __future__ import annotations

from typing import Any

import pytest

from splitsource.spark._copy import PASSED_ON_CHARS, passed_on


class Py4JJavaError(Exception):  # named as py4j's, whose real one needs a live Java exception behind it
    pass


Py4JJavaError.__module__ = "py4j.protocol"

FRAMES = "".join(f"\tat org.apache.spark.scheduler.DAGScheduler.step{i}(DAGScheduler.scala:{i})\n" for i in range(4000))
CANCELLED = ("An error occurred while calling o91.collectToPython.\n"
             ": org.apache.spark.SparkException: Job 3 cancelled part of cancelled job group\n" + FRAMES +
             "Caused by: java.lang.InterruptedException\n" + FRAMES[:2000] + "\t... 41 more\n")
FAILED = ("An error occurred while calling o91.collectToPython.\n"
          ": org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
          '  File "/x/_source.py", line 9, in fetch\n'
          "connectors.cassandra._source.PageTimeout: a page of 100 rows (min_fetch_size) timed out\n" + FRAMES)


def stopped(spark: Any, text: str) -> bool:
    jvm = spark.sparkContext._jvm
    streaming = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution
    return bool(streaming.isInterruptionException(jvm.py4j.Py4JException(text), spark.sparkContext._jsc.sc()))


def test_a_stopped_batch_is_told_to_spark_in_a_text_its_check_can_read(spark: Any) -> None:
    whole = f"Traceback (most recent call last):\n  ...\npy4j.protocol.Py4JJavaError: {CANCELLED}"
    with pytest.raises(Exception, match="StackOverflowError"):
        stopped(spark, whole)  # what py4j handed Spark before: the check itself overflows
    short = passed_on(Py4JJavaError(CANCELLED))
    assert len(short) < PASSED_ON_CHARS + 100 and "\tat " not in short
    assert stopped(spark, f"Traceback (most recent call last):\n  ...\nBatchFailed: {short}")


def test_a_failed_batch_keeps_its_cause_and_is_not_taken_for_a_stop(spark: Any) -> None:
    short = passed_on(Py4JJavaError(FAILED))
    assert "connectors.cassandra._source.PageTimeout: a page of 100 rows (min_fetch_size) timed out" in short
    assert not stopped(spark, short)
