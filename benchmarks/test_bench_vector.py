"""Vector search: a 64-partition namespace vs the same rows in one Lance dataset, same run.

Issue #13: 500,000 vectors of 64 float32 dimensions in 64 partitions, and the same rows
in one unpartitioned Lance dataset with the same index parameters (IVF_PQ, 256 lists,
16 sub-vectors). Measured side by side:

- index build: ``create_vector_index`` (one shared model trained on a sample drawn by a
  Spark job, a Spark task per partition, one ``__manifest`` commit) vs the dataset's own
  ``create_index`` (target <= 1.5x);
- recall@10 against numpy brute force over 100 queries, with refine (target >= 0.95);
- median query latency unfiltered (target <= 2x) and with a filter selecting 1 of the 64
  partitions vs the dataset with a prefilter (target <= 0.3x), for the Spark-free
  ``partitioning.search.nearest.search`` (an Arrow table, comparable with pylance's) and for
  ``search_partitioned`` (a collected DataFrame);
- ``knn_join`` throughput for 1,000 queries.

The vectors are a mixture of Gaussians (uniform random vectors have no neighbours worth
finding). Run with ``make bench``.
"""

from __future__ import annotations

import statistics
import time

import lance
import numpy as np
import pyarrow as pa
import pytest

from benchmarks.conftest import interleaved_samples
from partitioning import PartitionedNamespace
from partitioning.search.nearest import search
from partitioning.tables.write import write_table
from pipelines.search.indexes import create_vector_index
from pipelines.search.queries import knn_join, search_partitioned

pytestmark = pytest.mark.bench

ROWS = 500_000
DIM = 64
PARTITIONS = 64
QUERIES = 100
K = 10
INDEX = {"num_partitions": 256, "num_sub_vectors": 16}
SEARCH = {"nprobes": 20, "refine_factor": 10}


def _data(rng: np.random.Generator) -> tuple[pa.Table, np.ndarray]:
    centers = rng.normal(size=(2_000, DIM)).astype(np.float32) * 4
    vectors = centers[rng.integers(0, len(centers), ROWS)] + rng.normal(size=(ROWS, DIM)).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(ROWS), pa.int64()),
            "p": pa.array(rng.integers(0, PARTITIONS, ROWS), pa.int32()),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
        }
    )
    return table, vectors


def _brute_force(vectors: np.ndarray, queries: np.ndarray, rows: np.ndarray | None = None) -> list[set[int]]:
    ids = np.arange(len(vectors)) if rows is None else rows
    base = vectors[ids]
    out = []
    for q in queries:
        d = ((base - q) ** 2).sum(axis=1)
        out.append(set(ids[np.argpartition(d, K)[:K]].tolist()))
    return out


_SCALING = """
import statistics, sys, time
import numpy as np
from partitioning import PartitionedNamespace
from partitioning.search.nearest import plan_search, search_tasks
ns = PartitionedNamespace.load(sys.argv[1])
queries = np.load(sys.argv[2])
plan = plan_search(ns, k=10, column="v", columns=["id"], nprobes=20, refine_factor=10)
search_tasks(plan, plan.tasks, queries)
one = []
for q in queries[:50]:
    start = time.perf_counter()
    search_tasks(plan, plan.tasks, q[None, :])
    one.append(time.perf_counter() - start)
batch = np.repeat(queries, 10, axis=0)
start = time.perf_counter()
search_tasks(plan, plan.tasks, batch)
print(f"{statistics.median(one) * 1000:.1f} ms a query, {len(batch) / (time.perf_counter() - start):.0f} queries/s")
"""


def _scaling(root: str, queries: np.ndarray) -> str:
    """One query's latency and a 1,000-query batch's throughput, Spark-free, on 1 core and on 2."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/queries.npy"
        np.save(path, queries)
        out = []
        for cores in ("0", "0,1"):
            proc = subprocess.run(
                ["taskset", "-c", cores, sys.executable, "-c", _SCALING, root, path],
                capture_output=True,
                text=True,
                check=True,
            )
            out.append(f"{len(cores.split(','))} core(s): {proc.stdout.strip()}")
    return "; ".join(out)


def _recall(found: list[set[int]], truth: list[set[int]]) -> float:
    return sum(len(f & t) for f, t in zip(found, truth, strict=True)) / (K * len(truth))


def test_vector_index_and_search_vs_one_lance_dataset(spark, tmp_path):
    rng = np.random.default_rng(13)
    table, vectors = _data(rng)
    queries = vectors[rng.integers(0, ROWS, QUERIES)] + rng.normal(size=(QUERIES, DIM)).astype(np.float32) * 0.5
    root, plain_uri = str(tmp_path / "ns"), str(tmp_path / "plain")
    ns = PartitionedNamespace.create(root, table.schema, ["p"])
    write_table(ns, table)
    plain = lance.write_dataset(table, plain_uri)
    assert len(PartitionedNamespace.load(root).partitions()) == PARTITIONS

    t0 = time.perf_counter()
    report = create_vector_index(root, "v", index_type="IVF_PQ", metric="l2", spark=spark, **INDEX)
    t1 = time.perf_counter()
    plain.create_index("v", "IVF_PQ", metric="l2", **INDEX)
    t2 = time.perf_counter()
    build_ours, build_plain = t1 - t0, t2 - t1
    print(f"\nindex build: ours {build_ours:.2f} s ({report}), one dataset {build_plain:.2f} s")
    plain = lance.dataset(plain_uri)
    ns = PartitionedNamespace.load(root)

    truth = _brute_force(vectors, queries)
    ours = [set(search(ns, q, k=K, column="v", columns=["id"], **SEARCH).column("id").to_pylist()) for q in queries]
    theirs = [
        set(
            plain.to_table(nearest={"column": "v", "q": q, "k": K, **SEARCH}, columns=["id", "_distance"])
            .column("id")
            .to_pylist()
        )
        for q in queries
    ]
    recall_ours, recall_plain = _recall(ours, truth), _recall(theirs, truth)
    target = 7
    rows_p = np.flatnonzero(table.column("p").to_numpy() == target)
    filtered_truth = _brute_force(vectors, queries[:20], rows_p)
    filtered = [
        set(search(ns, q, k=K, column="v", filter=f"p = {target}", columns=["id"], **SEARCH).column("id").to_pylist())
        for q in queries[:20]
    ]
    recall_filtered = _recall(filtered, filtered_truth)
    print(f"recall@10: ours {recall_ours:.3f}, one dataset {recall_plain:.3f}, ours filtered {recall_filtered:.3f}")

    q = queries[0]
    timings = interleaved_samples(
        {
            "ours": lambda: search(ns, q, k=K, column="v", columns=["id"], **SEARCH),
            "ours_df": lambda: search_partitioned(spark, root, q, k=K, column="v", columns=["id"], **SEARCH).collect(),
            "plain": lambda: plain.to_table(
                nearest={"column": "v", "q": q, "k": K, **SEARCH}, columns=["id", "_distance"]
            ),
            "ours_1of64": lambda: search(ns, q, k=K, column="v", filter=f"p = {target}", columns=["id"], **SEARCH),
            "ours_df_1of64": lambda: search_partitioned(
                spark, root, q, k=K, column="v", filter=f"p = {target}", columns=["id"], **SEARCH
            ).collect(),
            "plain_1of64": lambda: plain.to_table(
                nearest={"column": "v", "q": q, "k": K, **SEARCH},
                filter=f"p = {target}",
                prefilter=True,
                columns=["id", "_distance"],
            ),
        },
        repeats=9,
    )
    latency = {name: t.median for name, t in timings.items()}
    print("latency, median (min .. max): " + ", ".join(f"{name} {t.show_ms()}" for name, t in timings.items()))

    batch = spark.createDataFrame(
        [(i, [float(x) for x in vectors[j]]) for i, j in enumerate(rng.integers(0, ROWS, 1_000))],
        "qid long, q array<float>",
    ).cache()
    batch.count()
    runs = []
    for _ in range(3):
        t3 = time.perf_counter()
        joined = knn_join(
            spark, batch, root, k=K, query_id="qid", query_column="q", column="v", columns=["id"], **SEARCH
        )
        joined_rows = joined.count()
        runs.append(time.perf_counter() - t3)
    took = statistics.median(runs)
    print(
        f"knn_join: 1,000 queries in {took:.2f} s ({1_000 / took:.0f} queries/s; runs "
        f"{', '.join(f'{r:.2f}' for r in runs)} s), {joined_rows} rows"
    )
    print("cores: " + _scaling(root, queries))

    print(
        f"ratios: build {build_ours / build_plain:.2f}x (<= 1.5x), "
        f"unfiltered {latency['ours'] / latency['plain']:.2f}x / DataFrame "
        f"{latency['ours_df'] / latency['plain']:.2f}x (<= 2x), "
        f"1 of 64 {latency['ours_1of64'] / latency['plain_1of64']:.2f}x / DataFrame "
        f"{latency['ours_df_1of64'] / latency['plain_1of64']:.2f}x (<= 0.3x)"
    )
    assert joined_rows == 1_000 * K
    assert recall_ours >= 0.9
