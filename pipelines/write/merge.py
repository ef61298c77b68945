"""``merge_partitioned``: Delta's ``MERGE INTO`` for a partitioned namespace, in one commit.

Spark joins the source with the target's rows (read at one pinned ``__manifest``
version, with their Lance row addresses) on the key columns; NULL keys never match.
Each joined row gets one action: a matched row is updated or deleted (if
``matched_condition`` holds), a source row without a match is inserted, a target row
without a match is deleted (``when_not_matched_by_source="delete"``, within
``target_filter``). Rows that go are deleted with Lance deletion vectors; updated and
inserted rows are written as new fragments into the partitions their values say, so a
row whose partition columns change moves in the same commit
(:mod:`pipelines.write.rewrite`, :mod:`partitioning.tables.rewrites`).

Which partitions are read: those ``target_filter`` prunes to, and, when the keys
determine partition fields and unmatched target rows are kept, only the partitions holding
the source's key values. Which rows reach Spark's join: when unmatched target rows are
kept, only those whose key the source has (:mod:`pipelines.write.matches`); a default
merge runs no join (:mod:`pipelines.write.upsert`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from functools import partial, reduce
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from partitioning.errors import InvalidInput, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE
from partitioning.spec.schema import NamespaceSchema
from partitioning.storage.history import Operation
from partitioning.tables.rewrites import ReadSet, RewriteResult, Touches
from pipelines.read_options import session_dialect
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import where_sql
from pipelines.write.matches import key_narrowing, matched_target, refuse_shared_matches, source_keys
from pipelines.write.rewrite import commit_changes
from pipelines.write.rounds import DEFAULT_ATTEMPTS, Round, rerun_on_conflict
from pipelines.write.set_merge import keyed_merge, keyed_modes, set_merge_values, set_upsert
from pipelines.write.small import small_copy, small_target
from pipelines.write.targets import addresses, target_rows
from pipelines.write.upsert import HeldSource, declined_clauses, exact_target_filter, is_upsert

__all__ = ["merge_partitioned"]

WhenMatched = Literal["update", "delete", "ignore"]
WhenNotMatched = Literal["insert", "ignore"]
WhenNotMatchedBySource = Literal["ignore", "delete"]
_ACTION = "__lance_merge_action"
_TARGET = "__lance_merge_target"
_SOURCE = "__lance_merge_source"
_KEY = "__lance_merge_key_"
log = logging.getLogger("lance_partitioned")
# Narrow the partitions read by the source's key values only up to this many distinct values.
MAX_KEY_VALUES = 100_000


def _choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise InvalidInput(f"{name}={value!r} is not one of: {', '.join(allowed)}")


def _check(
    source: DataFrame,
    schema: NamespaceSchema,
    on: Sequence[str],
    when_matched: str,
    when_not_matched: str,
    set: Mapping[str, str] | None,
    matched_condition: str | None,
) -> None:
    names = schema.arrow.names
    if not on:
        raise InvalidInput("merge_partitioned needs on=[key columns]")
    for key in on:
        if key not in names:
            raise InvalidInput(f"merge key {key!r} is not a namespace column; columns are: {', '.join(names)}")
        if key not in source.columns:
            raise InvalidInput(
                f"merge key {key!r} is not a source column; source columns are: {', '.join(source.columns)}"
            )
    if set is not None and when_matched != "update":
        raise InvalidInput(f"set= applies to when_matched='update', not {when_matched!r}")
    if set is not None and not set:
        raise InvalidInput("set= is empty; leave it out to update every column from the source")
    for column in set or {}:
        if column not in names:
            raise InvalidInput(f"set: {column!r} is not a namespace column; columns are: {', '.join(names)}")
    if matched_condition is not None and when_matched == "ignore":
        raise InvalidInput("matched_condition has no effect with when_matched='ignore'; remove one of them")
    if (when_matched == "update" and set is None) or when_not_matched == "insert":
        missing = [c for c in names if c not in source.columns]
        if missing:
            clause = "when_not_matched='insert'" if when_not_matched == "insert" else "when_matched='update'"
            raise InvalidInput(
                f"{clause} takes every column from the source, which has no column {missing[0]!r}"
                f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}"
                + ("; pass set= for the columns to update" if clause.startswith("when_matched") else "")
            )
    clash = {_ACTION, _TARGET, _SOURCE, ROW_TABLE, ROW_ADDRESS} & {*source.columns, *names}
    if clash:
        raise InvalidInput(f"merge cannot use a column named {sorted(clash)[0]!r}")


def _actions(
    matched: Column, target_only: Column, source_only: Column, condition: Column, modes: tuple[str, str, str]
) -> Column:
    when_matched, when_not_matched, by_source = modes
    action = F.when(F.lit(False), F.lit(None).cast("string"))
    if when_matched != "ignore":
        action = action.when(matched & condition, F.lit("U" if when_matched == "update" else "D"))
    if when_not_matched == "insert":
        action = action.when(source_only, F.lit("I"))
    if by_source == "delete":
        action = action.when(target_only, F.lit("X"))
    return action


def merge_partitioned(
    source: DataFrame,
    root: str,
    *,
    on: str | Sequence[str],
    when_matched: WhenMatched = "update",
    when_not_matched: WhenNotMatched = "insert",
    when_not_matched_by_source: WhenNotMatchedBySource = "ignore",
    matched_condition: str | None = None,
    set: Mapping[str, str] | None = None,
    target_filter: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
) -> RewriteResult:
    """Merge ``source`` into the namespace at ``root`` on the key columns ``on``, in one commit.

    ``when_matched``: ``"update"`` (every column from the source, or only the columns
    of ``set={"col": "SQL over source.* and target.*"}``), ``"delete"`` or ``"ignore"``;
    ``matched_condition`` (SQL over ``source.`` and ``target.`` columns) limits it.
    ``when_not_matched``: ``"insert"`` or ``"ignore"``. ``when_not_matched_by_source``:
    ``"ignore"`` or ``"delete"`` (target rows no source row matches, within
    ``target_filter``, which also limits which partitions are read at all). Two source
    rows matching one target row refuse the merge before anything is written (naming a
    key). If a partition the merge read changes before its commit, the merge runs again
    on the new state (``max_attempts`` times), so no concurrent change is lost.
    """
    session = source.sparkSession
    root = driver_root(session, root)
    keys = [on] if isinstance(on, str) else list(on)
    _choice("when_matched", when_matched, ("update", "delete", "ignore"))
    _choice("when_not_matched", when_not_matched, ("insert", "ignore"))
    _choice("when_not_matched_by_source", when_not_matched_by_source, ("ignore", "delete"))
    modes = (when_matched, when_not_matched, when_not_matched_by_source)
    started = time.monotonic()
    parameters = {
        "on": ",".join(keys),
        "when_matched": when_matched,
        "when_not_matched": when_not_matched,
        "when_not_matched_by_source": when_not_matched_by_source,
        **({"matched_condition": matched_condition} if matched_condition else {}),
        **({"set": json.dumps(dict(set), sort_keys=True)} if set else {}),
        **({"target_filter": target_filter} if target_filter else {}),
    }

    held = small_copy(source)  # a small source: its rows held in memory (pipelines.write.small)
    data = held if held is not None else source

    source_held = HeldSource(data, keys, small=held is not None)
    held_keys = source_held.keys_by_schema  # the source's keys by schema, collected once
    upsert = partial(is_upsert, modes=modes, set=set, matched_condition=matched_condition, target_filter=target_filter)

    path = "not run"  # which way the last round went, for the INFO line

    def attempt(run: Round) -> RewriteResult:
        nonlocal path
        ns = run.ns
        schema = ns.namespace_schema
        _check(source, schema, keys, when_matched, when_not_matched, set, matched_condition)
        narrow = {} if when_not_matched_by_source == "delete" else key_narrowing(data, ns, keys, MAX_KEY_VALUES)
        read_set = ReadSet(target_filter, session_dialect(session), narrow)
        read = read_set.plan(ns)
        names = schema.arrow.names
        keyed = keyed_modes(modes, set, matched_condition, source.columns, names)
        within = exact_target_filter(session, ns, target_filter) if upsert(source.columns, names) or keyed else None
        plain = within is not None and not keyed
        change = source_held.upsert(ns, read, within=within, prewrite=True) if plain else None
        values = set_merge_values(source, ns, set, session_dialect(session), modes, matched_condition, target_filter)
        if keyed:  # "insert the new keys", "delete the matched rows", ...
            done = keyed_merge(source_held, ns, read, modes, within) if within is not None else None
        else:
            done = set_upsert(source_held, ns, read, values) if values is not None else None
        if change is not None or done is not None:  # computed in the driver, no join in Spark
            incoming: DataFrame | pa.Table | None
            if change is not None:  # "delete the matched rows, append the source"
                gone, rows, written, opened = change.matched, change.rows, change.written, change.opened
                incoming, updated = data, change.matched.num_rows
                writer = "the driver" if rows is not None else "Spark's tasks"
                path = f"upsert: the source's keys probed in the driver, no join; rows written by {writer}"
            elif done is not None:  # the set= merge, or other clauses (pipelines.write.set_merge)
                gone, incoming, updated, opened, path = done.gone, done.incoming, done.updated, done.opened, done.path
                rows = written = None
            return commit_changes(
                session,
                ns,
                gone.select([ROW_TABLE, ROW_ADDRESS]),
                incoming,
                read_set=_with_touches(read_set, data, schema, keys, held is not None, modes, held_keys),
                read=read,
                mode="merge",
                rows_updated=updated,
                operation=Operation("MERGE", parameters),
                started=started,
                run=run,
                rows=rows,
                written=written,
                opened=opened,
            )
        columns = None if set is not None or matched_condition is not None or target_filter is not None else keys
        small = small_target(session, ns, read, filter=target_filter, columns=columns) if held is not None else None
        target = (
            small
            if small is not None
            else _matched(data, ns, read, keys, columns, target_filter, modes, run, held_keys)
        )
        which = "the target read in the driver" if small is not None else "the target rows whose key the source has"
        if target is None:
            target = target_rows(session, ns, read, filter=target_filter, columns=columns, cache=run.cache)
            which = "every target row of the partitions read"
        tried = within is not None or values is not None
        why = (source_held.why if tried else None) or declined_clauses(
            modes, set, matched_condition, target_filter, source.columns, names
        )
        path = f"Spark joins the source with {which} ({why})"
        joined = _join(target, data, keys, when_not_matched == "insert", when_not_matched_by_source == "delete")
        plan = _plan(joined, names, keys, modes, set, matched_condition).persist()
        try:
            gone = addresses(
                plan.where(F.col(_ACTION).isin("U", "D", "X")).select(
                    _ACTION, ROW_TABLE, ROW_ADDRESS, *[f"{_KEY}{i}" for i in range(len(keys))]
                ),
                f"merge into {ns.root}",
            )
            refuse_shared_matches(gone, keys, _ACTION, _KEY)
            actions = pc.value_counts(gone.column(_ACTION)).to_pylist() if gone.num_rows else []
            count = {a["values"]: a["counts"] for a in actions}
            incoming = plan.where(F.col(_ACTION).isin("U", "I")).select(*[F.col(f"`{c}`") for c in names])
            if when_matched != "update" and when_not_matched != "insert":
                incoming = None
            return commit_changes(
                session,
                ns,
                gone,
                incoming,
                read_set=_with_touches(read_set, data, schema, keys, held is not None, modes, held_keys),
                read=read,
                mode="merge",
                rows_updated=count.get("U", 0),
                operation=Operation("MERGE", parameters),
                started=started,
                run=run,
                local=small is not None,
            )
        finally:
            plan.unpersist()

    result = rerun_on_conflict(root, "merge", max_attempts, attempt, storage_options)
    log.info("lance_partitioned: %s; %s", result.summary(), path)
    return result


def _with_touches(
    read_set: ReadSet,
    source: DataFrame,
    schema: NamespaceSchema,
    keys: Sequence[str],
    small: bool,
    modes: tuple[str, str, str],
    held_keys: dict[str, pa.Table | None],
) -> ReadSet:
    """``read_set`` knowing the rows the merge changes: within its target filter, those whose
    key a source row has (the source's keys as collected for the target's prefilter, or now
    for a small source); every row within the filter when the merge deletes rows no source
    row matches, or its keys are unknown."""
    found = None
    if modes[2] != "delete":
        if small and schema.to_json() not in held_keys:
            held_keys[schema.to_json()] = source_keys(source, schema, keys)
        found = held_keys.get(schema.to_json())
    touches = Touches.of_sql(
        read_set.filter if isinstance(read_set.filter, str) else None, read_set.dialect, schema.arrow, found
    )
    return dataclasses.replace(read_set, touches=touches)


def _matched(
    source: DataFrame,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    keys: Sequence[str],
    columns: Sequence[str] | None,
    target_filter: str | None,
    modes: tuple[str, str, str],
    run: Round,
    held_keys: dict[str, pa.Table | None],
) -> DataFrame | None:
    """The target rows the source's keys can match (:mod:`pipelines.write.matches`), when the
    merge keeps unmatched target rows and the keys allow it; None: read every row. A later
    round reads again only the tables that changed (the round's cache)."""
    if modes[2] == "delete":
        return None
    schema = ns.namespace_schema.to_json()
    if schema not in held_keys:
        held_keys[schema] = source_keys(source, ns.namespace_schema, keys)
    wanted = held_keys[schema]
    if wanted is None:
        return None
    session = source.sparkSession
    key = ("matched", tuple(keys), tuple(columns) if columns is not None else None, schema)
    rows = run.cache.rows(key, read, lambda tables: matched_target(session, ns, tables, keys, wanted, columns))
    return where_sql(rows, target_filter, "target_filter")


def _join(target: DataFrame, source: DataFrame, keys: Sequence[str], inserts: bool, by_source: bool) -> DataFrame:
    how = {(True, True): "full", (True, False): "right", (False, True): "left", (False, False): "inner"}
    t = target.withColumn(_TARGET, F.lit(True)).alias("target")
    s = source.withColumn(_SOURCE, F.lit(True)).alias("source")
    condition = reduce(lambda a, b: a & b, [F.col(f"target.`{k}`") == F.col(f"source.`{k}`") for k in keys])
    return t.join(s, condition, how[(inserts, by_source)])


def _plan(
    joined: DataFrame,
    names: Sequence[str],
    keys: Sequence[str],
    modes: tuple[str, str, str],
    set: Mapping[str, str] | None,
    matched_condition: str | None,
) -> DataFrame:
    """One row per action: its code, the target row's address and the new row's columns."""
    has_target = F.col(f"target.{_TARGET}").isNotNull()
    has_source = F.col(f"source.{_SOURCE}").isNotNull()
    try:
        condition = F.coalesce(F.expr(matched_condition), F.lit(False)) if matched_condition else F.lit(True)
        action = _actions(has_target & has_source, has_target & ~has_source, has_source & ~has_target, condition, modes)
        columns = []
        for c in names:
            if set is None:
                updated = F.col(f"source.`{c}`")
            else:
                updated = F.expr(set[c]) if c in set else F.col(f"target.`{c}`")
            inserted = F.col(f"source.`{c}`") if modes[1] == "insert" else F.lit(None)
            columns.append(F.when(F.col(_ACTION) == "I", inserted).otherwise(updated).alias(c))
        return _with_rows(joined, action, columns, keys)
    except PySparkException as exc:
        raise InvalidInput(f"merge: {first_line(exc)}") from exc


def _with_rows(joined: DataFrame, action: Column, columns: list[Column], keys: Sequence[str]) -> DataFrame:
    return (
        joined.withColumn(_ACTION, action)
        .where(F.col(_ACTION).isNotNull())
        .select(
            F.col(_ACTION),
            F.col(f"target.{ROW_TABLE}").alias(ROW_TABLE),
            F.col(f"target.{ROW_ADDRESS}").alias(ROW_ADDRESS),
            *[F.col(f"source.`{k}`").alias(f"{_KEY}{i}") for i, k in enumerate(keys)],
            *columns,
        )
    )
