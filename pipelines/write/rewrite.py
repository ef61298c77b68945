"""Spark side of operations that delete and add rows in one commit: ``update_rows`` and
``write_partitioned(replace_where=...)`` here, ``merge_partitioned`` in :mod:`pipelines.write.merge`.

Each attempt pins the ``__manifest`` version, reads the rows it changes with their Lance
row addresses (``with_row_address``), writes the rows that come in as fragments
(:func:`pipelines.write.dataframe.write_fragments`) and makes one commit
(:func:`partitioning.tables.rewrites.commit_rewrite`). When a table the attempt read changed
before the commit, the whole attempt runs again on the new state (``max_attempts``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from partitioning.errors import ConcurrentModification, InvalidInput, PartitioningError, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.binding import bind
from partitioning.sql.filters import is_exactly_understood, parse_filter
from partitioning.state.commits import release_intent, take_intent
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.storage.roots import storage_option_pairs
from partitioning.tables.rewrites import ReadSet, ReadSetChanged, RewriteResult, addresses_by_table, commit_rewrite
from pipelines.read.reader import ROW_ADDRESS, ROW_TABLE
from pipelines.read_options import dialect_options, session_dialect
from pipelines.session import describe_jobs, driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import session_or_active
from pipelines.write.fragments import write_fragments
from pipelines.write.small import small_target

__all__ = [
    "DEFAULT_ATTEMPTS",
    "Round",
    "TargetCache",
    "addresses",
    "replace_where",
    "rerun_on_conflict",
    "target_rows",
    "update_rows",
]

DEFAULT_ATTEMPTS = 5
INTENT_AFTER = 2  # lost rounds before an operation takes an exclusive intent
INTENT_MIN = dt.timedelta(seconds=15)
INTENT_MAX = dt.timedelta(minutes=5)
INTENT_ATTEMPTS = 8
BACKOFF = 0.05  # seconds; the pause after lost round n is random in [0, BACKOFF * 2**n], at most BACKOFF_MAX
BACKOFF_MAX = 2.0


def target_rows(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    *,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    cache: TargetCache | None = None,
) -> DataFrame:
    """The rows of the tables in ``read`` at ``ns``'s manifest version, with ``_lance_table``
    and ``_lance_rowaddr``; ``filter`` (Spark SQL) prunes and is applied by Spark. Small
    tables are read by the driver (:func:`pipelines.write.small.small_target`). With ``cache``
    (a round's), tables whose version an earlier round read come from there."""
    clash = {ROW_TABLE, ROW_ADDRESS} & set(ns.schema.names)
    if clash:
        raise InvalidInput(f"rows cannot be changed in a namespace with a column named {sorted(clash)[0]!r}")
    small = small_target(session, ns, read, filter=filter, columns=columns)
    if small is not None:
        return small
    if cache is not None:
        key = (filter, tuple(columns) if columns is not None else None, ns.namespace_schema.to_json())
        return cache.rows(key, read, lambda tables: _spark_rows(session, ns, tables, filter, columns))
    return _spark_rows(session, ns, read, filter, columns)


def _spark_rows(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    filter: str | None,
    columns: Sequence[str] | None,
) -> DataFrame:
    """:func:`target_rows` read by Spark's tasks through the ``lance_partitioned`` source."""
    from pipelines.read.datasource import register_data_source

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


@dataclass
class Round:
    """One run of a rewrite operation: the namespace at the ``__manifest`` version it reads,
    the operation's guard (its lease, :mod:`partitioning.storage.guard`), its intent once it took
    one (:mod:`partitioning.storage.intents`), and the target rows earlier rounds read."""

    ns: PartitionedNamespace
    guard: Guard
    cache: TargetCache
    number: int = 1
    intent: Intent | None = None


class TargetCache:
    """The target rows the last round read, persisted: the next round reads again only the
    tables whose ``read_version`` changed (a concurrent commit), and takes the others' rows
    (same version, same rows and row addresses) from here."""

    def __init__(self) -> None:
        self._df: DataFrame | None = None
        self._read: dict[str, int] = {}
        self._key: tuple[Any, ...] | None = None
        self._old: list[DataFrame] = []
        self.reused = 0  # tables whose rows a round took from here, over all rounds

    def rows(
        self, key: tuple[Any, ...], read: Mapping[str, int], fresh: Callable[[Mapping[str, int]], DataFrame]
    ) -> DataFrame:
        """The target rows of ``read`` (``fresh(tables)`` reads some); ``key`` names what else
        the read depends on (filter, columns): a different key reads everything again."""
        if self._df is None or key != self._key:
            df = fresh(read)
        else:
            same = sorted(t for t, v in read.items() if self._read.get(t) == v)
            changed = {t: v for t, v in read.items() if self._read.get(t) != v}
            if not same:
                df = fresh(read)
            else:
                self.reused += len(same)
                df = self._df.where(F.col(ROW_TABLE).isin(same))
                if changed:
                    df = df.unionByName(fresh(changed))
        if self._df is not None:
            self._old.append(self._df)
        self._df, self._read, self._key = df.persist(), dict(read), key
        return self._df

    def release(self) -> None:
        for df in [*self._old, *([self._df] if self._df is not None else [])]:
            df.unpersist()
        self._old, self._df = [], None


def rerun_on_conflict(
    root: str,
    what: str,
    max_attempts: int,
    attempt: Callable[[Round], RewriteResult],
    storage_options: Mapping[str, str] | None,
    *,
    intent_after: int = INTENT_AFTER,
) -> RewriteResult:
    """Run ``attempt`` on the latest state until no table it read changed before its commit.

    The operation holds one lease throughout (:mod:`partitioning.storage.guard`), each round's
    ``__manifest`` version recorded as a base before it is read. A lost round is followed by
    a random pause that grows with the rounds; the next round reads again only the tables
    that changed (:class:`TargetCache`). After ``intent_after`` lost rounds the operation
    takes an exclusive intent on the tables it reads (:mod:`partitioning.storage.intents`): commits
    to them wait until its next round has committed, so that round cannot lose.
    """
    if max_attempts < 1:
        raise InvalidInput(f"max_attempts must be at least 1, got {max_attempts}")
    started = time.monotonic()
    last: ReadSetChanged | None = None
    longest = 0.0
    cache = TargetCache()
    intent: Intent | None = None
    with guarded(root, storage_options) as guard:
        try:
            for number in range(1, max_attempts + 1):
                ns = PartitionedNamespace.load(root, storage_options, guard=guard)
                began = time.monotonic()
                holding = intent is not None
                try:
                    result = attempt(Round(ns, guard, cache, number, intent))
                except ReadSetChanged as exc:
                    last = exc
                    longest = max(longest, time.monotonic() - began)
                    if number == max_attempts:
                        break
                    if intent is None and number >= intent_after:
                        intent = _take_intent(ns, guard, cache, what, longest)
                    else:
                        time.sleep(random.uniform(0, min(BACKOFF_MAX, BACKOFF * 2**number)))
                    continue
                intent = None  # its commit removed it
                return dataclasses.replace(
                    result, rounds=number, seconds=round(time.monotonic() - started, 3), intent=holding
                )
        finally:
            cache.release()
            if intent is not None:
                release_intent(ns, intent, operation=Operation("INTENT", {"operation": what, "step": "release"}))
    raise ConcurrentModification(
        f"{what} on {root}: the partitions it read kept changing ({last}); nothing was committed after "
        f"{max_attempts} attempts, run it again"
    ) from last


def _take_intent(
    ns: PartitionedNamespace, guard: Guard, cache: TargetCache, what: str, longest: float
) -> Intent | None:
    """An intent on the tables the last round read, held for a few rounds' time; None if
    other commits kept getting in first (the next round simply runs without one)."""
    duration = dt.timedelta(seconds=min(INTENT_MAX.total_seconds(), max(INTENT_MIN.total_seconds(), 3 * longest)))
    tables = sorted(cache._read)
    taken = Operation("INTENT", {"operation": what}, {"tables": len(tables), "seconds": duration.total_seconds()})
    for _ in range(INTENT_ATTEMPTS):
        ns.refresh(guard=guard)
        try:
            return take_intent(ns, tables, duration, what=what, operation=taken)
        except ConcurrentModification:
            time.sleep(random.uniform(0.005, 0.05))
    return None


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
    run: Round,
    local: bool | None = None,
) -> RewriteResult:
    """Write ``incoming`` as fragments and commit them with the deletion of ``gone``'s rows,
    on the protected path of ``run`` (the operation's current round); history records
    ``operation`` with the commit's metrics (and its duration since ``started``).
    ``local``: whether the driver writes ``incoming`` (None: Spark's size estimate decides)."""
    deletions = addresses_by_table(gone.column(ROW_TABLE).to_pylist(), gone.column(ROW_ADDRESS).to_pylist())
    label = ns.root.rstrip("/").rsplit("/", 1)[-1]
    if incoming is None:
        messages, spec_id, schema = _no_messages(ns)
    else:
        messages, writer = write_fragments(incoming, ns, local=local, **dict(sizes or {}))
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
            guard=run.guard,
            intent=run.intent,
        )


def _no_messages(ns: PartitionedNamespace) -> tuple[pa.Table, int, Any]:
    from partitioning.tables.write import FragmentWriter

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
        read_set = ReadSet(predicate, session_dialect(session))
        read = read_set.plan(ns)
        gone = addresses(
            target_rows(session, ns, read, filter=predicate, cache=run.cache).select(ROW_TABLE, ROW_ADDRESS),
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
            run=run,
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

    def attempt(run: Round) -> RewriteResult:
        ns = run.ns
        names = ns.schema.names
        unknown = [c for c in set if c not in names]
        if unknown:
            raise InvalidInput(
                f"update_rows: column {unknown[0]!r} is not in the namespace; columns are: {', '.join(names)}"
            )
        read_set = ReadSet(where, session_dialect(session))
        read = read_set.plan(ns)
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
                run=run,
                local=small is not None,
            )
        finally:
            updated.unpersist()

    return rerun_on_conflict(root, "update_rows", max_attempts, attempt, storage_options)
