"""SQL ``DELETE FROM t WHERE ...`` on non-partition columns whose condition this process
evaluates exactly is done by the Python engine, with no Spark job (pipelines.jvm.delete_rows):
Spark hands the table its predicates (``canDeleteWhere``/``deleteWhere``) instead of
planning a row-level delete. The rows left are Spark's own answer (the rows where the
condition is not true, computed by Spark on a DataFrame of the same rows), with NaN, -0.0,
NULLs, decimals, unicode strings and integer arithmetic; a condition Spark cannot hand over
(a function) still takes the row-level path and gives the same answer."""

from __future__ import annotations

import decimal
import math
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from tests import merge_oracle as oracle

CATALOG = "lance_delete_rows"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.int32()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("amount", pa.decimal128(10, 2)),
    ]
)
SPARK_SCHEMA = "id bigint, p int, x double, s string, amount decimal(10,2)"
XS = [math.nan, -0.0, 0.0, 1.5, -2.0, None, math.inf, 1e300]
TEXTS = ["a", "ä", "日本", None, "", "b%"]
ROWS = [
    {
        "id": i,
        "p": i % 4,
        "x": XS[i % len(XS)],
        "s": TEXTS[i % len(TEXTS)],
        "amount": None if i % 9 == 0 else decimal.Decimal(i) / 4,
    }
    for i in range(60)
]
# (condition, taken by the Python engine)
CONDITIONS = [
    ("x > 1", True),
    ("x = 0", True),  # -0.0 too
    ("x = CAST('NaN' AS DOUBLE)", True),
    ("NOT (x < 1)", True),  # NaN is above every number; NULL stays
    ("s = 'ä' OR s IS NULL", True),
    ("s LIKE 'b%' OR s IN ('a', '日本')", True),
    ("amount >= 10.25 AND p != 2", True),
    ("id % 7 = 3", False),  # arithmetic does not reach the table as a predicate: Spark's row-level delete
    ("upper(s) = 'A'", False),  # a function: Spark's row-level delete
]


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("delete-rows-warehouse"))
    spark.conf.set(f"spark.sql.catalog.{CATALOG}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.warehouse", path)
    return path


def _canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return oracle.canonical_values(rows, SCHEMA.names)


def _kept_by_spark(spark: SparkSession, condition: str) -> list[tuple[Any, ...]]:
    df = spark.createDataFrame(ROWS, SPARK_SCHEMA)
    kept = df.where(f"coalesce(({condition}), false) = false").collect()
    return _canonical([r.asDict() for r in kept])


@pytest.mark.parametrize(("condition", "python"), CONDITIONS, ids=[c for c, _ in CONDITIONS])
def test_a_sql_delete_leaves_spark_s_rows(spark: SparkSession, warehouse: str, condition: str, python: bool) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}"
    root = str(Path(warehouse, "db", name))
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), pa.Table.from_pylist(ROWS, schema=SCHEMA))
    expected = _kept_by_spark(spark, condition)
    before = PartitionedNamespace.load(root).manifest_version
    assert 0 < len(expected) < len(ROWS)
    group = f"delete-{name}"
    spark.sparkContext.setJobGroup(group, "the statement under test")
    try:
        spark.sql(f"DELETE FROM {CATALOG}.db.{name} WHERE {condition}")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # classic-only
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    assert (len(jobs) == 0) is python, jobs
    assert _canonical(oracle.stored_rows(root, "p")) == expected
    ns = PartitionedNamespace.load(root)
    assert ns.manifest_version == before + 1  # one commit for the delete
    last = ns.history().to_pylist()[0]  # newest first
    assert last["operation"] == "DELETE"
