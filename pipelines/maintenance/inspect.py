"""Metadata tables as DataFrames: ``partitions_table`` and ``files_table``.

The tables are computed on the driver from Lance metadata by
:mod:`partitioning.plan.inspect` (no data is scanned, no Spark job runs) and handed to
Spark as Arrow, so they work on classic Spark and Spark Connect alike. ``filter`` is
Spark SQL read in the session's dialect (time zone, string escapes, identifiers); it
selects partition tables the way a read prunes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from partitioning.plan import inspect as core
from pipelines.columns.schema import spark_schema
from pipelines.read_options import session_dialect
from pipelines.shared_roots import driver_root

__all__ = ["files_table", "partitions_table"]


def partitions_table(
    spark: SparkSession,
    root: str,
    filter: str | None = None,
    manifest_version: int | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """One row per partition table: ``spec_id``, ``partition`` (a struct named after the
    partition fields), ``object_id``, ``location``, ``read_version``, ``row_count``,
    ``deleted_rows``, ``fragment_count``, ``size_bytes``, ``last_updated``, ``indexes``.

    See :func:`partitioning.plan.inspect.partitions_table`; a bad filter or version is one line.
    """
    return _frame(spark, root, filter, manifest_version, storage_options, core.partitions_table)


def files_table(
    spark: SparkSession,
    root: str,
    filter: str | None = None,
    manifest_version: int | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """One row per fragment of each partition table: ``object_id``, ``spec_id``, ``partition``,
    ``read_version``, ``fragment_id``, ``path``, ``data_files``, ``physical_rows``,
    ``deleted_rows``, ``row_count``, ``size_bytes`` (:func:`partitioning.plan.inspect.files_table`)."""
    return _frame(spark, root, filter, manifest_version, storage_options, core.files_table)


def _frame(
    spark: SparkSession,
    root: str,
    filter: str | None,
    manifest_version: int | None,
    storage_options: Mapping[str, str] | None,
    build: Callable[..., pa.Table],
) -> DataFrame:
    table = build(
        driver_root(spark, root),
        filter=filter,
        manifest_version=manifest_version,
        storage_options=storage_options,
        dialect=session_dialect(spark),
    )
    schema = spark_schema(table.schema)
    if table.num_rows == 0:  # pyspark cannot take an Arrow table without chunks
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(table.combine_chunks(), schema=schema)
