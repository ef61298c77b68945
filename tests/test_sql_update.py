"""SQL ``UPDATE`` with the session extension runs through ``update_rows``' engine
(pipelines.jvm.update_rows, java/lance_partitioned/SqlUpdates.java): no Spark job when Lance's
own ``update`` or the driver computes the change exactly as Spark, Spark's row-level update
otherwise. Either way the stored rows are Spark's own answer: the same rows as a DataFrame,
each column ``CASE WHEN <condition> THEN <value> ELSE <column> END`` computed by Spark, with
NaN, -0.0, NULLs, decimals, unicode strings and timestamps in three session time zones."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from tests import merge_oracle as oracle

CATALOG = "lance_sql_update"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.int32()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
SPARK_SCHEMA = "id bigint, p int, x double, s string, amount decimal(10,2), ts timestamp"
SPARK_TYPES = dict(part.split(" ") for part in SPARK_SCHEMA.split(", "))
XS = [math.nan, -0.0, 0.0, 1.5, -2.0, None, math.inf, 1e300]
TEXTS = ["a", "ä", "日本", None, "", "b%"]
START = dt.datetime(2024, 3, 30, 22, 0, tzinfo=dt.UTC)  # Berlin's clocks go forward 3 hours later
ROWS = [
    {
        "id": i,
        "p": i % 4,
        "x": XS[i % len(XS)],
        "s": TEXTS[i % len(TEXTS)],
        "amount": None if i % 9 == 0 else decimal.Decimal(i) / 4,
        "ts": None if i % 11 == 0 else START + dt.timedelta(minutes=17 * i),
    }
    for i in range(60)
]
# (SET, WHERE or None, done without a Spark job)
UPDATES = [
    ({"x": "x * 2.5"}, "s = 'ä'", True),  # Lance's update
    ({"s": "s || '!'"}, "p = 1 OR s IS NULL", True),
    ({"x": "-1"}, "id % 7 = 3", True),
    ({"x": "-x"}, "x > 1", True),  # a DOUBLE comparison: the driver, NaN above every number
    ({"p": "p + 1", "s": "'moved'"}, "s = 'a'", True),  # rows move partition: the driver
    ({"amount": "amount * 2"}, "amount >= 10.25 AND p != 2", False),  # decimal arithmetic: Spark's update
    ({"x": "0"}, None, True),  # every row
    ({"X": "1"}, "S = '日本'", True),  # names in another case
    ({"s": "upper(s)"}, "ts < TIMESTAMP '2024-03-31 06:30:00'", False),  # a function: Spark's update
    ({"ts": "ts + INTERVAL 1 HOUR"}, "ts >= TIMESTAMP '2024-03-31 03:00:00'", False),
    ({"s": "'q'"}, "id IN (SELECT 1)", False),  # a subquery
]
ZONES = ["UTC", "Europe/Berlin", "Asia/Kolkata"]


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("sql-update-warehouse"))
    spark.conf.set(f"spark.sql.catalog.{CATALOG}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.warehouse", path)
    return path


@pytest.fixture
def zone(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", request.param)
    yield request.param
    spark.conf.set("spark.sql.session.timeZone", before)


def _canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return oracle.canonical_values(rows, SCHEMA.names)


def _by_spark(spark: SparkSession, set: dict[str, str], where: str | None) -> list[tuple[Any, ...]]:
    """Spark's own answer: each column CASE WHEN <where> THEN <value> ELSE <column> END
    (instants as Spark's ``unix_micros``)."""
    df = spark.createDataFrame(ROWS, SPARK_SCHEMA)
    values = {k.lower(): v for k, v in set.items()}
    condition = f"coalesce(({where}), false)" if where else "true"
    columns = [
        f"CAST(CASE WHEN {condition} THEN ({values[c]}) ELSE {c} END AS {SPARK_TYPES[c]}) AS {c}" if c in values else c
        for c in SCHEMA.names
    ]
    if where is not None and "SELECT" in where:  # a subquery: Spark evaluates it in a filter only
        hit = df.where(condition).selectExpr(
            *[f"CAST(({values[c]}) AS {SPARK_TYPES[c]}) AS {c}" if c in values else c for c in SCHEMA.names]
        )
        rest = df.where(f"NOT {condition}")
        both = hit.unionAll(rest)
    else:
        both = df.selectExpr(*columns)
    rows = both.withColumn("ts", F.unix_micros("ts")).collect()
    return _canonical([r.asDict() for r in rows])


def _table(warehouse: str) -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    root = str(Path(warehouse, "db", name))
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), pa.Table.from_pylist(ROWS, schema=SCHEMA))
    return name, root


def _run(spark: SparkSession, statement: str, group: str) -> list[int]:
    """Run ``statement``; the ids of the Spark jobs it started."""
    spark.sparkContext.setJobGroup(group, "the statement under test")
    try:
        spark.sql(statement).collect()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # classic-only
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("zone", ZONES, indirect=True)
@pytest.mark.parametrize(("set", "where", "here"), UPDATES, ids=[f"{s}-{w}" for s, w, _ in UPDATES])
def test_a_sql_update_stores_spark_s_answer(
    spark: SparkSession, warehouse: str, zone: str, set: dict[str, str], where: str | None, here: bool
) -> None:
    name, root = _table(warehouse)
    expected = _by_spark(spark, set, where)
    assert expected != _canonical(ROWS)  # the update changes something
    before = PartitionedNamespace.load(root).manifest_version
    assignments = ", ".join(f"{c} = {v}" for c, v in set.items())
    statement = f"UPDATE {CATALOG}.db.{name} SET {assignments}" + (f" WHERE {where}" if where else "")
    jobs = _run(spark, statement, f"update-{name}")
    assert (len(jobs) == 0) is here, (statement, jobs)
    assert _canonical(oracle.stored_rows(root, "p")) == expected
    ns = PartitionedNamespace.load(root)
    assert ns.manifest_version == before + 1  # one commit for the update
    assert ns.history().to_pylist()[0]["operation"] == "UPDATE"


def test_the_engine_and_spark_s_own_update_store_the_same_rows(spark: SparkSession, warehouse: str) -> None:
    """With the rule switched off the statement is Spark's row-level update: same rows, Spark jobs."""
    statement = "UPDATE {} SET x = x * 2.5, s = s || '?' WHERE s = 'ä' OR id % 5 = 0"
    (ours, our_root), (theirs, their_root) = _table(warehouse), _table(warehouse)
    assert _run(spark, statement.format(f"{CATALOG}.db.{ours}"), f"ours-{ours}") == []
    spark.conf.set("spark.lance_partitioned.sql.update.enabled", "false")
    try:
        assert _run(spark, statement.format(f"{CATALOG}.db.{theirs}"), f"theirs-{theirs}") != []
    finally:
        spark.conf.unset("spark.lance_partitioned.sql.update.enabled")
    assert _canonical(oracle.stored_rows(our_root, "p")) == _canonical(oracle.stored_rows(their_root, "p"))


def test_an_aliased_update_takes_spark_s_path_with_the_same_answer(spark: SparkSession, warehouse: str) -> None:
    name, root = _table(warehouse)
    jobs = _run(spark, f"UPDATE {CATALOG}.db.{name} AS t SET t.x = 7 WHERE t.s = 'a'", f"alias-{name}")
    assert jobs  # a qualified name does not bind in the engine: Spark's row-level update
    assert _canonical(oracle.stored_rows(root, "p")) == _by_spark(spark, {"x": "7"}, "s = 'a'")
    name, root = _table(warehouse)
    assert _run(spark, f"UPDATE {CATALOG}.db.{name} t SET x = 7 WHERE s = 'a'", f"alias2-{name}") == []
    assert _canonical(oracle.stored_rows(root, "p")) == _by_spark(spark, {"x": "7"}, "s = 'a'")


def test_explain_and_errors_change_nothing(spark: SparkSession, warehouse: str) -> None:
    name, root = _table(warehouse)
    before = PartitionedNamespace.load(root).manifest_version
    plan = spark.sql(f"EXPLAIN UPDATE {CATALOG}.db.{name} SET x = 0").collect()[0][0]
    assert "Physical Plan" in plan
    with pytest.raises(AnalysisException):  # Spark's own analysis error, after the engine declined
        spark.sql(f"UPDATE {CATALOG}.db.{name} SET nope = 1")
    with pytest.raises(AnalysisException):
        spark.sql(f"UPDATE {CATALOG}.db.{name} SET x = 'text' || nope WHERE id = 1")
    assert PartitionedNamespace.load(root).manifest_version == before
    assert _canonical(oracle.stored_rows(root, "p")) == _canonical(ROWS)


def test_a_temporary_view_or_another_catalog_is_left_to_spark(spark: SparkSession) -> None:
    spark.range(3).createOrReplaceTempView("sql_update_view")
    with pytest.raises(PySparkException, match="does not support UPDATE TABLE") as raised:
        spark.sql("UPDATE sql_update_view SET id = 1")
    assert "LANCE" not in str(raised.value)
