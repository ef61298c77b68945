"""Decimal columns written through Spark: Lance (arrow-rs) needs decimal buffers aligned to
16 bytes, and the Arrow batches a Python worker receives from Spark are aligned to 8. A
one-row DataFrame with a decimal column made Lance panic ("Memory pointer from external
source (e.g, FFI) is not aligned") on every write route."""

from __future__ import annotations

import decimal
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from pipelines import register_data_source, write_partitioned

DDL = "id long, country string, amount decimal(10,2), big decimal(38,6)"
ROWS = [(1, "US", decimal.Decimal("1.50"), decimal.Decimal("12345678901234567890123456789012.123456"))]
ROWS_WITH_NULL = [(2, "FR", None, None)]


def stored(root: str) -> list[tuple[object, ...]]:
    ns = PartitionedNamespace.load(root)
    out = []
    for p in ns.partitions():
        for r in ns.open_table(p).to_table().to_pylist():
            out.append((r["id"], r["country"], r["amount"], r["big"]))
    return sorted(out, key=lambda r: r[0])


@pytest.mark.parametrize("rows", [ROWS, ROWS_WITH_NULL], ids=["values", "nulls"])
def test_write_partitioned_one_decimal_row(spark: SparkSession, tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    root = str(tmp_path / "ns")
    write_partitioned(spark.createDataFrame(rows, DDL), root, partition_by=["country"])
    assert stored(root) == rows


def test_data_source_and_sql_insert_of_one_decimal_row(spark: SparkSession, tmp_path: Path) -> None:
    register_data_source(spark)
    root = str(tmp_path / "ns")
    spark.createDataFrame(ROWS, DDL).write.format("lance_partitioned").mode("append").option(
        "partition_by", "country"
    ).save(root)
    view = "decimal_alignment_view"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING lance_partitioned OPTIONS (path '{root}')")
    try:
        spark.sql(f"INSERT INTO {view} (id, country) VALUES (2, 'FR')")
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {view}")
    assert stored(root) == ROWS + ROWS_WITH_NULL
