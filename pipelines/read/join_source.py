"""The ``lance_partitioned_join`` Python Data Source: the shuffle-free scan of a storage-partitioned join.

Its options (parsed into :class:`_JoinOptions`) name both namespaces at fixed
``__manifest`` versions, the keys, the join type and each side's filter. The reader plans the
partition groups on the driver and spreads them over the input partitions; each task reads
both sides of its groups (:func:`pipelines.source.slices.read_table`) and joins them in Arrow.
:func:`pipelines.read.join.join_partitioned` decides between this scan and Spark's own join.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace, PartitionTable
from partitioning.plan.join import JoinTask, exact_side_filter, plan_namespace_join
from partitioning.plan.join_columns import JoinType, check_suffixes, join_output_schema, shared_columns, validate_join
from partitioning.plan.join_local import local_join
from partitioning.plan.table_rows import TableSlice, read_table
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import spark_facing_schema
from partitioning.sql.filters import Dialect, Filter, TrueFilter
from partitioning.state.partition_tables import open_partition_table
from partitioning.storage.roots import storage_options_from
from pipelines.columns.schema import spark_schema
from pipelines.shared_roots import check_source_root
from pipelines.source.reader import dialect_from_options

__all__ = ["LancePartitionedJoinDataSource"]

FORMAT = "lance_partitioned_join"
MAX_PARTITIONS = 32


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

    # Set by join_partitioned's registration (pipelines.session_calls.session_bound).
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
