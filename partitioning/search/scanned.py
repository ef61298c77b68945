"""Unfiltered searches of small partitions, answered from their vectors in memory.

:func:`scan_partition` scores one partition (:mod:`partitioning.search.vector_cache`) and
keeps only row positions and distances. :func:`winners` then ranks every scanned
partition's rows for each query by ``(distance, partition order, position)``, the same
order :func:`partitioning.search.nearest.merge_top_k` gives, keeps each query's ``k``, and
takes their columns with one Lance ``take`` per partition that holds any. When every
partition was scanned that is the answer; otherwise it is split per partition and merged
with the Lance searches of the others.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import lance
import numpy as np
import pyarrow as pa

from partitioning.errors import translate_lance_errors
from partitioning.search import knn_scan
from partitioning.search.pinned import is_pinned, open_task, options_key
from partitioning.search.query_args import DISTANCE
from partitioning.search.vector_cache import Found, nearest_positions, vectors_of
from partitioning.sql.filters import TrueFilter
from partitioning.state.scan import ScanTask
from partitioning.storage.alignment import dataset_columns, reconcile

if TYPE_CHECKING:
    from partitioning.search.nearest import SearchPlan

__all__ = ["Scanned", "Winners", "scan_partition", "winners"]


@dataclass(frozen=True)
class Scanned:
    """A small partition's nearest rows for a batch of queries, without their columns."""

    task: ScanTask
    dataset: lance.LanceDataset
    mapping: Mapping[str, str]
    found: Found


def scan_partition(plan: SearchPlan, task: ScanTask, queries: np.ndarray) -> Scanned | None:
    """An unfiltered search of a partition small enough to answer from its vectors in memory,
    else ``None``. Cheap (numpy passes), so run in the calling thread: in a pool, numpy's
    BLAS threads and the pool's fight over the cores."""
    if not isinstance(plan.filter, TrueFilter) or plan.metric not in knn_scan.SCAN_METRICS:
        return None
    dataset = open_task(task, plan.storage_options)
    mapping = dataset_columns(dataset.schema, plan.schema)
    if plan.column not in mapping or not knn_scan.fits(dataset.count_rows(), plan.dimension, plan.metric):
        return None
    keep = plan.keep_vectors and is_pinned(task)
    key = (task.uri, task.read_version, options_key(plan.storage_options)) if keep else None
    with translate_lance_errors(f"search partition table {task.object_id}"):
        vectors = vectors_of(dataset, key, mapping[plan.column], plan.dimension, plan.metric)
    return Scanned(task, dataset, mapping, nearest_positions(vectors, queries, plan.k, plan.metric))


@dataclass(frozen=True)
class Winners:
    """Each query's top-k over the scanned partitions: ``rows`` (output columns and
    ``_distance``) ordered by query, then distance, partition and position, with the
    partition (index into the scanned list) and query of each row."""

    rows: pa.Table
    owner: np.ndarray
    query: np.ndarray

    def per_query(self, n_queries: int) -> list[pa.Table]:
        edges = np.searchsorted(self.query, np.arange(n_queries + 1))
        return [self.rows.slice(int(a), int(b - a)) for a, b in itertools.pairwise(edges)]

    def per_partition(self, n_partitions: int, n_queries: int) -> list[list[pa.Table]]:
        out = []
        for j in range(n_partitions):
            mine = np.flatnonzero(self.owner == j)
            out.append(Winners(self.rows.take(pa.array(mine)), self.owner[mine], self.query[mine]).per_query(n_queries))
        return out


def winners(plan: SearchPlan, scanned: Sequence[Scanned]) -> Winners:
    """The scanned partitions' rows in some query's top-k among them, with their columns."""
    found = _within_bound([s.found for s in scanned], plan.k)
    owner = np.repeat(np.arange(len(scanned)), [len(f.query) for f in found])
    query, position, distance = (
        np.concatenate([getattr(f, n) for f in found]) for n in ("query", "position", "distance")
    )
    order = np.lexsort((position, owner, distance, query))
    query, owner, position, distance = query[order], owner[order], position[order], distance[order]
    top = np.arange(len(query)) - np.searchsorted(query, query) < plan.k
    query, owner, position, distance = query[top], owner[top], position[top], distance[top]
    tables, where = [], []
    for j in np.unique(owner):
        mine = np.flatnonzero(owner == j)
        tables.append(_take(plan, scanned[j], position[mine]))
        where.append(mine)
    if not tables:
        return Winners(plan.output_schema.empty_table(), owner, query)
    placed = np.concatenate(where)
    rows = pa.concat_tables(tables).take(pa.array(np.argsort(placed, kind="stable")))
    rows = rows.append_column(DISTANCE, pa.array(distance.astype(np.float32), pa.float32()))
    return Winners(rows, owner, query)


def _within_bound(found: list[Found], k: int) -> list[Found]:
    """Each partition's rows no farther than the nearest ``k``-th row of any one partition
    (per query): a partition with ``k`` rows that near shows the global top-k is too, so
    only these rows (ties at the bound included) need ranking together."""
    n_queries = 1 + max((int(f.query[-1]) for f in found if len(f.query)), default=-1)
    bound = np.full(n_queries, np.inf)
    for f in found:
        counts = np.bincount(f.query, minlength=n_queries)
        full = np.flatnonzero(counts == k)
        last = np.cumsum(counts) - 1
        np.minimum.at(bound, full, f.distance[last[full]])
    return [
        Found(f.query[keep], f.position[keep], f.distance[keep])
        for f in found
        for keep in [f.distance <= bound[f.query]]
    ]


def _take(plan: SearchPlan, s: Scanned, positions: np.ndarray) -> pa.Table:
    """The output columns of ``positions`` of the partition, in that order (one Lance take)."""
    unique = np.unique(positions)
    columns = [s.mapping[c] for c in plan.output if c in s.mapping]
    with translate_lance_errors(f"search partition table {s.task.object_id}"):
        raw = s.dataset.take(unique.tolist(), columns=columns)
    rows = reconcile(raw, s.mapping, list(plan.output), plan.schema, s.task.object_id)
    return rows.take(pa.array(np.searchsorted(unique, positions)))
