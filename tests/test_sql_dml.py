"""SQL DML on catalog tables gives the Python API's answers and delta-rs's (issue 30, item 5).

``MERGE INTO`` runs on the rows of ``tests/test_merge.py`` for mode combinations, checked
against delta-rs's own ``merge`` on the same rows, the plain-Python oracle and
``merge_partitioned``; ``UPDATE`` and ``DELETE`` against ``update_rows`` and
``delete_rows`` on a copy. Every statement is one ``__manifest`` commit.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import delete_rows, merge_partitioned, update_rows
from tests import merge_oracle as oracle
from tests.test_merge import COLUMNS, COMBINATIONS, CONDITIONS, SCHEMA, SOURCE, SPARK_SCHEMA, TARGET, _delta_merge

CATALOG = "lance_dml"
FAST = [("update", "insert", "delete"), ("delete", "ignore", "ignore"), ("ignore", "insert", "delete")]


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("dml-warehouse"))
    spark.conf.set(f"spark.sql.catalog.{CATALOG}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.warehouse", path)
    return path


def _table(warehouse: str, rows: list[dict[str, Any]]) -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    root = str(Path(warehouse, "db", name))
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    write_table(ns, pa.Table.from_pylist(rows, schema=SCHEMA))
    return f"{CATALOG}.db.{name}", root


def _merge_sql(table: str, case: oracle.Case) -> str:
    clauses = []
    if case.when_matched == "update":
        cond = f" AND {case.condition[0]}" if case.condition else ""
        clauses.append(f"WHEN MATCHED{cond} THEN UPDATE SET *")
    elif case.when_matched == "delete":
        cond = f" AND {case.condition[0]}" if case.condition else ""
        clauses.append(f"WHEN MATCHED{cond} THEN DELETE")
    if case.when_not_matched == "insert":
        clauses.append("WHEN NOT MATCHED THEN INSERT *")
    if case.when_not_matched_by_source == "delete":
        clauses.append("WHEN NOT MATCHED BY SOURCE THEN DELETE")
    return f"MERGE INTO {table} target USING merge_src source ON target.id = source.id " + " ".join(clauses)


def _check(spark: SparkSession, warehouse: str, tmp_path: Path, combination: tuple[str, str, str]) -> None:
    when_matched, when_not_matched, by_source = combination
    conditional = when_matched == "update" and when_not_matched == "insert"
    case = oracle.Case(when_matched, when_not_matched, by_source, condition=CONDITIONS[1] if conditional else None)
    table, root = _table(warehouse, TARGET)
    spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in SOURCE], SPARK_SCHEMA).createOrReplaceTempView(
        "merge_src"
    )
    before = PartitionedNamespace.load(root).manifest_version
    spark.sql(_merge_sql(table, case))
    got = oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS)
    assert got == oracle.canonical(_delta_merge(tmp_path, case), COLUMNS)
    assert got == oracle.canonical(oracle.merge(TARGET, SOURCE, ["id"], case), COLUMNS)
    python_root = str(tmp_path / "python")
    ns = PartitionedNamespace.create(python_root, SCHEMA, ["p"])
    write_table(ns, pa.Table.from_pylist(TARGET, schema=SCHEMA))
    src = spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in SOURCE], SPARK_SCHEMA)
    merge_partitioned(src, python_root, on="id", **case.kwargs())
    assert got == oracle.canonical(oracle.stored_rows(python_root, "p"), COLUMNS)
    history = PartitionedNamespace.load(root).history().to_pylist()
    # Spark runs a MERGE that only inserts as an append (InsertOnlyMerge): a WRITE in the history
    insert_only = (when_matched, by_source) == ("ignore", "ignore")
    operations = [r["operation"] for r in history if r["version"] > before]
    assert operations in ((["WRITE"],) if insert_only else (["MERGE"], []))


@pytest.mark.parametrize("combination", FAST)
def test_sql_merge_matches_delta_rs_the_oracle_and_merge_partitioned(
    spark: SparkSession, warehouse: str, tmp_path: Path, combination: tuple[str, str, str]
) -> None:
    _check(spark, warehouse, tmp_path, combination)


@pytest.mark.slow
@pytest.mark.parametrize(
    "combination",
    # a MERGE with no clause at all is not SQL
    [c for c in COMBINATIONS if c not in FAST and c != ("ignore", "ignore", "ignore")],
)
def test_sql_merge_every_combination(
    spark: SparkSession, warehouse: str, tmp_path: Path, combination: tuple[str, str, str]
) -> None:
    _check(spark, warehouse, tmp_path, combination)


def test_sql_update_and_delete_match_update_rows_and_delete_rows(
    spark: SparkSession, warehouse: str, tmp_path: Path
) -> None:
    rows = [r for r in TARGET if r["id"] is not None] + [{"id": 9, "p": 2, "v": 90}]
    table, root = _table(warehouse, rows)
    python_root = str(tmp_path / "python")
    ns = PartitionedNamespace.create(python_root, SCHEMA, ["p"])
    write_table(ns, pa.Table.from_pylist(rows, schema=SCHEMA))
    steps = [
        (f"UPDATE {table} SET v = v * 10, p = 3 WHERE v > 15", {"v": "v * 10", "p": "3"}, "v > 15"),
        (f"UPDATE {table} SET v = coalesce(v, -1) WHERE p = 0", {"v": "coalesce(v, -1)"}, "p = 0"),
    ]
    for sql, assignments, where in steps:
        spark.sql(sql)
        update_rows(python_root, set=assignments, where=where, spark=spark)
    for condition in ("id = 1", "p = 3"):  # a row condition; a whole partition (metadata only)
        spark.sql(f"DELETE FROM {table} WHERE {condition}")
        delete_rows(python_root, condition, spark=spark)
    got = oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS)
    assert got == oracle.canonical(oracle.stored_rows(python_root, "p"), COLUMNS)
    expected = [{**r, "v": r["v"] * 10, "p": 3} if r["v"] is not None and r["v"] > 15 else dict(r) for r in rows]
    expected = [{**r, "v": -1 if r["v"] is None else r["v"]} if r["p"] == 0 else r for r in expected]
    expected = [r for r in expected if r["id"] != 1 and r["p"] != 3]
    assert got == oracle.canonical(expected, COLUMNS)
