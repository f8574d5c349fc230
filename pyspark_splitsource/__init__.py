"""Spark's auto-registration hook: Spark imports every top-level ``pyspark_*`` module and registers its
``DefaultSource``, so ``spark.read.format("splitsource")`` works with no ``register`` call."""

from splitsource.spark._source import SplitSourceDataSource as DefaultSource

__all__ = ["DefaultSource"]
