"""The in-memory exact top-k of small partitions against numpy's float64 brute force:
duplicates (ties by position), NULL and zero vectors, k beyond the rows, query blocks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.search import vector_cache
from partitioning.search.pinned import VersionCache


def _oracle(matrix: np.ndarray, null: np.ndarray, q: np.ndarray, k: int, metric: str) -> tuple[list[int], np.ndarray]:
    m, q = matrix.astype(np.float64), q.astype(np.float64)
    if metric == "l2":
        d = ((m - q) ** 2).sum(axis=1)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            d = 1 - (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    keep = [i for i in range(len(m)) if not null[i] and np.isfinite(d[i])]
    ranked = sorted(keep, key=lambda i: (d[i], i))[:k]
    return ranked, d


@settings(max_examples=40, deadline=None)
@given(
    rows=st.sampled_from([0, 1, 7, 90, 700, 2500]),
    dim=st.sampled_from([2, 8]),
    k=st.sampled_from([1, 3, 10, 40]),
    metric=st.sampled_from(["l2", "cosine"]),
    queries=st.integers(1, 6),
    block=st.sampled_from([1 << 24, 3000]),
    seed=st.integers(0, 10_000),
)
def test_nearest_positions_equal_numpy(rows, dim, k, metric, queries, block, seed):
    rng = np.random.default_rng(seed)
    matrix = rng.integers(-3, 4, size=(rows, dim)).astype(np.float32)  # small integers: many exact ties
    if rows > 3:
        matrix[rows // 2] = 0  # a zero vector: no cosine distance
    null = rng.random(rows) < 0.1
    raw = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel(), pa.float32()), dim, mask=pa.array(null))
    qs = rng.normal(size=(queries, dim)).astype(np.float32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vector_cache, "_BLOCK", block)
        found = vector_cache.nearest_positions(vector_cache.vectors_from(raw, dim, metric), qs, k, metric)
    for i, q in enumerate(qs):
        mine = found.query == i
        positions, distances = found.position[mine], found.distance[mine]
        want, every = _oracle(matrix, null, q, k, metric)
        want_d = every[want]
        assert np.allclose(distances, want_d, rtol=1e-9, atol=1e-9)
        assert np.allclose(every[positions], distances, rtol=1e-9, atol=1e-9)
        if metric == "l2":  # integer vectors: exact float64 distances, so exact ties go by position
            assert positions.tolist() == want
        else:  # equal cosines computed two ways differ in the last bit: any order among those
            assert len(positions) == len(want) and not set(positions) - set(np.flatnonzero(~null))
            assert all(abs(a - b) < 1e-12 or a == b for a, b in zip(distances, want_d, strict=True))


def test_the_cache_keeps_what_fits_and_lets_the_oldest_go(monkeypatch, tmp_path):
    import lance

    tables = []
    for i in range(3):
        v = pa.FixedSizeListArray.from_arrays(pa.array(np.full(400, i, np.float32)), 4)
        tables.append(lance.write_dataset(pa.table({"v": v}), str(tmp_path / f"d{i}")))
    one = vector_cache.vectors_from(tables[0].to_table().column("v").combine_chunks(), 4, "l2").nbytes
    cache = VersionCache[vector_cache.Vectors](2 * one)
    monkeypatch.setattr(vector_cache, "_cache", cache)
    for i, ds in enumerate(tables):
        got = vector_cache.vectors_of(ds, ("d", i), "v", 4, "l2")
        assert got.matrix[0, 0] == i
    assert [key[0] for key in cache.keys()] == [("d", 1), ("d", 2)]
    assert cache.held == 2 * one
    assert vector_cache.vectors_of(tables[1], ("d", 1), "v", 4, "l2") is cache.get((("d", 1), "v", "l2"))


def test_a_plan_that_keeps_no_vectors_leaves_the_cache_alone(tmp_path, monkeypatch):
    """What an executor's task searches (``keep_vectors=False``) is read for that search only;
    the driver's searches keep each pinned partition's vectors."""
    import dataclasses

    from partitioning import PartitionedNamespace
    from partitioning.search.nearest import plan_search, search_tasks
    from partitioning.tables.write import write_table

    monkeypatch.setattr(vector_cache, "_cache", VersionCache(vector_cache.CACHE_BYTES))
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.list_(pa.float32(), 4))])
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, schema, ["p"])
    vectors = np.random.default_rng(3).normal(size=(60, 4)).astype(np.float32)
    table = pa.table(
        {
            "id": np.arange(60),
            "p": (np.arange(60) % 3).astype(np.int32),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4),
        },
        schema=schema,
    )
    write_table(ns, table)
    plan = plan_search(PartitionedNamespace.load(root), k=2, columns=["id"])
    queries = vectors[:2] + 0.01
    away = search_tasks(dataclasses.replace(plan, keep_vectors=False), plan.tasks, queries)
    assert len(vector_cache._cache) == 0
    kept = search_tasks(plan, plan.tasks, queries)
    assert len(vector_cache._cache) == 3
    assert [t.column("id").to_pylist() for t in away] == [t.column("id").to_pylist() for t in kept]
    assert [t.column("id").to_pylist()[0] for t in kept] == [0, 1]
