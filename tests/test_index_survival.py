"""Indexes survive appends, overwrites of other partitions, schema evolution, compaction and
deletes (issue 13); numpy brute force is the oracle of every nearest search."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from partitioning import PartitionedNamespace
from partitioning.tables.compaction import compact_local
from partitioning.tables.deletes import delete_rows
from partitioning.tables.write import write_table
from pipelines.maintenance.operations import compact
from pipelines.search.indexes import create_scalar_index, create_vector_index, optimize_indexes

DIM = 16
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("v", pa.list_(pa.float32(), DIM))])
NLIST = 4


def rows(n: int, c: str, start: int, seed: int) -> pa.Table:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "c": [c] * n, "v": vectors}, schema=SCHEMA)


def partition(ns: PartitionedNamespace, c: str) -> lance.LanceDataset:
    (t,) = [t for t in ns.partitions() if next(iter(t.values.values())) == c]
    return lance.dataset(t.uri, version=t.read_version)


def index_rows(ds: lance.LanceDataset, name: str = "v_idx") -> tuple[int, int]:
    s = ds.stats.index_stats(name)
    return s["num_indexed_rows"], s["num_unindexed_rows"]


def assert_search_exact(ds: lance.LanceDataset, expected: pa.Table, column: str = "v", k: int = 7) -> None:
    """The indexed search (all lists probed, refined over every candidate) equals numpy brute force."""
    vectors = np.stack(expected.column(column).to_numpy(zero_copy_only=False))
    ids = expected.column("id").to_numpy()
    for seed in range(3):
        q = np.random.default_rng(1000 + seed).standard_normal(DIM).astype(np.float32)
        d = ((vectors - q) ** 2).sum(axis=1)
        want = ids[np.lexsort((ids, d))[:k]].tolist()
        got = ds.to_table(nearest={"column": column, "q": q, "k": k, "nprobes": NLIST, "refine_factor": 10_000})
        assert got.column("id").to_pylist() == want
        np.testing.assert_allclose(got.column("_distance").to_numpy(), np.sort(d)[:k], rtol=1e-4)


@pytest.fixture
def indexed(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    data = pa.concat_tables([rows(700, "a", 0, 1), rows(40, "b", 10_000, 2)])
    write_table(ns, data)
    create_vector_index(root, "v", index_type="IVF_PQ", num_partitions=NLIST, spark=spark)
    ns = PartitionedNamespace.load(root)
    assert index_rows(partition(ns, "a")) == (700, 0)
    return root, data


def only(data: pa.Table, c: str) -> pa.Table:
    return data.filter(pc.equal(data.column("c"), c))


def test_append_keeps_the_index_and_new_rows_are_searchable(indexed):
    root, data = indexed
    more = rows(60, "a", 20_000, 3)
    write_table(PartitionedNamespace.load(root), more)
    ds = partition(PartitionedNamespace.load(root), "a")
    assert index_rows(ds) == (700, 60)
    assert_search_exact(ds, pa.concat_tables([only(data, "a"), more]))


def test_overwriting_another_partition_keeps_this_one(indexed):
    root, data = indexed
    write_table(PartitionedNamespace.load(root), rows(5, "b", 30_000, 4), mode="overwrite_partitions")
    ns = PartitionedNamespace.load(root)
    assert index_rows(partition(ns, "a")) == (700, 0)
    assert_search_exact(partition(ns, "a"), only(data, "a"))
    assert sorted(partition(ns, "b").to_table().column("id").to_pylist()) == list(range(30_000, 30_005))


def test_schema_evolution_keeps_the_index(indexed):
    root, data = indexed
    ns = PartitionedNamespace.load(root)
    ns.add_columns([pa.field("extra", pa.int32())])
    ns.rename_column("v", "emb")
    more = rows(20, "a", 40_000, 5).rename_columns(["id", "c", "emb"])
    write_table(PartitionedNamespace.load(root), more.append_column("extra", pa.array([1] * 20, pa.int32())))
    ns = PartitionedNamespace.load(root)
    ds = partition(ns, "a")
    assert index_rows(ds) == (700, 20)
    expected = pa.concat_tables([only(data, "a").rename_columns(["id", "c", "emb"]), more])
    assert_search_exact(ds, expected, column="emb")
    listed = {(r["column"], r["indexed_rows"]) for r in ns.indexes().to_pylist() if r["index_name"] == "v_idx"}
    assert ("emb", 700) in listed


@pytest.fixture
def fragmented(tmp_path):
    """Partition 'a' indexed over three fragments, then three unindexed appends and a delete,
    so compaction has indexed and unindexed fragments (and deletion files) to rewrite."""
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["c"])
    before = [rows(200, "a", 0, 1), rows(200, "a", 1_000, 2), rows(300, "a", 2_000, 3), rows(40, "b", 10_000, 4)]
    for t in before:
        write_table(PartitionedNamespace.load(root), t)
    after = [rows(30, "a", 50_000 + 100 * i, 10 + i) for i in range(3)]
    return root, before, after


def _append_and_delete(root: str, after: list[pa.Table], before: list[pa.Table]) -> pa.Table:
    for t in after:
        write_table(PartitionedNamespace.load(root), t)
    delete_rows(root, "c = 'a' AND id % 5 = 0")
    a = only(pa.concat_tables([*before, *after]), "a")
    return a.filter(pa.array(a.column("id").to_numpy() % 5 != 0))


@pytest.mark.parametrize("index_type", ["IVF_PQ", "IVF_FLAT"])
def test_compaction_remaps_the_vector_index_and_keeps_search_exact(spark, fragmented, index_type):
    root, before, after = fragmented
    create_vector_index(root, "v", index_type=index_type, num_partitions=NLIST, spark=spark)
    expected = _append_and_delete(root, after, before)
    indexed_live = sum(1 for i in expected.column("id").to_pylist() if i < 50_000)
    ds = partition(PartitionedNamespace.load(root), "a")
    assert len(ds.get_fragments()) == 6
    assert index_rows(ds) == (indexed_live, expected.num_rows - indexed_live) == (560, 72)

    report = compact(root, spark=spark)
    ds = partition(PartitionedNamespace.load(root), "a")
    assert report.tables == 1 and report.skipped == ()
    assert [f.metadata.deletion_file for f in ds.get_fragments()] == [None, None]
    assert ds.count_rows() == expected.num_rows
    assert index_rows(ds) == (560, 72)
    assert_search_exact(ds, expected)
    if index_type == "IVF_FLAT":
        q = np.random.default_rng(7).standard_normal(DIM).astype(np.float32)
        vectors = np.stack(expected.column("v").to_numpy(zero_copy_only=False))
        d = ((vectors - q) ** 2).sum(axis=1)
        got = ds.to_table(nearest={"column": "v", "q": q, "k": 10, "nprobes": NLIST})
        assert got.column("id").to_pylist() == expected.column("id").to_numpy()[np.argsort(d)[:10]].tolist()

    optimize_indexes(root, spark=spark)
    ds = partition(PartitionedNamespace.load(root), "a")
    assert index_rows(ds) == (expected.num_rows, 0)
    assert_search_exact(ds, expected)


def test_compaction_without_spark_remaps_a_btree_index(spark, fragmented):
    root, before, after = fragmented
    create_scalar_index(root, "id", "BTREE", spark=spark)
    expected = _append_and_delete(root, after, before)
    ds = partition(PartitionedNamespace.load(root), "a")
    assert index_rows(ds, "id_idx") == (560, 72)

    report = compact_local(PartitionedNamespace.load(root))
    ns = PartitionedNamespace.load(root)
    ds = partition(ns, "a")
    assert report.tables == 1 and len(ds.get_fragments()) == 2
    assert index_rows(ds, "id_idx") == (560, 72)
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 1001").explain_plan()
    live = set(expected.column("id").to_pylist())
    for probe in [1, 5, 199, 1_001, 1_005, 2_299, 50_001, 50_205]:
        got = ds.to_table(filter=f"id = {probe}")
        assert got.column("id").to_pylist() == ([probe] if probe in live else [])
        if probe in live:
            row = expected.filter(pc.equal(expected.column("id"), probe))
            assert got.column("v").to_pylist() == row.column("v").to_pylist()
    got = sorted(ds.to_table(filter="id >= 150 AND id < 1050").column("id").to_pylist())
    assert got == sorted(i for i in live if 150 <= i < 1_050)
    assert index_rows(partition(ns, "b"), "id_idx") == (40, 0)


def test_a_write_after_another_client_compacted_the_partition_keeps_the_index(spark, fragmented):
    """pylance cannot read back the transaction of a compaction that remapped indexes; a
    write on top of such an unrecorded version still builds on the recorded one."""
    root, before, after = fragmented
    create_vector_index(root, "v", index_type="IVF_FLAT", num_partitions=NLIST, spark=spark)
    (t,) = [t for t in PartitionedNamespace.load(root).partitions() if t.values and "a" in t.values.values()]
    lance.dataset(t.uri).optimize.compact_files()
    write_table(PartitionedNamespace.load(root), after[0])
    ds = partition(PartitionedNamespace.load(root), "a")
    assert index_rows(ds) == (700, 30)
    assert_search_exact(ds, pa.concat_tables([only(pa.concat_tables(before), "a"), after[0]]))


def test_delete_rows_keeps_the_index(indexed):
    root, data = indexed
    delete_rows(root, "c = 'a' AND id % 3 = 0")
    ds = partition(PartitionedNamespace.load(root), "a")
    a = only(data, "a")
    kept = a.filter(pa.array(a.column("id").to_numpy() % 3 != 0))
    assert ds.count_rows() == kept.num_rows == 466
    assert index_rows(ds) == (466, 0)
    assert_search_exact(ds, kept)
