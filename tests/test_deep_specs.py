"""Specs with 16 and 32 fields: table directories stay within the 255-byte file-name limit.

The long ``<8 hex>_<object_id>`` name grows ~17 bytes per field, so from 14 fields on a
partition table gets the bounded ``<8 hex>_v<N>_<16 [a-z0-9]>`` name; everything that
finds tables goes through the manifest's ``location``.
"""

from __future__ import annotations

import datetime as dt
import os
import re

import lance
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput
from partitioning.namespace import TableCommit, table_directory
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines import read_partitioned
from pipelines.maintenance.operations import compact
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.slow

BOUNDED = re.compile(r"^[0-9a-f]{8}_v\d+_[a-z0-9]{16}$")


def _source(spark, start: int, count: int, n: int, c0_mod: int):
    cols = [F.col("id")]
    for i in range(n):
        value = F.col("id") % c0_mod if i == 0 else (F.col("id") % 3 if i == 1 else F.lit(i))
        cols.append(value.cast("int").alias(f"c{i}"))
    return spark.range(start, start + count).select(*cols)


def test_long_names_are_kept_while_they_fit():
    seed = b"k" * 32
    for fields, bounded in ((1, False), (13, False), (14, True), (32, True)):
        object_id = "$".join(["v1", *["a" * 16] * fields, "dataset"])
        name = table_directory(seed, object_id)
        assert len(name.encode()) <= 255
        assert bool(BOUNDED.match(name)) is bounded
        assert name.endswith(object_id) is not bounded
        assert table_directory(seed, object_id) == name


@pytest.mark.parametrize("n", [16, 32])
def test_deep_spec_end_to_end(spark, tmp_path, n):
    root = str(tmp_path / "ns")
    first = _source(spark, 0, 60, n, 2)
    second = _source(spark, 60, 60, n, 4)
    write_partitioned(first, root, partition_by=[f"c{i}" for i in range(n)])
    write_partitioned(second, root)
    ns = PartitionedNamespace.load(root)
    tables = ns.partitions()
    assert len(tables) == 12
    for t in tables:
        assert BOUNDED.match(t.location) and os.path.isdir(t.uri)
        assert t.object_id.count("$") == n + 1

    src = first.unionByName(second)
    assert read_partitioned(spark, root).count() == 120
    where = "c0 = 1 AND c1 = 2"
    got = sorted(r["id"] for r in read_partitioned(spark, root, filter=where).select("id").collect())
    assert got == sorted(r["id"] for r in src.where(where).select("id").collect())
    plan = ns.plan_scan(where)
    assert len(plan) == 1
    assert {r["c0"] for r in lance.dataset(plan[0].uri, version=plan[0].read_version).to_table().to_pylist()} == {1}

    report = compact(root, target_rows_per_fragment=1000, spark=spark)
    assert report.tables == 6 and report.fragments_after == 6
    assert read_partitioned(spark, root).count() == 120

    def crash(self, *args, **kwargs):
        raise RuntimeError("driver died before the __manifest commit")

    ns = PartitionedNamespace.load(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PartitionedNamespace, "commit_once", crash)
        with pytest.raises(RuntimeError, match="driver died"):
            write_table(ns, _source(spark, 509, 1, n, 7).toArrow())
    orphan_dirs = [o for o in PartitionedNamespace.load(root).orphans() if o.kind == "table_dir"]
    assert len(orphan_dirs) == 1 and BOUNDED.match(os.path.basename(orphan_dirs[0].uri))

    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    vacuum(root, dt.timedelta(0), allow_short_retention=True, now=later)
    assert not os.path.exists(orphan_dirs[0].uri)
    assert PartitionedNamespace.load(root).orphans() == []
    assert read_partitioned(spark, root).count() == 120
    assert read_partitioned(spark, root, filter=where).count() == len(got)


def test_commits_of_bounded_locations_need_the_object_id(tmp_path):
    schema = pa.schema([pa.field(f"c{i}", pa.int32()) for i in range(16)])
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, [f"c{i}" for i in range(16)])
    values = {f"c{i}": i for i in range(16)}
    object_id, location = ns.location_planner(1).place(tuple(values.values()))
    assert BOUNDED.match(location)
    with pytest.raises(InvalidInput, match=r"bounded name .* pass TableCommit\(object_id=\.\.\.\)"):
        ns.commit_tables([TableCommit(1, values, location, 1)])
    lance.write_dataset(pa.table({f"c{i}": pa.array([i], pa.int32()) for i in range(16)}), f"{ns.root}/{location}")
    ns.commit_tables([TableCommit(1, values, location, 1, object_id)])
    (table,) = PartitionedNamespace.load(ns.root).partitions()
    assert (table.object_id, table.location, table.read_version) == (object_id, location, 1)
