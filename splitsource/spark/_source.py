"""The ``splitsource`` Spark data source: batch reads of any connector through the FLIP-27 contracts.

``spark.read.format("splitsource").option("connector", NAME).options(...).load()``

Framework options (every other option goes to the connector; ``splitsource options --connector NAME`` prints
both), generated from :class:`~splitsource._planning.FrameworkOptions`:

{options}

Runs in Spark's Python workers, not in the user's process: the driver-side worker calls ``partitions()`` (the
enumerator runs to the end once), executor workers call ``read()`` for each partition.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from splitsource._planning import FrameworkOptions, read_settings
from splitsource._typed_options import options_table
from splitsource.spark._reader import (
    PushdownBatchReader,
    SplitSourceBatchReader,
    carried,
    spark_arrow_schema,
    spark_offers_filters,
)
from splitsource.spark._stream import SplitSourceStreamReader

__all__ = ["SplitSourceDataSource"]

__doc__ = (__doc__ or "").replace("{options}", options_table(FrameworkOptions, "text"))


class SplitSourceDataSource(DataSource):
    """``format("splitsource")``: read any splitsource connector into Spark.

    Example::

        df = (spark.read.format("splitsource")
              .option("connector", "generator").option("rows", "1000000").load())

    See the module docstring for the framework options and each connector's docs for its own.
    """

    @classmethod
    def name(cls) -> str:
        return "splitsource"

    def schema(self) -> StructType:
        source = read_settings(self.options).source()
        struct = spark_arrow_schema(source.schema())[0]
        # Spark pickles this instance after schema() and hands it to the planning worker, which pickles the reader
        # into every task: the source travels with the metadata it has just read (for Cassandra: the table's
        # columns, types and converters), so neither planning nor a task connects to read them again
        self._carried = carried(source)
        return struct

    def reader(self, schema: StructType) -> DataSourceReader:
        settings = read_settings(self.options)  # parsed once: bad options fail here, before any task starts
        framework, planned = settings.framework, getattr(self, "_carried", None)
        # Spark refuses a reader that implements pushFilters while spark.sql.python.filterPushdown.enabled is
        # false (its default), even for a query with no filter, and the setting does not reach this worker: Spark
        # asks for the reader from its filter pushdown step only when the setting is on, so that is the sign
        if framework.pushdown == "true" or (framework.pushdown == "auto" and spark_offers_filters()):
            return PushdownBatchReader(settings, schema, planned)
        return SplitSourceBatchReader(settings, schema, planned)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        return SplitSourceStreamReader(read_settings(self.options), schema)
