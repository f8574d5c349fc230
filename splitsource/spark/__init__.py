"""The Spark adapters: the only package of splitsource that imports pyspark.

- ``format("splitsource")`` (:class:`SplitSourceDataSource`): batch and streaming reads of any connector;
- ``format("bucketing")`` (:class:`BucketingDataSource`): the exactly-once bucketing sink for ``df.write`` and
  ``writeStream``;
- the Spark engine of the copy job (``splitsource.spark._copy``);
- :func:`register`: both formats on a session (Spark also finds them by itself through the ``pyspark_splitsource``
  and ``pyspark_bucketing`` modules).
"""

from splitsource.spark._sink import BucketingDataSource
from splitsource.spark._source import SplitSourceDataSource

__all__ = ["BucketingDataSource", "SplitSourceDataSource", "register"]


def register(spark: object) -> None:
    """Register ``format("splitsource")`` and ``format("bucketing")`` on ``spark`` explicitly (auto-registration
    makes this optional)."""
    spark.dataSource.register(SplitSourceDataSource)  # type: ignore[attr-defined]
    spark.dataSource.register(BucketingDataSource)  # type: ignore[attr-defined]
