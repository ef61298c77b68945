"""``read_partitioned``: the namespace as a DataFrame, pruned by a filter Spark applies.

``filter`` is any predicate ``DataFrame.where`` accepts, read as Spark reads it (the
session's time zone for timestamps without one, its string-escape and identifier
settings). Spark applies it to the rows; the source uses it only to skip partition
tables and Lance rows that cannot match (``prune_filter``), and any part it does not
understand keeps everything. Because the filter is an option of the DataFrame, every
later use of the returned DataFrame (reuse, views, self-joins, cache) prunes the same.

The scan is planned here, on the driver, and its one-line summary ("scanning K of N
partition tables ...") is logged once, at INFO on the ``lance_partitioned`` logger.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from partitioning.errors import InvalidInput, SchemaError, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import TableSlice, read_table
from partitioning.sql.binding import bind
from partitioning.sql.filters import Filter, TrueFilter
from partitioning.sql.from_sql import parse_filter, referenced_columns
from partitioning.state.scan import ScanPlan
from partitioning.storage.history import version_at
from partitioning.storage.roots import storage_option_pairs
from pipelines.read.local import local_dataframe
from pipelines.read_options import dialect_options, read_schema, session_dialect
from pipelines.shared_roots import driver_root
from pipelines.source.datasource import register_data_source
from pipelines.source.reader import LanceInputPartition, LancePartitionedReader

__all__ = [
    "LanceInputPartition",
    "LancePartitionedReader",
    "TableSlice",
    "dialect_options",
    "read_partitioned",
    "read_partitioned_with_plan",
    "read_schema",
    "read_table",
    "referenced_columns",
    "session_dialect",
]

log = logging.getLogger("lance_partitioned")


def read_partitioned(
    spark: SparkSession,
    root: str,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    manifest_version: int | None = None,
    *,
    as_of: dt.datetime | dt.date | str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The namespace as a DataFrame, at ``manifest_version`` (default: the latest), or as
    of the time ``as_of`` (the last ``__manifest`` version committed at or before it; a
    zone-less time is read in the session time zone).

    ``filter`` is Spark SQL (anything ``DataFrame.where`` takes); Spark applies it, and
    the source prunes partition tables with the parts it understands. ``storage_options``
    are Lance's (e.g. ``aws_endpoint``, ``aws_region``); they reach the tasks as the
    source's ``storage.<key>`` options. A relative ``root`` is made absolute here, and
    refused on a cluster whose executors do not share this machine's files.
    """
    df, _ = read_partitioned_with_plan(
        spark, root, filter, columns, manifest_version, as_of=as_of, storage_options=storage_options
    )
    return df


def read_partitioned_with_plan(
    spark: SparkSession,
    root: str,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    manifest_version: int | None = None,
    *,
    as_of: dt.datetime | dt.date | str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[DataFrame, ScanPlan]:
    """:func:`read_partitioned`, also returning the scan plan it made (the tables it reads)."""
    root = driver_root(spark, root)
    if as_of is not None:
        if manifest_version is not None:
            raise InvalidInput("give manifest_version or as_of, not both")
        zone = str(spark.conf.get("spark.sql.session.timeZone", "UTC"))
        manifest_version = version_at(root, as_of, time_zone=zone, storage_options=storage_options)
    ns = PartitionedNamespace.load(root, storage_options, manifest_version=manifest_version)
    names = ns.schema.names
    dialect = session_dialect(spark)
    for c in columns or ():
        if c not in names:
            raise SchemaError(f"unknown column {c!r} in columns; columns are: {', '.join(names)}")
    reader = spark.read.format("lance_partitioned").option("versionAsOf", str(ns.manifest_version))
    reader = reader.options(**storage_option_pairs(ns.storage_options))
    parsed = parse_filter(filter, dialect, strict=False) if filter is not None and filter.strip() else None
    bound: Filter = TrueFilter()
    if parsed is not None:
        bound = bind(parsed, ns.schema, dialect)  # unknown columns: one line
    # planned here, so a damaged __manifest row the scan needs is one line now, not a Spark
    # planning error at the first action; the data source plans the same tables again
    plan = ns.plan_scan(parsed, dialect=dialect)
    log.info(plan.summary_with_indexes(ns.namespace_schema, ns.properties, ns.storage_options))
    if filter is not None and filter.strip():
        reader = reader.option("prune_filter", filter)
        for key, value in dialect_options(dialect).items():
            reader = reader.option(key, value)
    wanted: list[str] | None = None
    if columns:
        extra = referenced_columns(filter, names, dialect.case_sensitive, dialect)
        wanted = list(dict.fromkeys([*columns, *extra]))
        reader = reader.option("columns", ",".join(wanted))
    # the format, and in a session started without the jar the JVM layer, for this read and the
    # session's later format("lance_partitioned") calls (once per session)
    register_data_source(spark)
    local = local_dataframe(spark, ns, plan.tasks, read_schema(ns.namespace_schema, wanted), bound)
    df = local if local is not None else reader.load(ns.root)
    if filter is not None and filter.strip():
        try:
            df = df.where(filter)
        except PySparkException as exc:
            raise InvalidInput(f"filter {filter!r}: {first_line(exc)}") from exc
    if columns:
        df = df.select(*[f"`{c}`" for c in columns])
    return df, plan
