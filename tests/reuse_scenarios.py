"""DataFrames used the way people use them, compared with Spark's own answer on the same rows.

Shared by tests/test_reuse.py (classic session, in-process) and the Spark Connect run
(a subprocess: a Connect session cannot start beside a classic one). Each scenario
returns ``(label, ours, spark)`` triples; the expected side always comes from a plain
DataFrame of the same rows (``src``), never from this project's code.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import json
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.read.dataframe import read_partitioned
from pipelines.source.datasource import register_data_source

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("country", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
SPARK_SCHEMA = "id long, country string, amount decimal(10,2), ts timestamp"
A = "country = 'US'"
B = "amount > 5 AND country <> 'FR'"
C = "ts >= TIMESTAMP '2025-12-11 00:00:00'"

Result = tuple[str, Any, Any]


def rows() -> list[dict[str, Any]]:
    countries = ["US", "DE", "FR"]
    start = dt.datetime(2025, 12, 10, tzinfo=dt.UTC)
    return [
        {
            "id": i,
            "country": countries[i % 3],
            "amount": decimal.Decimal(i) / 4,
            "ts": start + dt.timedelta(hours=i),
        }
        for i in range(60)
    ]


def make_namespace(root: str) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["country", "day(ts)"])
    write_table(ns, pa.Table.from_pylist(rows(), schema=SCHEMA))


def source(spark: SparkSession) -> DataFrame:
    data = [(r["id"], r["country"], r["amount"], r["ts"]) for r in rows()]
    return spark.createDataFrame(data, SPARK_SCHEMA)


def _ids(df: DataFrame) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


def _pairs(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def reuse(df: DataFrame, src: DataFrame) -> list[Result]:
    """One DataFrame object: counts and filters in turn, each compared with ``src``."""
    out: list[Result] = []
    for step, f in enumerate([None, A, None, B, A, C, None, f"NOT ({A})", None]):
        got = df.count() if f is None else _ids(df.where(f))
        want = src.count() if f is None else _ids(src.where(f))
        out.append((f"reuse step {step}: {f or 'count()'}", got, want))
    return out


def self_join(df: DataFrame, src: DataFrame) -> list[Result]:
    ours = df.join(df.where(A).select("id", "amount"), "id")
    theirs = src.join(src.where(A).select("id", "amount"), "id")
    both = df.where(A).select("id").join(df.where(B).select("id"), "id", "full")
    both_src = src.where(A).select("id").join(src.where(B).select("id"), "id", "full")
    return [
        ("self-join", _pairs(ours.select("id")), _pairs(theirs.select("id"))),
        ("full self-join of two filters", _pairs(both), _pairs(both_src)),
    ]


def union(df: DataFrame, src: DataFrame) -> list[Result]:
    return [("union of two filters", _ids(df.where(A).union(df.where(C))), _ids(src.where(A).union(src.where(C))))]


def views(spark: SparkSession, df: DataFrame, src: DataFrame) -> list[Result]:
    df.createOrReplaceTempView("reuse_ours")
    src.createOrReplaceTempView("reuse_src")
    out: list[Result] = []
    for where in (f"WHERE {A}", "", f"WHERE {B}", f"WHERE {C}", ""):
        got = spark.sql(f"SELECT id FROM reuse_ours {where}")
        want = spark.sql(f"SELECT id FROM reuse_src {where}")
        out.append((f"view {where or '(all)'}", _ids(got), _ids(want)))
    return out


def cached(df: DataFrame, src: DataFrame) -> list[Result]:
    filtered = df.where(A).cache()
    try:
        out: list[Result] = [("cached filter", filtered.count(), src.where(A).count())]
        out.append(("count after caching a filter", df.count(), src.count()))
        out.append(("cached filter again", _ids(filtered), _ids(src.where(A))))
    finally:
        filtered.unpersist()
    return out


def explained(df: DataFrame, src: DataFrame) -> list[Result]:
    with contextlib.redirect_stdout(io.StringIO()):
        df.where(A).explain(True)
        df.explain()
    return [
        ("explain then collect (all)", _ids(df), _ids(src)),
        ("explain then collect (filter)", _ids(df.where(A)), _ids(src.where(A))),
    ]


def all_scenarios(spark: SparkSession, root: str) -> list[Result]:
    """Every scenario on both read routes."""
    register_data_source(spark)
    src = source(spark)
    out: list[Result] = []
    routes: dict[str, Callable[[], DataFrame]] = {
        "format": lambda: spark.read.format("lance_partitioned").load(root),
        "read_partitioned": lambda: read_partitioned(spark, root),
        "read_partitioned(filter)": lambda: read_partitioned(spark, root, filter="amount >= 0"),
    }
    for name, make in routes.items():
        results = [
            *reuse(make(), src),
            *self_join(make(), src),
            *union(make(), src),
            *views(spark, make(), src),
            *cached(make(), src),
            *explained(make(), src),
        ]
        out.extend((f"{name}: {label}", got, want) for label, got, want in results)
    return out


def main(argv: list[str]) -> int:
    """Run every scenario in a Spark Connect session; print the results as JSON lines."""
    import os

    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = argv[0]
    spark = SparkSession.builder.remote("local[2]").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    try:
        make_namespace(root)
        for label, got, want in all_scenarios(spark, root):
            print(json.dumps({"label": label, "got": got, "want": want}, default=str))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
