"""``update_rows`` and ``write_partitioned(replace_where=...)``: delete and add rows in one commit.

``merge_partitioned`` (:mod:`pipelines.write.merge`) does the same and commits through
:func:`commit_changes` as well.

Each attempt pins the ``__manifest`` version, reads the rows it changes with their Lance
row addresses (:mod:`pipelines.write.targets`), writes the rows that come in as fragments
(:func:`pipelines.write.fragments.write_fragments`) and makes one commit
(:func:`commit_changes`, :func:`partitioning.tables.rewrites.commit_rewrite`). When a table the
attempt read changed before the commit, the whole attempt runs again on the new state
(``max_attempts``, :mod:`pipelines.write.rounds`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from partitioning.errors import InvalidInput, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, addresses_of
from partitioning.sql.assign import NotExact, assigned, assignments
from partitioning.sql.filters import Filter, TrueFilter
from partitioning.sql.tokens import Dialect
from partitioning.storage.history import Operation
from partitioning.tables.fragments import FragmentWriter
from partitioning.tables.lance_updates import update_in_lance
from partitioning.tables.rewrites import ReadSet, RewriteResult, Touches, commit_rewrite
from pipelines.read_options import session_dialect
from pipelines.session import is_connect
from pipelines.session_calls import describe_jobs
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import session_or_active
from pipelines.write.fragments import conform_dataframe, write_fragments, write_rows
from pipelines.write.rounds import DEFAULT_ATTEMPTS, Round, rerun_on_conflict
from pipelines.write.small import exact_rows, pushed_filter, small_target
from pipelines.write.targets import addresses, target_rows

__all__ = ["replace_where", "update_rows"]

log = logging.getLogger("lance_partitioned")


def commit_changes(
    session: SparkSession | None,
    ns: PartitionedNamespace,
    gone: pa.Table,
    incoming: DataFrame | pa.Table | None,
    *,
    read_set: ReadSet,
    read: Mapping[str, int],
    mode: str,
    write_id: str | None = None,
    sizes: Mapping[str, Any] | None = None,
    rows_updated: int = 0,
    operation: Operation,
    started: float | None = None,
    run: Round,
    local: bool | None = None,
    rows: pa.Table | None = None,
    written: tuple[pa.Table, FragmentWriter] | None = None,
    opened: Mapping[str, lance.LanceDataset] | None = None,
) -> RewriteResult:
    """Write ``incoming`` as fragments and commit them with the deletion of ``gone``'s rows,
    on the protected path of ``run`` (the operation's current round); history records
    ``operation`` with the commit's metrics (and its duration since ``started``).
    ``local``: whether the driver writes ``incoming`` (None: Spark's size estimate decides);
    ``rows``: ``incoming``'s rows, conformed and collected already (the driver writes them);
    ``incoming`` may also be such rows itself (no DataFrame made); ``written``: ``incoming``
    written already (:func:`pipelines.write.fragments.write_rows`' messages and writer);
    ``opened``: tables read, opened at their versions already, by object id (the commit reuses them)."""
    deletions = addresses_of(gone, ROW_TABLE, ROW_ADDRESS)
    label = ns.root.rstrip("/").rsplit("/", 1)[-1]
    if written is not None:
        messages, writer = written
    elif incoming is None:
        writer = FragmentWriter.for_namespace(ns)
        messages = writer.output_schema.empty_table()
    elif isinstance(incoming, pa.Table):
        messages, writer = write_rows(incoming, ns, **dict(sizes or {}))
    else:
        messages, writer = write_fragments(incoming, ns, local=local, rows=rows, **dict(sizes or {}))
    spec_id, schema = writer.planner.spec_id, writer.schema
    labelled = describe_jobs(session, f"lance_partitioned: commit {mode} ({label})") if session else nullcontext()
    with labelled:
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
            guard=run.guard,
            intent=run.intent,
            opened=opened,
        )


def _update_in_arrow(
    session: SparkSession | None,
    ns: PartitionedNamespace,
    set: Mapping[str, str],
    where: str | None,
    dialect: Dialect,
    read: Mapping[str, int],
) -> tuple[pa.Table, pa.Table] | None:
    """The addresses of the rows an update changes and their new rows, with no Spark job, when
    the driver selects them exactly as Spark would (:func:`pipelines.write.small.exact_rows`)
    and computes every new value as Spark would (:func:`partitioning.sql.assign.assignments`);
    else None (Spark evaluates them)."""
    schema = ns.namespace_schema.arrow
    assign = assignments(set, schema, dialect)
    if assign is None:
        return None
    rows = exact_rows(session, ns, read, where, dialect=dialect)
    if rows is None:
        return None
    try:
        new = assigned(rows, assign(rows))
    except NotExact as exc:
        log.debug("update of %s: Spark computes the new values (%s)", ns.root, first_line(exc))
        return None
    return rows.select([ROW_TABLE, ROW_ADDRESS]), new.select(schema.names)


def _update_with_lance(
    session: SparkSession | None,
    ns: PartitionedNamespace,
    set: Mapping[str, str],
    where: str | None,
    dialect: Dialect,
    read: Mapping[str, int],
    read_set: ReadSet,
    run: Round,
    parameters: Mapping[str, str],
    started: float,
) -> RewriteResult | None:
    """The update run by Lance's own ``update`` on each table it can touch
    (:func:`partitioning.tables.lance_updates.update_in_lance`), when the driver binds
    ``where`` exactly as Spark does; else None."""
    if session is not None and is_connect(session):
        return None
    if where:
        pushed = pushed_filter(session, ns, where, dialect=dialect)
        if pushed is None or pushed[1] is None:
            return None
        condition: Filter = pushed[1]
    else:
        condition = TrueFilter()
    return update_in_lance(
        ns,
        read,
        set=set,
        where=condition,
        dialect=dialect,
        read_set=read_set,
        operation=Operation("UPDATE", dict(parameters)),
        started=started,
        guard=run.guard,
        intent=run.intent,
    )


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
    from pipelines.write.fragments import conform_dataframe

    session = df.sparkSession
    started = time.monotonic()
    if not predicate or not predicate.strip():
        raise InvalidInput("replace_where needs a predicate, e.g. \"country = 'US'\"")

    def attempt(run: Round) -> RewriteResult:
        ns = run.ns
        conformed = conform_dataframe(df, ns.namespace_schema)
        with spark_errors(f"replace_where {predicate!r}"):
            outside = conformed.where(f"NOT coalesce(({predicate}), false)").count()
        if outside:
            raise InvalidInput(
                f"replace_where {predicate!r}: {outside:,} row(s) of the DataFrame do not match it; nothing was written"
            )
        dialect = session_dialect(session)
        touches = Touches.of_sql(predicate, dialect, ns.namespace_schema.arrow)
        read_set = ReadSet(predicate, dialect, touches=touches)
        read = read_set.plan(ns)
        gone = addresses(
            target_rows(session, ns, read, filter=predicate, cache=run.cache).select(ROW_TABLE, ROW_ADDRESS),
            f"replace_where on {ns.root}",
        )
        return commit_changes(
            session,
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
            run=run,
        )

    return rerun_on_conflict(ns.root, "replace_where", max_attempts, attempt, ns.storage_options)


def update_parameters(set: Mapping[str, str], where: str | None) -> dict[str, str]:
    """What history records of an update."""
    return {"set": json.dumps(dict(set), sort_keys=True), **({"where": where} if where else {})}


@dataclass(frozen=True)
class UpdateHere:
    """An update's round as far as this process takes it: its ``result`` when Lance or the
    driver committed it, else what the Spark path of the round needs (the tables ``read``
    and the commit of its rows, with the round's session); ``engine``: which one made the change."""

    result: RewriteResult | None
    read: Mapping[str, int]
    commit: Callable[..., RewriteResult]
    engine: str = "Spark"


def update_here(
    run: Round,
    *,
    set: Mapping[str, str],
    where: str | None,
    dialect: Dialect,
    started: float,
    session: SparkSession | None = None,
) -> UpdateHere:
    """One round of ``update_rows`` without Spark: Lance's own ``update`` (round 1 only, a
    later round rebases onto the versions a lost round's updates left), else the driver's
    exact read and values (:func:`_update_in_arrow`). ``session`` None: this process has no
    SparkSession (the JVM layer's SQL ``UPDATE``), and no Spark Connect check is made."""
    ns = run.ns
    names = ns.schema.names
    unknown = [c for c in set if c not in names]
    if unknown:
        raise InvalidInput(
            f"update_rows: column {unknown[0]!r} is not in the namespace; columns are: {', '.join(names)}"
        )
    parameters = update_parameters(set, where)
    read_set = ReadSet(where, dialect, touches=Touches.of_sql(where, dialect, ns.namespace_schema.arrow))
    read = read_set.plan(ns)

    def commit(gone: pa.Table, incoming: Any, **kw: Any) -> RewriteResult:
        return commit_changes(
            session, ns, gone, incoming, read_set=read_set, read=read, mode="update", started=started, run=run, **kw
        )

    if run.number == 1:
        in_lance = _update_with_lance(session, ns, set, where, dialect, read, read_set, run, parameters, started)
        if in_lance is not None:
            return UpdateHere(in_lance, read, commit, "Lance's update")
    done = _update_in_arrow(session, ns, set, where, dialect, read)
    if done is not None:
        gone, collected = done
        result = commit(gone, collected, rows_updated=gone.num_rows, operation=Operation("UPDATE", parameters))
        return UpdateHere(result, read, commit, "the driver")
    return UpdateHere(None, read, commit)


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
    the partitions read; without it every row is updated. When Lance's own engine computes
    the filter and every value exactly as Spark, it runs the update on each table
    (:mod:`partitioning.tables.lance_updates`); otherwise the driver or Spark does.
    """
    session = session_or_active(spark)
    if session is None:
        raise InvalidInput("update_rows needs a SparkSession (pass spark= or start one)")
    root = driver_root(session, root)
    if not set:
        raise InvalidInput("update_rows needs set={column: SQL expression}")
    started = time.monotonic()
    parameters = update_parameters(set, where)

    def attempt(run: Round) -> RewriteResult:
        ns = run.ns
        dialect = session_dialect(session)
        here = update_here(run, set=set, where=where, dialect=dialect, started=started, session=session)
        if here.result is not None:
            return here.result
        read, commit = here.read, here.commit
        names = ns.schema.names
        small = small_target(session, ns, read, filter=where)
        rows = small if small is not None else target_rows(session, ns, read, filter=where, cache=run.cache)
        try:
            updated = rows.select(
                ROW_TABLE,
                ROW_ADDRESS,
                *[(F.expr(set[c]) if c in set else F.col(f"`{c}`")).alias(c) for c in names],
            ).persist()
        except PySparkException as exc:
            raise InvalidInput(f"update_rows: {first_line(exc)}") from exc
        try:
            incoming = updated.select(*[F.col(f"`{c}`") for c in names])
            collected = None
            if small is not None:  # one pass: the addresses and the new rows, conformed for the driver's writer
                with spark_errors(f"update_rows on {ns.root}"):
                    both = conform_dataframe(updated, ns.namespace_schema, keep=(ROW_TABLE, ROW_ADDRESS)).toArrow()
                gone, collected = both.select([ROW_TABLE, ROW_ADDRESS]), both.drop_columns([ROW_TABLE, ROW_ADDRESS])
            else:
                gone = addresses(updated.select(ROW_TABLE, ROW_ADDRESS), f"update_rows on {ns.root}")
            return commit(
                gone,
                incoming,
                rows_updated=gone.num_rows,
                operation=Operation("UPDATE", parameters),
                local=small is not None,
                rows=collected,
            )
        finally:
            updated.unpersist()

    return rerun_on_conflict(root, "update_rows", max_attempts, attempt, storage_options)
