"""Storage-partitioned join (SPJ) of two partitioned namespaces, as one shuffle-free scan.

:func:`join_partitioned` plans the join with :mod:`partitioning.join_plan` on the
driver. When the two sides are partitioned compatibly on the join keys, the result is
read from the ``lance_partitioned_join`` Python Data Source: each input partition
holds whole partition groups (the left and right partition tables whose rows can
match), and ``read()`` reads both sides of each group with the side's filter and
joins them locally in Arrow. Spark's physical plan is then a single scan, with no
Exchange for the join inputs. Otherwise the join is Spark's own shuffle (or
broadcast) join of :func:`pipelines.read.read_partitioned` of both sides, and one
log line on the ``lance_partitioned`` logger says why SPJ was not used.

Both paths read each namespace at the same ``__manifest`` version, and both return
Spark's ``left.join(right, on=[...], how=...)`` columns: the keys once (for a full
join the left key if not NULL, else the right), the left non-key columns, then the
right non-key columns.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput
from partitioning.filters import Filter, TrueFilter, columns_of, parse_filter, to_arrow_expression, to_sql
from partitioning.join_plan import (
    JoinPlan,
    JoinTask,
    JoinType,
    join_output_schema,
    local_join,
    plan_namespace_join,
    validate_join,
)
from partitioning.namespace import PartitionedNamespace, PartitionTable, open_partition_table
from partitioning.schema import NamespaceSchema
from pipelines.read import TableSlice, read_partitioned, read_table
from pipelines.schema import spark_schema

__all__ = ["LancePartitionedJoinDataSource", "join_partitioned", "join_partitioned_with_plan"]

log = logging.getLogger("lance_partitioned")
FORMAT = "lance_partitioned_join"
MAX_PARTITIONS = 32
_ROW = "__lance_join_row"


def join_partitioned(
    spark: SparkSession,
    left_root: str,
    right_root: str,
    on: str | Sequence[str],
    how: JoinType = "inner",
    *,
    filter_left: str | None = None,
    filter_right: str | None = None,
) -> DataFrame:
    """``left JOIN right USING (on)`` of two partitioned namespaces, without a shuffle when possible.

    ``how`` is ``inner``, ``left``, ``right`` or ``full``; ``filter_left`` / ``filter_right``
    are SQL filters applied to each side before the join (and used to prune its
    partition tables). The storage-partitioned join is used when at least one join key
    has the same type on both sides and a common grouping of the partition fields on it
    in every spec version present on both sides (after pruning); see
    :mod:`partitioning.join_plan`. If any version is incompatible the WHOLE join falls
    back to Spark's join: an outer join's unmatched rows can only be decided against the
    whole other side, so a per-version fallback would only be sound for inner joins.
    """
    df, _ = join_partitioned_with_plan(
        spark, left_root, right_root, on, how, filter_left=filter_left, filter_right=filter_right
    )
    return df


def join_partitioned_with_plan(
    spark: SparkSession,
    left_root: str,
    right_root: str,
    on: str | Sequence[str],
    how: JoinType = "inner",
    *,
    filter_left: str | None = None,
    filter_right: str | None = None,
) -> tuple[DataFrame, JoinPlan]:
    """:func:`join_partitioned`, also returning the plan (``plan.compatible``, ``plan.reason``)."""
    left = PartitionedNamespace.load(left_root)
    right = PartitionedNamespace.load(right_root)
    plan = plan_namespace_join(left, right, on, how, filter_left=filter_left, filter_right=filter_right)
    if not plan.compatible:
        log.warning(plan.summary)
        lhs = read_partitioned(spark, left_root, filter=filter_left, manifest_version=left.manifest_version)
        rhs = read_partitioned(spark, right_root, filter=filter_right, manifest_version=right.manifest_version)
        return lhs.join(rhs, on=list(plan.on), how=plan.how), plan
    log.info(plan.summary)
    spark.dataSource.register(LancePartitionedJoinDataSource)
    options = {
        "max_partitions": str(_default_partitions(spark)),
        "left": left_root,
        "right": right_root,
        "left_version": str(left.manifest_version),
        "right_version": str(right.manifest_version),
        "on": json.dumps(list(plan.on)),
        "how": plan.how,
    }
    if filter_left:
        options["filter_left"] = filter_left
    if filter_right:
        options["filter_right"] = filter_right
    return spark.read.format(FORMAT).options(**options).load(), plan


def _default_partitions(spark: SparkSession) -> int:
    """Twice the cluster's cores: enough tasks to balance groups of different sizes, few enough
    that per-task overhead does not dominate small joins."""
    try:
        return max(1, 2 * int(spark.sparkContext.defaultParallelism))
    except Exception:  # e.g. Spark Connect, which has no SparkContext
        return MAX_PARTITIONS


# -- the data source ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _JoinOptions:
    """The data source's options, parsed. Picklable."""

    left: str
    right: str
    left_version: int | None
    right_version: int | None
    on: tuple[str, ...]
    how: str
    filter_left: str | None
    filter_right: str | None
    max_partitions: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _JoinOptions:
        def get(name: str) -> str | None:
            return options.get(name, options.get(name.lower()))

        left, right, on = get("left"), get("right"), get("on")
        if not left or not right or not on:
            raise InvalidInput(f"format {FORMAT!r} needs the options left, right and on (a JSON list of keys)")
        try:
            keys = json.loads(on)
        except json.JSONDecodeError:
            keys = [k.strip() for k in on.split(",")]
        lv, rv = get("left_version"), get("right_version")
        return cls(
            left=left,
            right=right,
            left_version=int(lv) if lv else None,
            right_version=int(rv) if rv else None,
            on=tuple(keys) if isinstance(keys, list) else (str(keys),),
            how=get("how") or "inner",
            filter_left=get("filter_left") or None,
            filter_right=get("filter_right") or None,
            max_partitions=max(1, int(get("max_partitions") or MAX_PARTITIONS)),
        )

    def namespaces(self) -> tuple[PartitionedNamespace, PartitionedNamespace]:
        return (
            PartitionedNamespace.load(self.left, manifest_version=self.left_version),
            PartitionedNamespace.load(self.right, manifest_version=self.right_version),
        )


class LancePartitionedJoinDataSource(DataSource):
    """``spark.read.format("lance_partitioned_join").options(left=, right=, on=, how=, ...).load()``.

    Options: ``left`` / ``right`` (namespace roots), ``on`` (JSON list of keys), ``how``,
    ``filter_left`` / ``filter_right``, ``left_version`` / ``right_version`` (``__manifest``
    versions) and ``max_partitions``. It only reads compatibly partitioned sides;
    :func:`join_partitioned` chooses between it and Spark's join.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        opts = _JoinOptions.parse(self.options)
        left, right = opts.namespaces()
        keys, _ = validate_join(left.namespace_schema, right.namespace_schema, opts.on, opts.how)
        return spark_schema(join_output_schema(left.namespace_schema, right.namespace_schema, keys))

    def reader(self, schema: StructType) -> LancePartitionedJoinReader:
        return LancePartitionedJoinReader(_JoinOptions.parse(self.options))


@dataclass(frozen=True)
class _Group:
    """One partition group's tables on each side."""

    left: tuple[TableSlice, ...]
    right: tuple[TableSlice, ...]


@dataclass(frozen=True)
class JoinInputPartition(InputPartition):
    """The partition groups one Spark task joins, in order."""

    groups: tuple[_Group, ...]

    def __init__(self, groups: tuple[_Group, ...]) -> None:
        object.__setattr__(self, "value", len(groups))
        object.__setattr__(self, "groups", groups)


@dataclass(frozen=True)
class _SideReader:
    """Reads one side's tables of a group: exact filters in the Lance scan, the rest in Arrow."""

    schema: NamespaceSchema
    lance_filters: tuple[Filter, ...]
    arrow_filter: Filter | None
    storage_options: Mapping[str, str] | None

    @classmethod
    def of(cls, ns: PartitionedNamespace, filter_sql: str | None) -> _SideReader:
        f = parse_filter(filter_sql)
        if isinstance(f, TrueFilter):
            return cls(ns.namespace_schema, (), None, ns.storage_options)
        if _exact_in_lance(f, ns.namespace_schema):
            return cls(ns.namespace_schema, (f,), None, ns.storage_options)
        return cls(ns.namespace_schema, (), f, ns.storage_options)

    def read(self, slices: Sequence[TableSlice]) -> pa.Table:
        output = self.schema.arrow.names
        out_schema = pa.schema([self.schema.arrow.field(c) for c in output])
        batches: list[pa.RecordBatch] = []
        for piece in slices:
            dataset = open_partition_table(
                piece.uri, piece.read_version, piece.read_branch, piece.read_tag, self.storage_options
            )
            batches.extend(read_table(dataset, piece, self.schema, output, self.lance_filters))
        table = pa.Table.from_batches(batches, schema=out_schema)
        return table if self.arrow_filter is None else spark_filter(table, self.arrow_filter)


def spark_filter(table: pa.Table, f: Filter) -> pa.Table:
    """``table`` filtered by ``f`` in Arrow, with Spark's float order: NaN equals NaN and is
    above every number. NaN is read as +inf, which is exact for the finite literals a filter
    can spell."""
    columns = sorted(columns_of(f))
    view = []
    for name in columns:
        col = table.column(name)
        if pa.types.is_floating(col.type):
            col = pc.if_else(pc.is_nan(col), pa.scalar(float("inf"), col.type), col)
        view.append(col)
    view.append(pa.array(np.arange(table.num_rows, dtype=np.int64)))
    rows = pa.Table.from_arrays(view, names=[*columns, _ROW]).filter(to_arrow_expression(f)).column(_ROW)
    return table.take(rows)


def _exact_in_lance(f: Filter, schema: NamespaceSchema) -> bool:
    """Whether a Lance scan filters exactly as Spark would (floats and binary are filtered in Arrow)."""
    for name in columns_of(f):
        t = schema.arrow.field(name).type
        if pa.types.is_floating(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_nested(t):
            return False
    return to_sql(f) is not None


def _slice(table: PartitionTable) -> TableSlice:
    return TableSlice(table.object_id, table.uri, table.read_version, table.read_branch, table.read_tag)


def _pack(tasks: Sequence[JoinTask], n: int) -> list[JoinInputPartition]:
    """Spread the groups over ``n`` input partitions, the largest groups (by table count) first."""
    if not tasks:
        return [JoinInputPartition(())]
    n = min(n, len(tasks))
    heap: list[tuple[int, int]] = [(0, i) for i in range(n)]
    bins: list[list[_Group]] = [[] for _ in range(n)]
    for task in sorted(tasks, key=lambda t: -(len(t.left) + len(t.right))):
        load, i = heapq.heappop(heap)
        bins[i].append(_Group(tuple(map(_slice, task.left)), tuple(map(_slice, task.right))))
        heapq.heappush(heap, (load + len(task.left) + len(task.right), i))
    return [JoinInputPartition(tuple(b)) for b in bins]


class LancePartitionedJoinReader(DataSourceReader):
    """Plans the group tasks on the driver; each ``read`` joins its groups in Arrow."""

    def __init__(self, options: _JoinOptions) -> None:
        left, right = options.namespaces()
        keys, how = validate_join(left.namespace_schema, right.namespace_schema, options.on, options.how)
        self.options = options
        self.keys = keys
        self.how = how
        self.output = join_output_schema(left.namespace_schema, right.namespace_schema, keys)
        self.left = _SideReader.of(left, options.filter_left)
        self.right = _SideReader.of(right, options.filter_right)
        self._namespaces: tuple[PartitionedNamespace, PartitionedNamespace] | None = (left, right)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_namespaces"] = None
        return state

    def partitions(self) -> list[JoinInputPartition]:
        left, right = self._namespaces or self.options.namespaces()
        plan = plan_namespace_join(
            left,
            right,
            self.keys,
            self.how,
            filter_left=self.options.filter_left,
            filter_right=self.options.filter_right,
        )
        if not plan.compatible:
            raise InvalidInput(f"format {FORMAT!r} cannot join these namespaces: {plan.reason}; use join_partitioned")
        return _pack(plan.tasks, self.options.max_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, JoinInputPartition):
            return
        for group in partition.groups:
            joined = local_join(
                self.left.read(group.left), self.right.read(group.right), self.keys, self.how, self.output
            )
            yield from joined.to_batches()
