"""Reads: the data source reader, ``read_partitioned``, and the read-side schema rules.

Each partition table is read at the version ``__manifest`` records for it, so a
reader never sees a write whose manifest commit has not happened. Old partitions
are reconciled with the namespace schema (seed 000 section 4): a missing column
reads as NULL, a column only in the partition is ignored, a different type is cast
(an impossible cast names the column and partition). Columns are matched by
``lance:field_id`` where the partition records it, so renamed columns still line up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import datasource as ds
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from partitioning.errors import SchemaError, translate_lance_errors
from partitioning.filters import (
    Cmp,
    Filter,
    In,
    IsNull,
    Like,
    Not,
    TrueFilter,
    columns_of,
    conjunction,
    parse_filter,
    to_arrow_expression,
    to_sql,
)
from partitioning.namespace import PartitionedNamespace, open_partition_table
from partitioning.scan import ScanTask
from partitioning.schema import NamespaceSchema
from partitioning.tables import dataset_columns, reconcile
from pipelines.schema import spark_schema

__all__ = ["LanceInputPartition", "LancePartitionedReader", "TableSlice", "read_partitioned", "read_schema"]

log = logging.getLogger("lance_partitioned")
SPLIT_TABLES_BELOW = 64
TARGET_ROWS_PER_SPLIT = 1_000_000
MAX_PARTITIONS = 32
_CMP = {
    ds.EqualTo: "=",
    ds.EqualNullSafe: "<=>",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}
_LIKE = {ds.StringStartsWith: "starts", ds.StringEndsWith: "ends", ds.StringContains: "contains"}


def read_schema(schema: NamespaceSchema, columns: str | Sequence[str] | None = None) -> StructType:
    """The Spark schema of a read: the namespace schema, or the named subset in that order."""
    full = spark_schema(schema)
    if not columns:
        return full
    names = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else list(columns)
    unknown = [c for c in names if c not in full.names]
    if unknown:
        raise SchemaError(f"unknown column(s) {', '.join(map(repr, unknown))}; columns are: {', '.join(full.names)}")
    return StructType([full[c] for c in names])


def from_spark_filter(f: ds.Filter) -> Filter | None:
    """Our filter AST for one of Spark's pushed filters (None if not understood)."""
    attribute = getattr(f, "attribute", None)
    if attribute is not None and len(attribute) != 1:
        return None  # nested field paths are left to Spark
    column = attribute[0] if attribute is not None else ""
    if type(f) in _CMP:
        return Cmp(column, _CMP[type(f)], f.value)  # type: ignore[attr-defined]
    if isinstance(f, ds.In):
        return In(column, tuple(f.value))
    if isinstance(f, ds.IsNull):
        return IsNull(column)
    if isinstance(f, ds.IsNotNull):
        return Not(IsNull(column))
    if type(f) in _LIKE:
        return Like(column, _LIKE[type(f)], f.value)  # type: ignore[attr-defined]
    if isinstance(f, ds.Not):
        inner = from_spark_filter(f.child)
        return None if inner is None else Not(inner)
    return None


def _exact_in_lance(f: Filter, schema: NamespaceSchema) -> bool:
    """Filters whose Lance-scan result is exactly Spark's (floats and binary stay with Spark)."""
    for name in columns_of(f):
        idx = schema.arrow.get_field_index(name)
        if idx < 0:
            return False
        t = schema.arrow.field(idx).type
        if pa.types.is_floating(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_nested(t):
            return False
    return to_sql(f) is not None


@dataclass(frozen=True)
class TableSlice:
    """One partition table (or a group of its fragments) at a fixed version. Picklable."""

    object_id: str
    uri: str
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    fragment_ids: tuple[int, ...] | None = None

    @classmethod
    def of(cls, task: ScanTask, fragment_ids: tuple[int, ...] | None = None) -> TableSlice:
        return cls(task.object_id, task.uri, task.read_version, task.read_branch, task.read_tag, fragment_ids)


@dataclass(frozen=True)
class LanceInputPartition(InputPartition):
    """The table slices one Spark task reads, in order."""

    slices: tuple[TableSlice, ...]

    def __init__(self, slices: tuple[TableSlice, ...]) -> None:
        object.__setattr__(self, "value", slices[0].object_id if slices else None)
        object.__setattr__(self, "slices", slices)


class LancePartitionedReader(DataSourceReader):
    """Plans on the driver from one ``__manifest`` version; opens Lance datasets only in ``read``."""

    def __init__(self, ns: PartitionedNamespace, schema: StructType, options: Mapping[str, str]) -> None:
        self.root = ns.root
        self.manifest_version = ns.manifest_version
        self.namespace_schema = ns.namespace_schema
        self.output = list(schema.names)
        self.storage_options = ns.storage_options
        extra = parse_filter(options.get("filter"))
        self.filters: list[Filter] = [] if isinstance(extra, TrueFilter) else [extra]
        self.lance_filters = [f for f in self.filters if _exact_in_lance(f, self.namespace_schema)]
        self.rows_per_split = int(options.get("rows_per_split", TARGET_ROWS_PER_SPLIT))
        self.max_partitions = max(1, int(options.get("max_partitions", MAX_PARTITIONS)))
        self._ns = ns

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_ns", None)
        return state

    def pushFilters(self, filters: list[ds.Filter]) -> Iterator[ds.Filter]:
        for f in filters:
            ours = from_spark_filter(f)
            if ours is None:
                yield f
                continue
            self.filters.append(ours)
            if _exact_in_lance(ours, self.namespace_schema):
                self.lance_filters.append(ours)
            else:
                yield f

    def _namespace(self) -> PartitionedNamespace:
        """The planning namespace; reloaded at the same manifest version if this reader was pickled."""
        ns = self.__dict__.get("_ns")
        if ns is None:
            ns = PartitionedNamespace.load(self.root, self.storage_options, manifest_version=self.manifest_version)
            self._ns = ns
        return ns

    def partitions(self) -> list[LanceInputPartition]:
        plan = self._namespace().plan_scan(conjunction(self.filters))
        log.warning(plan.summary)
        tasks = list(plan)
        if not tasks:
            return [_EMPTY]
        if len(tasks) >= SPLIT_TABLES_BELOW:
            # Many small tables: several per task, so per-task overhead does not dominate.
            per_task = -(-len(tasks) // self.max_partitions)
            slices = [TableSlice.of(t) for t in tasks]
            return [LanceInputPartition(tuple(slices[i : i + per_task])) for i in range(0, len(slices), per_task)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            return [LanceInputPartition((s,)) for parts in pool.map(self._split, tasks) for s in parts]

    def _split(self, task: ScanTask) -> list[TableSlice]:
        """Group a table's fragments so that one big table is read by several tasks."""
        dataset = open_partition_table(
            task.uri, task.read_version, task.read_branch, task.read_tag, self.storage_options
        )
        groups: list[list[int]] = [[]]
        rows = 0
        for fragment in dataset.get_fragments():
            count = fragment.count_rows()
            if groups[-1] and rows + count > self.rows_per_split:
                groups.append([])
                rows = 0
            groups[-1].append(fragment.fragment_id)
            rows += count
        if len(groups) == 1:
            return [TableSlice.of(task)]
        return [TableSlice.of(task, tuple(g)) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LanceInputPartition):
            return
        for piece in partition.slices:
            dataset = open_partition_table(
                piece.uri, piece.read_version, piece.read_branch, piece.read_tag, self.storage_options
            )
            yield from read_table(dataset, piece, self.namespace_schema, self.output, self.lance_filters)


_EMPTY = InputPartition(None)


def read_table(
    dataset: lance.LanceDataset,
    partition: TableSlice,
    schema: NamespaceSchema,
    output: Sequence[str],
    filters: Sequence[Filter],
) -> Iterator[pa.RecordBatch]:
    """Stream one partition's rows as namespace-shaped batches, filtered."""
    mapping = dataset_columns(dataset.schema, schema)
    f = conjunction(list(filters))
    needed = [c for c in schema.arrow.names if c in set(output) | columns_of(f)]
    renamed = any(mapping.get(c, c) != c for c in columns_of(f))
    pushable = not isinstance(f, TrueFilter) and not renamed and columns_of(f) <= set(mapping)
    scan_columns = [mapping[c] for c in needed if c in mapping]
    fragments = None
    if partition.fragment_ids is not None:
        fragments = [dataset.get_fragment(i) for i in partition.fragment_ids]
    with translate_lance_errors(f"scan partition table {partition.object_id}"):
        scanner = dataset.scanner(
            columns=scan_columns, filter=to_sql(f) if pushable else None, fragments=fragments, batch_size=65_536
        )
        batches = scanner.to_batches()
    out_schema = pa.schema([schema.arrow.field(c) for c in output])
    for batch in batches:
        table = reconcile(pa.Table.from_batches([batch]), mapping, needed, schema, partition.object_id)
        if not pushable and not isinstance(f, TrueFilter):
            table = table.filter(to_arrow_expression(f))
        yield from table.select(list(output)).cast(out_schema).to_batches()


def read_partitioned(
    spark: SparkSession,
    root: str,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    manifest_version: int | None = None,
) -> DataFrame:
    """The namespace as a DataFrame; ``filter`` is SQL, pruned through ``__manifest``."""
    from pipelines.datasource import register_data_source

    register_data_source(spark)
    reader = spark.read.format("lance_partitioned")
    if manifest_version is not None:
        reader = reader.option("versionAsOf", str(manifest_version))
    parsed = parse_filter(filter)  # a bad filter fails here, with one line
    names = PartitionedNamespace.load(root, manifest_version=manifest_version).schema.names
    for what, wanted in (("filter", columns_of(parsed)), ("columns", set(columns or ()))):
        unknown = sorted(wanted - set(names))
        if unknown:
            raise SchemaError(f"unknown column {unknown[0]!r} in {what}; columns are: {', '.join(names)}")
    if columns:
        wanted = list(columns) + sorted(columns_of(parsed) - set(columns))
        reader = reader.option("columns", ",".join(wanted))
    if filter:
        reader = reader.option("filter", filter)
    df = reader.load(root)
    if filter:
        df = df.filter(filter)
    return df.select(*columns) if columns else df
