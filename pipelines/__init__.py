"""Spark side of the Lance partitioned namespace: session, Column transforms, writes, data source."""

from partitioning.write import CommitResult
from pipelines.datasource import LancePartitionedDataSource, register_data_source
from pipelines.indexes import create_scalar_index, create_vector_index, optimize_indexes
from pipelines.join import join_partitioned
from pipelines.maintenance import compact, delete_rows, drop_partitions, optimize_manifest, vacuum
from pipelines.read import read_partitioned
from pipelines.schema import namespace_schema_from_spark, spark_schema
from pipelines.search import knn_join, search_partitioned
from pipelines.session import build_session
from pipelines.transforms import partition_value, with_partition_columns
from pipelines.write import write_partitioned

__all__ = [
    "CommitResult",
    "LancePartitionedDataSource",
    "build_session",
    "compact",
    "create_scalar_index",
    "create_vector_index",
    "delete_rows",
    "drop_partitions",
    "join_partitioned",
    "knn_join",
    "namespace_schema_from_spark",
    "optimize_indexes",
    "optimize_manifest",
    "partition_value",
    "read_partitioned",
    "register_data_source",
    "search_partitioned",
    "spark_schema",
    "vacuum",
    "with_partition_columns",
    "write_partitioned",
]
