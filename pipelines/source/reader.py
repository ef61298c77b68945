"""The ``lance_partitioned`` data source reader: a read plan fixed by the DataFrame's options.

PySpark 4.3 keeps one read plan (the pickled reader and its ``partitions()``) per
DataFrame and hands it to every later scan of that DataFrame, whatever filters those
scans have; ``partitions()`` is not called again. So :class:`LancePartitionedReader`
takes filters only from the DataFrame's own options, which every scan of it shares:

- ``filter``: a predicate the reader prunes with and applies to rows itself, exactly as
  Spark would. It must be one the reader understands completely (comparisons, IN,
  BETWEEN, LIKE, IS [NOT] NULL, NOT, AND, OR of columns and literals); anything else is
  refused with one line pointing to ``.where()`` / ``read_partitioned``.
- ``prune_filter``: a predicate used only to skip partition tables and rows that cannot
  match; the caller applies it with Spark (``read_partitioned`` does ``.where(f)``).
  Parts the pruner does not understand keep everything.

Filters Spark pushes are handed back to Spark. On a Spark that keeps pushdown results
per scan, :class:`PerScanPushdownReader` also prunes with them (see
:mod:`pipelines.source.datasource`, which decides by probing Spark's behaviour).

Each partition table is read at the version ``__manifest`` records for it, its rows
shaped like the namespace by :mod:`pipelines.source.slices`. Tasks get the reader pickled: the
namespace's absolute root, every slice's absolute URI and the storage options travel with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import datasource as ds
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, TableSlice
from partitioning.sql.binding import bind
from partitioning.sql.filters import (
    Cmp,
    Dialect,
    Filter,
    In,
    IsNull,
    Like,
    Not,
    columns_of,
    conjunction,
    is_exactly_understood,
)
from partitioning.sql.from_sql import parse_filter
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanTask
from pipelines.source.slices import read_slice
from pipelines.spark_errors import hide_worker_traceback

__all__ = [
    "LanceInputPartition",
    "LancePartitionedReader",
    "PerScanPushdownReader",
    "dialect_from_options",
    "from_spark_filter",
]

SPLIT_TABLES_BELOW = 64
TARGET_ROWS_PER_SPLIT = 1_000_000
MAX_PARTITIONS = 32
MIN_TASKS = 2
SMALL_TASK_ROWS = 100_000
_CMP = {
    ds.EqualTo: "=",
    ds.EqualNullSafe: "<=>",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}
_LIKE = {ds.StringStartsWith: "starts", ds.StringEndsWith: "ends", ds.StringContains: "contains"}


def dialect_from_options(options: Mapping[str, str]) -> Dialect:
    """The SQL dialect of a read's filter options: Spark's, with ``timeZone`` and ``sqlConf``.

    A data source cannot see the session's time zone, so without ``timeZone`` a timestamp
    written without a zone is refused rather than read in a guessed one."""
    zone = options.get("timezone") or None
    conf = json.loads(options.get("sqlconf") or "{}")
    if not isinstance(conf, dict):
        raise InvalidInput("option sqlConf must be a JSON object")
    return Dialect(
        "spark",
        zone,
        escaped_string_literals=bool(conf.get("escapedStringLiterals", False)),
        double_quoted_identifiers=bool(conf.get("doubleQuotedIdentifiers", False)),
        case_sensitive=bool(conf.get("caseSensitive", False)),
        timestamp_ntz_default=bool(conf.get("timestampNTZ", False)),
        ansi=bool(conf.get("ansi", True)),
    )


def from_spark_filter(f: ds.Filter) -> Filter | None:
    """Our filter AST for one of Spark's pushed filters (None if not used)."""
    attribute = getattr(f, "attribute", None)
    if attribute is not None and len(attribute) != 1:
        return None  # nested field paths are left to Spark
    column = attribute[0] if attribute is not None else ""
    value = getattr(f, "value", None)
    values = value if isinstance(f, ds.In) else (value,)
    if any(_uncertain_value(v) for v in values):
        return None
    if type(f) in _CMP:
        return Cmp(column, _CMP[type(f)], value)
    if isinstance(f, ds.In):
        return In(column, tuple(value))
    if isinstance(f, ds.IsNull):
        return IsNull(column)
    if isinstance(f, ds.IsNotNull):
        return Not(IsNull(column))
    if type(f) in _LIKE:
        return Like(column, _LIKE[type(f)], value)
    if isinstance(f, ds.Not):
        inner = from_spark_filter(f.child)
        return None if inner is None else Not(inner)
    return None


def _uncertain_value(v: Any) -> bool:
    """Values whose meaning Spark's filter serialization may not keep (zones, floats)."""
    import datetime as dt

    return isinstance(v, dt.datetime | float)


@dataclass(frozen=True)
class LanceInputPartition(InputPartition):
    """The table slices one Spark task reads, in order."""

    slices: tuple[TableSlice, ...]

    def __init__(self, slices: tuple[TableSlice, ...]) -> None:
        object.__setattr__(self, "value", slices[0].object_id if slices else None)
        object.__setattr__(self, "slices", slices)


class LancePartitionedReader(DataSourceReader):
    """Plans on the driver from one ``__manifest`` version; opens Lance datasets only in ``read``.

    ``partitions()`` runs in Spark's planner worker, where a log line reaches nobody (and
    repeats per scan), so it logs nothing; :func:`pipelines.read.dataframe.read_partitioned` logs the
    plan once on the driver."""

    def __init__(self, ns: PartitionedNamespace, schema: StructType, options: Mapping[str, str]) -> None:
        self.root = ns.root
        self.manifest_version = ns.manifest_version
        self.namespace_schema = ns.namespace_schema
        self.row_address = (options.get("with_row_address") or "false").lower() == "true"
        self.output = [n for n in schema.names if not (self.row_address and n in (ROW_TABLE, ROW_ADDRESS))]
        self.storage_options = ns.storage_options
        dialect = dialect_from_options(options)
        arrow = ns.namespace_schema.arrow
        exact_text = options.get("filter")
        exact = bind(parse_filter(exact_text, dialect), arrow, dialect)
        if not is_exactly_understood(exact):
            raise InvalidInput(
                f"option filter {exact_text!r} is more than this source evaluates itself (comparisons, IN, BETWEEN, "
                "LIKE, IS NULL, NOT, AND, OR of columns and literals); use .where(...) or read_partitioned(filter=...)"
            )
        self.exact: Filter = exact
        self.prune: Filter = bind(parse_filter(options.get("prune_filter"), dialect, strict=False), arrow, dialect)
        self.object_ids = _object_ids(options.get("object_ids"))
        self.rows_per_split = _positive_int(options, "rows_per_split", TARGET_ROWS_PER_SPLIT)
        self.max_partitions = _positive_int(options, "max_partitions", MAX_PARTITIONS)
        self.planned: tuple[ScanTask, ...] | None = None
        self._ns = ns

    @classmethod
    def of_plan(
        cls,
        ns: PartitionedNamespace,
        schema: StructType,
        options: Mapping[str, str],
        tasks: Sequence[ScanTask],
        *,
        exact: Filter,
        prune: Filter,
    ) -> LancePartitionedReader:
        """A reader of tasks planned already (by the JVM layer's plan call,
        :mod:`pipelines.jvm.source`), with the filters they were planned with: ``exact`` (bound,
        fully understood) is applied to rows, ``prune`` only prunes."""
        reader = cls(ns, schema, {k: v for k, v in options.items() if k not in ("filter", "prune_filter")})
        reader.exact, reader.prune, reader.planned = exact, prune, tuple(tasks)
        return reader

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_ns", None)
        return state

    @property
    def scan_filter(self) -> Filter:
        """What prunes tables and goes (as a superset) into each Lance scan."""
        return conjunction([self.exact, self.prune])

    def _namespace(self) -> PartitionedNamespace:
        """The planning namespace; reloaded at the same manifest version if this reader was pickled."""
        ns = self.__dict__.get("_ns")
        if ns is None:
            ns = PartitionedNamespace.load(self.root, self.storage_options, manifest_version=self.manifest_version)
            self._ns = ns
        return ns

    def partitions(self) -> list[InputPartition]:
        try:
            return self._partitions()
        except PartitioningError:
            hide_worker_traceback()  # our one line, not the planner worker's traceback
            raise

    def _partitions(self) -> list[InputPartition]:
        if self.planned is not None:
            tasks = list(self.planned)
        else:
            tasks = list(self._namespace().plan_scan(self.scan_filter))
        if self.object_ids is not None:
            tasks = [t for t in tasks if t.object_id in self.object_ids]
        if not tasks:
            return [_EMPTY]
        if len(tasks) >= SPLIT_TABLES_BELOW:
            # Many small tables: several per task, so per-task overhead does not dominate.
            per_task = -(-len(tasks) // self.max_partitions)
            slices = [TableSlice.of(t) for t in tasks]
            return [LanceInputPartition(tuple(slices[i : i + per_task])) for i in range(0, len(slices), per_task)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            pieces = [piece for parts in pool.map(self._split, tasks) for piece in parts]
        return [LanceInputPartition(tuple(s for s, _ in group)) for group in _pack(pieces, self.rows_per_split)]

    def _split(self, task: ScanTask) -> list[tuple[TableSlice, int]]:
        """A table as (slice, rows) pieces: one big table is cut into fragment groups."""
        dataset = open_partition_table(
            task.uri, task.read_version, task.read_branch, task.read_tag, self.storage_options
        )
        groups: list[tuple[list[int], int]] = [([], 0)]
        for fragment in dataset.get_fragments():
            count = fragment.metadata.physical_rows or 0
            ids, rows = groups[-1]
            if ids and rows + count > self.rows_per_split:
                groups.append(([], 0))
                ids, rows = groups[-1]
            ids.append(fragment.fragment_id)
            groups[-1] = (ids, rows + count)
        if len(groups) == 1:
            return [(TableSlice.of(task), groups[0][1])]
        return [(TableSlice.of(task, tuple(ids)), rows) for ids, rows in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LanceInputPartition):
            return
        for piece in partition.slices:
            yield from read_slice(
                piece,
                self.namespace_schema,
                self.output,
                self.scan_filter,
                exact=self.exact,
                row_address=self.row_address,
                storage_options=self.storage_options,
            )


class PerScanPushdownReader(LancePartitionedReader):
    """A reader that also prunes with Spark's pushed filters: only for a Spark that keeps
    pushdown results per scan (never PySpark 4.3.0; see :mod:`pipelines.source.datasource`)."""

    def pushFilters(self, filters: list[ds.Filter]) -> Iterator[ds.Filter]:
        arrow = self.namespace_schema.arrow
        accepted = []
        for f in filters:
            ours = from_spark_filter(f)
            bound = bind(ours, arrow) if ours is not None and columns_of(ours) <= set(arrow.names) else None
            if bound is None or not is_exactly_understood(bound):
                yield f
                continue
            accepted.append(bound)
        self.exact = conjunction([self.exact, *accepted])


def _pack(pieces: list[tuple[TableSlice, int]], target: int) -> list[list[tuple[TableSlice, int]]]:
    """Pieces in tasks of about ``target`` rows (small tables share a task), and at least
    :data:`MIN_TASKS` tasks when there are that many pieces and rows to keep them busy."""
    groups: list[list[tuple[TableSlice, int]]] = []
    rows = 0
    for piece in pieces:
        if not groups or (groups[-1] and rows + piece[1] > target):
            groups.append([])
            rows = 0
        groups[-1].append(piece)
        rows += piece[1]
    if len(groups) < MIN_TASKS <= len(pieces) and sum(p[1] for p in pieces) >= MIN_TASKS * SMALL_TASK_ROWS:
        bins: list[list[tuple[TableSlice, int]]] = [[] for _ in range(MIN_TASKS)]
        loads = [0] * MIN_TASKS
        for piece in sorted(pieces, key=lambda p: -p[1]):
            i = loads.index(min(loads))
            bins[i].append(piece)
            loads[i] += piece[1]
        return bins
    return groups


_EMPTY = InputPartition(None)


def _positive_int(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"option {key} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise InvalidInput(f"option {key} must be a positive integer, got {text!r}")
    return value


def _object_ids(text: str | None) -> frozenset[str] | None:
    """The ``object_ids`` option: a JSON list of partition table ids, or None."""
    if text is None:
        return None
    try:
        ids = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"option object_ids must be a JSON list of table ids, got {text[:80]!r}") from exc
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise InvalidInput(f"option object_ids must be a JSON list of table ids, got {text[:80]!r}")
    return frozenset(ids)
