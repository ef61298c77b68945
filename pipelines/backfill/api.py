"""``backfill_columns``: add or recompute columns of a partitioned namespace without rewriting it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pyspark.sql import SparkSession

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.state.evolution import ColumnsLike, coerce_columns
from partitioning.state.partition_tables import PartitionTable
from partitioning.storage.guard import guarded
from partitioning.storage.history import Operation
from partitioning.tables.backfill.commit import BackfillResult, commit_backfill
from partitioning.tables.backfill.plan import TablePlan, WrittenFragment, backfill_plan, fragment_works, plan_tables
from partitioning.tables.deletes import whole_partitions
from partitioning.tables.write import already_committed
from pipelines.backfill.compute import (
    FunctionTask,
    batch_kind,
    group_works,
    sql_output,
    sql_read_columns,
    sql_written,
)
from pipelines.maintenance.operations import values_matcher
from pipelines.read_options import session_dialect
from pipelines.session_calls import default_parallelism, describe_jobs
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import run_tasks

__all__ = ["BackfillResult", "backfill_columns"]

_TASK_ROWS = 500_000


_log = logging.getLogger(__name__)


def backfill_columns(
    spark: SparkSession,
    root: str,
    fn: Callable[[Any], Any] | Mapping[str, str],
    *,
    read_columns: Sequence[str] | None = None,
    output_schema: ColumnsLike | None = None,
    filter: str | None = None,
    write_id: str | None = None,
    batch_rows: int = 8192,
    rows_per_task: int | None = None,
    fn_input: Literal["auto", "pandas", "arrow"] = "auto",
    storage_options: Mapping[str, str] | None = None,
) -> BackfillResult:
    """Compute columns for every row of the namespace at ``root`` (or of the partitions
    ``filter`` selects) and store them beside the existing data: each fragment gets one
    new Lance data file, no existing file is rewritten, each partition dataset gets one
    version and ``__manifest`` one visible commit.

    ``fn`` is either a function or a mapping of column name to a Spark SQL expression over
    the namespace's columns (``{"amount_usd": "amount * 1.1"}``; the expressions' types
    are Spark's, and ``read_columns`` is found in their text). A function gets one batch
    of one fragment's ``read_columns`` at a time (at most ``batch_rows`` rows, in row
    order): a pandas DataFrame, or a ``pyarrow.RecordBatch`` when its first parameter is
    annotated so or ``fn_input="arrow"``. It returns the same number of rows with exactly
    ``output_schema``'s columns (a ``pa.Schema``, a mapping of name to type, or fields);
    values are cast to those types safely. A wrong row count, column, type or an
    exception in ``fn`` fails the backfill with one line naming the partition and
    fragment, and nothing is committed.

    Output columns the namespace lacks are added (new field ids, nullable); partitions
    not backfilled read NULL for them. Columns it has are replaced in the backfilled
    partitions (same field id; the output must cast to the column's type); partition
    source columns cannot be replaced. ``filter`` (Spark SQL on identity partition
    columns) selects whole partitions. Tasks take fragments of about ``rows_per_task``
    rows (default: the rows spread over three times the cluster's task slots, at most
    500,000 a task, so no core waits long for a last task).

    A retry with the same ``write_id`` commits nothing twice. Rows another writer appends
    meanwhile are kept and left NULL (``rows_left_null``); a compaction or update of a
    backfilled fragment meanwhile makes the backfill compute those partitions again (the
    others are not recomputed), up to four times, then it fails with a retryable
    :class:`~partitioning.errors.ConcurrentModification`. A Lance index on a replaced
    column is dropped from the backfilled partitions (``indexes_dropped``);
    :func:`pipelines.optimize_indexes` rebuilds it.
    """
    started = time.monotonic()
    if batch_rows < 1 or (rows_per_task is not None and rows_per_task < 1):
        raise InvalidInput("batch_rows and rows_per_task must be at least 1")
    root = driver_root(spark, root)
    ns = PartitionedNamespace.load(root, storage_options)
    skipped = already_committed(ns, "backfill", write_id)
    if skipped is not None:
        return BackfillResult(**{**skipped.__dict__})
    expressions = _expressions(fn)
    if expressions is not None:
        types = sql_output(spark, expressions, ns.namespace_schema)
        output = coerce_columns(output_schema) if output_schema is not None else list(types)
        read = list(read_columns) if read_columns is not None else sql_read_columns(expressions, ns.namespace_schema)
    else:
        if output_schema is None or read_columns is None:
            raise InvalidInput("a backfill function needs read_columns and output_schema")
        kind = batch_kind(fn, fn_input)  # type: ignore[arg-type]
        output, read = coerce_columns(output_schema), list(read_columns)
    columns = backfill_plan(ns.namespace_schema, ns.specs, output, read)
    if expressions is not None and sorted(expressions) != sorted(columns.names):
        raise InvalidInput(
            f"output_schema names [{', '.join(columns.names)}]; the expressions [{', '.join(expressions)}]"
        )
    operation = Operation(
        "BACKFILL", {"columns": ", ".join(columns.names), "filter": filter or "", "write_id": write_id or ""}
    )
    label = root.rstrip("/").rsplit("/", 1)[-1]
    with guarded(ns.root, ns.storage_options, write_id=write_id, bases=(ns.manifest_version,)) as guard:

        def compute(tables: Sequence[PartitionTable]) -> tuple[list[TablePlan], list[WrittenFragment]]:
            plans = plan_tables(tables, columns.before, ns.storage_options)
            works = fragment_works(plans)
            total = sum(w.rows for w in works)
            if rows_per_task is None:
                tasks = max(3 * (default_parallelism(spark) or 2), -(-total // _TASK_ROWS))
            else:
                tasks = -(-total // rows_per_task)
            groups = group_works(works, tasks)
            with describe_jobs(spark, f"lance_partitioned: backfill ({label})"), spark_errors("backfill"):
                if not groups:
                    return plans, []
                if expressions is not None:
                    return plans, sql_written(spark, groups, columns, expressions, batch_rows, ns.storage_options)
                task = FunctionTask(fn, kind, columns, batch_rows, ns.storage_options)  # type: ignore[arg-type]
                return plans, [w for done in run_tasks(spark, groups, task) for w in done]

        def recompute(object_ids: Sequence[str]) -> tuple[list[TablePlan], list[WrittenFragment]]:
            """The tables another writer rewrote, backfilled again at their recorded versions."""
            _log.info(
                "lance_partitioned: backfill of %s: %d table(s) rewritten meanwhile, backfilling them again",
                root,
                len(object_ids),
            )
            current = ns.refresh(guard=guard).tables_by_id(object_ids)
            return compute([current[oid] for oid in object_ids if oid in current])

        plans, written = compute(_tables(spark, ns, filter))
        return commit_backfill(
            ns,
            columns,
            plans,
            written,
            write_id=write_id,
            guard=guard,
            operation=operation,
            started=started,
            recompute=recompute,
        )


def _expressions(fn: Any) -> dict[str, str] | None:
    if isinstance(fn, Mapping):
        if not fn:
            raise InvalidInput("backfill expressions: give at least one column, e.g. {'amount_usd': 'amount * 1.1'}")
        return {str(k): v for k, v in fn.items()}
    if not callable(fn):
        raise InvalidInput(
            f"backfill fn must be a function or a mapping of column to Spark SQL, not {type(fn).__name__}"
        )
    return None


def _tables(spark: SparkSession, ns: PartitionedNamespace, filter: str | None) -> list[PartitionTable]:
    if filter is None or not filter.strip():
        return list(ns.partitions())
    return whole_partitions(ns, filter, session_dialect(spark), values_matcher(spark, "backfill"), "backfill")
