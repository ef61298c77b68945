"""A default merge limited by a ``target_filter`` this process evaluates exactly as Spark
runs no join in Spark (pipelines.write.upsert): the matched target rows within the filter
are deleted and the source appended. delta-rs (the filter in its merge predicate) and the
plain-Python oracle are the answers; a filter only Spark evaluates still joins in Spark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipelines.write.merge import merge_partitioned
from tests import merge_oracle as oracle
from tests.test_merge import COLUMNS, SOURCE, SPARK_SCHEMA, TARGET, _delta_merge, _namespace

# (target_filter, the oracle's predicate, the delta-rs predicate on the target)
FILTERS: list[tuple[str, Callable[[dict[str, Any]], bool], str]] = [
    ("v >= 20 OR v IS NULL", lambda t: t["v"] is None or t["v"] >= 20, "(target.v >= 20 OR target.v IS NULL)"),
    ("p IN (0, 3)", lambda t: t["p"] in (0, 3), "target.p IN (0, 3)"),
    ("v % 20 = 10", lambda t: t["v"] is not None and t["v"] % 20 == 10, "target.v % 20 = 10"),
]


@pytest.mark.parametrize(("text", "predicate", "delta_predicate"), FILTERS)
def test_a_merge_within_an_exact_target_filter_runs_no_join(
    spark: SparkSession,
    tmp_path: Any,
    joins: list[int],
    text: str,
    predicate: Callable[[dict[str, Any]], bool],
    delta_predicate: str,
) -> None:
    root = str(tmp_path / "ns")
    _namespace(root, TARGET)
    source = spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in SOURCE], SPARK_SCHEMA)
    result = merge_partitioned(source, root, on="id", target_filter=text)
    assert not joins
    case = oracle.Case(target_filter=(text, predicate))
    expected = oracle.canonical(oracle.merge(TARGET, SOURCE, ["id"], case), COLUMNS)
    got = oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS)
    assert got == expected
    assert got == oracle.canonical(_delta_merge_within(tmp_path, delta_predicate), COLUMNS)
    keys = {s["id"] for s in SOURCE if s["id"] is not None}  # a NULL key matches nothing
    assert result.rows_updated == sum(1 for t in TARGET if predicate(t) and t["id"] in keys)


def _delta_merge_within(tmp_path: Any, target_predicate: str) -> list[dict[str, Any]]:
    import pyarrow as pa
    from deltalake import DeltaTable

    from tests.test_merge import SCHEMA

    _delta_merge(tmp_path, oracle.Case(when_matched="ignore", when_not_matched="ignore"))  # the target table only
    uri = str(tmp_path / "delta")
    (
        DeltaTable(uri)
        .merge(
            pa.Table.from_pylist(SOURCE, schema=SCHEMA),
            predicate=f"target.id = source.id AND {target_predicate}",
            source_alias="source",
            target_alias="target",
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    return DeltaTable(uri).to_pyarrow_table().to_pylist()


def test_a_target_filter_only_spark_evaluates_joins_in_spark(
    spark: SparkSession, tmp_path: Any, joins: list[int]
) -> None:
    root = str(tmp_path / "ns")
    _namespace(root, TARGET)
    source = spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in SOURCE], SPARK_SCHEMA)
    merge_partitioned(source, root, on="id", target_filter="abs(v) >= 20")
    assert joins
    case = oracle.Case(target_filter=("abs(v) >= 20", lambda t: t["v"] is not None and abs(t["v"]) >= 20))
    expected = oracle.canonical(oracle.merge(TARGET, SOURCE, ["id"], case), COLUMNS)
    assert oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS) == expected
