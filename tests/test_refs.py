"""Partition tables read from a branch or a tag (SPEC-NOTES 15), made by pylance itself."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from partitioning.errors import PartitioningError
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.write import write_table
from pipelines.read.dataframe import read_partitioned

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _point(root: str, object_id: str, **columns: object) -> None:
    """Rewrite one table row of __manifest, as another client of the spec could."""
    store = ManifestStore(root)
    ds = store.dataset()
    rows = ds.to_table(filter=f"object_id = '{object_id}'").to_pylist()
    rows[0].update(columns)
    store.merge_rows(ds, pa.Table.from_pylist(rows, schema=ds.schema))


@pytest.fixture()
def ns_with_branch(tmp_path: Path) -> tuple[str, str]:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    write_table(ns, pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"]}, schema=SCHEMA))
    table = next(t for t in ns.partitions() if t.values["p"] == "a")
    ds = lance.dataset(table.uri)
    branch = ds.create_branch("experiment")
    branch.insert(pa.Table.from_pylist([{"id": 10, "p": "a"}], schema=ds.schema))
    branch.insert(pa.Table.from_pylist([{"id": 11, "p": "a"}], schema=ds.schema))
    return root, table.object_id


def test_a_branch_with_a_version_reads_that_branch_version(ns_with_branch, spark: SparkSession) -> None:
    root, object_id = ns_with_branch
    head = lance.dataset(PartitionedNamespace.load(root).partitions()[0].uri)
    version = head.version
    _point(root, object_id, read_branch="experiment", read_version=version + 1)
    ns = PartitionedNamespace.load(root)
    table = next(t for t in ns.partitions() if t.object_id == object_id)
    assert sorted(r["id"] for r in ns.open_table(table).to_table().to_pylist()) == [1, 2, 10]
    got = sorted(r.id for r in read_partitioned(spark, root).collect())
    assert got == [1, 2, 3, 10]
    got = sorted(r.id for r in spark.read.format("lance_partitioned").load(root).where("p = 'a'").collect())
    assert got == [1, 2, 10]


def test_a_tag_names_the_version(ns_with_branch, spark: SparkSession) -> None:
    root, object_id = ns_with_branch
    table = next(t for t in PartitionedNamespace.load(root).partitions() if t.object_id == object_id)
    ds = lance.dataset(table.uri)
    ds.tags.create("before-branch", table.read_version)
    _point(root, object_id, read_tag="before-branch", read_version=None)
    got = sorted(r.id for r in read_partitioned(spark, root, filter="p = 'a'").collect())
    assert got == [1, 2]


def test_a_missing_branch_is_one_line_naming_it(ns_with_branch) -> None:
    root, object_id = ns_with_branch
    _point(root, object_id, read_branch="nope", read_version=1)
    ns = PartitionedNamespace.load(root)
    table = next(t for t in ns.partitions() if t.object_id == object_id)
    with pytest.raises(PartitioningError) as info:
        ns.open_table(table)
    assert "branch 'nope'" in str(info.value)
    assert "\n" not in str(info.value)
