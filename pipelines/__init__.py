"""Spark side of the Lance partitioned namespace: session, Column transforms, writes, data source."""

from partitioning.tables.write import CommitResult
from pipelines.columns.schema import namespace_schema_from_spark, spark_schema
from pipelines.columns.transforms import partition_value, with_partition_columns
from pipelines.maintenance.history import history, restore
from pipelines.maintenance.inspect import files_table, partitions_table
from pipelines.maintenance.operations import compact, delete_rows, drop_partitions, optimize_manifest, vacuum
from pipelines.read.dataframe import read_partitioned
from pipelines.read.datasource import LancePartitionedDataSource, register_data_source
from pipelines.read.join import join_partitioned
from pipelines.search.indexes import create_scalar_index, create_vector_index, optimize_indexes
from pipelines.search.queries import knn_join, search_partitioned
from pipelines.session import build_session
from pipelines.write.dataframe import write_partitioned
from pipelines.write.merge import merge_partitioned
from pipelines.write.rewrite import update_rows

__all__ = [
    "CommitResult",
    "LancePartitionedDataSource",
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
    "spark_schema",
    "update_rows",
    "vacuum",
    "with_partition_columns",
    "write_partitioned",
]
