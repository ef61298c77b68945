"""Storage-partitioned join (SPJ) planning, without Spark.

Given two partitioned namespaces, their (pruned) partition tables and the join keys,
decide whether the join can run group by group without a shuffle, and if so which
partition tables of each side go together. Each key's grouping comes from
:mod:`partitioning.plan.join_keys`, the output columns from :mod:`partitioning.plan.join_columns`;
one group is joined by :func:`partitioning.plan.join_local.local_join`.

The group value of a table is the tuple of the group values of every key that has a
grouping; keys without one do not contribute, and at least one key must have one.

Multi-version specs: the partitions of each side are grouped by the spec version they
were written with, and a key's grouping must cover every version present on both sides
(after pruning). If no key has a grouping that covers all versions, the WHOLE join falls
back to a shuffle join: an outer join's unmatched rows can only be decided against the
whole other side, so joining compatible versions partition-wise and the rest by shuffle
would only be sound for inner joins.

Partition tables whose group has a NULL component hold only rows with a NULL join key;
those rows never match, so such a table gets a one-sided task of its own (emitted only
by the outer joins that keep that side).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace, PartitionTable
from partitioning.plan.join_columns import JoinType, validate_join
from partitioning.plan.join_keys import (
    KeyFields,
    KeyGrouping,
    Side,
    Version,
    joinable_type,
    key_fields,
    key_grouping,
)
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.binding import UnknownColumn, bind
from partitioning.sql.filters import Dialect, Filter, is_exactly_understood
from partitioning.sql.from_sql import parse_filter

__all__ = ["JoinPlan", "JoinSide", "JoinTask", "plan_join", "plan_namespace_join"]


# -- sides ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinSide:
    """One input of a join: a namespace's schema and specs, and its partition tables after pruning."""

    root: str
    schema: NamespaceSchema
    specs: Mapping[int, PartitionSpec]
    tables: tuple[PartitionTable, ...]
    filter: str | None = None
    manifest_version: int | None = None

    @classmethod
    def of(
        cls,
        ns: PartitionedNamespace,
        filter_sql: str | None = None,
        *,
        label: str = "left",
        dialect: Dialect | None = None,
    ) -> JoinSide:
        """The side's tables that ``filter_sql`` cannot prune, from the namespace's manifest version."""
        check_filter(ns.namespace_schema, filter_sql, label, dialect)
        plan = ns.plan_scan(filter_sql, dialect=dialect)
        by_id = {p.object_id: p for p in ns.partitions()}
        tables = tuple(by_id[t.object_id] for t in plan)
        return cls(ns.root, ns.namespace_schema, ns.specs, tables, filter_sql or None, ns.manifest_version)

    @property
    def columns(self) -> list[str]:
        return list(self.schema.arrow.names)

    @property
    def versions(self) -> list[int]:
        return sorted({t.spec_id for t in self.tables})


def check_filter(schema: NamespaceSchema, filter_sql: str | None, label: str, dialect: Dialect | None = None) -> Filter:
    """A side filter, bound to the side's columns (an unknown column is one line naming the side)."""
    try:
        return bind(parse_filter(filter_sql, dialect, strict=False), schema.arrow, dialect)
    except UnknownColumn as exc:
        names = ", ".join(schema.arrow.names)
        message = f"filter_{label} uses unknown column(s) {exc.column!r}; {label} columns are: {names}"
        raise InvalidInput(message) from exc


def exact_side_filter(schema: NamespaceSchema, filter_sql: str | None, dialect: Dialect | None) -> Filter | None:
    """The bound side filter if the join can apply it itself (exactly as Spark), else None."""
    bound = check_filter(schema, filter_sql, "side", dialect)
    return bound if is_exactly_understood(bound) else None


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinTask:
    """One group: the left and right partition tables joined together.

    ``group`` is None for a table holding only NULL keys (its rows never match).
    """

    group: tuple[Any, ...] | None
    left: tuple[PartitionTable, ...]
    right: tuple[PartitionTable, ...]


@dataclass(frozen=True)
class JoinPlan:
    on: tuple[str, ...]
    how: JoinType
    compatible: bool
    reason: str
    groupings: tuple[KeyGrouping, ...] = ()
    tasks: tuple[JoinTask, ...] = ()
    left_tables: int = 0
    right_tables: int = 0

    @property
    def summary(self) -> str:
        if not self.compatible:
            return f"lance_partitioned: storage-partitioned join not used: {self.reason}"
        return (
            f"lance_partitioned: storage-partitioned {self.how} join of {self.left_tables} x {self.right_tables} "
            f"partition tables in {len(self.tasks)} group tasks: {self.reason}"
        )

    def __str__(self) -> str:
        return self.summary


def _versions(left: JoinSide, right: JoinSide, key: str) -> dict[Version, KeyFields]:
    out: dict[Version, KeyFields] = {}
    for label, side in (("left", left), ("right", right)):
        source_id = side.schema.id_of(key)
        for spec_id in side.versions:
            out[(label, spec_id)] = key_fields(side.specs[spec_id], source_id)
    return out


def _groups(side: JoinSide, label: Side, groupings: Sequence[KeyGrouping]) -> list[tuple[Any, PartitionTable]]:
    out: list[tuple[Any, PartitionTable]] = []
    for spec_id in side.versions:
        tables = [t for t in side.tables if t.spec_id == spec_id]
        per_key = [g.group_values(label, spec_id, tables) for g in groupings]
        for t, group in zip(tables, zip(*per_key, strict=True), strict=True):
            out.append((None if any(v is None for v in group) else group, t))
    return out


def plan_join(left: JoinSide, right: JoinSide, on: str | Sequence[str], how: str = "inner") -> JoinPlan:
    """Decide compatibility and the group tasks of ``left JOIN right USING (on)``."""
    keys, join_type = validate_join(left.schema, right.schema, on, how)
    n_left, n_right = len(left.tables), len(right.tables)
    if not left.tables and not right.tables:
        return JoinPlan(keys, join_type, True, "both sides are empty", (), (), n_left, n_right)
    groupings: list[KeyGrouping] = []
    reasons: list[str] = []
    for k in keys:
        lt, rt = left.schema.arrow.field(k).type, right.schema.arrow.field(k).type
        if lt != rt:
            reasons.append(f"key {k!r} is {lt} on the left but {rt} on the right")
            continue
        if pa.types.is_floating(lt):
            reasons.append(f"key {k!r} is {lt}: Spark's join equates -0.0 with 0.0 and NaN with NaN, partitions do not")
            continue
        if not joinable_type(lt):
            reasons.append(f"key {k!r} of type {lt} cannot be joined partition-wise")
            continue
        grouping, why = key_grouping(k, lt, _versions(left, right, k))
        if grouping is None:
            reasons.append(why)
        else:
            groupings.append(grouping)
    if not groupings:
        reason = "no join key is partitioned compatibly on both sides: " + "; ".join(reasons)
        return JoinPlan(keys, join_type, False, reason, (), (), n_left, n_right)

    matched: dict[Any, tuple[list[PartitionTable], list[PartitionTable]]] = {}
    unmatched: list[JoinTask] = []
    for label, side in (("left", left), ("right", right)):
        for group, table in _groups(side, label, groupings):  # type: ignore[arg-type]
            if group is None:
                unmatched.append(JoinTask(None, (table,), ()) if label == "left" else JoinTask(None, (), (table,)))
            else:
                matched.setdefault(group, ([], []))[0 if label == "left" else 1].append(table)
    keep_left, keep_right = join_type in ("left", "full"), join_type in ("right", "full")
    tasks = []
    for group, (lts, rts) in matched.items():
        if (lts and rts) or (lts and keep_left) or (rts and keep_right):
            tasks.append(JoinTask(group, tuple(lts), tuple(rts)))
    tasks += [t for t in unmatched if (t.left and keep_left) or (t.right and keep_right)]
    reason = "grouped by " + ", ".join(g.describe() for g in groupings)
    if reasons:
        reason += "; not grouped by " + "; ".join(reasons)
    return JoinPlan(keys, join_type, True, reason, tuple(groupings), tuple(tasks), n_left, n_right)


def plan_namespace_join(
    left: PartitionedNamespace,
    right: PartitionedNamespace,
    on: str | Sequence[str],
    how: str = "inner",
    *,
    filter_left: str | None = None,
    filter_right: str | None = None,
    dialect: Dialect | None = None,
) -> JoinPlan:
    """:func:`plan_join` of two namespaces, each pruned with its filter.

    The storage-partitioned join applies the side filters itself, so it needs filters it
    evaluates exactly as Spark does; any other filter makes the plan fall back.
    """
    validate_join(left.namespace_schema, right.namespace_schema, on, how)
    plan = plan_join(
        JoinSide.of(left, filter_left, label="left", dialect=dialect),
        JoinSide.of(right, filter_right, label="right", dialect=dialect),
        on,
        how,
    )
    for label, ns, text in (("left", left, filter_left), ("right", right, filter_right)):
        if plan.compatible and exact_side_filter(ns.namespace_schema, text, dialect) is None:
            reason = f"filter_{label} {text!r} has parts only Spark evaluates (functions, arithmetic, ...)"
            return dataclasses.replace(plan, compatible=False, reason=reason, tasks=())
    return plan
