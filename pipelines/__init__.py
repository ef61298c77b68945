"""Spark side of the Lance partitioned namespace: session, Column transforms, writes, data source.

Everything that imports PySpark lives here, on top of :mod:`partitioning`. The floor plan:

- the session modules anyone here may import: ``session`` (``build_session``),
  ``session_calls`` (calls on a session you have), ``shared_roots`` (roots a master can
  reach), ``tasks`` (work as Spark tasks), ``spark_errors`` (one line for a failed job),
  ``read_options`` (what a read hands the data source), ``jar`` (where the JVM layer's jar
  is, and adding it to a running session); ``sample`` makes demo data.
- :mod:`pipelines.columns`: transforms as Spark Columns, Spark schemas.
- :mod:`pipelines.search`: vector and full-text search, index builds.
- :mod:`pipelines.source`: the ``lance_partitioned`` data source (reader and writer, and
  their Structured Streaming sides).
- :mod:`pipelines.read`: ``read_partitioned``, small local reads, the shuffle-free join.
- :mod:`pipelines.write`: ``write_partitioned``, merges, updates, small changes.
- :mod:`pipelines.maintenance`: compaction, vacuum, deletes, history, metadata tables.
- :mod:`pipelines.backfill`: ``backfill_columns``, columns computed without rewriting files.
- :mod:`pipelines.jvm`: the Python side of the JVM layer.

This module keeps the public names; imports from the modules are private and may move.
"""

from partitioning.tables.write import CommitResult
from pipelines.backfill.api import BackfillResult, backfill_columns
from pipelines.columns.schema import namespace_schema_from_spark, spark_schema
from pipelines.columns.transforms import partition_value, with_partition_columns
from pipelines.maintenance.history import history, restore
from pipelines.maintenance.inspect import files_table, partitions_table
from pipelines.maintenance.operations import compact, delete_rows, drop_partitions, optimize_manifest, vacuum
from pipelines.read.dataframe import read_partitioned
from pipelines.read.join import join_partitioned
from pipelines.search.indexes import create_scalar_index, create_vector_index, optimize_indexes
from pipelines.search.queries import knn_join, search_partitioned
from pipelines.search.text import search_text_partitioned
from pipelines.session import build_session
from pipelines.source.datasource import LancePartitionedDataSource, register_data_source
from pipelines.source.stream_writer import batch_write_id
from pipelines.write.dataframe import write_partitioned
from pipelines.write.merge import merge_partitioned
from pipelines.write.rewrite import update_rows

__all__ = [
    "BackfillResult",
    "CommitResult",
    "LancePartitionedDataSource",
    "backfill_columns",
    "batch_write_id",
    "build_session",
    "compact",
    "create_scalar_index",
    "create_vector_index",
    "delete_rows",
    "drop_partitions",
    "files_table",
    "history",
    "join_partitioned",
    "knn_join",
    "merge_partitioned",
    "namespace_schema_from_spark",
    "optimize_indexes",
    "optimize_manifest",
    "partition_value",
    "partitions_table",
    "read_partitioned",
    "register_data_source",
    "restore",
    "search_partitioned",
    "search_text_partitioned",
    "spark_schema",
    "update_rows",
    "vacuum",
    "with_partition_columns",
    "write_partitioned",
]
