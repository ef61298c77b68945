"""Small partitions' vectors kept in memory, and their exact top-k without a Lance search.

A Lance index search costs 3-6 ms whatever the partition's size (planning, not arithmetic),
so an unfiltered query over 64 partitions of 8,000 rows spent nearly all its time in 64
such calls. A partition whose vectors fit :func:`knn_scan.fits` is answered here instead,
exactly: its vectors are read once per pinned version (a version never changes), kept
in a process-wide cache bounded to :data:`CACHE_BYTES` (least recently used go first),
scored against a batch of queries with one float32 matrix product, and the candidates
within rounding of each query's top-k are ranked by their exact float64 distance. A
partition the cache cannot hold is read for this search alone; the answer is the same.
Only positions and distances are computed here (:mod:`partitioning.search.scanned` takes
the columns).
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import translate_lance_errors
from partitioning.search.pinned import VersionCache

__all__ = ["CACHE_BYTES", "Found", "Vectors", "nearest_positions", "vectors_from", "vectors_of"]

CACHE_BYTES = int(os.environ.get("LANCE_PARTITIONED_VECTOR_CACHE_BYTES", 256 << 20))
_WIDTH = 8  # rows per block whose minimum bounds a query's candidates
_BLOCK = 1 << 24  # queries x rows scored at once (64 MiB of float32 scores)
_cache: VersionCache[Vectors] = VersionCache(CACHE_BYTES)


@dataclass(frozen=True)
class Found:
    """Nearest rows of one partition for a batch of queries, as parallel arrays ordered by
    ``(query, distance, position)``: the query's index, the row's position, its distance."""

    query: np.ndarray
    position: np.ndarray
    distance: np.ndarray


@dataclass(frozen=True)
class Vectors:
    """A partition's non-NULL vectors: their row positions (offsets for ``take``), the rows
    as float32, and per row the squared norm (``l2``) or the inverse norm (``cosine``)."""

    positions: np.ndarray
    matrix: np.ndarray
    scale: np.ndarray
    scoring: np.ndarray  # l2: the rows with their squared norm appended (``matrix`` is a view of it)

    @property
    def nbytes(self) -> int:
        return self.positions.nbytes + self.scoring.nbytes + self.scale.nbytes


def _read(dataset: lance.LanceDataset, column: str, dimension: int, metric: str) -> Vectors:
    with translate_lance_errors(f"read vectors of {dataset.uri}"):
        raw = dataset.to_table(columns=[column]).column(column).combine_chunks()
    return vectors_from(raw, dimension, metric)


def vectors_from(raw: pa.Array, dimension: int, metric: str) -> Vectors:
    """A vector column's non-NULL rows, ready for :func:`nearest_positions`."""
    valid = np.flatnonzero(raw.is_valid().to_numpy(zero_copy_only=False))
    flat = raw.filter(raw.is_valid())
    values = flat.flatten() if isinstance(flat, pa.FixedSizeListArray) else pc.list_flatten(flat)
    matrix = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dimension)
    squares = np.einsum("ij,ij->i", matrix.astype(np.float64), matrix.astype(np.float64))
    if metric == "cosine":
        with np.errstate(divide="ignore"):
            return Vectors(valid.astype(np.int64), matrix, 1.0 / np.sqrt(squares), matrix)
    # one matrix product gives |v|^2 - 2 v.q: the norm rides along as a last column
    scoring = np.empty((len(matrix), dimension + 1), dtype=np.float32)
    scoring[:, :dimension] = matrix
    scoring[:, dimension] = squares
    return Vectors(valid.astype(np.int64), scoring[:, :dimension], squares, scoring)


def vectors_of(dataset: lance.LanceDataset, key: Hashable | None, column: str, dimension: int, metric: str) -> Vectors:
    """The partition's vectors, from the cache when ``key`` (a pinned version) is given."""
    full = (key, column, metric) if key is not None else None
    return _cache.get_or_compute(full, lambda: _read(dataset, column, dimension, metric))


def nearest_positions(vectors: Vectors, queries: np.ndarray, k: int, metric: str) -> Found:
    """Every query's ``k`` nearest rows with their exact distances (squared L2, or
    ``1 - cos``); non-finite distances left out."""
    n = len(vectors.positions)
    if n == 0:
        return Found(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
    q64 = np.asarray(queries, dtype=np.float64)
    if metric == "cosine":
        with np.errstate(divide="ignore", invalid="ignore"):
            q64 = q64 / np.linalg.norm(q64, axis=1, keepdims=True)
    step = max(1, _BLOCK // n)
    parts = [_nearest_block(vectors, q64[start : start + step], k, metric, start) for start in range(0, len(q64), step)]
    if len(parts) == 1:
        return parts[0]
    return Found(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("query", "position", "distance")))


def _candidates(vectors: Vectors, q64: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, queries)``: pairs holding every query's exact top-k, the rows whose float32
    score is within rounding of a bound no lower than the ``k``-th best score.
    The bound is that rank among the minima of blocks of :data:`_WIDTH` rows (each such
    block holds a row at most that good), so the scores are never sorted or partitioned,
    and only blocks whose minimum is within the bound are looked into."""
    with np.errstate(invalid="ignore", over="ignore"):
        if metric == "cosine":
            score = vectors.matrix @ q64.astype(np.float32).T  # rows x queries
            score *= -vectors.scale.astype(np.float32)[:, None]
        else:  # -2 is exact in float32
            weights = np.hstack([-2 * q64.astype(np.float32), np.ones((len(q64), 1), np.float32)])
            score = vectors.scoring @ weights.T
    n, keep = score.shape[0], k
    if n < keep * _WIDTH:
        rows, queries = np.nonzero(np.isfinite(score))
        return rows, queries
    minima = _block_minima(score)
    coarse = _block_minima(minima) if len(minima) >= keep * _WIDTH else minima  # a looser bound, cheaper
    bound = np.partition(np.nan_to_num(coarse, nan=np.inf), keep - 1, axis=0)[keep - 1]
    magnitude = 1.0 if metric == "cosine" else float(vectors.scale.max()) + np.einsum("ij,ij->i", q64, q64)
    bound = bound + 1e-4 * (magnitude + 1.0)
    blocks, queries = np.nonzero(minima <= bound[None, :])
    rows = (blocks[:, None] * _WIDTH + np.arange(_WIDTH)[None, :]).ravel()
    queries = np.repeat(queries, _WIDTH)
    inside = rows < n
    rows, queries = rows[inside], queries[inside]
    near = score[rows, queries] <= bound[queries]
    return rows[near], queries[near]


def _block_minima(score: np.ndarray) -> np.ndarray:
    """The minimum of each block of :data:`_WIDTH` rows (the last block may be shorter),
    NaN scores (a zero vector under cosine) ignored, so they never hide a block's other rows."""
    whole = len(score) - len(score) % _WIDTH
    minima = np.fmin.reduce(score[:whole].reshape(-1, _WIDTH, score.shape[1]), axis=1)
    if whole < len(score):
        minima = np.concatenate([minima, np.fmin.reduce(score[whole:], axis=0, keepdims=True)])
    return minima


def _nearest_block(vectors: Vectors, q64: np.ndarray, k: int, metric: str, first: int) -> Found:
    cols, rows = _candidates(vectors, q64, k, metric)
    picked = vectors.matrix[cols].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if metric == "cosine":
            d = 1.0 - np.einsum("ij,ij->i", picked, q64[rows]) * vectors.scale[cols]
        else:
            diff = picked - q64[rows]
            d = np.einsum("ij,ij->i", diff, diff)
    finite = np.isfinite(d)
    rows, cols, d = rows[finite], cols[finite], d[finite]
    order = np.lexsort((cols, d, rows))
    rows, cols, d = rows[order], cols[order], d[order]
    top = np.arange(len(rows)) - np.searchsorted(rows, rows) < k
    return Found(rows[top] + first, vectors.positions[cols[top]], d[top])
