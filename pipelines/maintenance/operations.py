"""Maintenance driven by Spark: filters are Spark SQL, read in the session's dialect and
applied by Spark; compaction rewrites run as Spark tasks, bins of small fragments packed
into tasks, or, for a small plan, on the driver's threads (no Spark job).

Every operation ends with the driver's dataset commits and ONE ``__manifest`` commit.
Each takes ``storage_options`` (Lance's, e.g. ``aws_endpoint``), which reach the tasks;
a relative root is refused on a cluster whose executors do not share this machine's files.
Without a SparkSession each falls back to its Spark-free form in
:mod:`partitioning.tables.maintenance`, where filters are DataFusion SQL (zone-less timestamps
in UTC, as in a Lance scan).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from partitioning.errors import InvalidInput, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, addresses_of
from partitioning.sql.filters import Filter
from partitioning.state.scan import ScanTask
from partitioning.storage.guard import guarded
from partitioning.storage.roots import storage_option_pairs
from partitioning.tables.compaction import (
    DEFAULT_TARGET_ROWS,
    CompactionResult,
    CompactionTask,
    commit_compaction,
    compact_local,
    plan_compaction,
    rewrite_all,
)
from partitioning.tables.deletes import RowMatcher
from partitioning.tables.deletes import delete_rows as delete_rows_local
from partitioning.tables.deletes import drop_partitions as drop_partitions_local
from partitioning.tables.maintenance import MaintenanceReport, optimize_manifest
from partitioning.tables.vacuum import vacuum
from pipelines.read_options import dialect_options, session_dialect
from pipelines.session_calls import describe_jobs
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import run_tasks, session_or_active
from pipelines.write.small import exact_rows, small_target

__all__ = ["compact", "delete_rows", "drop_partitions", "optimize_manifest", "vacuum", "values_matcher"]

log = logging.getLogger("lance_partitioned")
_INDEX = "__lance_partitioned_row"


def _root(session: SparkSession | None, root: str | PartitionedNamespace) -> str | PartitionedNamespace:
    """A root string checked against the session's master (:func:`pipelines.shared_roots.driver_root`)."""
    return driver_root(session, root) if session is not None and isinstance(root, str) else root


LOCAL_MAX_ROWS = 2_000_000
"""A compaction plan of at most this many live rows (and :data:`LOCAL_MAX_BYTES`) is rewritten
in the driver's process, on threads, without a Spark job. Measured on local[2]
(``benchmarks/test_bench_maintenance.py``): a warm session's Spark job costs 1-2 s before a
row is rewritten, while the driver rewrites small rows at 1.5-2M rows/s, so a plan under
the bound takes about what the Spark path would spend just starting."""
LOCAL_MAX_BYTES = 32 * 1024 * 1024
"""The data-file bytes bound beside :data:`LOCAL_MAX_ROWS`, for wide rows (the driver rewrites
the benchmark's files at ~25 MB/s: 32 MiB is again about a Spark job's start-up)."""
BATCH_ROWS = 262_144
"""The Spark path packs consecutive bins into one task up to this many rows (or
:data:`BATCH_BYTES`), so many small tables do not each pay a Spark task."""
BATCH_BYTES = 32 * 1024 * 1024


def compact(
    root: str,
    filter: str | Filter | None = None,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    local_max_rows: int = LOCAL_MAX_ROWS,
    local_max_bytes: int = LOCAL_MAX_BYTES,
) -> MaintenanceReport:
    """Rewrite small fragments of the partitions ``filter`` selects, in parallel: Spark tasks, or threads here.

    ``filter`` only selects partitions (rows never change). Uses ``spark`` or the active
    session (classic or Spark Connect); without one it runs in this process. A plan of at
    most ``local_max_rows`` live rows and ``local_max_bytes`` data-file bytes is rewritten
    in this process too (threads; no Spark job to start); ``local_max_rows=0`` always
    uses Spark. Either way: one ``__manifest`` commit on the protected path (a lease taken
    before planning, :mod:`partitioning.storage.guard`), and readers
    of older ``__manifest`` versions keep seeing the old fragments.
    """
    session = session_or_active(spark)
    ns = PartitionedNamespace.load(root if session is None else driver_root(session, root), storage_options)
    if session is None:
        log.info("compact %s: no SparkSession, compacting in this process", ns.root)
        return compact_local(ns, filter, target_rows_per_fragment=target_rows_per_fragment)
    with guarded(ns.root, ns.storage_options) as guard:
        ns.refresh(guard=guard)  # the lease is there before the plan reads the tables
        tasks = plan_compaction(
            ns, filter, target_rows_per_fragment=target_rows_per_fragment, dialect=session_dialect(session)
        )
        if not tasks:
            return MaintenanceReport("compact", ns.root, ns.manifest_version)
        rows, size = sum(t.rows for t in tasks), sum(t.size_bytes for t in tasks)
        label = ns.root.rstrip("/").rsplit("/", 1)[-1]
        if rows <= local_max_rows and size <= local_max_bytes:
            log.info("compact %s: %d bins, %d rows, %d bytes: in this process", ns.root, len(tasks), rows, size)
            results = rewrite_all(tasks)
        else:
            batches = _batches(tasks)
            with (
                spark_errors(f"compact {ns.root}"),
                describe_jobs(session, f"lance_partitioned: compact {len(tasks)} fragment bins ({label})"),
            ):
                results = [r for batch in run_tasks(session, batches, _rewrite_batch) for r in batch]
        return commit_compaction(ns, results, guard=guard)


def _batches(tasks: Sequence[CompactionTask]) -> list[list[CompactionTask]]:
    """Consecutive bins (a table's bins stay together) packed up to :data:`BATCH_ROWS` rows or
    :data:`BATCH_BYTES` bytes per Spark task; a bin at or above either is a task of its own."""
    out: list[list[CompactionTask]] = []
    rows = size = 0
    for task in tasks:
        if not out or rows + task.rows > BATCH_ROWS or size + task.size_bytes > BATCH_BYTES:
            out.append([])
            rows = size = 0
        out[-1].append(task)
        rows += task.rows
        size += task.size_bytes
    return out


def _rewrite_batch(batch: Sequence[CompactionTask]) -> list[CompactionResult]:
    """Executor side: the batch's bins one after another (Lance's own threads do the work)."""
    return rewrite_all(batch, threads=1)


def delete_rows(
    root: str | PartitionedNamespace,
    filter: str,
    *,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Delete the rows matching ``filter`` (Spark SQL) in the pruned tables.

    Spark reads the candidate tables at the manifest's versions and finds the matching
    rows' Lance row addresses; the driver deletes exactly those and commits once. When the
    driver evaluates ``filter`` exactly as Spark does and the matching rows are few
    (:func:`pipelines.write.small.exact_rows`), it finds them itself, with no Spark job.
    Without a session, :func:`partitioning.tables.deletes.delete_rows` (DataFusion SQL).
    """
    session = session_or_active(spark)
    if session is None:
        return delete_rows_local(root, filter, storage_options=storage_options)
    root = _root(session, root)
    dialect = session_dialect(session)

    def find(ns: PartitionedNamespace, tasks: Sequence[ScanTask], filter_sql: str) -> Mapping[str, Sequence[int]]:
        if not tasks:
            return {}
        clash = {ROW_TABLE, ROW_ADDRESS} & set(ns.schema.names)
        if clash:
            raise InvalidInput(f"delete_rows cannot run on a namespace with a column named {sorted(clash)[0]!r}")
        wanted = {t.object_id for t in tasks}
        read = {t.object_id: t.read_version or 0 for t in tasks}
        exact = exact_rows(session, ns, read, filter_sql, columns=())  # the addresses only
        if exact is not None:  # selected here exactly as Spark would: no Spark job
            found = addresses_of(exact, ROW_TABLE, ROW_ADDRESS)
            return {table: found[table] for table in found if table in wanted}
        rows = small_target(session, ns, read)
        if rows is None:
            from pipelines.source.datasource import register_data_source

            register_data_source(session)
            reader = session.read.format("lance_partitioned").option("versionAsOf", str(ns.manifest_version))
            reader = reader.option("prune_filter", filter_sql).option("with_row_address", "true")
            reader = reader.options(**storage_option_pairs(ns.storage_options))
            for key, value in dialect_options(dialect).items():
                reader = reader.option(key, value)
            rows = reader.load(ns.root)
        try:
            hits = rows.where(filter_sql).select(ROW_TABLE, ROW_ADDRESS).collect()
        except PySparkException as exc:
            raise InvalidInput(f"delete_rows filter {filter_sql!r}: {first_line(exc)}") from exc
        out: dict[str, list[int]] = {}
        for row in hits:
            if row[0] in wanted:
                out.setdefault(row[0], []).append(int(row[1]))
        return out

    return delete_rows_local(root, filter, find_rows=find, dialect=dialect, storage_options=storage_options)


def values_matcher(session: SparkSession, what: str) -> RowMatcher:
    """A :data:`~partitioning.tables.deletes.RowMatcher` applying a filter with Spark's ``where``
    to a table of partition values; a filter Spark refuses is one line naming ``what``."""

    def match(values: pa.Table, filter_sql: str) -> list[int]:
        indexed = values.append_column(_INDEX, pa.array(range(values.num_rows), pa.int64()))
        try:
            df = session.createDataFrame(indexed).where(filter_sql)
            return sorted(r[0] for r in df.select(F.col(_INDEX)).collect())
        except PySparkException as exc:
            raise InvalidInput(f"{what} filter {filter_sql!r}: {first_line(exc)}") from exc

    return match


def drop_partitions(
    root: str | PartitionedNamespace,
    filter: str,
    *,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Drop whole partition tables whose identity partition values satisfy ``filter``
    (Spark SQL, applied by Spark to each table's values). Without a session,
    :func:`partitioning.tables.deletes.drop_partitions` (DataFusion SQL)."""
    session = session_or_active(spark)
    if session is None:
        return drop_partitions_local(root, filter, storage_options=storage_options)
    root = _root(session, root)
    return drop_partitions_local(
        root,
        filter,
        matcher=values_matcher(session, "drop_partitions"),
        dialect=session_dialect(session),
        storage_options=storage_options,
    )
