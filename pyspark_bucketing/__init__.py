"""Spark's auto-registration hook for the bucketing sink: ``df.write.format("bucketing")`` with no ``register``
call (Spark imports every top-level ``pyspark_*`` module and registers its ``DefaultSource``)."""

from splitsource.spark._sink import BucketingDataSource as DefaultSource

__all__ = ["DefaultSource"]
