"""One meaning of a root: a relative local root is made absolute on the driver, before
anything is planned, so every URI a task receives names the same place on every machine.

In the local[2] session the executors' Python workers run in the JVM's working
directory, which is not the test's (``monkeypatch.chdir``): a relative path reaching a
task would write somewhere else, as on a real cluster.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput, NamespaceNotFound
from partitioning.storage.lease_files import list_leases
from partitioning.storage.leases import take_lease
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.roots import resolve_root
from partitioning.tables.compaction import compact_local, plan_compaction
from partitioning.tables.deletes import delete_rows
from partitioning.tables.fragments import FragmentWriter
from partitioning.tables.write import write_table
from pipelines import read_partitioned, write_partitioned
from pipelines.maintenance.operations import compact
from pipelines.maintenance.operations import delete_rows as spark_delete_rows
from pipelines.source.datasource import LancePartitionedDataSource
from pipelines.source.reader import LanceInputPartition
from pipelines.source.writer import LancePartitionedWriter

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string()), pa.field("v", pa.int64())]
)
SPARK_SCHEMA = "id long, country string, v long"


def _table(rows: list[tuple[int, str, int]]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "country": c, "v": v} for i, c, v in rows], schema=SCHEMA)


def _lance_files(directory: Path) -> list[Path]:
    """The partition tables' data files under ``directory`` (not ``__manifest``'s)."""
    found = directory.rglob("*.lance") if directory.exists() else []
    return sorted(p for p in found if "__manifest" not in p.parts)


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/warehouse/events",
        "gs://bucket/events/",
        "az://container/events",
        "file:///srv/warehouse/events",
        "memory://events",
    ],
)
def test_uris_pass_through_unchanged(uri):
    assert resolve_root(uri) == uri


def test_local_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_root("rel/events") == f"{tmp_path}/rel/events"
    assert resolve_root("./a/../events/") == f"{tmp_path}/events"
    assert resolve_root(f"{tmp_path}/x") == f"{tmp_path}/x"
    assert resolve_root("file:/srv/warehouse/events") == "/srv/warehouse/events"
    assert resolve_root("~/events") == os.path.join(os.path.expanduser("~"), "events")
    for bad in ("", "  ", None):
        with pytest.raises(InvalidInput, match="non-empty path or URI"):
            resolve_root(bad)  # type: ignore[arg-type]


def test_spark_free_api_resolves_a_relative_root_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    absolute = tmp_path / "rel" / "ns"
    ns = PartitionedNamespace.create("rel/ns", SCHEMA, ["country"])
    assert ns.root == str(absolute)
    assert ManifestStore("rel/ns").uri == f"{absolute}/__manifest"
    write_table(ns, _table([(1, "US", 1), (2, "CN", 2), (3, "US", 3)]))
    write_table(PartitionedNamespace.load("rel/ns"), _table([(4, "US", 4)]))

    planned = PartitionedNamespace.load("./rel/../rel/ns")
    assert planned.root == str(absolute)
    assert all(t.uri.startswith(f"{absolute}/") for t in planned.plan_scan())
    assert all(t.uri.startswith(f"{absolute}/") for t in plan_compaction(planned))
    assert FragmentWriter.for_namespace(planned).root == str(absolute)
    assert len(_lance_files(absolute)) == 3

    report = compact_local(planned)
    assert (report.tables, report.fragments_before, report.fragments_after) == (1, 2, 1)
    assert delete_rows("rel/ns", "v = 3").rows == 1
    assert list_leases("rel/ns") == []

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    reloaded = PartitionedNamespace.load(str(absolute))
    rows = sorted(r["id"] for p in reloaded.partitions() for r in reloaded.open_table(p).to_table().to_pylist())
    assert rows == [1, 2, 4]
    with pytest.raises(NamespaceNotFound):
        PartitionedNamespace.load("rel/ns")  # relative to where it is opened, as a path is
    assert list(elsewhere.iterdir()) == []


def test_data_source_plans_and_writes_with_absolute_paths_only(tmp_path, monkeypatch):
    """What the tasks are pickled with: the reader's slices, the writer, its fragment writer and lease."""
    monkeypatch.chdir(tmp_path)
    ns = PartitionedNamespace.create("rel/ns", SCHEMA, ["country"])
    write_table(ns, _table([(1, "US", 1), (2, "CN", 2)]))
    source = LancePartitionedDataSource({"path": "rel/ns"})
    reader = source.reader(source.schema())
    slices = [s for part in reader.partitions() if isinstance(part, LanceInputPartition) for s in part.slices]
    assert len(slices) == 2
    assert reader.root == str(tmp_path / "rel" / "ns")
    assert all(s.uri.startswith(f"{tmp_path}/rel/ns/") for s in slices)

    spark_schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("country", T.StringType()),
            T.StructField("v", T.LongType()),
        ]
    )
    writer = LancePartitionedWriter({"path": "rel/new", "partition_by": "country"}, spark_schema, False)
    try:
        assert writer.root == str(tmp_path / "rel" / "new")
        assert writer.fragment_writer.root == writer.root
        assert writer.lease is not None and writer.lease.uri.startswith(f"{tmp_path}/rel/new/_writes/")
    finally:
        writer.abort([])
    lease = take_lease("rel/new")
    assert lease is not None and lease.uri.startswith(f"{tmp_path}/rel/new/_writes/")


def test_relative_root_with_local_spark(spark, tmp_path, monkeypatch):
    launched_in = Path.cwd()  # the JVM's (and so the executors') working directory
    name = f"rel-{uuid.uuid4().hex[:8]}/events"
    monkeypatch.chdir(tmp_path)
    absolute = tmp_path / name
    df = spark.createDataFrame([(1, "US", 1), (2, "CN", 2), (3, "US", 3)], SPARK_SCHEMA)
    result = write_partitioned(df, name, partition_by=["country"])
    assert result.root == str(absolute)
    write_partitioned(spark.createDataFrame([(4, "US", 4)], SPARK_SCHEMA), name)
    write_partitioned(spark.createDataFrame([(5, "CN", 5)], SPARK_SCHEMA), name, mode="overwrite_partitions")
    assert len(_lance_files(absolute)) == 4
    assert sorted(tuple(r) for r in read_partitioned(spark, name).collect()) == [
        (1, "US", 1),
        (3, "US", 3),
        (4, "US", 4),
        (5, "CN", 5),
    ]

    report = compact(name, spark=spark)
    assert (report.tables, report.fragments_before, report.fragments_after) == (1, 2, 1)
    assert spark_delete_rows(name, "v = 3", spark=spark).rows == 1
    assert sorted(tuple(r) for r in read_partitioned(spark, name, filter="country = 'US'").collect()) == [
        (1, "US", 1),
        (4, "US", 4),
    ]
    assert not (launched_in / name.split("/")[0]).exists()  # no task wrote where the JVM runs
