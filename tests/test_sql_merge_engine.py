"""An upserting SQL ``MERGE INTO`` (``WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN
INSERT *`` on key equalities) runs through the upsert engine with the session extension
(pipelines.jvm.upsert_rows, java/lance_partitioned/MergeProcedure.java): Spark's tasks write the
source, the commit probes the target's keys, no join in Spark. The stored rows are compared
with plain Python's upsert (a target row whose key a source row has is replaced by it, NULL
keys match nothing) and with Spark's own ``MERGE`` on the same rows (the rule switched off);
what the engine does not take (a matched condition, a key two target rows hold, a float key)
runs as Spark plans it, with Spark's answer."""

from __future__ import annotations

import decimal
import math
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from tests import merge_oracle as oracle

CATALOG = "lance_sql_merge"
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
XS = [math.nan, -0.0, 0.0, 1.5, None, math.inf]
TEXTS = ["a", "ä", "日本", None, "b%"]


def _row(i: int, shift: int) -> dict[str, Any]:
    return {
        "id": None if i < 0 else i,
        "p": (i + shift) % 4,
        "x": XS[(i + shift) % len(XS)],
        "s": TEXTS[(i + shift) % len(TEXTS)],
        "amount": None if i % 7 == 0 else decimal.Decimal(i + shift) / 4,
    }


TARGET = [_row(i, 0) for i in range(80)]
# overlapping keys (a third of them move partition), new keys, and two NULL keys
SOURCE = [_row(i, 1 if i % 3 == 0 else 4) for i in range(50, 120)] + [_row(-1, 2), _row(-2, 3)]
SETTING = "spark.lance_partitioned.sql.update.enabled"


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("sql-merge-warehouse"))
    spark.conf.set(f"spark.sql.catalog.{CATALOG}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.warehouse", path)
    return path


def _canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return oracle.canonical_values(rows, SCHEMA.names)


def _upserted(target: list[dict[str, Any]], source: list[dict[str, Any]], keys: list[str]) -> list[tuple[Any, ...]]:
    """Plain Python: target rows whose key no source row has, then every source row."""
    held = {tuple(r[k] for k in keys) for r in source if all(r[k] is not None for k in keys)}
    kept = [r for r in target if tuple(r[k] for k in keys) not in held]
    return _canonical(kept + source)


def _table(warehouse: str, rows: list[dict[str, Any]]) -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    root = str(Path(warehouse, "db", name))
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), pa.Table.from_pylist(rows, schema=SCHEMA))
    return name, root


def _last(root: str) -> dict[str, Any]:
    return PartitionedNamespace.load(root).history().to_pylist()[0]  # newest first


def _engine_took_it(root: str) -> bool:
    last = _last(root)
    return last["operation"] == "MERGE" and "on" in dict(last["parameters"])


STATEMENTS = [
    (
        "MERGE INTO {t} t USING merge_src s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        ["id"],
    ),
    (
        "MERGE INTO {t} AS t USING (SELECT * FROM merge_src WHERE id % 2 = 0 OR id IS NULL) AS s "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        ["id"],
    ),
    (
        "MERGE INTO {t} USING merge_src ON {t}.id = merge_src.id AND {t}.s = merge_src.s "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        ["id", "s"],
    ),
]


@pytest.mark.parametrize(("statement", "keys"), STATEMENTS, ids=["alias", "subquery", "two-keys"])
def test_an_upserting_merge_stores_plain_python_s_and_spark_s_answer(
    spark: SparkSession, warehouse: str, statement: str, keys: list[str]
) -> None:
    source = spark.createDataFrame(SOURCE, SPARK_SCHEMA)
    source.createOrReplaceTempView("merge_src")
    chosen = SOURCE if "WHERE" not in statement else [r for r in SOURCE if r["id"] is None or r["id"] % 2 == 0]
    (ours, our_root), (theirs, their_root) = _table(warehouse, TARGET), _table(warehouse, TARGET)
    before = PartitionedNamespace.load(our_root).manifest_version

    spark.sql(statement.format(t=f"{CATALOG}.db.{ours}"))
    assert _engine_took_it(our_root)
    assert PartitionedNamespace.load(our_root).manifest_version == before + 1
    stored = _canonical(oracle.stored_rows(our_root, "p"))
    assert stored == _upserted(TARGET, chosen, keys)

    spark.conf.set(SETTING, "false")
    try:
        spark.sql(statement.format(t=f"{CATALOG}.db.{theirs}"))
    finally:
        spark.conf.unset(SETTING)
    assert not _engine_took_it(their_root)
    assert stored == _canonical(oracle.stored_rows(their_root, "p"))


DECLINED = [
    # a matched condition: Spark's MERGE
    "MERGE INTO {t} t USING merge_src s ON t.id = s.id "
    "WHEN MATCHED AND s.amount > 20 THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    # a float key
    "MERGE INTO {t} t USING merge_src s ON t.x = s.x WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
]


@pytest.mark.parametrize("statement", DECLINED, ids=["matched-condition", "float-key"])
def test_what_the_engine_does_not_take_is_spark_s_merge(spark: SparkSession, warehouse: str, statement: str) -> None:
    source = [r for r in SOURCE if r["x"] is None or not math.isnan(r["x"])][:3]  # x unique among them
    spark.createDataFrame(source, SPARK_SCHEMA).createOrReplaceTempView("merge_src")
    (ours, our_root), (theirs, their_root) = _table(warehouse, TARGET), _table(warehouse, TARGET)
    spark.sql(statement.format(t=f"{CATALOG}.db.{ours}"))
    assert not _engine_took_it(our_root)
    spark.conf.set(SETTING, "false")
    try:
        spark.sql(statement.format(t=f"{CATALOG}.db.{theirs}"))
    finally:
        spark.conf.unset(SETTING)
    assert _canonical(oracle.stored_rows(our_root, "p")) == _canonical(oracle.stored_rows(their_root, "p"))


def test_a_key_two_target_rows_hold_is_spark_s_merge(spark: SparkSession, warehouse: str) -> None:
    """Spark updates both target rows; the engine declines at its commit and Spark's MERGE runs."""
    target = [*TARGET, {**TARGET[60], "p": 3, "s": "twin"}]
    spark.createDataFrame(SOURCE, SPARK_SCHEMA).createOrReplaceTempView("merge_src")
    name, root = _table(warehouse, target)
    spark.sql(
        f"MERGE INTO {CATALOG}.db.{name} t USING merge_src s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    assert not _engine_took_it(root)
    stored = _canonical(oracle.stored_rows(root, "p"))
    replaced = [r for r in target if r["id"] not in {s["id"] for s in SOURCE}]
    twice = [s for s in SOURCE if s["id"] == 60]  # both target rows of id 60 become the source row
    assert stored == _canonical(replaced + SOURCE + twice)


def test_two_source_rows_for_one_target_row_refuse_the_merge(spark: SparkSession, warehouse: str) -> None:
    spark.createDataFrame([*SOURCE, {**SOURCE[0], "s": "again"}], SPARK_SCHEMA).createOrReplaceTempView("merge_src")
    name, root = _table(warehouse, TARGET)
    before = PartitionedNamespace.load(root).manifest_version
    with pytest.raises(PySparkException, match="matched by more than one source row"):
        spark.sql(
            f"MERGE INTO {CATALOG}.db.{name} t USING merge_src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    assert PartitionedNamespace.load(root).manifest_version == before
    assert _canonical(oracle.stored_rows(root, "p")) == _canonical(TARGET)
