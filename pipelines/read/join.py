"""Storage-partitioned join (SPJ) of two partitioned namespaces, as one shuffle-free scan.

:func:`join_partitioned` plans the join with :mod:`partitioning.plan.join` on the
driver. When the two sides are partitioned compatibly on the join keys, the result is
read from the ``lance_partitioned_join`` Python Data Source: each input partition
holds whole partition groups (the left and right partition tables whose rows can
match), and ``read()`` reads both sides of each group with the side's filter and
joins them locally in Arrow. Spark's physical plan is then a single scan, with no
Exchange for the join inputs. Otherwise the join is Spark's own shuffle (or
broadcast) join of :func:`pipelines.read.dataframe.read_partitioned` of both sides, and one
log line on the ``lance_partitioned`` logger says why SPJ was not used.

Both paths read each namespace at the same ``__manifest`` version, and both return
Spark's ``left.join(right, on=[...], how=...)`` columns: the keys once (for a full
join the left key if not NULL, else the right), the left non-key columns, then the
right non-key columns. A non-key column name on both sides appears twice, as in
Spark, unless ``suffixes=`` renames both copies.

A Python Data Source cannot return two columns of one name (PySpark hands its Arrow
batches back by column name), so the SPJ scan names such columns with internal
suffixes and :func:`join_partitioned` renames them back with ``toDF``, a projection
that adds no Exchange.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace, PartitionTable, open_partition_table
from partitioning.plan.join import (
    JoinPlan,
    JoinTask,
    JoinType,
    check_suffixes,
    distinct_suffixes,
    exact_side_filter,
    join_output_names,
    join_output_schema,
    local_join,
    plan_namespace_join,
    shared_columns,
    validate_join,
)
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import spark_facing_schema
from partitioning.sql.filters import Dialect, Filter, TrueFilter
from partitioning.storage.roots import storage_option_pairs, storage_options_from
from pipelines.columns.schema import spark_schema
from pipelines.read.dataframe import TableSlice, dialect_options, read_partitioned, read_table, session_dialect
from pipelines.read.reader import dialect_from_options
from pipelines.session import check_source_root, default_parallelism, driver_root, register_bound

__all__ = ["LancePartitionedJoinDataSource", "join_partitioned", "join_partitioned_with_plan"]

log = logging.getLogger("lance_partitioned")
FORMAT = "lance_partitioned_join"
MAX_PARTITIONS = 32


def join_partitioned(
    spark: SparkSession,
    left_root: str,
    right_root: str,
    on: str | Sequence[str],
    how: JoinType = "inner",
    *,
    filter_left: str | None = None,
    filter_right: str | None = None,
    suffixes: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """``left JOIN right USING (on)`` of two partitioned namespaces, without a shuffle when possible.

    The result has exactly the columns of Spark's ``left.join(right, on=[...], how=how)``
    of the two (filtered) namespaces: the keys once, the left non-key columns, then the
    right ones. A non-key column name present on both sides (ignoring case, as Spark
    does) therefore appears twice by default (``suffixes=None``), which Spark can show,
    collect and write as CSV but cannot write as parquet or reference by name; pass
    ``suffixes=("_left", "_right")`` to rename both copies (``a`` becomes ``a_left`` and
    ``a_right``; other columns keep their names). Suffixes that would still leave two
    equal names are refused.

    ``how`` is ``inner``, ``left``, ``right`` or ``full``; ``filter_left`` / ``filter_right``
    are SQL filters applied to each side before the join (and used to prune its
    partition tables). The storage-partitioned join is used when at least one join key
    has the same type on both sides and a common grouping of the partition fields on it
    in every spec version present on both sides (after pruning); see
    :mod:`partitioning.plan.join`. If any version is incompatible the WHOLE join falls
    back to Spark's join: an outer join's unmatched rows can only be decided against the
    whole other side, so a per-version fallback would only be sound for inner joins.

    ``storage_options`` (Lance's, e.g. ``aws_endpoint``) open both namespaces and reach
    the tasks. Relative roots are made absolute here, and refused on a cluster whose
    executors do not share this machine's files.
    """
    df, _ = join_partitioned_with_plan(
        spark,
        left_root,
        right_root,
        on,
        how,
        filter_left=filter_left,
        filter_right=filter_right,
        suffixes=suffixes,
        storage_options=storage_options,
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
    suffixes: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[DataFrame, JoinPlan]:
    """:func:`join_partitioned`, also returning the plan (``plan.compatible``, ``plan.reason``)."""
    left_root, right_root = driver_root(spark, left_root), driver_root(spark, right_root)
    left = PartitionedNamespace.load(left_root, storage_options)
    right = PartitionedNamespace.load(right_root, storage_options)
    validate_join(left.namespace_schema, right.namespace_schema, on, how, suffixes)
    dialect = session_dialect(spark)
    plan = plan_namespace_join(
        left, right, on, how, filter_left=filter_left, filter_right=filter_right, dialect=dialect
    )
    pair = check_suffixes(suffixes)
    names = join_output_names(left.namespace_schema, right.namespace_schema, plan.on, pair)
    if not plan.compatible:
        log.warning(plan.summary)
        lhs = read_partitioned(
            spark,
            left_root,
            filter=filter_left,
            manifest_version=left.manifest_version,
            storage_options=storage_options,
        )
        rhs = read_partitioned(
            spark,
            right_root,
            filter=filter_right,
            manifest_version=right.manifest_version,
            storage_options=storage_options,
        )
        if pair is not None:
            shared = {c.lower() for c in shared_columns(left.namespace_schema, right.namespace_schema, plan.on)}
            lhs, rhs = _suffixed(lhs, shared, plan.on, pair[0]), _suffixed(rhs, shared, plan.on, pair[1])
        return lhs.join(rhs, on=list(plan.on), how=plan.how), plan
    log.info(plan.summary)
    register_bound(spark, LancePartitionedJoinDataSource)
    options = {
        "max_partitions": str(_default_partitions(spark)),
        "left": left_root,
        "right": right_root,
        "left_version": str(left.manifest_version),
        "right_version": str(right.manifest_version),
        "on": json.dumps(list(plan.on)),
        "how": plan.how,
        **dialect_options(dialect),
        **storage_option_pairs(storage_options),
    }
    if filter_left:
        options["filter_left"] = filter_left
    if filter_right:
        options["filter_right"] = filter_right
    scan_suffixes = pair
    if scan_suffixes is None and len(set(names)) < len(names):
        scan_suffixes = distinct_suffixes(left.namespace_schema, right.namespace_schema, plan.on)
    if scan_suffixes is not None:
        options["suffixes"] = json.dumps(list(scan_suffixes))
    df = spark.read.format(FORMAT).options(**options).load()
    return (df if df.columns == names else df.toDF(*names)), plan


def _suffixed(df: DataFrame, shared: set[str], on: Sequence[str], suffix: str) -> DataFrame:
    """``df`` with ``suffix`` added to its non-key columns named (ignoring case) in ``shared``."""
    renames = {c: c + suffix for c in df.columns if c not in on and c.lower() in shared}
    return df.withColumnsRenamed(renames) if renames and suffix else df


def _default_partitions(spark: SparkSession) -> int:
    """Twice the cluster's cores: enough tasks to balance groups of different sizes, few enough
    that per-task overhead does not dominate small joins."""
    slots = default_parallelism(spark)
    return MAX_PARTITIONS if slots is None else max(1, 2 * slots)


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
    suffixes: tuple[str, str] | None = None
    dialect: Dialect = field(default_factory=Dialect)
    storage_options: Mapping[str, str] | None = None

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
        lv, rv, sx = get("left_version"), get("right_version"), get("suffixes")
        try:
            suffixes = check_suffixes(json.loads(sx)) if sx else None
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"option suffixes must be a JSON list of two strings, got {sx!r}") from exc
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
            suffixes=suffixes,
            dialect=dialect_from_options({k.lower(): v for k, v in options.items()}),
            storage_options=storage_options_from(options),
        )

    def output(
        self, left: PartitionedNamespace, right: PartitionedNamespace
    ) -> tuple[tuple[str, ...], JoinType, pa.Schema]:
        """The keys, the join type and the output schema, whose names must be distinct."""
        keys, how = validate_join(left.namespace_schema, right.namespace_schema, self.on, self.how, self.suffixes)
        output = join_output_schema(left.namespace_schema, right.namespace_schema, keys, self.suffixes)
        if len(set(output.names)) < len(output.names):
            shared = shared_columns(left.namespace_schema, right.namespace_schema, keys)
            raise InvalidInput(
                f"format {FORMAT!r} cannot return two columns of one name ({', '.join(map(repr, shared))} on both "
                'sides): pass the option suffixes, e.g. \'["_left", "_right"]\', or use join_partitioned, which '
                "returns Spark's duplicate columns"
            )
        return keys, how, spark_facing_schema(output)

    def namespaces(self) -> tuple[PartitionedNamespace, PartitionedNamespace]:
        return (
            PartitionedNamespace.load(self.left, self.storage_options, manifest_version=self.left_version),
            PartitionedNamespace.load(self.right, self.storage_options, manifest_version=self.right_version),
        )


class LancePartitionedJoinDataSource(DataSource):
    """``spark.read.format("lance_partitioned_join").options(left=, right=, on=, how=, ...).load()``.

    Options: ``left`` / ``right`` (namespace roots), ``on`` (JSON list of keys), ``how``,
    ``filter_left`` / ``filter_right``, ``left_version`` / ``right_version`` (``__manifest``
    versions), ``suffixes`` (JSON list of two strings, see :func:`join_partitioned`; needed
    when a non-key column name is on both sides, since a data source cannot return two
    columns of one name), ``max_partitions`` and ``storage.<key>`` (a Lance storage option,
    for both sides). It only reads compatibly partitioned
    sides; :func:`join_partitioned` chooses between it and Spark's join.
    """

    # Set by join_partitioned's registration (pipelines.session.session_bound).
    session_master: ClassVar[str | None] = None
    session_connect: ClassVar[bool] = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self) -> _JoinOptions:
        opts = _JoinOptions.parse(self.options)
        for root in (opts.left, opts.right):
            check_source_root(root, self.session_master, self.session_connect)
        return opts

    def schema(self) -> StructType:
        opts = self._options()
        return spark_schema(opts.output(*opts.namespaces())[2])

    def reader(self, schema: StructType) -> LancePartitionedJoinReader:
        return LancePartitionedJoinReader(self._options())


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
    """Reads one side's tables of a group, with its filter applied exactly as Spark would."""

    schema: NamespaceSchema
    filter: Filter
    storage_options: Mapping[str, str] | None

    @classmethod
    def of(cls, ns: PartitionedNamespace, filter_sql: str | None, dialect: Dialect) -> _SideReader:
        bound = exact_side_filter(ns.namespace_schema, filter_sql, dialect)
        if bound is None:
            raise InvalidInput(
                f"format {FORMAT!r} applies side filters itself and cannot evaluate {filter_sql!r}; "
                "use join_partitioned"
            )
        return cls(ns.namespace_schema, bound, ns.storage_options)

    def read(self, slices: Sequence[TableSlice]) -> pa.Table:
        output = self.schema.arrow.names
        out_schema = spark_facing_schema(pa.schema([self.schema.arrow.field(c) for c in output]))
        exact = None if isinstance(self.filter, TrueFilter) else self.filter
        batches: list[pa.RecordBatch] = []
        for piece in slices:
            dataset = open_partition_table(
                piece.uri, piece.read_version, piece.read_branch, piece.read_tag, self.storage_options
            )
            batches.extend(read_table(dataset, piece, self.schema, output, self.filter, exact=exact))
        return pa.Table.from_batches(batches, schema=out_schema)


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
        self.options = options
        self.keys, self.how, self.output = options.output(left, right)
        self.left = _SideReader.of(left, options.filter_left, options.dialect)
        self.right = _SideReader.of(right, options.filter_right, options.dialect)
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
            dialect=self.options.dialect,
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
