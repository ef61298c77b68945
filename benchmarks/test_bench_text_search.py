"""Full-text search: a 64-partition namespace vs the same rows in one Lance dataset, same run.

200,000 rows of text (a Zipf vocabulary of 5,000 words, each partition leaning on its own
words, 4 to 60 words a row) in 64 partitions, and the same rows in one unpartitioned
Lance dataset with the same INVERTED index (default tokenizer). Measured side by side:

- index build: ``create_scalar_index(root, "text", "INVERTED")`` (a Spark task per
  partition, one ``__manifest`` commit) vs the dataset's own ``create_scalar_index``;
- the first search (every partition's postings made and kept);
- median latency of a top-10 query, interleaved runs, for the Spark-free
  ``partitioning.search.text`` (an Arrow table, comparable with pylance's) and for
  ``search_text_partitioned`` (a collected DataFrame), vs
  ``to_table(full_text_query=q, limit=10)`` (target <= 3x), unfiltered and with a filter
  keeping 1 of the 64 partitions (a prefilter for the dataset).

Every query's rows and float32 ``_score`` are checked equal to the dataset's (ties, which
Lance orders arbitrarily, may hold any of the tied rows). Run with ``make bench``.
"""

from __future__ import annotations

import time

import lance
import numpy as np
import pyarrow as pa
import pytest

from benchmarks.conftest import interleaved_samples
from partitioning import PartitionedNamespace
from partitioning.search.text import plan_text_search, search_text
from partitioning.tables.write import write_table
from pipelines.search.indexes import create_scalar_index
from pipelines.search.text import search_text_partitioned

pytestmark = pytest.mark.bench

ROWS = 200_000
PARTITIONS = 64
WORDS = 5_000
K = 10
QUERIES = ("w17", "w3 w250", "w1200 w40 w7", "w999 w4000", "w2 w9 w33 w120")


def _data(rng: np.random.Generator) -> pa.Table:
    words = np.array([f"w{i}" for i in range(WORDS)])
    weights = 1.0 / np.arange(1, WORDS + 1) ** 1.1
    part = rng.integers(0, PARTITIONS, ROWS)
    lengths = rng.integers(4, 61, ROWS)
    texts = []
    for j in range(PARTITIONS):
        rows = np.flatnonzero(part == j)
        p = np.roll(weights, 37 * j)  # each partition's own frequent words
        p /= p.sum()
        picks = rng.choice(WORDS, size=int(lengths[rows].sum()), p=p)
        ends = np.cumsum(lengths[rows])
        texts.extend(
            (int(r), " ".join(words[picks[e - n : e]])) for r, n, e in zip(rows, lengths[rows], ends, strict=True)
        )
    texts.sort()
    return pa.table(
        {
            "id": pa.array(np.arange(ROWS), pa.int64()),
            "p": pa.array(part, pa.int32()),
            "text": pa.array([t for _, t in texts], pa.string()),
        }
    )


def _ranked(table: pa.Table) -> list[tuple[int, float]]:
    return list(zip(table.column("id").to_pylist(), table.column("_score").to_pylist(), strict=True))


def _same(ours: list[tuple[int, float]], plain: lance.LanceDataset, query: str, **kw: object) -> bool:
    """Same scores in the same order, same ids but among ties (checked against every tied row)."""
    top = _ranked(plain.to_table(full_text_query=query, columns=["id"], limit=K, **kw))
    if [s for _, s in ours] != [s for _, s in top]:
        return False
    every = _ranked(plain.to_table(full_text_query=query, columns=["id"], **kw))
    tied: dict[float, set[int]] = {}
    for i, s in every:
        tied.setdefault(s, set()).add(i)
    return all(i == j or (i in tied[s] and j in tied[s]) for (i, s), (j, _) in zip(ours, top, strict=True))


def test_full_text_search_vs_one_lance_dataset(spark, tmp_path):
    table = _data(np.random.default_rng(29))
    root, plain_uri = str(tmp_path / "ns"), str(tmp_path / "plain")
    write_table(PartitionedNamespace.create(root, table.schema, ["p"]), table)
    plain = lance.write_dataset(table, plain_uri)
    assert len(PartitionedNamespace.load(root).partitions()) == PARTITIONS

    t0 = time.perf_counter()
    report = create_scalar_index(root, "text", "INVERTED", spark=spark)
    t1 = time.perf_counter()
    plain.create_scalar_index("text", "INVERTED")
    t2 = time.perf_counter()
    print(f"\nindex build: ours {t1 - t0:.2f} s ({report.summary()}), one dataset {t2 - t1:.2f} s")
    plain = lance.dataset(plain_uri)
    ns = PartitionedNamespace.load(root)

    t3 = time.perf_counter()
    search_text(plan_text_search(ns, QUERIES[0], k=K, columns=["id"]))
    print(f"first search (64 partitions tokenized and kept): {time.perf_counter() - t3:.2f} s")

    target = 7
    same = [_same(_ranked(search_text(plan_text_search(ns, q, k=K, columns=["id"]))), plain, q) for q in QUERIES] + [
        _same(
            [(r["id"], r["_score"]) for r in search_text_partitioned(spark, root, q, k=K, columns=["id"]).collect()],
            plain,
            q,
        )
        for q in QUERIES
    ]
    where = f"p = {target}"
    same += [
        _same(
            _ranked(search_text(plan_text_search(ns, q, k=K, filter=where, columns=["id"]))),
            plain,
            q,
            filter=where,
            prefilter=True,
        )
        for q in QUERIES
    ]
    print(f"same results as one dataset: {sum(same)} of {len(same)} queries")

    def ours(where: str | None = None) -> None:
        for q in QUERIES:
            search_text(plan_text_search(ns, q, k=K, filter=where, columns=["id"]))

    def ours_df(where: str | None = None) -> None:
        for q in QUERIES:
            search_text_partitioned(spark, root, q, k=K, filter=where, columns=["id"]).collect()

    def theirs(where: str | None = None) -> None:
        for q in QUERIES:
            plain.to_table(full_text_query=q, limit=K, columns=["id"], filter=where, prefilter=where is not None)

    timings = interleaved_samples(
        {
            "ours": ours,
            "ours_df": ours_df,
            "plain": theirs,
            "ours_1of64": lambda: ours(where),
            "ours_df_1of64": lambda: ours_df(where),
            "plain_1of64": lambda: theirs(where),
        },
        repeats=9,
    )
    n = len(QUERIES)
    print(
        "latency a query, median (min .. max): "
        + ", ".join(f"{name} {t.show(scale=1000 / n, unit='ms', digits=2)}" for name, t in timings.items())
    )
    latency = {name: t.median for name, t in timings.items()}
    ratio = latency["ours"] / latency["plain"]
    print(
        f"ratios: unfiltered {ratio:.2f}x / DataFrame {latency['ours_df'] / latency['plain']:.2f}x (<= 3x), "
        f"1 of 64 {latency['ours_1of64'] / latency['plain_1of64']:.2f}x / DataFrame "
        f"{latency['ours_df_1of64'] / latency['plain_1of64']:.2f}x"
    )
    assert all(same)
    assert ratio <= 3.0
