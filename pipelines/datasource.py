"""The ``lance_partitioned`` Python Data Source: reads with manifest pruning, and writes.

Reads: ``spark.read.format("lance_partitioned").load(root)`` (options ``versionAsOf``
for an older ``__manifest`` version, ``columns`` to read a subset, ``filter`` for a
SQL filter used for pruning and in the scans, ``rows_per_split`` for how many rows of
one large table a task reads, ``max_partitions`` for how many tasks share many small
tables). ``pushFilters`` prunes partition tables
through ``__manifest`` and pushes the filters into each Lance scan; ``partitions()``
returns one :class:`LanceInputPartition` per table (per fragment group for large
tables when there are few tables), each at the table's ``read_version``.

Writes:
``df.write.format("lance_partitioned").mode("append" | "overwrite").option(...).save(root)``
goes through the same protocol as :func:`pipelines.write.write_partitioned`:
tasks write fragments and return commit messages, and ``commit`` makes the dataset
commits and ONE ``__manifest`` commit. Spark gives a data source writer its input as
is, so partition values are computed with the Arrow transforms inside the tasks and
each task keeps at most ``max_open_writers`` partition buffers.

Options: ``partition_by`` (``"day(ts); bucket[16](user_id)"`` or a JSON list, to
create the namespace), ``write_id``, ``max_rows_per_file``, ``max_open_writers``,
and ``partitionOverwriteMode=dynamic`` (or the session setting
``spark.sql.sources.partitionOverwriteMode``) to make ``overwrite`` replace only the
partitions present in the DataFrame.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from partitioning.errors import SpecError
from partitioning.namespace import PartitionedNamespace
from pipelines.read import LancePartitionedReader, read_schema
from pipelines.source_writer import LancePartitionedWriter

__all__ = ["LancePartitionedDataSource", "register_data_source"]


def register_data_source(spark: SparkSession) -> None:
    """Make ``format("lance_partitioned")`` available in this session (with filter pushdown on)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(LancePartitionedDataSource)


class LancePartitionedDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "lance_partitioned"

    def _namespace(self) -> PartitionedNamespace:
        root = self.options.get("path")
        if not root:
            raise SpecError("load(path) is required: the namespace root")
        version = self.options.get("versionAsOf", self.options.get("versionasof"))
        return PartitionedNamespace.load(root, manifest_version=int(version) if version is not None else None)

    def schema(self) -> StructType:
        return read_schema(self._namespace().namespace_schema, self.options.get("columns"))

    def reader(self, schema: StructType) -> LancePartitionedReader:
        ns = self._namespace()
        return LancePartitionedReader(ns, schema, dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> LancePartitionedWriter:
        return LancePartitionedWriter(dict(self.options), schema, overwrite)
