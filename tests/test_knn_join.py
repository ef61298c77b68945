"""knn_join (issue 13): every query's top-k, from the driver's threads and in one Spark job,
checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.sql import types as T
from search_data import DIM, brute_force, create, data_of, distances, index_all, make_table

from partitioning.errors import InvalidInput, SchemaError
from partitioning.search import knn_scan
from partitioning.search.nearest import plan_search, search_tasks
from pipelines.search.queries import knn_join

QUERY_SCHEMA = T.StructType([T.StructField("qid", T.StringType()), T.StructField("q", T.ArrayType(T.FloatType()))])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("knn") / "ns")
    tables = [make_table(1200, 61, null_every=5)]
    ns = create(root, tables)
    return root, ns, data_of(tables)


def _queries(spark, n: int, seed: int = 3, *, null: bool = False):
    matrix = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    rows = [(f"q{i}", [float(x) for x in matrix[i]]) for i in range(n)]
    if null:
        rows.append(("none", None))
    return spark.createDataFrame(rows, QUERY_SCHEMA), matrix


@pytest.fixture(params=["driver threads", "a Spark job"])
def where(request) -> dict[str, int]:
    """knn_join's two ways: partitions searched from the driver, or in a Spark job."""
    return {} if request.param == "driver threads" else {"driver_max_partitions": 0}


def _by_query(df) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in df.collect():
        out.setdefault(r["qid"], []).append(r["id"])
    return out


def test_exact_knn_join_equals_numpy_with_and_without_filters(spark, built, where):
    root, _, data = built
    queries, matrix = _queries(spark, 12, null=True)
    cases = {
        None: None,
        "c = 'c'": data.cats == "c",
        "score >= 0.4 AND c IN ('a', 'b')": (data.scores >= 0.4) & np.isin(data.cats, ["a", "b"]),
    }
    for filter_sql, mask in cases.items():
        df = knn_join(
            spark, queries, root, k=6, query_id="qid", query_column="q", filter=filter_sql, exact=True, **where
        )
        assert df.columns == ["qid", "id", "c", "score", "v", "_distance"]
        got = _by_query(df)
        assert "none" not in got  # a NULL query vector matches nothing
        assert got == {f"q{i}": brute_force(data, matrix[i], 6, mask) for i in range(len(matrix))}
    rows = knn_join(
        spark, queries, root, k=3, query_id="qid", query_column="q", exact=True, columns=["id"], **where
    ).collect()
    for qid in ("q0", "q5"):
        mine = [r for r in rows if r["qid"] == qid]
        expected = distances(data, matrix[int(qid[1:])], [r["id"] for r in mine])
        assert np.allclose([r["_distance"] for r in mine], expected, rtol=1e-4)


def test_knn_join_cosine_k_larger_than_the_data_and_empty_results(spark, built, where):
    root, _, data = built
    queries, matrix = _queries(spark, 4, seed=8)
    few = (data.cats == "d") & (data.scores > 0.9)
    df = knn_join(
        spark,
        queries,
        root,
        k=500,
        query_id="qid",
        query_column="q",
        metric="cosine",
        exact=True,
        filter="c = 'd' AND score > 0.9",
        columns=["id"],
        **where,
    )
    got = _by_query(df)
    assert got == {f"q{i}": brute_force(data, matrix[i], 500, few, "cosine") for i in range(4)}
    assert all(len(v) == int((few & ~data.null).sum()) for v in got.values())
    empty = knn_join(spark, queries, root, k=3, query_id="qid", query_column="q", filter="c = 'zzz'", **where)
    assert empty.count() == 0 and empty.columns == ["qid", "id", "c", "score", "v", "_distance"]


def test_knn_join_accepts_ml_vectors_and_integer_ids(spark, built, where):
    root, _, data = built
    matrix = np.random.default_rng(4).standard_normal((3, DIM))
    queries = spark.createDataFrame([(i, Vectors.dense(matrix[i].tolist())) for i in range(3)], ["n", "vec"])
    df = knn_join(spark, queries, root, k=4, query_id="n", query_column="vec", exact=True, columns=["id"], **where)
    got: dict[int, list[int]] = {}
    for r in df.collect():
        got.setdefault(r["n"], []).append(r["id"])
    assert got == {i: brute_force(data, matrix[i].astype(np.float32), 4) for i in range(3)}


def test_indexed_knn_join_recall(spark, tmp_path, where):
    root = str(tmp_path / "ns")
    tables = [make_table(2500, 71)]
    index_all(create(root, tables))
    data = data_of(tables)
    queries, matrix = _queries(spark, 20, seed=12)
    got = _by_query(
        knn_join(spark, queries, root, k=10, query_id="qid", query_column="q", nprobes=3, refine_factor=10, **where)
    )
    recall = [len(set(got[f"q{i}"]) & set(brute_force(data, matrix[i], 10))) / 10 for i in range(20)]
    assert np.mean(recall) >= 0.9


def test_knn_join_errors(spark, built):
    root, _, _ = built
    queries, _ = _queries(spark, 2)
    short = spark.createDataFrame([("a", [1.0, 2.0])], QUERY_SCHEMA)
    with pytest.raises(InvalidInput) as exc:
        knn_join(spark, short, root, k=3, query_id="qid", query_column="q")
    assert str(exc.value) == "query_column 'q' has 1 vector(s) of dimension 2, but column 'v' has dimension 16"
    with pytest.raises(SchemaError, match="query_column 'nope' is not a column of the queries"):
        knn_join(spark, queries, root, k=3, query_id="qid", query_column="nope")
    with pytest.raises(SchemaError, match="query_column 'qid' is string, not an array"):
        knn_join(spark, queries, root, k=3, query_id="qid", query_column="qid")
    with pytest.raises(InvalidInput, match="query_id 'id' is also a column of the namespace"):
        knn_join(spark, queries.withColumnRenamed("qid", "id"), root, k=3, query_id="id", query_column="q")
    with pytest.raises(InvalidInput, match="k must be a positive integer, got -1"):
        knn_join(spark, queries, root, k=-1, query_id="qid", query_column="q")


@pytest.mark.parametrize("metric", ["l2", "cosine"])
@pytest.mark.parametrize("filter_sql", [None, "c IN ('a', 'b') AND score > 0.3"])
def test_a_batch_scan_equals_one_lance_search_per_query(built, monkeypatch, metric, filter_sql):
    """A batch of queries over a small partition is answered by one numpy pass
    (partitioning.search.knn_scan); it must give numpy's rows and Lance's per-query distances, and
    above the size budget the Lance route must give the same rows."""
    _, ns, data = built
    plan = plan_search(ns, k=7, filter=filter_sql, metric=metric, exact=True, columns=["id"])
    queries = np.random.default_rng(9).standard_normal((5, DIM)).astype(np.float32)
    mask = None
    if filter_sql:
        mask = np.isin(data.cats, ["a", "b"]) & (data.scores > 0.3)
    batch = search_tasks(plan, plan.tasks, queries)
    one_by_one = [search_tasks(plan, plan.tasks, queries[i : i + 1])[0] for i in range(len(queries))]
    monkeypatch.setattr(knn_scan, "MAX_ELEMENTS", 1)
    through_lance = search_tasks(plan, plan.tasks, queries)
    for i, q in enumerate(queries):
        want = brute_force(data, q, 7, mask, metric)
        for got in (batch[i], one_by_one[i], through_lance[i]):
            assert got.column("id").to_pylist() == want
        np.testing.assert_allclose(
            batch[i].column("_distance").to_numpy(), one_by_one[i].column("_distance").to_numpy(), rtol=1e-4, atol=1e-4
        )
