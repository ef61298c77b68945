"""Small partitions' vectors kept in memory, and their exact top-k without a Lance search.

A Lance index search costs 3-6 ms whatever the partition's size (planning, not arithmetic),
so an unfiltered query over 64 partitions of 8,000 rows spent nearly all its time in 64
such calls. A partition whose vectors fit :func:`knn_scan.fits` is answered here instead,
exactly: its vectors are read once per pinned version (a version never changes), kept
in a process-wide cache bounded to :data:`CACHE_BYTES` (least recently used go first),
scored against each query with one float32 matrix product, and the best candidates are
re-ranked by their exact float64 distance. A partition the cache cannot hold is read
for this search alone; the answer is the same.

Only the positions and distances are computed per partition (:func:`scan_partition`); the
output columns are taken for the rows that win the global top-k (:func:`take_winners`),
one Lance ``take`` per partition that holds any.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import translate_lance_errors
from partitioning.search import knn_scan
from partitioning.search.pinned import is_pinned, open_task, options_key
from partitioning.search.query_args import DISTANCE
from partitioning.sql.filters import TrueFilter
from partitioning.state.scan import ScanTask
from partitioning.storage.alignment import dataset_columns, reconcile

if TYPE_CHECKING:
    from partitioning.search.nearest import SearchPlan

__all__ = ["CACHE_BYTES", "Scanned", "Vectors", "nearest_positions", "scan_partition", "take_winners", "vectors_of"]

CACHE_BYTES = int(os.environ.get("LANCE_PARTITIONED_VECTOR_CACHE_BYTES", 256 << 20))
_RERANK = 4  # candidates re-ranked exactly per query: RERANK * k + 16
_lock = threading.Lock()
_cache: OrderedDict[Hashable, Vectors] = OrderedDict()
_held = [0]


@dataclass(frozen=True)
class Vectors:
    """A partition's non-NULL vectors: their row positions (offsets for ``take``) and the
    rows as float32, unit length for ``cosine``, with squared norms for ``l2``."""

    positions: np.ndarray
    matrix: np.ndarray
    norms: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.positions.nbytes + self.matrix.nbytes + self.norms.nbytes


def _read(dataset: lance.LanceDataset, column: str, dimension: int, metric: str) -> Vectors:
    with translate_lance_errors(f"read vectors of {dataset.uri}"):
        raw = dataset.to_table(columns=[column]).column(column).combine_chunks()
    valid = np.flatnonzero(raw.is_valid().to_numpy(zero_copy_only=False))
    flat = raw.filter(raw.is_valid())
    values = flat.flatten() if isinstance(flat, pa.FixedSizeListArray) else pc.list_flatten(flat)
    matrix = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64).reshape(-1, dimension)
    if metric == "cosine":
        with np.errstate(divide="ignore", invalid="ignore"):
            matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    norms = np.einsum("ij,ij->i", matrix, matrix)
    return Vectors(valid.astype(np.int64), matrix.astype(np.float32), norms.astype(np.float32))


def vectors_of(dataset: lance.LanceDataset, key: Hashable | None, column: str, dimension: int, metric: str) -> Vectors:
    """The partition's vectors, from the cache when ``key`` (a pinned version) is given."""
    if key is None:
        return _read(dataset, column, dimension, metric)
    full = (key, column, metric)
    with _lock:
        found = _cache.get(full)
        if found is not None:
            _cache.move_to_end(full)
            return found
    found = _read(dataset, column, dimension, metric)
    if found.nbytes <= CACHE_BYTES:
        with _lock:
            if full not in _cache:
                _cache[full] = found
                _held[0] += found.nbytes
            while _held[0] > CACHE_BYTES:
                _, gone = _cache.popitem(last=False)
                _held[0] -= gone.nbytes
    return found


def nearest_positions(
    vectors: Vectors, queries: np.ndarray, k: int, metric: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, the row positions of its ``k`` nearest and their exact distances (squared
    L2, or ``1 - cos``), nearest first, ties by position; non-finite distances left out."""
    n = len(vectors.positions)
    if n == 0:
        return [(np.empty(0, np.int64), np.empty(0, np.float64)) for _ in queries]
    q64 = np.asarray(queries, dtype=np.float64)
    if metric == "cosine":
        with np.errstate(divide="ignore", invalid="ignore"):
            q64 = q64 / np.linalg.norm(q64, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        approx = vectors.norms[None, :] - 2 * (q64.astype(np.float32) @ vectors.matrix.T)
    approx = np.nan_to_num(approx, nan=np.inf)
    keep = min(n, _RERANK * k + 16)
    if keep < n:
        # every row within float32 error of the keep-th score, so exact ties are all kept
        bound = np.partition(approx, keep - 1, axis=1)[:, keep - 1 : keep]
        slack = 1e-4 * (float(vectors.norms.max(initial=0.0)) + np.einsum("ij,ij->i", q64, q64)[:, None] + 1.0)
        candidates = [np.flatnonzero(row <= b) for row, b in zip(approx, bound + slack, strict=True)]
    else:
        candidates = [np.arange(n)] * len(q64)
    out = []
    for q, rows in zip(q64, candidates, strict=True):
        picked = vectors.matrix[rows].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            if metric == "cosine":
                d = 1.0 - picked @ q
            else:
                diff = picked - q
                d = np.einsum("ij,ij->i", diff, diff)
        finite = np.isfinite(d)
        rows, d = rows[finite], d[finite]
        order = np.lexsort((rows, d))[:k]
        out.append((vectors.positions[rows[order]], d[order]))
    return out


def scan_partition(plan: SearchPlan, task: ScanTask, queries: np.ndarray) -> Scanned | None:
    """An unfiltered search of a partition small enough to answer from its vectors in memory,
    else ``None``. Cheap (a numpy pass), so run in the calling thread: in a pool, numpy's
    BLAS threads and the pool's fight over the cores."""
    if not isinstance(plan.filter, TrueFilter) or plan.metric not in knn_scan.SCAN_METRICS:
        return None
    dataset = open_task(task, plan.storage_options)
    mapping = dataset_columns(dataset.schema, plan.schema)
    if plan.column not in mapping or not knn_scan.fits(dataset.count_rows(), plan.dimension, plan.metric):
        return None
    key = (task.uri, task.read_version, options_key(plan.storage_options)) if is_pinned(task) else None
    with translate_lance_errors(f"search partition table {task.object_id}"):
        vectors = vectors_of(dataset, key, mapping[plan.column], plan.dimension, plan.metric)
    return Scanned(task, dataset, mapping, nearest_positions(vectors, queries, plan.k, plan.metric))


@dataclass(frozen=True)
class Scanned:
    """A small partition's top-k per query as row positions and distances (no columns yet)."""

    task: ScanTask
    dataset: lance.LanceDataset
    mapping: Mapping[str, str]
    found: list[tuple[np.ndarray, np.ndarray]]


def take_winners(
    plan: SearchPlan, per_task: Sequence[list[pa.Table] | Scanned], n_queries: int
) -> list[list[pa.Table]]:
    """Scanned partitions' rows that make some query's global top-k among them, with their
    columns (one ``take`` per partition). Ordered by ``(distance, partition, position)``, a
    partition's winners for a query are a prefix of its own top-k, so only counts are kept."""
    scanned = [r for r in per_task if isinstance(r, Scanned)]
    if not scanned:
        return [r for r in per_task if not isinstance(r, Scanned)]
    counts = np.zeros((len(scanned), n_queries), dtype=np.int64)
    for qi in range(n_queries):
        d = np.concatenate([s.found[qi][1] for s in scanned])
        owner = np.repeat(np.arange(len(scanned)), [len(s.found[qi][1]) for s in scanned])
        pos = np.concatenate([s.found[qi][0] for s in scanned])
        counts[:, qi] = np.bincount(owner[np.lexsort((pos, owner, d))[: plan.k]], minlength=len(scanned))

    def take(j: int) -> list[pa.Table]:
        s = scanned[j]
        flat = np.concatenate([s.found[qi][0][: counts[j, qi]] for qi in range(n_queries)])
        unique = np.unique(flat)
        columns = [s.mapping[c] for c in plan.output if c in s.mapping]
        with translate_lance_errors(f"search partition table {s.task.object_id}"):
            raw = s.dataset.take(unique.tolist(), columns=columns)
        rows = reconcile(raw, s.mapping, list(plan.output), plan.schema, s.task.object_id)
        rows = rows.take(pa.array(np.searchsorted(unique, flat)))
        dist = np.concatenate([s.found[qi][1][: counts[j, qi]] for qi in range(n_queries)])
        rows = rows.append_column(DISTANCE, pa.array(dist.astype(np.float32), pa.float32()))
        offsets = np.concatenate([[0], np.cumsum(counts[j])])
        return [rows.slice(int(offsets[qi]), int(counts[j, qi])) for qi in range(n_queries)]

    winners = [j for j in range(len(scanned)) if counts[j].any()]
    taken = {j: take(j) for j in winners}  # at most k partitions, each one Lance take
    empty = [plan.output_schema.empty_table()] * n_queries
    order = iter(range(len(scanned)))
    return [taken.get(next(order), empty) if isinstance(r, Scanned) else r for r in per_task]
