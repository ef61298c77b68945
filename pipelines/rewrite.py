"""Spark side of operations that delete and add rows in one commit: ``update_rows`` and
``write_partitioned(replace_where=...)`` here, ``merge_partitioned`` in :mod:`pipelines.merge`.

Each attempt pins the ``__manifest`` version, reads the rows it changes with their Lance
row addresses (``with_row_address``), writes the rows that come in as fragments
(:func:`pipelines.write.write_fragments`) and makes one commit
(:func:`partitioning.rewrites.commit_rewrite`). When a table the attempt read changed
before the commit, the whole attempt runs again on the new state (``max_attempts``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from partitioning.binding import bind
from partitioning.errors import ConcurrentModification, InvalidInput, PartitioningError, first_line
from partitioning.filters import is_exactly_understood, parse_filter
from partitioning.history import Operation
from partitioning.leases import write_lease
from partitioning.namespace import PartitionedNamespace
from partitioning.rewrites import ReadSet, ReadSetChanged, RewriteResult, addresses_by_table, commit_rewrite
from partitioning.storage import storage_option_pairs
from pipelines.read_options import dialect_options, session_dialect
from pipelines.reader import ROW_ADDRESS, ROW_TABLE
from pipelines.session import describe_jobs, driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import session_or_active
from pipelines.write import write_fragments

__all__ = ["DEFAULT_ATTEMPTS", "addresses", "replace_where", "rerun_on_conflict", "target_rows", "update_rows"]

DEFAULT_ATTEMPTS = 3


def target_rows(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    *,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
) -> DataFrame:
    """The rows of the tables in ``read`` at ``ns``'s manifest version, with ``_lance_table``
    and ``_lance_rowaddr``; ``filter`` (Spark SQL) prunes and is applied by Spark."""
    clash = {ROW_TABLE, ROW_ADDRESS} & set(ns.schema.names)
    if clash:
        raise InvalidInput(f"rows cannot be changed in a namespace with a column named {sorted(clash)[0]!r}")
    from pipelines.datasource import register_data_source

    register_data_source(session)
    reader = session.read.format("lance_partitioned").option("versionAsOf", str(ns.manifest_version))
    reader = reader.option("with_row_address", "true").option("object_ids", json.dumps(sorted(read)))
    reader = reader.options(**storage_option_pairs(ns.storage_options))
    for key, value in dialect_options(session_dialect(session)).items():
        reader = reader.option(key, value)
    if columns is not None:
        reader = reader.option("columns", ",".join(columns))
    if filter:
        # a filter the source evaluates exactly drops rows before they reach Spark
        exact = _exactly_understood(filter, ns, session)
        reader = reader.option("filter" if exact else "prune_filter", filter)
    df = reader.load(ns.root)
    if filter:
        try:
            df = df.where(filter)
        except PySparkException as exc:
            raise InvalidInput(f"filter {filter!r}: {first_line(exc)}") from exc
    return df


def _exactly_understood(text: str, ns: PartitionedNamespace, session: SparkSession) -> bool:
    dialect = session_dialect(session)
    try:
        bound = bind(parse_filter(text, dialect), ns.namespace_schema.arrow, dialect)
    except PartitioningError:
        return False
    return is_exactly_understood(bound)


def addresses(df: DataFrame, context: str) -> pa.Table:
    """``df``'s rows (``_lance_table``, ``_lance_rowaddr`` and whatever else it selects) on the driver."""
    with spark_errors(context):
        return df.toArrow()


def rerun_on_conflict(
    root: str,
    what: str,
    max_attempts: int,
    attempt: Callable[[PartitionedNamespace], RewriteResult],
    storage_options: Mapping[str, str] | None,
) -> RewriteResult:
    """Run ``attempt`` on the latest state until no table it read changed before its commit."""
    if max_attempts < 1:
        raise InvalidInput(f"max_attempts must be at least 1, got {max_attempts}")
    last: ReadSetChanged | None = None
    for _ in range(max_attempts):
        ns = PartitionedNamespace.load(root, storage_options)
        try:
            return attempt(ns)
        except ReadSetChanged as exc:
            last = exc
    raise ConcurrentModification(
        f"{what} on {root}: the partitions it read kept changing ({last}); nothing was committed after "
        f"{max_attempts} attempts, run it again"
    ) from last


def commit_changes(
    source: DataFrame,
    ns: PartitionedNamespace,
    gone: pa.Table,
    incoming: DataFrame | None,
    *,
    read_set: ReadSet,
    read: Mapping[str, int],
    mode: str,
    write_id: str | None = None,
    sizes: Mapping[str, Any] | None = None,
    rows_updated: int = 0,
    operation: Operation,
    started: float | None = None,
) -> RewriteResult:
    """Write ``incoming`` as fragments and commit them with the deletion of ``gone``'s rows;
    history records ``operation`` with the commit's metrics (and its duration since ``started``)."""
    deletions = addresses_by_table(gone.column(ROW_TABLE).to_pylist(), gone.column(ROW_ADDRESS).to_pylist())
    label = ns.root.rstrip("/").rsplit("/", 1)[-1]
    with write_lease(ns.root, ns.storage_options, write_id=write_id):
        if incoming is None:
            messages, spec_id, schema = _no_messages(ns)
        else:
            messages, writer = write_fragments(incoming, ns, **dict(sizes or {}))
            spec_id, schema = writer.planner.spec_id, writer.schema
        with describe_jobs(source.sparkSession, f"lance_partitioned: commit {mode} ({label})"):
            return commit_rewrite(
                ns,
                messages,
                deletions,
                read_set=read_set,
                read=read,
                mode=mode,
                spec_id=spec_id,
                schema=schema,
                write_id=write_id,
                rows_updated=rows_updated,
                operation=operation,
                started=started,
            )


def _no_messages(ns: PartitionedNamespace) -> tuple[pa.Table, int, Any]:
    from partitioning.write import FragmentWriter

    writer = FragmentWriter.for_namespace(ns)
    return writer.output_schema.empty_table(), writer.planner.spec_id, writer.schema


def replace_where(
    df: DataFrame,
    ns: PartitionedNamespace,
    predicate: str,
    *,
    write_id: str | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
    **sizes: Any,
) -> RewriteResult:
    """``write_partitioned(mode="overwrite", replace_where=predicate)``: see there."""
    from pipelines.write import conform_dataframe

    session = df.sparkSession
    started = time.monotonic()
    if not predicate or not predicate.strip():
        raise InvalidInput("replace_where needs a predicate, e.g. \"country = 'US'\"")

    def attempt(ns: PartitionedNamespace) -> RewriteResult:
        conformed = conform_dataframe(df, ns.namespace_schema)
        with spark_errors(f"replace_where {predicate!r}"):
            outside = conformed.where(f"NOT coalesce(({predicate}), false)").count()
        if outside:
            raise InvalidInput(
                f"replace_where {predicate!r}: {outside:,} row(s) of the DataFrame do not match it; nothing was written"
            )
        read_set = ReadSet(predicate, session_dialect(session))
        read = read_set.plan(ns)
        gone = addresses(
            target_rows(session, ns, read, filter=predicate).select(ROW_TABLE, ROW_ADDRESS),
            f"replace_where on {ns.root}",
        )
        return commit_changes(
            df,
            ns,
            gone,
            df,
            read_set=read_set,
            read=read,
            mode="overwrite",
            write_id=write_id,
            sizes=sizes,
            operation=Operation(
                "WRITE",
                {"mode": "overwrite", "replace_where": predicate, **({"write_id": write_id} if write_id else {})},
            ),
            started=started,
        )

    return rerun_on_conflict(ns.root, "replace_where", max_attempts, attempt, ns.storage_options)


def update_rows(
    root: str,
    *,
    set: Mapping[str, str],
    where: str | None = None,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
) -> RewriteResult:
    """``UPDATE root SET col = expr, ... WHERE where``, in one commit.

    ``set`` maps columns to Spark SQL expressions over the row (``{"price": "price * 1.1"}``);
    other columns keep their values. A row whose partition columns change moves to its
    new partition in the same commit. ``where`` (Spark SQL) selects the rows and prunes
    the partitions read; without it every row is updated.
    """
    session = session_or_active(spark)
    if session is None:
        raise InvalidInput("update_rows needs a SparkSession (pass spark= or start one)")
    root = driver_root(session, root)
    if not set:
        raise InvalidInput("update_rows needs set={column: SQL expression}")
    started = time.monotonic()
    parameters = {"set": json.dumps(dict(set), sort_keys=True), **({"where": where} if where else {})}

    def attempt(ns: PartitionedNamespace) -> RewriteResult:
        names = ns.schema.names
        unknown = [c for c in set if c not in names]
        if unknown:
            raise InvalidInput(
                f"update_rows: column {unknown[0]!r} is not in the namespace; columns are: {', '.join(names)}"
            )
        read_set = ReadSet(where, session_dialect(session))
        read = read_set.plan(ns)
        rows = target_rows(session, ns, read, filter=where)
        try:
            updated = rows.select(
                ROW_TABLE,
                ROW_ADDRESS,
                *[(F.expr(set[c]) if c in set else F.col(f"`{c}`")).alias(c) for c in names],
            ).persist()
        except PySparkException as exc:
            raise InvalidInput(f"update_rows: {first_line(exc)}") from exc
        try:
            gone = addresses(updated.select(ROW_TABLE, ROW_ADDRESS), f"update_rows on {ns.root}")
            incoming = updated.select(*[F.col(f"`{c}`") for c in names])
            return commit_changes(
                rows,
                ns,
                gone,
                incoming,
                read_set=read_set,
                read=read,
                mode="update",
                rows_updated=gone.num_rows,
                operation=Operation("UPDATE", parameters),
                started=started,
            )
        finally:
            updated.unpersist()

    return rerun_on_conflict(root, "update_rows", max_attempts, attempt, storage_options)
