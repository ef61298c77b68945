"""Roots that are not (only) a partitioned namespace are refused before anything is written."""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from partitioning import PartitionedNamespace
from partitioning.errors import CorruptNamespace, InvalidInput
from partitioning.tables.write import write_table
from pipelines import register_data_source
from pipelines.write.dataframe import write_partitioned

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string())])
ROWS = pa.table({"id": [1, 2, 3], "c": ["US", "CN", "US"]}, schema=SCHEMA)


def snapshot(root: str) -> dict[str, bytes | None]:
    """Every directory (None) and file (its bytes) under ``root``."""
    out: dict[str, bytes | None] = {}
    for here, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(here, d), root) + "/"] = None
        for f in files:
            path = os.path.join(here, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def _plain_dataset(root: str) -> None:
    lance.write_dataset(ROWS, root)


def _a_file(root: str) -> None:
    os.makedirs(root)
    with open(os.path.join(root, "notes.txt"), "w") as fh:
        fh.write("not a namespace")


def _another_dir(root: str) -> None:
    os.makedirs(os.path.join(root, "exports", "2025"))


OCCUPANTS = {"plain_dataset": _plain_dataset, "file": _a_file, "other_dir": _another_dir}


@pytest.mark.parametrize("occupant", sorted(OCCUPANTS))
def test_write_partitioned_refuses_an_occupied_root(spark, tmp_path, occupant):
    root = str(tmp_path / "root")
    OCCUPANTS[occupant](root)
    before = snapshot(root)
    df = spark.createDataFrame(ROWS.to_pylist(), "id long, c string")
    with pytest.raises(InvalidInput, match=r"cannot create a partitioned namespace at .*not empty"):
        write_partitioned(df, root, partition_by=["c"])
    assert snapshot(root) == before


@pytest.mark.parametrize("occupant", sorted(OCCUPANTS))
def test_the_data_source_refuses_an_occupied_root(spark, tmp_path, occupant):
    register_data_source(spark)
    root = str(tmp_path / "root")
    OCCUPANTS[occupant](root)
    before = snapshot(root)
    df = spark.createDataFrame(ROWS.to_pylist(), "id long, c string")
    refused = r"^\[LANCE_INVALID_INPUT\] cannot create a partitioned namespace at .*not empty"
    with pytest.raises(PySparkException, match=refused):
        df.write.format("lance_partitioned").mode("append").option("partition_by", "c").save(root)
    assert snapshot(root) == before


@pytest.mark.parametrize("occupant", sorted(OCCUPANTS))
def test_create_refuses_an_occupied_root(tmp_path, occupant):
    root = str(tmp_path / "root")
    OCCUPANTS[occupant](root)
    before = snapshot(root)
    with pytest.raises(InvalidInput, match=r"cannot create a partitioned namespace at .*not empty"):
        PartitionedNamespace.create(root, SCHEMA, ["c"])
    assert snapshot(root) == before


def test_a_namespace_root_that_is_also_a_plain_dataset_takes_no_writes(spark, tmp_path):
    root = str(tmp_path / "root")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, ROWS)
    _plain_dataset(root)
    before = snapshot(root)
    with pytest.raises(InvalidInput, match=r"is a plain Lance dataset as well as a partitioned namespace"):
        write_table(PartitionedNamespace.load(root), ROWS)
    df = spark.createDataFrame(ROWS.to_pylist(), "id long, c string")
    with pytest.raises(InvalidInput, match=r"is a plain Lance dataset as well as a partitioned namespace"):
        write_partitioned(df, root)
    assert snapshot(root) == before


def _corrupt_spec(root: str, source_ids: list[int]) -> None:
    """Rewrite partition_spec_v1 in the __manifest table metadata, as another tool might."""
    manifest = lance.dataset(f"{root}/__manifest")
    spec = json.loads(manifest.metadata["partition_spec_v1"])
    spec["fields"][0]["source_ids"] = source_ids
    manifest.update_metadata({"partition_spec_v1": json.dumps(spec)})


@pytest.mark.parametrize("source_ids", [[99], [2]])
def test_a_spec_naming_an_unknown_source_id_is_refused_when_loaded(spark, tmp_path, source_ids):
    root = str(tmp_path / "root")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["c"]), ROWS)
    _corrupt_spec(root, source_ids)
    before = snapshot(root)
    expected = rf"partition field 'c' of spec v1 reads source id {source_ids[0]}, which is not a top-level column"
    with pytest.raises(CorruptNamespace, match=expected) as info:
        PartitionedNamespace.load(root)
    assert "\n" not in str(info.value)
    df = spark.createDataFrame([(9, "DE")], "id long, c string")
    with pytest.raises(CorruptNamespace, match=expected):
        write_partitioned(df, root)
    assert snapshot(root) == before


def test_an_older_spec_may_read_a_dropped_column(tmp_path):
    """The check is not stricter than evolution: v1's source may be dropped once v2 is current."""
    root = str(tmp_path / "root")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, ROWS)
    ns.evolve_partition_spec(["bucket[4](id)"])
    ns.drop_column("c")
    reloaded = PartitionedNamespace.load(root)
    assert sorted(reloaded.specs) == [1, 2]
    assert reloaded.schema.names == ["id"]
