"""Vector namespaces for the search tests, built without Spark, and the numpy oracle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
from lance.indices import IndicesBuilder

from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.tables.write import write_table

DIM = 16
CATEGORIES = ("a", "b", "c", "d")
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("c", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("v", pa.list_(pa.float32(), DIM)),
    ]
)


@dataclass(frozen=True)
class Data:
    """The rows written, as numpy (the oracle's input)."""

    ids: np.ndarray
    cats: np.ndarray
    scores: np.ndarray
    vectors: np.ndarray
    null: np.ndarray  # True where the row's vector is NULL


def make_table(n: int, seed: int, *, start: int = 0, null_every: int = 0, cats: Sequence[str] = CATEGORIES) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    null = np.zeros(n, bool)
    if null_every:
        null[::null_every] = True
    flat = pa.array(vectors.ravel())
    v = pa.FixedSizeListArray.from_arrays(flat, DIM, mask=pa.array(null)) if null.any() else None
    if v is None:
        v = pa.FixedSizeListArray.from_arrays(flat, DIM)
    return pa.table(
        {
            "id": np.arange(start, start + n, dtype=np.int64),
            "c": np.asarray(cats)[rng.integers(0, len(cats), n)],
            "score": rng.random(n),
            "v": v,
        },
        schema=SCHEMA,
    )


def data_of(tables: Sequence[pa.Table]) -> Data:
    t = pa.concat_tables(tables)
    rows = t.column("v").to_pylist()
    null = np.array([r is None for r in rows], bool)
    full = np.array([[0.0] * DIM if r is None else r for r in rows], np.float32).reshape(-1, DIM)
    return Data(
        np.asarray(t.column("id").to_numpy()),
        np.asarray(t.column("c").to_pylist()),
        np.asarray(t.column("score").to_numpy()),
        full,
        null,
    )


def create(root: str, tables: Sequence[pa.Table]) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    for t in tables:
        write_table(ns, t)
    return PartitionedNamespace.load(root)


def brute_force(data: Data, q: np.ndarray, k: int, mask: np.ndarray | None = None, metric: str = "l2") -> list[int]:
    """The ids of the ``k`` nearest rows with a vector (and ``mask``), by numpy."""
    keep = ~data.null if mask is None else (~data.null & mask)
    vectors = data.vectors[keep].astype(np.float64)
    q64 = np.asarray(q, np.float64)
    if metric == "l2":
        d = ((vectors - q64) ** 2).sum(axis=1)
    else:
        d = 1 - vectors @ q64 / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q64))
    order = np.argsort(d, kind="stable")[:k]
    return [int(i) for i in data.ids[keep][order]]


def distances(data: Data, q: np.ndarray, ids: Sequence[int], metric: str = "l2") -> np.ndarray:
    pos = {int(i): n for n, i in enumerate(data.ids)}
    vectors = data.vectors[[pos[i] for i in ids]].astype(np.float64)
    q64 = np.asarray(q, np.float64)
    if metric == "l2":
        return ((vectors - q64) ** 2).sum(axis=1)
    return 1 - vectors @ q64 / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q64))


def index_all(ns: PartitionedNamespace, *, index_type: str = "IVF_PQ", metric: str = "l2") -> None:
    """A shared-model vector index on every partition, committed to the manifest."""
    parts = ns.partitions()
    sample = pa.concat_tables([ns.open_table(p).to_table(columns=["v"], filter="v IS NOT NULL") for p in parts])
    tmp = lance.write_dataset(sample, ns.root + "/_search_sample")
    builder = IndicesBuilder(tmp, "v")
    commits = []
    if index_type == "IVF_PQ":
        model = builder.prepare_global_ivf_pq(4, 4, distance_type=metric, sample_rate=2)
        extra = {"ivf_centroids": model["ivf_centroids"], "pq_codebook": model["pq_codebook"], "num_sub_vectors": 4}
    else:
        extra = {"ivf_centroids": builder.train_ivf(4, distance_type=metric, sample_rate=2).centroids}
    for p in parts:
        ds = ns.open_table(p)
        ds.create_index("v", index_type, metric=metric, num_partitions=4, **extra)
        new = lance.dataset(p.uri)
        stats = new.stats.index_stats("v_idx")
        assert stats["num_indexed_rows"] > 0 and stats["num_unindexed_rows"] == 0, stats
        commits.append(TableCommit(p.spec_id, p.values, p.location, new.version, p.object_id))
    ns.commit_tables(commits)
