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

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import InvalidInput, PartitioningError, first_line, translate_lance_errors
from partitioning.namespace import PartitionedNamespace
from partitioning.search import knn_scan, scanned
from partitioning.search.pinned import index_metric, is_pinned, open_task, options_key, pinned_metric
from partitioning.search.query_args import (
    DEFAULT_METRIC,
    DEFAULT_REFINE_FACTOR,
    DISTANCE,
    METRICS,
    output_columns,
    positive,
    query_matrix,
    resolve_vector_column,
)
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, TrueFilter, columns_of, is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import arrow_predicate, lance_filter
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

SEARCH_THREADS = 8
BATCH = 32  # queries from which small partitions are scored in several threads
_T = TypeVar("_T")
_A = TypeVar("_A")
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
    keep_vectors: bool = True  # small partitions' vectors stay in this process's cache

    @property
    def output_schema(self) -> pa.Schema:
        fields = [pa.field(c, self.schema.arrow.field(c).type) for c in self.output]
        return pa.schema([*fields, pa.field(DISTANCE, pa.float32())])


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
    positive("k", k)
    positive("nprobes", nprobes)
    if refine_factor is None:
        refine_factor = DEFAULT_REFINE_FACTOR
    elif refine_factor == 0 and not isinstance(refine_factor, bool):
        refine_factor = None  # off: the index's approximate distances and order
    else:
        positive("refine_factor", refine_factor)
    if metric is not None and (not isinstance(metric, str) or metric.lower() not in METRICS):
        raise InvalidInput(f"unknown metric {metric!r}; metrics are: {', '.join(METRICS)}")
    output = output_columns(arrow, columns, DISTANCE, "distance")
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


def _metric(ns: PartitionedNamespace, tasks: Sequence[ScanTask], column: str, metric: str | None, exact: bool) -> str:
    def one(task: ScanTask) -> tuple[str, str | None]:
        dataset = open_task(task, ns.storage_options)
        mapping = dataset_columns(dataset.schema, ns.namespace_schema)
        if column not in mapping:
            return task.object_id, None
        if is_pinned(task):
            return task.object_id, pinned_metric(
                task.uri, task.read_version, options_key(ns.storage_options), mapping[column]
            )
        return task.object_id, index_metric(dataset, mapping[column])

    pinned = [t for t in tasks if is_pinned(t)]  # a cached lookup: cheaper than a thread
    moving = [t for t in tasks if not is_pinned(t)]
    found = {oid: m for oid, m in [*map(one, pinned), *_map(one, moving, SEARCH_THREADS)] if m is not None}
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

    A filtered batch of queries over a partition small enough for
    :mod:`partitioning.search.knn_scan` is answered exactly from one read of its matching
    rows; otherwise each query is a Lance search (unfiltered small partitions go through
    :func:`_scan_partition`)."""
    empty = plan.output_schema.empty_table()
    dataset = open_task(task, plan.storage_options)
    mapping = dataset_columns(dataset.schema, plan.schema)
    if plan.column not in mapping:
        return [empty] * len(queries)  # the column was added after this partition was written: all NULL
    rows = dataset.count_rows()
    exact = None if isinstance(plan.filter, TrueFilter) else plan.filter
    needed = [c for c in plan.schema.arrow.names if c in set(plan.output) | (columns_of(exact) if exact else set())]
    where = lance_filter(plan.filter, plan.schema.arrow, mapping)
    predicate = arrow_predicate(exact, plan.schema.arrow) if exact is not None else None
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
                    columns=[*(mapping[c] for c in needed if c in mapping), DISTANCE],
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


def _map(fn: Callable[[_A], _T], tasks: Sequence[_A], threads: int) -> list[_T]:
    """``fn`` over ``tasks`` in a thread pool; in this thread for one task (a pool costs more
    than a pruned search of one partition)."""
    if len(tasks) <= 1 or threads <= 1:
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
        # a batch keeps the cores busy between matrix products; one query is cheaper on one thread
        pool = 1 if len(queries) < BATCH else min(threads, (os.cpu_count() or 1) + 1)
        tried = _map(lambda t: scanned.scan_partition(plan, t, queries), tasks, pool)
        hits = [s for s in tried if s is not None]
        won = scanned.winners(plan, hits) if hits else None
        if won is not None and len(hits) == len(tasks):
            return won.per_query(len(queries))
        rest = [t for t, s in zip(tasks, tried, strict=True) if s is None]
        searched = iter(_map(lambda t: _search_partition(plan, t, queries), rest, threads))
        split = iter(won.per_partition(len(hits), len(queries)) if won is not None else [])
        per_task = [next(searched) if s is None else next(split) for s in tried]
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
