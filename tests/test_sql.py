"""SQL users (issue 30): a catalog, WHERE pruning, COUNT(*) from metadata, time travel and DML.

The catalog ``lance`` (``lance_partitioned.LanceCatalog`` over a warehouse directory) and
session-catalog tables ``USING lance_partitioned`` are used only through ``spark.sql``.
Oracles: Spark's own answers on plain DataFrames of the same rows, plain Lance reads of
the partition tables (``namespace_rows``), the namespace's history, and the merge oracle
of ``tests/merge_oracle.py``.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import lance
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from pipelines import read_partitioned, write_partitioned
from tests import merge_oracle as oracle

ROWS = [(1, "US", 10.0), (2, "US", 20.0), (3, "FR", 30.0), (4, "DE", 40.0), (5, "FR", 50.0)]
DDL = "id long, country string, amount double"
COLUMNS = ["id", "country", "amount"]


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("warehouse"))
    spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.lance.warehouse", path)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lance.db")
    yield path


@pytest.fixture
def table(spark: SparkSession, warehouse: str) -> Iterator[str]:
    name = f"lance.db.events_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id bigint, country string, amount double) PARTITIONED BY (country)")
    spark.sql(f"INSERT INTO {name} VALUES " + ", ".join(f"({i}, '{c}', {a})" for i, c, a in ROWS))
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def root_of(warehouse: str, name: str) -> str:
    return str(Path(warehouse, *name.split(".")[1:]))


def rows(spark: SparkSession, sql: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.sql(sql).collect())


def namespace_rows(root: str) -> list[tuple[object, ...]]:
    """What the namespace holds: each partition table read with plain Lance at its read_version."""
    manifest = lance.dataset(f"{root}/__manifest")
    out = []
    for row in manifest.to_table(filter="object_type = 'table'").to_pylist():
        ds = lance.dataset(f"{root}/{row['location']}", version=row["read_version"])
        out.extend((r["id"], r["country"], r["amount"]) for r in ds.to_table(columns=COLUMNS).to_pylist())
    return sorted(out)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0]
    assert "Traceback" not in text, text
    return first


# -- the catalog ------------------------------------------------------------------------------------
def test_create_insert_select_describe_and_show(spark: SparkSession, warehouse: str, table: str) -> None:
    root = root_of(warehouse, table)
    assert rows(spark, f"SELECT * FROM {table}") == sorted(ROWS)
    assert namespace_rows(root) == sorted(ROWS)
    shown = {r.tableName for r in spark.sql("SHOW TABLES IN lance.db").collect()}
    assert table.split(".")[-1] in shown
    described = {r.col_name: r.data_type for r in spark.sql(f"DESCRIBE TABLE {table}").collect()}
    assert described["id"] == "bigint" and described["amount"] == "double"
    assert "# Partition Information" in described
    ns = PartitionedNamespace.load(root)
    assert [str(f.transform) for f in ns.current_spec.fields] == ["identity"]


def test_partition_transforms_map_to_the_spec_and_epoch_counts_are_refused(spark: SparkSession, warehouse: str) -> None:
    name = f"lance.db.t_{uuid.uuid4().hex[:8]}"
    spark.sql(
        f"CREATE TABLE {name} (id bigint, ts timestamp, name string, c string) "
        "PARTITIONED BY (year(ts), month(ts), day(ts), bucket(4, id), truncate(2, name), c)"
    )
    ns = PartitionedNamespace.load(root_of(warehouse, name))
    assert [str(f.transform) for f in ns.current_spec.fields] == [
        "year",
        "month",
        "day",
        "bucket[4]",
        "truncate[2]",
        "identity",
    ]
    parts = [r.data_type for r in spark.sql(f"DESCRIBE TABLE {name}").collect() if r.col_name.startswith("Part ")]
    assert parts[:5] == ["year(ts)", "month(ts)", "day(ts)", "bucket(4, id)", "truncate(2, name)"]
    spark.sql(f"DROP TABLE {name} PURGE")
    for transform, message in (
        ("days(ts)", "PARTITIONED BY days(ts) counts days since 1970 (Spark's and Iceberg's meaning), not the spec's"),
        ("years(ts)", "write year(ts)"),
        ("hash(id)", "PARTITIONED BY hash(id) is not a partition transform; allowed: c, identity(c), bucket(N"),
    ):
        with pytest.raises(PySparkException) as info:
            spark.sql(f"CREATE TABLE lance.db.bad (id bigint, ts timestamp) PARTITIONED BY ({transform})")
        assert message in one_line(info.value)
    with pytest.raises(PySparkException, match="needs PARTITIONED BY"):
        spark.sql("CREATE TABLE lance.db.bad (id bigint)")
    assert not Path(warehouse, "db", "bad").exists()


def test_alter_table_evolves_through_the_namespace(spark: SparkSession, warehouse: str, table: str) -> None:
    root = root_of(warehouse, table)
    spark.sql(f"ALTER TABLE {table} ADD COLUMN note string")
    spark.sql(f"INSERT INTO {table} VALUES (6, 'US', 60.0, 'x')")
    assert rows(spark, f"SELECT id, note FROM {table} WHERE id >= 5") == [(5, None), (6, "x")]
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN note TO remark")
    spark.sql(f"ALTER TABLE {table} DROP COLUMN remark")
    ns = PartitionedNamespace.load(root)
    assert ns.schema.names == ["id", "country", "amount"]
    assert ns.namespace_schema.next_field_id == 4  # the dropped column's id is never reused
    assert [r.col_name for r in spark.sql(f"DESCRIBE TABLE {table}").collect()][:3] == ["id", "country", "amount"]
    with pytest.raises(PySparkException, match="not supported"):
        spark.sql(f"ALTER TABLE {table} ALTER COLUMN amount COMMENT 'money'")


def test_drop_table_keeps_the_data_and_purge_removes_it(spark: SparkSession, warehouse: str) -> None:
    for purge in (False, True):
        name = f"lance.db.d_{uuid.uuid4().hex[:8]}"
        spark.sql(f"CREATE TABLE {name} (id bigint, c string) PARTITIONED BY (c)")
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
        root = Path(root_of(warehouse, name))
        tables = [p for p in root.iterdir() if p.name != "__manifest" and p.is_dir() and "_v1" in p.name]
        spark.sql(f"DROP TABLE {name}{' PURGE' if purge else ''}")
        assert name.split(".")[-1] not in {r.tableName for r in spark.sql("SHOW TABLES IN lance.db").collect()}
        assert not (root / "__manifest").exists()
        if purge:
            assert not root.exists()
        else:  # each partition is still an ordinary Lance dataset
            assert sorted(lance.dataset(str(t)).count_rows() for t in tables) == [1, 1]


def test_ctas_and_replace_table_as_select(spark: SparkSession, warehouse: str, table: str) -> None:
    copy = f"lance.db.c_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {copy} PARTITIONED BY (country) AS SELECT * FROM {table} WHERE amount > 15")
    assert rows(spark, f"SELECT * FROM {copy}") == sorted(r for r in ROWS if r[2] > 15)
    spark.sql(f"REPLACE TABLE {copy} PARTITIONED BY (bucket(2, id)) AS SELECT id, amount FROM {table}")
    assert rows(spark, f"SELECT * FROM {copy}") == sorted((i, a) for i, _, a in ROWS)
    ns = PartitionedNamespace.load(root_of(warehouse, copy))
    assert ns.schema.names == ["id", "amount"] and str(ns.current_spec.fields[0].transform) == "bucket[2]"
    spark.sql(f"DROP TABLE {copy} PURGE")


# -- inserts -------------------------------------------------------------------------------------
def test_insert_overwrite_static_dynamic_and_by_partition(spark: SparkSession, warehouse: str, table: str) -> None:
    root = root_of(warehouse, table)
    spark.sql(f"INSERT OVERWRITE {table} PARTITION (country = 'US') SELECT 9, 90.0")
    expected = sorted([r for r in ROWS if r[1] != "US"] + [(9, "US", 90.0)])
    assert namespace_rows(root) == expected
    spark.sql(f"INSERT OVERWRITE {table} PARTITION (country = 'JP') SELECT 10, 100.0")
    expected = sorted([*expected, (10, "JP", 100.0)])
    assert namespace_rows(root) == expected
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        spark.sql(f"INSERT OVERWRITE {table} VALUES (11, 'FR', 1.0)")
    finally:
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    expected = sorted([r for r in expected if r[1] != "FR"] + [(11, "FR", 1.0)])
    assert namespace_rows(root) == expected
    spark.sql(f"INSERT OVERWRITE {table} VALUES (12, 'IT', 2.0)")
    assert namespace_rows(root) == [(12, "IT", 2.0)]
    spark.createDataFrame([(13, "US", 3.0)], DDL).writeTo(table).append()
    spark.createDataFrame([(14, "IT", 4.0)], DDL).writeTo(table).overwrite(F.col("country") == "IT")
    assert namespace_rows(root) == [(13, "US", 3.0), (14, "IT", 4.0)]
    with pytest.raises(PySparkException) as info:
        spark.createDataFrame([(15, "DE", 5.0)], DDL).writeTo(table).overwrite(F.col("country") == "US")
    assert "outside the overwrite's condition" in one_line(info.value)
    assert namespace_rows(root) == [(13, "US", 3.0), (14, "IT", 4.0)]


def test_a_write_id_adds_nothing_twice_and_unknown_options_are_one_line(spark: SparkSession, table: str) -> None:
    insert = f"INSERT INTO {table} WITH ('write_id' = 'nightly-1') VALUES (6, 'US', 60.0)"
    spark.sql(insert)
    spark.sql(insert)
    assert rows(spark, f"SELECT count(*) FROM {table}") == [(6,)]
    with pytest.raises(PySparkException) as info:
        spark.sql(f"INSERT INTO {table} WITH ('max_rows' = '5') VALUES (7, 'US', 70.0)")
    assert "unknown lance_partitioned write option 'max_rows'" in one_line(info.value)


# -- reads ---------------------------------------------------------------------------------------
def test_where_prunes_count_star_is_metadata_and_explain_says_so(spark: SparkSession, table: str) -> None:
    plan = spark.sql(f"EXPLAIN SELECT * FROM {table} WHERE country = 'US' AND amount > 5").collect()[0][0]
    assert "scanning 1 of 3 partition tables" in plan
    assert "PushedPredicates: [country IS NOT NULL, country = 'US']" in plan
    assert rows(spark, f"SELECT id FROM {table} WHERE country = 'US' AND amount > 15") == [(2,)]
    counted = spark.sql(f"SELECT count(*) FROM {table} WHERE country IN ('US', 'DE')")
    assert "LocalTableScan" in counted._jdf.queryExecution().executedPlan().toString()  # classic-only (local[2] suite)
    assert counted.collect()[0][0] == 3
    assert spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == len(ROWS)
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE amount > 25").collect()[0][0] == 3  # not metadata


def test_time_travel_equals_the_python_api(spark: SparkSession, warehouse: str, table: str) -> None:
    root = root_of(warehouse, table)
    version = PartitionedNamespace.load(root).manifest_version
    time.sleep(1.1)
    between = dt.datetime.now(dt.UTC).replace(microsecond=0)
    time.sleep(1.1)
    spark.sql(f"INSERT INTO {table} VALUES (6, 'US', 60.0)")
    old = rows(spark, f"SELECT * FROM {table} VERSION AS OF {version}")
    assert old == sorted(tuple(r) for r in read_partitioned(spark, root, manifest_version=version).collect())
    assert old == sorted(ROWS)
    with_zone = between.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).replace(tzinfo=None)
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        by_time = rows(spark, f"SELECT * FROM {table} TIMESTAMP AS OF '{with_zone.isoformat(sep=' ')}'")
        python = read_partitioned(spark, root, as_of=with_zone.isoformat(sep=" ")).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert by_time == sorted(tuple(r) for r in python) == sorted(ROWS)
    assert rows(spark, f"SELECT count(*) FROM {table}") == [(6,)]
    with pytest.raises(PySparkException) as info:
        spark.sql(f"SELECT * FROM {table} VERSION AS OF 999").collect()
    assert "has no __manifest version 999" in one_line(info.value) or "999" in one_line(info.value)


# -- DML -----------------------------------------------------------------------------------------
def _history(root: str) -> list[str]:
    return [r["operation"] for r in PartitionedNamespace.load(root).history().to_pylist()]


def test_delete_update_and_merge_match_the_oracle(spark: SparkSession, warehouse: str, table: str) -> None:
    root = root_of(warehouse, table)
    state = [dict(zip(COLUMNS, r, strict=True)) for r in ROWS]
    spark.sql(f"DELETE FROM {table} WHERE country = 'DE'")  # whole partitions: metadata only
    state = [r for r in state if r["country"] != "DE"]
    assert _history(root)[0] == "DELETE"
    assert namespace_rows(root) == oracle.canonical(state, COLUMNS)
    spark.sql(f"DELETE FROM {table} WHERE id = 3")
    state = [r for r in state if r["id"] != 3]
    spark.sql(f"UPDATE {table} SET country = 'IT', amount = amount * 2 WHERE id = 1")  # the row moves
    state = oracle.update(state, lambda r: {**r, "country": "IT", "amount": r["amount"] * 2}, lambda r: r["id"] == 1)
    assert namespace_rows(root) == oracle.canonical(state, COLUMNS)
    source = [{"id": 2, "country": "US", "amount": 200.0}, {"id": 7, "country": "JP", "amount": 70.0}]
    spark.createDataFrame([tuple(s.values()) for s in source], DDL).createOrReplaceTempView("merge_source")
    spark.sql(
        f"MERGE INTO {table} t USING merge_source s ON t.id = s.id "
        "WHEN MATCHED AND s.amount > 100 THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT * "
        "WHEN NOT MATCHED BY SOURCE AND t.country = 'FR' THEN DELETE"
    )
    case = oracle.Case(
        condition=("s.amount > 100", lambda s, t: s["amount"] > 100),
        when_not_matched_by_source="delete",
        by_source_condition=lambda t: t["country"] == "FR",
    )
    state = oracle.merge(state, source, ["id"], case)
    assert namespace_rows(root) == oracle.canonical(state, COLUMNS)
    assert oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS) == oracle.canonical(state, COLUMNS)
    assert _history(root)[:4] == ["MERGE", "UPDATE", "DELETE", "DELETE"]


def test_dataframe_merge_into(spark: SparkSession, warehouse: str, table: str) -> None:
    root = root_of(warehouse, table)
    source = spark.createDataFrame([(1, "US", 11.0), (8, "FR", 80.0)], DDL).alias("s")
    (
        source.mergeInto(table, F.expr(f"{table}.id = s.id"))
        .whenMatched()
        .updateAll()
        .whenNotMatched()
        .insertAll()
        .merge()
    )
    expected = sorted([(1, "US", 11.0), *[r for r in ROWS if r[0] != 1], (8, "FR", 80.0)])
    assert namespace_rows(root) == expected


def test_a_statement_racing_a_write_to_what_it_read_runs_again_on_the_new_rows(
    spark: SparkSession, warehouse: str, table: str, tmp_path: Path
) -> None:
    """An UPDATE whose read tables change before its commit (a Python UDF of its SET writes
    a row its WHERE selects to the US partition once, from the task) cannot be rebased: its
    rows are dropped and the statement runs again, and that run changes the new row too."""
    root = root_of(warehouse, table)
    marker = tmp_path / "raced"

    def racing(amount: float) -> float:
        if not marker.exists():
            marker.write_text("1")
            import pyarrow as pa

            from partitioning.tables.write import write_table

            schema = pa.schema([("id", pa.int64()), ("country", pa.string()), ("amount", pa.float64())])
            write_table(
                PartitionedNamespace.load(root),
                pa.Table.from_pylist([{"id": 50, "country": "US", "amount": 5.0}], schema=schema),
            )
        return 0.0

    spark.udf.register("racing_amount", racing, "double")
    spark.sql(f"UPDATE {table} SET amount = racing_amount(amount) WHERE country = 'US'")
    expected = [(i, c, 0.0 if c == "US" else a) for i, c, a in [*ROWS, (50, "US", 5.0)]]
    assert namespace_rows(root) == sorted(expected)
    updates = [r for r in PartitionedNamespace.load(root).history().to_pylist() if r["operation"] == "UPDATE"]
    assert len(updates) == 1  # the first run committed nothing


# -- the session catalog ---------------------------------------------------------------------------
def test_session_catalog_tables_need_no_path(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "events")
    write_partitioned(spark.createDataFrame(ROWS, DDL), root, partition_by=["country"])
    name = f"events_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} USING lance_partitioned LOCATION '{root}'")
    try:
        spark.sql(f"INSERT INTO {name} VALUES (6, 'US', 60.0)")
        assert rows(spark, f"SELECT * FROM {name} WHERE country = 'US'") == [
            (1, "US", 10.0),
            (2, "US", 20.0),
            (6, "US", 60.0),
        ]
        spark.sql(f"DELETE FROM {name} WHERE id = 2")
        spark.sql(f"UPDATE {name} SET amount = 0 WHERE id = 6")
        expected = sorted([*[r for r in ROWS if r[0] != 2], (6, "US", 0.0)])
        assert namespace_rows(root) == expected
        old = PartitionedNamespace.load(root).history().to_pylist()[-1]["version"]
        assert old >= 1
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
    assert namespace_rows(root) == expected  # a session catalog table is only a name for the root


def test_what_spark_still_refuses(spark: SparkSession, table: str) -> None:
    """Spark's own analysis errors stay Spark's; what this layer refuses is one line."""
    with pytest.raises(PySparkException, match=re.escape("RENAME TABLE is not supported")):
        spark.sql(f"ALTER TABLE {table} RENAME TO lance.db.other")
    with pytest.raises(PySparkException) as info:
        spark.sql(f"INSERT INTO {table} SELECT 'x', 'US', 1.0").collect()
    assert "Traceback" not in str(info.value)
