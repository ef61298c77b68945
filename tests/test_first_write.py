"""A namespace comes into existence with its first successful write: a failed creating write
leaves an empty root, so a retry with corrected data or another spec starts afresh."""

from __future__ import annotations

from pathlib import Path

import lance
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import pipelines.write.dataframe as write_module
from pipelines import read_partitioned, write_partitioned
from pipelines.write.fragments import write_fragments


def _rows(spark: SparkSession, bad: bool) -> DataFrame:
    df = spark.range(0, 40, numPartitions=2).select(
        F.col("id"), (F.col("id") % 3).cast("string").alias("country"), (F.col("id") * 1.5).alias("amount")
    )
    if not bad:
        return df
    # a value the job refuses in a task, as a cast or a check of a user's pipeline would
    return df.withColumn(
        "amount", F.when(F.col("id") == 33, F.raise_error(F.lit("bad amount in row 33"))).otherwise(F.col("amount"))
    )


def _left(root: Path) -> list[str]:
    """What is left under ``root`` besides data files a task Spark was still stopping wrote
    after the write was given up (uncommitted: no Lance version refers to them)."""
    if not root.exists():
        return []
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not (p.parent.name == "data" and p.suffix == ".lance")
    )


def test_failed_first_write_leaves_nothing_and_the_retry_gets_its_own_spec(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "events"
    with pytest.raises(Exception, match="bad amount in row 33"):
        write_partitioned(_rows(spark, bad=True), str(root), partition_by=["country"], mode="error")
    assert _left(root) == []
    # the retry chooses another spec and mode="error": neither meets the failed attempt
    write_partitioned(_rows(spark, bad=False), str(root), partition_by=["bucket[4](id)"], mode="error")
    got = read_partitioned(spark, str(root)).toPandas().sort_values("id")
    assert got["id"].tolist() == list(range(40))
    manifest = lance.dataset(str(root / "__manifest"))
    # pylance's own view of the root properties: only the retry's spec is there
    specs = {k: v for k, v in manifest.metadata.items() if k.startswith("partition_spec_v")}
    assert list(specs) == ["partition_spec_v1"] and '"bucket"' in specs["partition_spec_v1"]


def test_failed_first_write_through_the_data_source_leaves_nothing(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "events"
    source = _rows(spark, bad=True).write.format("lance_partitioned").option("partition_by", "country")
    with pytest.raises(Exception, match="bad amount in row 33"):
        source.mode("append").save(str(root))
    assert _left(root) == []
    _rows(spark, bad=False).write.format("lance_partitioned").option("partition_by", "id").mode("append").save(
        str(root)
    )
    assert spark.read.format("lance_partitioned").load(str(root)).count() == 40


def test_a_failed_write_into_an_existing_namespace_removes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "events"
    write_partitioned(_rows(spark, bad=False), str(root), partition_by=["country"])
    with pytest.raises(Exception, match="bad amount in row 33"):
        write_partitioned(_rows(spark, bad=True), str(root))
    assert read_partitioned(spark, str(root)).count() == 40


def test_a_namespace_someone_else_wrote_to_meanwhile_stays(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creating write fails after another writer committed into the new namespace: that
    commit is someone's data, so nothing is removed."""
    root = tmp_path / "events"

    def other_writer_commits_first(df: DataFrame, ns: object, **kw: object) -> None:
        monkeypatch.setattr(write_module, "write_fragments", write_fragments)
        write_partitioned(_rows(spark, bad=False), str(root))  # the namespace exists: an append
        raise RuntimeError("the creating write fails after the other commit")

    monkeypatch.setattr(write_module, "write_fragments", other_writer_commits_first)
    with pytest.raises(RuntimeError, match="fails after the other commit"):
        write_partitioned(_rows(spark, bad=False), str(root), partition_by=["country"])
    assert read_partitioned(spark, str(root)).count() == 40
