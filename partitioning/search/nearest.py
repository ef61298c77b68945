"""Vector search across a partitioned namespace, without Spark (issue 13).

A search is planned once (:func:`plan_search`): the vector column and the query are
checked, the filter prunes partition tables through ``__manifest``
(:meth:`PartitionedNamespace.plan_scan`), and the metric is read from the partitions'
vector indexes. Each surviving partition is then searched at its ``read_version`` with
Lance's ``nearest`` (its index plus an exact scan of unindexed fragments; ``exact``
scans everything) and the per-partition results are merged to the global top-k
(:func:`merge_top_k`): ordered by ``_distance``, exactly ``min(k, matching rows)`` rows
with ``prefilter`` (the default). NULL vectors are never returned.

The filter is applied exactly: the part Lance evaluates like Spark goes into the Lance
scan (:func:`partitioning.sql.rowfilter.lance_filter`, a superset), the whole filter is then
applied to the rows (:func:`partitioning.sql.rowfilter.arrow_predicate`), and a partition
that came back short is searched again with a larger ``k``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import InvalidInput, PartitioningError, SchemaError, first_line, translate_lance_errors
from partitioning.namespace import PartitionedNamespace
from partitioning.search import knn_scan
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import is_vector_type, vector_dimension
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, TrueFilter, columns_of, is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import arrow_predicate, lance_filter
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanTask
from partitioning.storage.alignment import dataset_columns, reconcile

__all__ = [
    "DISTANCE",
    "METRICS",
    "SearchPlan",
    "merge_top_k",
    "plan_search",
    "query_matrix",
    "resolve_vector_column",
    "search",
    "search_tasks",
]

DISTANCE = "_distance"
METRICS = ("l2", "cosine", "dot")
DEFAULT_METRIC = "l2"
SEARCH_THREADS = 8
PINNED_DATASETS = 256  # partition datasets kept open per process, with their index caches
_T = TypeVar("_T")
_ORDER = "__search_order"


@dataclass(frozen=True)
class SearchPlan:
    """Everything a search needs, fixed at one ``__manifest`` version. Picklable (no datasets)."""

    root: str
    storage_options: Mapping[str, str] | None
    schema: NamespaceSchema
    column: str
    dimension: int
    output: tuple[str, ...]
    filter: Filter
    k: int
    metric: str
    nprobes: int | None
    refine_factor: int | None
    exact: bool
    prefilter: bool
    tasks: tuple[ScanTask, ...]
    manifest_version: int

    @property
    def output_schema(self) -> pa.Schema:
        fields = [pa.field(c, self.schema.arrow.field(c).type) for c in self.output]
        return pa.schema([*fields, pa.field(DISTANCE, pa.float32())])


def vector_columns(schema: pa.Schema) -> list[str]:
    """The namespace's vector columns (fixed-size lists of floats), in schema order."""
    return [f.name for f in schema if is_vector_type(f.type)]


def resolve_vector_column(schema: pa.Schema, column: str | None) -> tuple[str, int]:
    """``(column, dimension)``; ``None`` means the namespace's only vector column."""
    vectors = vector_columns(schema)
    if column is None:
        if len(vectors) == 1:
            return vectors[0], vector_dimension(schema.field(vectors[0]).type)
        if not vectors:
            raise SchemaError("the namespace has no vector column (a fixed-size list of float16/float32/float64)")
        raise InvalidInput(f"the namespace has several vector columns; pass column= one of: {', '.join(vectors)}")
    if column not in schema.names:
        raise SchemaError(f"unknown column {column!r}; columns are: {', '.join(schema.names)}")
    t = schema.field(column).type
    if not is_vector_type(t):
        hint = f"; vector columns are: {', '.join(vectors)}" if vectors else ""
        raise SchemaError(
            f"column {column!r} is {t}, not a vector column (a fixed-size list of float16/float32/float64){hint}"
        )
    return column, vector_dimension(t)


def query_matrix(vectors: Any, column: str, dimension: int) -> np.ndarray:
    """Query vectors as an ``(n, dimension)`` float32 matrix (one vector is ``n = 1``)."""
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"query vector for column {column!r} is not a list of numbers: {first_line(exc)}") from exc
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        got = matrix.shape[-1] if matrix.ndim else 0
        raise InvalidInput(f"query vector has dimension {got}, but column {column!r} has dimension {dimension}")
    if not np.isfinite(matrix).all():
        raise InvalidInput(f"query vector for column {column!r} holds NaN or infinite values")
    return matrix


# re-rank 10k index candidates per partition by exact distance (lancedb's refine_factor)
DEFAULT_REFINE_FACTOR = 10


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise InvalidInput(f"{name} must be a positive integer, got {value!r}")


def plan_search(
    ns: PartitionedNamespace,
    *,
    k: int = 10,
    column: str | None = None,
    filter: str | Filter | None = None,
    metric: str | None = None,
    nprobes: int | None = None,
    refine_factor: int | None = None,
    exact: bool = False,
    columns: Sequence[str] | None = None,
    prefilter: bool = True,
    dialect: Dialect | None = None,
) -> SearchPlan:
    """Check the arguments (one line each) and plan the partition tables to search.

    ``filter`` is SQL in ``dialect`` (default: DataFusion SQL, UTC) and must be one this
    module evaluates exactly (comparisons, IN, BETWEEN, LIKE, IS NULL, NOT, AND, OR of
    columns and literals). ``metric`` defaults to the partitions' index metric (else l2);
    one that differs from an index's metric is refused unless ``exact``.

    ``refine_factor`` (default :data:`DEFAULT_REFINE_FACTOR`): an index search fetches
    ``refine_factor * k`` candidates per partition and ranks them by their exact distance,
    so ``_distance`` is exact and the order right among the candidates; ``0`` turns it off
    (PQ's approximate distances, which can misorder the top rows).
    """
    arrow = ns.schema
    name, dimension = resolve_vector_column(arrow, column)
    _positive("k", k)
    _positive("nprobes", nprobes)
    if refine_factor is None:
        refine_factor = DEFAULT_REFINE_FACTOR
    elif refine_factor == 0 and not isinstance(refine_factor, bool):
        refine_factor = None  # off: the index's approximate distances and order
    else:
        _positive("refine_factor", refine_factor)
    if metric is not None and (not isinstance(metric, str) or metric.lower() not in METRICS):
        raise InvalidInput(f"unknown metric {metric!r}; metrics are: {', '.join(METRICS)}")
    output = tuple(arrow.names) if columns is None else tuple(columns)
    for c in output:
        if c not in arrow.names:
            raise SchemaError(f"unknown column {c!r} in columns; columns are: {', '.join(arrow.names)}")
    if DISTANCE in output:
        raise InvalidInput(f"column {DISTANCE!r} is the search's distance; the namespace cannot have one")
    d = dialect or Dialect.datafusion("UTC")
    parsed = parse_filter(filter, d) if isinstance(filter, str) or filter is None else filter
    bound = bind(parsed, arrow, d)
    if not is_exactly_understood(bound):
        raise InvalidInput(
            f"search filter {filter!r} is more than search evaluates (comparisons, IN, BETWEEN, LIKE, IS NULL, NOT, "
            "AND, OR of columns and literals)"
        )
    tasks = tuple(ns.plan_scan(bound, dialect=d))
    chosen = _metric(ns, tasks, name, None if metric is None else metric.lower(), exact)
    return SearchPlan(
        ns.root,
        ns.storage_options,
        ns.namespace_schema,
        name,
        dimension,
        output,
        bound,
        k,
        chosen,
        nprobes,
        refine_factor,
        exact,
        prefilter,
        tasks,
        ns.manifest_version,
    )


def _open_task(task: ScanTask, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The partition's dataset as the manifest pins it. A pinned version never changes, so it
    is opened once per process (:func:`_pinned`): the dataset object keeps Lance's index
    cache, without which every search reads the index from storage again (3x slower).
    Branch and tag reads may move and are opened each time."""
    if task.read_version is None or task.read_branch is not None or task.read_tag is not None:
        return open_partition_table(task.uri, task.read_version, task.read_branch, task.read_tag, storage_options)
    return _pinned(task.uri, task.read_version, tuple(sorted((storage_options or {}).items())))


@functools.lru_cache(maxsize=PINNED_DATASETS)
def _pinned(uri: str, version: int, options: tuple[tuple[str, str], ...]) -> lance.LanceDataset:
    return open_partition_table(uri, version, None, None, dict(options) or None)


def _open(plan: SearchPlan, task: ScanTask) -> lance.LanceDataset:
    return _open_task(task, plan.storage_options)


def index_metric(dataset: lance.LanceDataset, column: str) -> str | None:
    """The metric of the dataset's vector index on ``column`` (its dataset name), if any."""
    with translate_lance_errors(f"list indexes of {dataset.uri}"):
        for index in dataset.describe_indices():
            if list(index.field_names) != [column] or "Vector" not in index.type_url:
                continue
            found = (index.details or {}).get("metric_type")  # index_stats costs ~30 ms a partition
            if not isinstance(found, str):
                indices = dataset.stats.index_stats(index.name).get("indices") or [{}]
                found = indices[0].get("metric_type")
            if isinstance(found, str):
                return found.lower()
    return None


def _metric(ns: PartitionedNamespace, tasks: Sequence[ScanTask], column: str, metric: str | None, exact: bool) -> str:
    def one(task: ScanTask) -> tuple[str, str | None]:
        dataset = _open_task(task, ns.storage_options)
        mapping = dataset_columns(dataset.schema, ns.namespace_schema)
        return task.object_id, index_metric(dataset, mapping[column]) if column in mapping else None

    found = {oid: m for oid, m in _map(one, tasks, SEARCH_THREADS) if m is not None}
    if not found:
        return metric or DEFAULT_METRIC
    if metric is None:
        kinds = sorted(set(found.values()))
        if len(kinds) > 1:
            raise InvalidInput(
                f"the indexes on column {column!r} use different metrics ({', '.join(kinds)}); pass metric="
            )
        return kinds[0]
    if not exact:
        for oid, m in sorted(found.items()):
            if m != metric:
                raise InvalidInput(
                    f"metric {metric!r} does not match the {m!r} index on column {column!r} of partition table {oid}; "
                    f"use metric={m!r}, or exact=True for a brute-force {metric} search"
                )
    return metric


def _search_partition(plan: SearchPlan, task: ScanTask, queries: np.ndarray) -> list[pa.Table]:
    """This partition's top-k per query (output columns + ``_distance``), ordered by distance.

    A batch of queries over a partition small enough for :mod:`partitioning.search.knn_scan` is
    answered exactly from one read of its vectors; otherwise each query is a Lance search."""
    empty = plan.output_schema.empty_table()
    dataset = _open(plan, task)
    mapping = dataset_columns(dataset.schema, plan.schema)
    if plan.column not in mapping:
        return [empty] * len(queries)  # the column was added after this partition was written: all NULL
    exact = None if isinstance(plan.filter, TrueFilter) else plan.filter
    needed = [c for c in plan.schema.arrow.names if c in set(plan.output) | (columns_of(exact) if exact else set())]
    where = lance_filter(plan.filter, plan.schema.arrow, mapping)
    predicate = arrow_predicate(exact, plan.schema.arrow) if exact is not None else None
    rows = dataset.count_rows()
    if len(queries) > 1 and plan.prefilter and knn_scan.fits(rows, plan.dimension, plan.metric):
        wanted = [c for c in plan.schema.arrow.names if c in {*needed, plan.column}]
        with translate_lance_errors(f"search partition table {task.object_id}"):
            raw = dataset.to_table(columns=[mapping[c] for c in wanted if c in mapping], filter=where)
        table = reconcile(raw, mapping, wanted, plan.schema, task.object_id)
        if predicate is not None:
            table = table.filter(predicate)
        table = table.filter(pc.is_valid(table.column(plan.column)))
        found = knn_scan.top_k(table.column(plan.column).combine_chunks(), queries, plan.k, plan.metric)
        return [t.select([*plan.output, DISTANCE]) for t in knn_scan.take_rows(table, found)]
    out = []
    for q in queries:
        fetch = plan.k
        while True:
            nearest: dict[str, Any] = {"column": mapping[plan.column], "q": q, "k": fetch, "metric": plan.metric}
            nearest["use_index"] = not plan.exact
            if plan.nprobes is not None:
                nearest["nprobes"] = plan.nprobes
            if plan.refine_factor is not None:
                nearest["refine_factor"] = plan.refine_factor
            with translate_lance_errors(f"search partition table {task.object_id}"):
                raw = dataset.to_table(
                    columns=[mapping[c] for c in needed if c in mapping],
                    nearest=nearest,
                    filter=where,
                    prefilter=plan.prefilter,
                )
            table = reconcile(raw, mapping, needed, plan.schema, task.object_id)
            table = table.append_column(DISTANCE, raw.column(DISTANCE).cast(pa.float32()))
            table = table.filter(pc.is_finite(table.column(DISTANCE)))
            if predicate is not None:
                table = table.filter(predicate)
            if table.num_rows >= plan.k or raw.num_rows < fetch or fetch >= rows or not plan.prefilter:
                break
            fetch = min(fetch * 4, rows)
        out.append(merge_top_k([table.select([*plan.output, DISTANCE])], plan.k))
    return out


def merge_top_k(tables: Sequence[pa.Table], k: int) -> pa.Table:
    """The ``k`` rows of smallest ``_distance``; ties keep the order of ``tables`` and their rows."""
    table = pa.concat_tables(list(tables)) if len(tables) > 1 else tables[0]
    if table.num_rows == 0:
        return table
    table = table.append_column(_ORDER, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    order = pc.sort_indices(table, sort_keys=[(DISTANCE, "ascending"), (_ORDER, "ascending")])
    return table.take(order.slice(0, k)).drop_columns([_ORDER])


def _map(fn: Callable[[ScanTask], _T], tasks: Sequence[ScanTask], threads: int) -> list[_T]:
    """``fn`` over ``tasks`` in a thread pool; in this thread for one task (a pool costs more
    than a pruned search of one partition)."""
    if len(tasks) <= 1:
        return [fn(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(tasks)))) as pool:
        return list(pool.map(fn, tasks))


def search_tasks(
    plan: SearchPlan, tasks: Sequence[ScanTask], queries: np.ndarray, *, threads: int = SEARCH_THREADS
) -> list[pa.Table]:
    """Each query's top-k over ``tasks`` (searched in a thread pool), in the order of ``queries``."""
    if not tasks:
        return [plan.output_schema.empty_table() for _ in queries]
    try:
        per_task = _map(lambda t: _search_partition(plan, t, queries), tasks, threads)
    except PartitioningError:
        raise
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        raise PartitioningError(f"search: {first_line(exc)}") from exc
    return [merge_top_k([found[i] for found in per_task], plan.k) for i in range(len(queries))]


def search(
    ns: PartitionedNamespace | str,
    vector: Any,
    *,
    k: int = 10,
    column: str | None = None,
    filter: str | None = None,
    metric: str | None = None,
    nprobes: int | None = None,
    refine_factor: int | None = None,
    exact: bool = False,
    columns: Sequence[str] | None = None,
    prefilter: bool = True,
    dialect: Dialect | None = None,
    manifest_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The global top-k rows nearest ``vector`` (selected columns + ``_distance``), searched here."""
    if isinstance(ns, str):
        ns = PartitionedNamespace.load(ns, storage_options, manifest_version=manifest_version)
    plan = plan_search(
        ns,
        k=k,
        column=column,
        filter=filter,
        metric=metric,
        nprobes=nprobes,
        refine_factor=refine_factor,
        exact=exact,
        columns=columns,
        prefilter=prefilter,
        dialect=dialect,
    )
    return search_tasks(plan, plan.tasks, query_matrix(vector, plan.column, plan.dimension))[0]
