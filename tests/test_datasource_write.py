"""df.write.format("lance_partitioned"): the same protocol through Spark's Python Data Source API."""

from __future__ import annotations

import lance
import pytest
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from pipelines import register_data_source

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registered(spark):
    register_data_source(spark)
    return spark


def _events(spark, start: int, n: int, countries=("US", "CN", "DE")):
    names = F.array(*[F.lit(c) for c in countries])
    return spark.range(start, start + n).select(
        F.col("id"),
        F.element_at(names, (F.col("id") % len(countries) + 1).cast("int")).alias("country"),
        (F.col("id") * 10).alias("amount"),
    )


def _contents(root: str) -> dict[str, list[int]]:
    ns = PartitionedNamespace.load(root)
    return {
        p.values["country"]: sorted(ns.open_table(p).to_table(columns=["id"]).column("id").to_pylist())
        for p in ns.partitions()
    }


def test_append_creates_then_appends_with_one_manifest_commit_each(registered, tmp_path):
    root = str(tmp_path / "ns")
    _events(registered, 0, 30).repartition(3).write.format("lance_partitioned").mode("append").option(
        "partition_by", "country"
    ).save(root)
    first = lance.dataset(f"{root}/__manifest").version
    _events(registered, 30, 30).repartition(3).write.format("lance_partitioned").mode("append").save(root)
    assert lance.dataset(f"{root}/__manifest").version == first + 1
    contents = _contents(root)
    assert sorted(contents) == ["CN", "DE", "US"]
    assert sorted(i for ids in contents.values() for i in ids) == list(range(60))
    assert contents["US"] == [i for i in range(60) if i % 3 == 0]


def test_overwrite_is_static_unless_dynamic_is_asked_for(registered, tmp_path):
    root = str(tmp_path / "ns")
    writer = _events(registered, 0, 30).write.format("lance_partitioned").option("partition_by", "country")
    writer.mode("append").save(root)
    _events(registered, 100, 4, countries=("US",)).write.format("lance_partitioned").mode("overwrite").option(
        "partitionOverwriteMode", "dynamic"
    ).save(root)
    contents = _contents(root)
    assert contents["US"] == [100, 101, 102, 103]
    assert contents["CN"] == [i for i in range(30) if i % 3 == 1]
    _events(registered, 200, 2, countries=("FR",)).write.format("lance_partitioned").mode("overwrite").save(root)
    assert _contents(root) == {"FR": [200, 201]}


def test_write_id_option_makes_a_retry_a_no_op(registered, tmp_path):
    root = str(tmp_path / "ns")
    for _ in range(2):
        _events(registered, 0, 12).write.format("lance_partitioned").mode("append").option(
            "partition_by", "country"
        ).option("write_id", "batch-7").save(root)
    assert sum(len(ids) for ids in _contents(root).values()) == 12


def test_missing_partition_by_for_a_new_namespace_names_the_option(registered, tmp_path):
    root = str(tmp_path / "ns")
    with pytest.raises(Exception, match=r"set \.option\('partition_by'"):
        _events(registered, 0, 3).write.format("lance_partitioned").mode("append").save(root)
