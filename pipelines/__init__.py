"""Spark side of the Lance partitioned namespace: session, Column transforms, schemas."""

from pipelines.schema import namespace_schema_from_spark, spark_schema
from pipelines.session import build_session
from pipelines.transforms import partition_value, with_partition_columns

__all__ = [
    "build_session",
    "namespace_schema_from_spark",
    "partition_value",
    "spark_schema",
    "with_partition_columns",
]
