"""Trust: a DataFrame gives Spark's answer however it is reused (issue: stale pushed filters).

PySpark 4.3.0 keeps the first scan's read plan for every later scan of the same
DataFrame. These tests reuse one DataFrame across filters, self-joins, unions, temp
views, cache and explain, on the format route and on ``read_partitioned``, in a classic
session (and, in tests/connect_scenarios.py, through Spark Connect), and compare each answer with Spark's own on a plain
DataFrame of the same rows.
"""

from __future__ import annotations

from pathlib import Path

import reuse_scenarios as scenarios
from pyspark.sql import SparkSession

from pipelines.source.datasource import pushdown_is_per_scan

TESTS = Path(__file__).resolve().parent


def _mismatches(results: list[tuple[str, object, object]]) -> list[str]:
    return [f"{label}: got {got!r}, Spark says {want!r}" for label, got, want in results if got != want]


def test_reused_dataframes_match_spark_classic(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    scenarios.make_namespace(root)
    results = scenarios.all_scenarios(spark, root)
    assert len(results) > 60
    assert not _mismatches(results), "\n".join(_mismatches(results))


def test_this_spark_shares_pushdown_plans_between_scans(spark: SparkSession) -> None:
    """The probe sees PySpark 4.3.0's shared plan, so pushed filters must not prune here."""
    assert spark.version.startswith("4.3.0")
    assert pushdown_is_per_scan(spark, probe=True) is False
