"""Brute-force top-k of a batch of queries over one partition's vectors, in one numpy pass.

A batch kNN (:func:`pipelines.search.queries.knn_join`) would otherwise run one Lance search per
query and partition (3-6 ms each, whatever the partition's size). When a partition's
vectors fit in :data:`MAX_ELEMENTS` float64 values, reading them once and computing every
query's distances as one matrix product is exact and far cheaper; larger partitions go
through Lance. Distances are Lance's: squared L2 for ``l2``, ``1 - cos`` for ``cosine``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MAX_ELEMENTS", "SCAN_METRICS", "fits", "top_k"]

MAX_ELEMENTS = 1 << 24  # rows x dimension (128 MiB as float64); also bounds each query block
SCAN_METRICS = ("l2", "cosine")


def fits(rows: int, dimension: int, metric: str) -> bool:
    """Whether a partition of ``rows`` vectors is searched here rather than through Lance."""
    return metric in SCAN_METRICS and rows * dimension <= MAX_ELEMENTS


def _matrix(vectors: pa.Array, dimension: int) -> np.ndarray:
    flat = vectors.flatten() if isinstance(vectors, pa.FixedSizeListArray) else pc.list_flatten(vectors)
    return np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float64).reshape(-1, dimension)


def top_k(vectors: pa.Array, queries: np.ndarray, k: int, metric: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, the positions in ``vectors`` (no NULLs) of its ``k`` nearest and their
    distances, nearest first; ties keep the order of ``vectors``; non-finite distances
    (a zero vector under cosine) are left out."""
    dimension = queries.shape[1]
    base = _matrix(vectors, dimension)
    q = np.asarray(queries, dtype=np.float64)
    if metric == "l2":
        norms = np.einsum("ij,ij->i", base, base)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            base = base / np.linalg.norm(base, axis=1, keepdims=True)
            q = q / np.linalg.norm(q, axis=1, keepdims=True)
    block = max(1, MAX_ELEMENTS // max(1, len(base)))
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for start in range(0, len(q), block):
        part = q[start : start + block]
        with np.errstate(invalid="ignore"):
            dots = part @ base.T
            if metric == "l2":
                d = np.maximum(norms[None, :] - 2 * dots + np.einsum("ij,ij->i", part, part)[:, None], 0.0)
            else:
                d = 1.0 - dots
        out.extend(_smallest(d, k))
    return out


def _smallest(d: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row of ``d``, the ``k`` smallest finite values' positions and values, ascending
    (NaN sorts last in numpy, so it is only kept when fewer than ``k`` values are finite)."""
    if d.shape[1] > k:
        idx = np.argpartition(d, k - 1, axis=1)[:, :k]
    else:
        idx = np.broadcast_to(np.arange(d.shape[1]), d.shape)
    vals = np.take_along_axis(d, idx, axis=1)
    order = np.lexsort((idx, vals), axis=1)
    idx, vals = np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)
    keep = np.isfinite(vals)
    return [(i[m], v[m]) for i, v, m in zip(idx, vals, keep, strict=True)]


def take_rows(table: pa.Table, found: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[pa.Table]:
    """Each query's rows of ``table`` with a float32 ``_distance`` column appended (one take
    for the whole batch, then zero-copy slices)."""
    sizes = [len(idx) for idx, _ in found]
    if not sizes:
        return []
    rows = table.take(pa.array(np.concatenate([idx for idx, _ in found]), pa.int64()))
    distances = np.concatenate([dist for _, dist in found]).astype(np.float32)
    rows = rows.append_column("_distance", pa.array(distances, pa.float32()))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [rows.slice(int(offsets[i]), sizes[i]) for i in range(len(sizes))]
