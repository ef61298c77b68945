"""Storage-partitioned join (SPJ) planning, without Spark.

Given two partitioned namespaces, their (pruned) partition tables and the join keys,
decide whether the join can run group by group without a shuffle, and if so which
partition tables of each side go together.

For every join key (a column with the same Arrow type on both sides) the planner looks
at the single-source partition fields on that key in every spec version present on
either side, and looks for one *grouping function* that every version can compute from
its partition values, such that rows with equal keys always get equal group values:

- ``identity`` in every version: the group is the value itself;
- ``bucket[N]`` / ``bucket[M]`` (any mix, across sides and versions): the group is
  ``bucket % G`` with ``G`` the gcd of the bucket counts (``G == 1`` is useless);
- ``year`` / ``month`` / ``day`` / ``hour`` of the same column: the group is the tuple of
  the time fields every version has (that tuple must include ``year``, or all versions
  must have the same time fields);
- ``truncate[W]`` with the same ``W`` everywhere: the truncated value;
- a version with ``identity`` on the key derives any of these from its value, with the
  transform's Arrow implementation.

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
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import product
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace, PartitionTable
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
    is_hashable_type,
)
from partitioning.sql.binding import UnknownColumn, bind
from partitioning.sql.filters import Dialect, Filter, is_exactly_understood, parse_filter

__all__ = [
    "JOIN_TYPES",
    "JoinPlan",
    "JoinSide",
    "JoinTask",
    "KeyGrouping",
    "distinct_suffixes",
    "duplicate_names",
    "join_output_names",
    "join_output_schema",
    "local_join",
    "plan_join",
    "plan_namespace_join",
    "validate_join",
]

JoinType = Literal["inner", "left", "right", "full"]
JOIN_TYPES: tuple[str, ...] = ("inner", "left", "right", "full")
TIME_PARTS: tuple[str, ...] = ("year", "month", "day", "hour")
_TIME_TRANSFORMS: dict[str, Transform] = {
    "year": YearTransform(),
    "month": MonthTransform(),
    "day": DayTransform(),
    "hour": HourTransform(),
}
_ARROW_JOIN_TYPE = {"inner": "inner", "left": "left outer", "right": "right outer", "full": "full outer"}
_LEFT_ROW = "__lance_join_left_row"
_RIGHT_ROW = "__lance_join_right_row"
Side = Literal["left", "right"]
Version = tuple[str, int]  # (side, spec_id)
Sources = dict[Version, tuple[tuple[str, bool], ...]]  # per version: (field_id, from identity) per component


# -- sides and validation ---------------------------------------------------------------------


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


def normalize_on(on: str | Sequence[str]) -> tuple[str, ...]:
    keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidInput(f"join keys 'on' must be a non-empty list of column names, got {on!r}")
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise InvalidInput(f"join key {dupes[0]!r} is given twice in 'on'")
    return keys


Suffixes = tuple[str, str]


def check_suffixes(suffixes: Sequence[str] | None) -> Suffixes | None:
    """``None``, or a pair of strings (left, right) as a tuple."""
    if suffixes is None:
        return None
    if isinstance(suffixes, str) or len(suffixes) != 2 or not all(isinstance(x, str) for x in suffixes):
        raise InvalidInput(f"suffixes must be two strings (left, right), e.g. ('_left', '_right'); got {suffixes!r}")
    return suffixes[0], suffixes[1]


def shared_columns(left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str]) -> list[str]:
    """The left non-key columns whose name (ignoring case, as Spark does) is also a right non-key column."""
    right_rest = {c.lower() for c in right.arrow.names if c not in on}
    return [c for c in left.arrow.names if c not in on and c.lower() in right_rest]


def join_output_names(
    left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str], suffixes: Sequence[str] | None = None
) -> list[str]:
    """The names of Spark's ``left.join(right, on=[...])`` columns: the keys once, the left then the
    right non-key columns. A non-key name on both sides appears twice, as in Spark, unless
    ``suffixes=(l, r)`` is given: then both get their side's suffix (names compared ignoring case)."""
    pair = check_suffixes(suffixes)
    shared = {c.lower() for c in shared_columns(left, right, on)}

    def named(c: str, suffix: str) -> str:
        return c + suffix if pair is not None and c.lower() in shared else c

    names = list(on)
    names += [named(c, pair[0] if pair else "") for c in left.arrow.names if c not in on]
    names += [named(c, pair[1] if pair else "") for c in right.arrow.names if c not in on]
    return names


def validate_join(
    left: NamespaceSchema,
    right: NamespaceSchema,
    on: str | Sequence[str],
    how: str,
    suffixes: Sequence[str] | None = None,
) -> tuple[tuple[str, ...], JoinType]:
    """Check the join type, the keys and the suffixes; return the keys and the join type.

    Non-key columns on both sides are allowed (Spark keeps both); ``suffixes``, when given,
    must make every output name distinct (ignoring case).
    """
    if how not in JOIN_TYPES:
        raise InvalidInput(f"unknown join type {how!r}; allowed: {', '.join(JOIN_TYPES)}")
    keys = normalize_on(on)
    for label, schema in (("left", left), ("right", right)):
        for k in keys:
            if schema.arrow.get_field_index(k) < 0:
                raise InvalidInput(
                    f"unknown join key {k!r}: the {label} side has no such column; "
                    f"{label} columns are: {', '.join(schema.arrow.names)}"
                )
    pair = check_suffixes(suffixes)
    if pair is not None:
        own = {d.lower() for schema in (left, right) for d in duplicate_names(schema.arrow.names)}
        dupes = [d for d in duplicate_names(join_output_names(left, right, keys, pair)) if d.lower() not in own]
        if dupes:
            raise InvalidInput(
                f"suffixes {pair!r} leave duplicate output column(s) {', '.join(map(repr, dupes))}; "
                "choose suffixes that make every column name distinct"
            )
    return keys, how  # type: ignore[return-value]


def duplicate_names(names: Sequence[str]) -> list[str]:
    """The names that occur more than once, ignoring case (Spark's default), in order of first repeat."""
    seen: set[str] = set()
    out: list[str] = []
    for n in names:
        if n.lower() in seen and n not in out:
            out.append(n)
        seen.add(n.lower())
    return out


def distinct_suffixes(left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str]) -> Suffixes:
    """Suffixes that make every output name distinct, for a reader that cannot hold duplicate names."""
    n = 0
    while True:
        pair = (f"__lance_left{n or ''}", f"__lance_right{n or ''}")
        names = join_output_names(left, right, on, pair)
        if len(set(names)) == len(names):
            return pair
        n += 1


def join_output_schema(
    left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str], suffixes: Sequence[str] | None = None
) -> pa.Schema:
    """Spark's ``USING`` output: the keys once, then the left and the right non-key columns (all
    nullable), named by :func:`join_output_names` (so possibly twice without ``suffixes``)."""
    fields = [left.arrow.field(k) for k in on]
    fields += [f for f in left.arrow if f.name not in on]
    fields += [f for f in right.arrow if f.name not in on]
    names = join_output_names(left, right, on, suffixes)
    return pa.schema([pa.field(n, f.type, nullable=True) for n, f in zip(names, fields, strict=True)])


# -- key groupings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _KeyFields:
    """The single-source partition fields of one spec version on one key column."""

    identity: str | None = None
    buckets: dict[int, str] = field(default_factory=dict)  # N -> field_id
    truncates: dict[int, str] = field(default_factory=dict)  # W -> field_id
    times: dict[str, str] = field(default_factory=dict)  # part -> field_id

    @property
    def empty(self) -> bool:
        return self.identity is None and not (self.buckets or self.truncates or self.times)

    def describe(self) -> str:
        parts = ["identity"] if self.identity is not None else []
        parts += [f"bucket[{n}]" for n in sorted(self.buckets)]
        parts += [f"truncate[{w}]" for w in sorted(self.truncates)]
        parts += [p for p in TIME_PARTS if p in self.times]
        return "+".join(parts) if parts else "no partition field on it"


def _key_fields(spec: PartitionSpec, source_id: int) -> _KeyFields:
    out = _KeyFields()
    identity = None
    for f in spec.fields:
        t = f.transform
        if t is None or t.multi_source or f.source_ids != (source_id,):
            continue
        if isinstance(t, IdentityTransform):
            identity = identity or f.field_id
        elif isinstance(t, BucketTransform):
            out.buckets.setdefault(t.num_buckets, f.field_id)
        elif isinstance(t, TruncateTransform):
            out.truncates.setdefault(t.width, f.field_id)
        elif t.name in _TIME_TRANSFORMS:
            out.times.setdefault(t.name, f.field_id)
    return _KeyFields(identity, out.buckets, out.truncates, out.times)


@dataclass(frozen=True)
class KeyGrouping:
    """How one join key contributes to a table's group value.

    ``kind`` is ``identity``, ``bucket`` (``param`` = G), ``truncate`` (``param`` = W) or
    ``time`` (``param`` = the time parts). ``sources[(side, spec_id)]`` lists, per
    component, the partition field it is read from and whether that field is the
    key's identity field (then the component is derived with the Arrow transform).
    """

    key: str
    key_type: pa.DataType
    kind: str
    param: Any
    sources: Mapping[Version, tuple[tuple[str, bool], ...]] = field(repr=False)

    def describe(self) -> str:
        if self.kind == "identity":
            return f"{self.key} (identity)"
        if self.kind == "bucket":
            return f"{self.key} (bucket % {self.param})"
        if self.kind == "truncate":
            return f"{self.key} (truncate[{self.param}])"
        return f"{self.key} ({'/'.join(self.param)})"

    def group_values(self, side: Side, spec_id: int, tables: Sequence[PartitionTable]) -> list[Any]:
        """This key's group value for each table (all of one side and spec version)."""
        components = []
        for i, (field_id, from_identity) in enumerate(self.sources[(side, spec_id)]):
            values = [t.values.get(field_id) for t in tables]
            components.append(self._component(i, values, from_identity))
        if self.kind == "time":
            return [None if any(c is None for c in row) else row for row in zip(*components, strict=True)]
        return components[0]

    def _component(self, i: int, values: list[Any], from_identity: bool) -> list[Any]:
        if self.kind == "identity" or (self.kind == "truncate" and not from_identity):
            return values
        if self.kind == "bucket" and not from_identity:
            return [None if v is None else int(v) % self.param for v in values]
        if self.kind == "time" and not from_identity:
            return [None if v is None else int(v) for v in values]
        transform: Transform
        if self.kind == "bucket":
            transform = BucketTransform(self.param)
        elif self.kind == "truncate":
            transform = TruncateTransform(self.param)
        else:
            transform = _TIME_TRANSFORMS[self.param[i]]
        return transform.apply(pa.array(values, type=self.key_type)).to_pylist()


def _joinable_type(t: pa.DataType) -> bool:
    """Key types whose equality is the same in Spark, in partition values and in Arrow's join."""
    return is_hashable_type(t) and not pa.types.is_floating(t)


def _time_parts(t: pa.DataType) -> set[str]:
    if pa.types.is_timestamp(t):
        return set(TIME_PARTS)
    if pa.types.is_date(t):
        return {"year", "month", "day"}
    return set()


def _label(v: Version) -> str:
    return f"{v[0]} v{v[1]}"


def _source(kf: _KeyFields, direct: str | None) -> tuple[str, bool]:
    """Read a component from the field ``direct``, or derive it from the identity field."""
    if direct is not None:
        return direct, False
    assert kf.identity is not None
    return kf.identity, True


def key_grouping(
    key: str, key_type: pa.DataType, versions: Mapping[Version, _KeyFields]
) -> tuple[KeyGrouping | None, str]:
    """The finest grouping of ``key`` every version can compute, or None and why not."""
    if not versions:
        return None, f"key {key!r}: no partition tables to join"
    missing = [v for v, kf in versions.items() if kf.empty]
    if missing:
        return None, f"key {key!r}: {', '.join(_label(v) for v in missing)} has no partition field on it"
    sources: Sources
    if all(kf.identity is not None for kf in versions.values()):
        sources = {v: (_source(kf, None),) for v, kf in versions.items()}
        return KeyGrouping(key, key_type, "identity", None, sources), ""
    derived = [kf for kf in versions.values() if kf.identity is None]
    notes = []

    # time hierarchy: the time fields every version has (identity versions have them all)
    available = [set(kf.times) for kf in derived]
    common = _time_parts(key_type).intersection(*available)
    if common and ("year" in common or all(a == available[0] for a in available)):
        parts = tuple(p for p in TIME_PARTS if p in common)
        sources = {v: tuple(_source(kf, kf.times.get(p)) for p in parts) for v, kf in versions.items()}
        return KeyGrouping(key, key_type, "time", parts, sources), ""
    if any(available):
        have = "/".join(p for p in TIME_PARTS if p in common) or "none"
        notes.append(f"the time fields every version has ({have}) do not include year")

    # truncate with the same width everywhere
    widths = set.intersection(*(set(kf.truncates) for kf in derived))
    if widths:
        w = max(widths)
        sources = {v: (_source(kf, kf.truncates.get(w)),) for v, kf in versions.items()}
        return KeyGrouping(key, key_type, "truncate", w, sources), ""
    if any(kf.truncates for kf in derived):
        notes.append("truncate widths differ")

    # buckets: bucket % G, G the largest gcd of one bucket count per version
    if all(kf.buckets for kf in derived):
        g = max(reduce(math.gcd, combo) for combo in product(*(sorted(kf.buckets) for kf in derived)))
        if g > 1:
            sources = {
                v: (_source(kf, next((f for n, f in sorted(kf.buckets.items()) if n % g == 0), None)),)
                for v, kf in versions.items()
            }
            return KeyGrouping(key, key_type, "bucket", g, sources), ""
        counts = sorted({n for kf in derived for n in kf.buckets})
        notes.append(f"bucket counts {', '.join(map(str, counts))} have no common divisor > 1")
    desc = ", ".join(f"{_label(v)} {kf.describe()}" for v, kf in versions.items())
    return None, f"key {key!r}: no common grouping of {desc}" + (f" ({'; '.join(notes)})" if notes else "")


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


def _versions(left: JoinSide, right: JoinSide, key: str) -> dict[Version, _KeyFields]:
    out: dict[Version, _KeyFields] = {}
    for label, side in (("left", left), ("right", right)):
        source_id = side.schema.id_of(key)
        for spec_id in side.versions:
            out[(label, spec_id)] = _key_fields(side.specs[spec_id], source_id)
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
        if not _joinable_type(lt):
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


# -- the local join of one group --------------------------------------------------------------


def _any_null(table: pa.Table, keys: Iterable[str]) -> pa.Array:
    mask = pa.array(np.zeros(table.num_rows, dtype=bool))
    for k in keys:
        mask = pc.or_(mask, pc.is_null(table.column(k)).combine_chunks())
    return mask


def _comparable(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The key columns as Spark compares them in a join: floats with -0.0 as 0.0 and one NaN."""
    columns = []
    for k in keys:
        col = table.column(k)
        if pa.types.is_floating(col.type):
            nan = pa.scalar(float("nan"), col.type)
            col = pc.if_else(pc.is_nan(col), nan, pc.add(col, pa.scalar(0.0, col.type)))
        columns.append(col)
    return pa.Table.from_arrays(columns, names=list(keys))


def local_join(left: pa.Table, right: pa.Table, on: Sequence[str], how: str, output: pa.Schema) -> pa.Table:
    """SQL ``left JOIN right USING (on)`` of two in-memory tables, shaped as ``output``.

    ``output`` is :func:`join_output_schema`: the keys, the left non-key columns, then
    the right non-key columns, filled by position (so its names may repeat, or carry
    suffixes; a name on both sides is read from each side's own table). As in Spark, a
    key column is the left value (the right value for a right join) and, when that side
    has no row, the other side's.

    Rows with a NULL in any key never match (SQL semantics); they are split off before
    Arrow's hash join and emitted as unmatched rows by the outer joins that keep them, so
    the result does not depend on how Arrow compares NULL keys. Float keys are compared
    as Spark does (-0.0 equals 0.0, NaN equals NaN). Only the keys and a row number go
    through the hash join; every output column is gathered with ``take``, so non-key
    columns may be of any type (Arrow's join rejects nested non-key columns).
    """
    if how not in JOIN_TYPES:
        raise InvalidInput(f"unknown join type {how!r}; allowed: {', '.join(JOIN_TYPES)}")
    keys = list(on)
    left_rest = [c for c in left.column_names if c not in keys]
    right_rest = [c for c in right.column_names if c not in keys]
    lnull, rnull = _any_null(left, keys), _any_null(right, keys)
    lok, lbad = left.filter(pc.invert(lnull)), left.filter(lnull)
    rok, rbad = right.filter(pc.invert(rnull)), right.filter(rnull)
    lk = _comparable(lok, keys).append_column(_LEFT_ROW, pa.array(np.arange(lok.num_rows, dtype=np.int64)))
    rk = _comparable(rok, keys).append_column(_RIGHT_ROW, pa.array(np.arange(rok.num_rows, dtype=np.int64)))
    joined = lk.join(rk, keys=keys, join_type=_ARROW_JOIN_TYPE[how], coalesce_keys=True)
    lrows, rrows = lok.take(joined.column(_LEFT_ROW)), rok.take(joined.column(_RIGHT_ROW))
    first, second = (rrows, lrows) if how == "right" else (lrows, rrows)
    key_columns = [pc.coalesce(first.column(k), second.column(k)) for k in keys]
    pieces = [_assemble(key_columns, lrows.select(left_rest), rrows.select(right_rest), output)]
    no_left, no_right = lbad.select(left_rest).slice(0, 0), rbad.select(right_rest).slice(0, 0)
    if how in ("left", "full") and lbad.num_rows:
        pieces.append(_assemble([lbad.column(k) for k in keys], lbad.select(left_rest), no_right, output))
    if how in ("right", "full") and rbad.num_rows:
        pieces.append(_assemble([rbad.column(k) for k in keys], no_left, rbad.select(right_rest), output))
    return pa.concat_tables(pieces)


def _assemble(keys: Sequence[pa.ChunkedArray], left: pa.Table, right: pa.Table, output: pa.Schema) -> pa.Table:
    """Keys, left and right columns as ``output``; an empty side (0 rows) becomes NULLs."""
    n = len(keys[0]) if keys else 0
    columns: list[pa.ChunkedArray | pa.Array] = list(keys)
    for part in (left, right):
        if part.num_rows == 0 and n:
            columns += [pa.nulls(n, part.schema.field(i).type) for i in range(part.num_columns)]
        else:
            columns += [part.column(i) for i in range(part.num_columns)]
    casted = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, output, strict=True)]
    return pa.Table.from_arrays(casted, schema=output)
