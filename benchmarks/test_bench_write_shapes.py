"""Write fixed costs on three shapes of data (issue 33): ours vs Spark's parquet write, same run.

Shapes, each built by Spark and cached before timing:

- ``narrow ints``: an id and three int/long columns;
- ``mixed strings``: an id, a user name, one of 50 countries, a 16-character event code,
  a price and a timestamp;
- ``wide + vector``: an id, 24 numeric columns and a 32-dim float vector.

Two writes per shape, interleaved with Spark's parquet write of the same cached rows
(median (min .. max) of ``REPEATS`` after one untimed warm-up of each):

- ``SINGLE_ROWS`` rows into one partition (``partition_by=["one"]``, a constant) against
  ``df.write.parquet``; target at most 1.2x;
- ``BUCKET_ROWS`` rows into ``bucket[16](id)`` against ``partitionBy(b).parquet`` with the
  bucket column precomputed and cached; target at most 0.8x.

Run with ``make bench``; sizes from ``BENCH_WRITE_*``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.conftest import interleaved_samples
from partitioning import PartitionedNamespace
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.bench

SINGLE_ROWS = int(os.environ.get("BENCH_WRITE_SINGLE_ROWS", 1_000_000))
BUCKET_ROWS = int(os.environ.get("BENCH_WRITE_BUCKET_ROWS", 3_000_000))
REPEATS = int(os.environ.get("BENCH_WRITE_REPEATS", 5))
DIM = 32


def _h(seed: int):
    return F.abs(F.xxhash64("id", F.lit(seed)))


def _shape(spark: SparkSession, name: str, rows: int) -> DataFrame:
    base = spark.range(rows)
    if name == "narrow ints":
        return base.select(
            "id",
            (_h(1) % 1000).cast("int").alias("a"),
            (_h(2) % 1_000_000).alias("b"),
            (_h(3) % 100).cast("int").alias("c"),
        )
    if name == "mixed strings":
        countries = F.array(*[F.lit(f"C{i:02d}") for i in range(50)])
        return base.select(
            "id",
            F.concat(F.lit("user_"), (_h(1) % 100_000).cast("string")).alias("user"),
            F.element_at(countries, (_h(2) % 50 + 1).cast("int")).alias("country"),
            F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 16).alias("event"),
            (_h(3) % 10_000 / 100).alias("price"),
            F.timestamp_seconds(F.lit(1_764_547_200) + _h(4) % 86_400).alias("ts"),
        )
    numeric = [(_h(10 + i) % 1000 / 10).alias(f"x{i}") for i in range(24)]
    vector = F.transform(F.sequence(F.lit(0), F.lit(DIM - 1)), lambda i: (F.rand(7) + i).cast("float"))
    return base.select("id", *numeric, vector.alias("emb"))


SHAPES = ["narrow ints", "mixed strings", "wide + vector"]


def _compare(label: str, rows: int, target: float, ours: Callable[[], None], parquet: Callable[[], None]) -> None:
    """Time ``ours`` and ``parquet`` interleaved (one warm-up each: Python workers start, the JIT
    compiles) and print both with their ratio."""
    t = interleaved_samples({"ours": ours, "parquet": parquet}, repeats=REPEATS)
    ratio = t["ours"].median / t["parquet"].median
    print(
        f"\n[write, {label}] {rows:,} rows: ours {t['ours']}, parquet {t['parquet']}, "
        f"ratio {ratio:.2f} (target <= {target})"
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_single_partition_write_vs_parquet(spark, tmp_path, shape):
    df = _shape(spark, shape, SINGLE_ROWS).withColumn("one", F.lit("all")).cache()
    df.count()
    root, out = tmp_path / "ours", tmp_path / "parquet"

    def ours() -> None:
        shutil.rmtree(root, ignore_errors=True)
        write_partitioned(df, str(root), mode="overwrite", partition_by=["one"])

    def parquet() -> None:
        df.write.mode("overwrite").parquet(str(out))

    _compare(f"1 partition, {shape}", SINGLE_ROWS, 1.2, ours, parquet)
    assert PartitionedNamespace.load(str(root)).partitions()[0].read_version >= 1
    df.unpersist()


@pytest.mark.parametrize("shape", SHAPES)
def test_bucket_write_vs_parquet(spark, tmp_path, shape):
    df = _shape(spark, shape, BUCKET_ROWS).cache()
    df.count()
    with_b = df.withColumn("b", F.pmod(F.hash("id"), F.lit(16))).cache()
    with_b.count()
    root, out = tmp_path / "ours", tmp_path / "parquet"

    def ours() -> None:
        shutil.rmtree(root, ignore_errors=True)
        write_partitioned(df, str(root), mode="overwrite", partition_by=["bucket[16](id)"])

    def parquet() -> None:
        with_b.write.mode("overwrite").partitionBy("b").parquet(str(out))

    _compare(f"bucket[16], {shape}", BUCKET_ROWS, 0.8, ours, parquet)
    assert len(PartitionedNamespace.load(str(root)).partitions()) == 16
    df.unpersist()
    with_b.unpersist()


FILE_ROWS = int(os.environ.get("BENCH_WRITE_FILE_ROWS", 3_000_000))


@pytest.mark.parametrize("shape", ["narrow ints", "mixed strings"])
def test_writes_from_files_vs_parquet(spark, tmp_path, shape):
    """Rows read from parquet files (not cached), as users' jobs read them: ``bucket[16](id)``
    against Spark's ``partitionBy(b).parquet`` of the same files (the bucket computed in the
    same query), and one partition against ``df.write.parquet``. Targets: 0.8x and 1.0x."""
    files = str(tmp_path / "input")
    _shape(spark, shape, FILE_ROWS).repartition(8).write.parquet(files)
    root, out = tmp_path / "ours", tmp_path / "parquet"

    def ours_bucket() -> None:
        shutil.rmtree(root, ignore_errors=True)
        write_partitioned(spark.read.parquet(files), str(root), mode="overwrite", partition_by=["bucket[16](id)"])

    def parquet_bucket() -> None:
        df = spark.read.parquet(files).withColumn("b", F.pmod(F.hash("id"), F.lit(16)))
        df.write.mode("overwrite").partitionBy("b").parquet(str(out))

    _compare(f"bucket[16] from files, {shape}", FILE_ROWS, 0.8, ours_bucket, parquet_bucket)
    assert len(PartitionedNamespace.load(str(root)).partitions()) == 16

    def ours_single() -> None:
        shutil.rmtree(root, ignore_errors=True)
        df = spark.read.parquet(files).withColumn("one", F.lit("all"))
        write_partitioned(df, str(root), mode="overwrite", partition_by=["one"])

    def parquet_single() -> None:
        spark.read.parquet(files).withColumn("one", F.lit("all")).write.mode("overwrite").parquet(str(out))

    _compare(f"1 partition from files, {shape}", FILE_ROWS, 1.0, ours_single, parquet_single)
    assert len(PartitionedNamespace.load(str(root)).partitions()) == 1
