"""Spark-free reads and writes for the tools people use next to Spark.

:func:`dataset` gives the namespace's rows as an Arrow stream that DuckDB, Polars and
DataFusion scan (``duckdb.sql("SELECT ... FROM reader")``, ``polars.from_arrow(reader)``):
the partition tables the filter may match, pruned through ``__manifest``, each read at its
committed ``read_version``, reconciled with the namespace schema, and filtered exactly in
DataFusion SQL (what Lance scans apply). :func:`write_arrow` writes an Arrow table (an
Airflow task's or a notebook's) through the same writer and commit as every other write,
creating the namespace with its first successful commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa

from partitioning.errors import NamespaceNotFound, SchemaError
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import TableSlice, read_table
from partitioning.spec.partition_by import check_same_spec, parse_partition_by
from partitioning.spec.vectors import spark_facing_schema
from partitioning.sql.engine import matching_rows
from partitioning.sql.from_sql import referenced_columns
from partitioning.sql.tokens import Dialect
from partitioning.state.partition_tables import open_partition_table
from partitioning.storage.unborn import discard_unborn
from partitioning.tables.write import CommitResult, WriteMode, write_table

__all__ = ["dataset", "write_arrow"]


def dataset(
    root: str,
    *,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.RecordBatchReader:
    """The rows of the namespace at ``root`` (``columns``, default all) matching ``filter``
    (DataFusion SQL), as of ``__manifest`` ``version`` (default the latest), as a stream.

    Vector columns come as plain lists, as Spark reads them."""
    ns = PartitionedNamespace.load(root, storage_options, manifest_version=version)
    schema = ns.namespace_schema
    names = list(schema.arrow.names)
    output = list(columns) if columns is not None else names
    unknown = [c for c in output if c not in names]
    if unknown or not output:
        raise SchemaError(f"columns {unknown or '[]'} cannot be read: the namespace's columns are {names}")
    text = filter if filter is not None and filter.strip() else None
    needed = list(output)
    if text is not None:
        needed += [c for c in referenced_columns(text, names, False, Dialect.datafusion()) if c not in output]
    plan = ns.plan_scan(text)
    shaped = spark_facing_schema(pa.schema([schema.arrow.field(c) for c in output]))

    def batches() -> Iterator[pa.RecordBatch]:
        for task in plan.tasks:
            table = open_partition_table(
                task.uri, task.read_version, task.read_branch, task.read_tag, ns.storage_options
            )
            for batch in read_table(table, TableSlice.of(task), schema, needed, plan.filter):
                rows = pa.Table.from_batches([batch])
                if text is not None:
                    rows = rows.take(pa.array(matching_rows(rows, text), pa.int64()))
                yield from rows.select(output).cast(shaped).to_batches()

    return pa.RecordBatchReader.from_batches(shaped, batches())


def write_arrow(
    root: str,
    table: pa.Table,
    *,
    mode: WriteMode = "append",
    partition_by: Sequence[str] | None = None,
    write_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> CommitResult:
    """Write ``table`` into the namespace at ``root`` in one commit, without Spark.

    A root that holds no namespace yet needs ``partition_by``; the namespace (``table``'s
    schema, that spec) comes into existence with this write's commit, and a failed first
    write leaves nothing behind. For an existing namespace, ``partition_by`` (if given) must
    be its current spec. ``write_id`` makes a retry a no-op."""
    try:
        ns = PartitionedNamespace.load(root, storage_options)
    except NamespaceNotFound:
        if partition_by is None:
            raise NamespaceNotFound(
                f"no partitioned namespace at {root}: pass partition_by=[...] to create it with this write"
            ) from None
        ns = PartitionedNamespace.create(root, table.schema, list(partition_by), storage_options)
        created = ns.manifest_version
        try:
            return write_table(ns, table, mode=mode, write_id=write_id)
        except BaseException:
            discard_unborn(ns.root, created, ns.storage_options)
            raise
    if partition_by is not None:
        wanted = parse_partition_by(list(partition_by), ns.namespace_schema)
        hint = "leave partition_by out to write with the current spec, or evolve the spec first"
        check_same_spec(root, ns.current_spec, wanted, hint)
    return write_table(ns, table, mode=mode, write_id=write_id)
