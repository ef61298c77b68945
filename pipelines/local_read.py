"""Small reads without Python workers: the rows of a small plan, read here, as a local relation.

A read that plans a few small partition tables (a point lookup: one day of one country)
costs little in Lance, but through the ``lance_partitioned`` source Spark plans it in a
Python worker and reads it in another, which is most of its time (1 of 1,500 partitions:
about 0.4 s against 0.2 s for the same rows handed to Spark as Arrow). When the planned
tables hold at most :data:`LOCAL_MAX_ROWS` rows and :data:`LOCAL_MAX_BYTES` bytes of data
files (fragment metadata, before any filter), :func:`pipelines.read.read_partitioned`
reads them here with the source's own reader (:func:`pipelines.reader.read_slice`: the
same versions, schema reconciliation and pruning) and gives Spark the batches.

The rows are the ones the source would give at action time: the plan pins each table's
version, so reading now rather than later changes nothing but when a read error shows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from partitioning.errors import PartitioningError, first_line
from partitioning.filters import Filter
from partitioning.namespace import PartitionedNamespace, open_partition_table
from partitioning.scan import ScanTask
from partitioning.vectors import spark_facing_schema
from pipelines.reader import TableSlice, read_slice
from pipelines.session import active_session_kept
from pipelines.small import within

__all__ = ["LOCAL_MAX_BYTES", "LOCAL_MAX_ROWS", "LOCAL_MAX_TABLES", "local_dataframe", "local_table"]

log = logging.getLogger("lance_partitioned")

LOCAL_MAX_ROWS = 65_536
LOCAL_MAX_BYTES = 16 << 20
LOCAL_MAX_TABLES = 16


def local_dataframe(
    spark: SparkSession,
    ns: PartitionedNamespace,
    tasks: Sequence[ScanTask],
    schema: StructType,
    scan_filter: Filter,
) -> DataFrame | None:
    """The rows of ``tasks`` (``schema``'s columns, pruned by ``scan_filter``) as a local
    DataFrame; None when they are more than the ``LOCAL_MAX_*`` bounds allow, or when a
    table cannot be read here (the source then reads it, and reports what is wrong, as
    for any read)."""
    table = local_table(ns, tasks, list(schema.names), scan_filter)
    if table is None:
        return None
    with active_session_kept(spark):
        return spark.createDataFrame(table, schema=schema)


def local_table(
    ns: PartitionedNamespace,
    tasks: Sequence[ScanTask],
    output: Sequence[str],
    scan_filter: Filter,
    *,
    exact: Filter | None = None,
) -> pa.Table | None:
    """The rows of ``tasks`` (``output``'s columns, typed as Spark reads them), pruned by
    ``scan_filter`` and filtered by ``exact`` (bound, fully understood) when given, read
    here; None beyond the ``LOCAL_MAX_*`` bounds or when a table cannot be read here."""
    if len(tasks) > LOCAL_MAX_TABLES or any(t.read_version is None for t in tasks):
        return None
    try:
        datasets = [
            open_partition_table(t.uri, t.read_version, t.read_branch, t.read_tag, ns.storage_options) for t in tasks
        ]
        if not within(datasets, LOCAL_MAX_ROWS, LOCAL_MAX_BYTES):
            return None
        batches = [
            batch
            for task, dataset in zip(tasks, datasets, strict=True)
            for batch in read_slice(
                TableSlice.of(task), ns.namespace_schema, output, scan_filter, exact=exact, dataset=dataset
            )
        ]
    except PartitioningError as exc:
        log.debug(
            "reading %d tables of %s in the driver failed (%s); Spark's tasks read them",
            len(tasks),
            ns.root,
            first_line(exc),
        )
        return None
    shaped = spark_facing_schema(pa.schema([ns.namespace_schema.arrow.field(c) for c in output]))
    # one (empty) batch at least: Spark's Arrow conversion cannot build a column from none
    return pa.Table.from_batches(batches or [pa.RecordBatch.from_pylist([], schema=shaped)], schema=shaped)
