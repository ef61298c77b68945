"""Commits other Lance clients make to a partition dataset between two of our writes.

``__manifest`` is the source of truth: a write builds on the version it records. Indexes
another client built are carried over when still valid for the new version; another
client's data commits are not included, and stay in the dataset's history.
"""

from __future__ import annotations

import logging

import lance
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from partitioning.tables.deletes import delete_rows
from partitioning.tables.write import write_table
from pipelines.write.dataframe import write_partitioned

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("c", pa.string())])


def _rows(ids, c: str = "US") -> pa.Table:
    return pa.table({"id": list(ids), "c": [c] * len(ids)}, schema=SCHEMA)


def _table(root: str, c: str = "US"):
    ns = PartitionedNamespace.load(root)
    (table,) = [p for p in ns.partitions() if p.values["c"] == c]
    return table


def _at_manifest(root: str, c: str = "US") -> lance.LanceDataset:
    t = _table(root, c)
    return lance.dataset(t.uri, version=t.read_version)


def _indexes(ds: lance.LanceDataset) -> dict[str, int]:
    return {d.name: d.num_rows_indexed for d in ds.describe_indices()}


def _uses_index(ds: lance.LanceDataset, where: str) -> bool:
    return "ScalarIndexQuery" in ds.scanner(filter=where).explain_plan()


@pytest.fixture
def root(tmp_path):
    path = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(path, SCHEMA, ["c"])
    write_table(ns, _rows(range(0, 10)))
    write_table(ns, _rows(range(100, 110)))
    return path


def test_an_index_built_by_another_client_survives_our_next_write(root):
    lance.dataset(_table(root).uri).create_scalar_index("id", "BTREE")
    write_table(PartitionedNamespace.load(root), _rows(range(200, 210)))
    ds = _at_manifest(root)
    assert _indexes(ds) == {"id_idx": 20}
    assert _uses_index(ds, "id = 105")
    for wanted in (5, 105, 205):
        assert ds.to_table(filter=f"id = {wanted}").column("id").to_pylist() == [wanted]
    assert sorted(ds.to_table().column("id").to_pylist()) == [*range(10), *range(100, 110), *range(200, 210)]
    write_table(PartitionedNamespace.load(root), _rows(range(300, 305)))
    assert _indexes(_at_manifest(root)) == {"id_idx": 20}


def test_an_index_survives_a_spark_write_and_an_optimize_by_the_other_client(spark, root):
    uri = _table(root).uri
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    write_table(PartitionedNamespace.load(root), _rows(range(200, 210)))
    lance.dataset(uri).optimize.optimize_indices()
    df = spark.range(400, 410).select(F.col("id"), F.lit("US").alias("c"))
    write_partitioned(df, root)
    ds = _at_manifest(root)
    assert _indexes(ds) == {"id_idx": 30}
    assert [len(d.segments) for d in ds.describe_indices()] == [1]
    assert _uses_index(ds, "id = 205")
    assert ds.to_table(filter="id = 405").column("id").to_pylist() == [405]
    assert ds.count_rows() == 40


def test_another_clients_append_is_neither_included_nor_deleted(root, caplog):
    uri = _table(root).uri
    before = _table(root).read_version
    foreign = lance.write_dataset(_rows(range(900, 903)), uri, mode="append")
    foreign.create_scalar_index("id", "BTREE")  # covers the foreign fragment: must not come along
    with caplog.at_level(logging.WARNING, logger="partitioning.storage.alignment"):
        write_table(PartitionedNamespace.load(root), _rows(range(200, 205)))
    ds = _at_manifest(root)
    assert sorted(ds.to_table().column("id").to_pylist()) == [*range(10), *range(100, 110), *range(200, 205)]
    assert _indexes(ds) == {}
    assert ds.to_table(filter="id = 901").num_rows == 0
    assert sorted(lance.dataset(uri, version=foreign.version).to_table().column("id").to_pylist())[-3:] == [
        900,
        901,
        902,
    ]
    (warning,) = [r.getMessage() for r in caplog.records if uri in r.getMessage()]
    assert f"versions {before + 1}" in warning and "not included" in warning


def test_an_index_built_after_another_clients_delete_is_not_carried(root):
    """Our version still holds the deleted row, which that index does not know."""
    foreign = lance.dataset(_table(root).uri)
    foreign.delete("id = 3")
    foreign.create_scalar_index("id", "BTREE")
    write_table(PartitionedNamespace.load(root), _rows(range(200, 202)))
    ds = _at_manifest(root)
    assert _indexes(ds) == {}
    assert ds.to_table(filter="id = 3").column("id").to_pylist() == [3]


def test_new_fragments_never_reuse_an_id_an_index_still_covers(root):
    """An index keeps covering a fragment deleted whole; a new fragment with its id would be
    taken as indexed, and an indexed query would miss its rows."""
    lance.dataset(_table(root).uri).create_scalar_index("id", "BTREE")
    write_table(PartitionedNamespace.load(root), _rows(range(200, 210)))
    delete_rows(root, "id >= 100")
    write_table(PartitionedNamespace.load(root), _rows(range(300, 310)))
    ds = _at_manifest(root)
    assert "id_idx" in _indexes(ds)
    assert _uses_index(ds, "id = 305")
    assert ds.to_table(filter="id = 305").column("id").to_pylist() == [305]
    assert sorted(ds.to_table().column("id").to_pylist()) == [*range(10), *range(300, 310)]


def test_an_index_built_by_another_client_survives_delete_rows_and_compaction(root):
    from partitioning.tables.compaction import compact_local

    lance.dataset(_table(root).uri).create_scalar_index("id", "BTREE")
    assert delete_rows(root, "id = 3").rows == 1
    ds = _at_manifest(root)
    assert "id_idx" in _indexes(ds)
    assert _uses_index(ds, "id = 105")
    assert ds.to_table(filter="id = 105").column("id").to_pylist() == [105]
    assert ds.to_table(filter="id = 3").num_rows == 0
    compact_local(PartitionedNamespace.load(root))
    ds = _at_manifest(root)
    assert "id_idx" in _indexes(ds)
    assert sorted(ds.to_table().column("id").to_pylist()) == [i for i in range(10) if i != 3] + list(range(100, 110))
    assert ds.to_table(filter="id = 105").column("id").to_pylist() == [105]
