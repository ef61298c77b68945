"""SQL users: catalog tables ``USING lance_partitioned`` through ``spark.sql`` (PySpark 4.3.0).

What Spark 4.3 hands a Python data source (checked in the 4.3.0 jar and here):
- ``CREATE TABLE ... USING lance_partitioned OPTIONS (path ...)`` / ``LOCATION ...`` calls
  ``schema()`` with the options once; ``PythonDataSourceV2.getTable`` drops them, so later
  reads and writes get no table options. A read gets the schema the catalog stored, which
  carries the root (metadata of its first column).
- Per-statement options do reach the source: ``SELECT ... FROM t WITH ('filter' = ...)``,
  ``INSERT INTO t WITH ('path' = ...)``, ``writeTo(t).option('path', ...)``.
- ``INSERT OVERWRITE`` is a truncate-and-append (``overwrite=True``); Python tables lack the
  dynamic-overwrite and overwrite-by-filter capabilities, and ``MERGE INTO``, ``UPDATE``,
  ``DELETE FROM`` are refused before the source is asked.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from pipelines import register_data_source, write_partitioned

ROWS = [(1, "US", 10.0), (2, "US", 20.0), (3, "FR", 30.0), (4, "DE", 40.0), (5, "FR", 50.0)]
DDL = "id long, country string, amount double"


@pytest.fixture
def root(spark: SparkSession, tmp_path: Path) -> str:
    register_data_source(spark)
    path = str(tmp_path / "events")
    write_partitioned(spark.createDataFrame(ROWS, DDL), path, partition_by=["country"])
    return path


@pytest.fixture
def table(spark: SparkSession, root: str) -> Iterator[str]:
    name = f"events_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} USING lance_partitioned OPTIONS (path '{root}')")
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def rows(spark: SparkSession, sql: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.sql(sql).collect())


def namespace_rows(root: str) -> list[tuple[object, ...]]:
    """What the namespace holds, read with Lance (no Spark), one tuple per row."""
    ns = PartitionedNamespace.load(root)
    out = []
    for p in ns.partitions():
        for r in ns.open_table(p).to_table(columns=["id", "country", "amount"]).to_pylist():
            out.append((r["id"], r["country"], r["amount"]))
    return sorted(out)


@pytest.mark.parametrize("clause", ["OPTIONS (path '{root}')", "LOCATION '{root}'"])
def test_create_table_and_select(spark: SparkSession, root: str, clause: str) -> None:
    name = f"events_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} USING lance_partitioned {clause.format(root=root)}")
    try:
        assert spark.table(name).columns == ["id", "country", "amount"]
        assert rows(spark, f"SELECT * FROM {name}") == sorted(ROWS)
        assert rows(spark, f"SELECT country, count(*), sum(amount) FROM {name} GROUP BY country") == [
            ("DE", 1, 40.0),
            ("FR", 2, 80.0),
            ("US", 2, 30.0),
        ]
    finally:
        spark.sql(f"DROP TABLE {name}")
    assert namespace_rows(root) == sorted(ROWS)  # DROP TABLE leaves the namespace alone


def test_select_with_the_filter_option_reads_only_matching_partitions(spark: SparkSession, root: str, table: str):
    ns = PartitionedNamespace.load(root)
    for p in ns.partitions():
        if p.values == {"country": "FR"}:
            for f in Path(p.uri, "data").iterdir():
                f.unlink()  # a read of the FR partition table now fails
    query = f"SELECT id, amount FROM {table} WITH ('filter' = \"country = 'US'\")"
    assert rows(spark, query) == [(1, 10.0), (2, 20.0)]
    assert rows(spark, f"SELECT id FROM {table} WITH ('filter' = \"country IN ('US', 'DE')\")") == [(1,), (2,), (4,)]
    with pytest.raises(Exception, match="a file of a committed version is missing"):
        spark.sql(f"SELECT count(*) FROM {table}").collect()


def test_insert_into_with_the_path_appends_and_every_select_sees_it(spark: SparkSession, root: str, table: str):
    spark.sql(f"INSERT INTO {table} WITH ('path' = '{root}') VALUES (6, 'US', 60.0)")
    spark.sql(f"INSERT INTO {table} WITH ('path' = '{root}') SELECT 7 AS id, 'JP' AS country, 70.0 AS amount")
    spark.createDataFrame([(8, "DE", 80.0)], DDL).writeTo(table).option("path", root).append()
    expected = sorted([*ROWS, (6, "US", 60.0), (7, "JP", 70.0), (8, "DE", 80.0)])
    assert rows(spark, f"SELECT * FROM {table}") == expected
    assert namespace_rows(root) == expected


def test_time_travel_is_sparks_own_and_refused_for_catalog_tables(spark: SparkSession, root: str, table: str):
    """Spark reads ``versionAsOf`` as its own time travel, which Python tables do not support."""
    version = PartitionedNamespace.load(root).manifest_version
    for query in (
        f"SELECT * FROM {table} WITH ('versionAsOf' = '{version}')",
        f"SELECT * FROM {table} VERSION AS OF {version}",
    ):
        with pytest.raises(AnalysisException, match=re.escape("[UNSUPPORTED_FEATURE.TIME_TRAVEL]")):
            spark.sql(query).collect()
    spark.sql(f"INSERT INTO {table} WITH ('path' = '{root}') VALUES (6, 'US', 60.0)")
    old = spark.read.format("lance_partitioned").option("versionAsOf", version).load(root)
    assert sorted(tuple(r) for r in old.collect()) == sorted(ROWS)  # the Python API's time travel
    assert rows(spark, f"SELECT * FROM {table}") == sorted([*ROWS, (6, "US", 60.0)])


def test_write_options_go_in_the_same_with_clause(spark: SparkSession, root: str, table: str):
    insert = f"INSERT INTO {table} WITH ('path' = '{root}', 'write_id' = 'nightly-1') VALUES (6, 'US', 60.0)"
    spark.sql(insert)
    spark.sql(insert)  # the same write_id adds nothing twice
    assert namespace_rows(root) == sorted([*ROWS, (6, "US", 60.0)])
    with pytest.raises(AnalysisException, match=re.escape("unknown lance_partitioned write option 'max_rows'")):
        spark.sql(f"INSERT INTO {table} WITH ('path' = '{root}', 'max_rows' = '5') VALUES (7, 'US', 70.0)")


def test_insert_overwrite_static_replaces_every_partition(spark: SparkSession, root: str, table: str):
    spark.sql(f"INSERT OVERWRITE {table} WITH ('path' = '{root}') VALUES (9, 'US', 90.0)")
    assert rows(spark, f"SELECT * FROM {table}") == [(9, "US", 90.0)]
    assert namespace_rows(root) == [(9, "US", 90.0)]


def test_insert_overwrite_dynamic_replaces_only_the_written_partitions(spark: SparkSession, root: str, table: str):
    spark.sql(
        f"INSERT OVERWRITE {table} WITH ('path' = '{root}', 'partitionOverwriteMode' = 'dynamic') "
        "VALUES (9, 'US', 90.0), (10, 'JP', 100.0)"
    )
    expected = sorted([(3, "FR", 30.0), (4, "DE", 40.0), (5, "FR", 50.0), (9, "US", 90.0), (10, "JP", 100.0)])
    assert rows(spark, f"SELECT * FROM {table}") == expected
    assert namespace_rows(root) == expected


def test_insert_without_the_path_is_one_line_naming_the_fix(spark: SparkSession, root: str, table: str):
    for statement in (
        f"INSERT INTO {table} SELECT 6 AS id, 'US' AS country, 60.0 AS amount",
        f"INSERT OVERWRITE {table} SELECT 6 AS id, 'US' AS country, 60.0 AS amount",
    ):
        with pytest.raises(AnalysisException) as info:
            spark.sql(statement)
        text = str(info.value)
        assert "partitioning.errors.SpecError: no path: Spark 4.3 gives a Python data source writer no table " in text
        # the root when Spark passes the stored schema's metadata along (it does for VALUES and casts)
        assert re.search(f"INSERT INTO t WITH \\('path' = '(<root>|{re.escape(root)})'\\) \\.\\.\\.", text)
        assert "Traceback" not in text
    with pytest.raises(AnalysisException, match=f"INSERT INTO t WITH \\('path' = '{re.escape(root)}'\\)"):
        spark.sql(f"INSERT INTO {table} VALUES (6, 'US', 60.0)")
    assert namespace_rows(root) == sorted(ROWS)


def test_what_spark_refuses_for_python_data_sources(spark: SparkSession, root: str, table: str):
    refused = {
        f"MERGE INTO {table} t USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE": (
            "does not support MERGE INTO TABLE"
        ),
        f"UPDATE {table} SET amount = 0 WHERE id = 1": "does not support UPDATE TABLE",
        f"DELETE FROM {table} WHERE id = 1": "Table does not support deletes: lance_partitioned",
        f"INSERT OVERWRITE {table} WITH ('path' = '{root}') PARTITION (country = 'US') SELECT 9, 90.0": (
            "PARTITION clause cannot contain the non-partition column: `country`"
        ),
        f"INSERT INTO {table} REPLACE WHERE id = 1 VALUES (1, 'US', 0.0)": "does not support overwrite by filter",
    }
    for statement, message in refused.items():
        with pytest.raises(PySparkException, match=re.escape(message)):
            spark.sql(statement)
    source = spark.createDataFrame([(1, "US", 0.0)], DDL).alias("s")
    with pytest.raises(PySparkException, match=re.escape("does not support MERGE INTO TABLE")):
        source.mergeInto(table, F.expr(f"{table}.id = s.id")).whenMatched().delete().merge()
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY"):
        spark.sql(f"SELECT * FROM lance_partitioned.`{root}`")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        with pytest.raises(AnalysisException, match="does not support dynamic overwrite in batch mode"):
            spark.sql(f"INSERT OVERWRITE {table} WITH ('path' = '{root}') VALUES (9, 'US', 90.0)")
    finally:
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    assert namespace_rows(root) == sorted(ROWS)


def test_create_table_as_select_gets_no_path(spark: SparkSession, tmp_path: Path):
    register_data_source(spark)
    name = f"ctas_{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(AnalysisException, match=re.escape("no path: Spark 4.3 gives a Python data source writer")):
            spark.sql(
                f"CREATE TABLE {name} USING lance_partitioned LOCATION '{tmp_path / 'ctas'}' "
                "AS SELECT 1 AS id, 'US' AS country"
            )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
    assert not (tmp_path / "ctas" / "__manifest").exists()


def test_a_temporary_view_reads_the_version_of_its_creation_and_takes_inserts(spark: SparkSession, root: str):
    view = f"events_view_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TEMPORARY VIEW {view} USING lance_partitioned OPTIONS (path '{root}')")
    try:
        spark.sql(f"INSERT INTO {view} VALUES (6, 'US', 60.0)")
        assert namespace_rows(root) == sorted([*ROWS, (6, "US", 60.0)])
        assert rows(spark, f"SELECT * FROM {view}") == sorted(ROWS)  # one view, one __manifest version
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING lance_partitioned OPTIONS (path '{root}')")
        assert rows(spark, f"SELECT * FROM {view}") == sorted([*ROWS, (6, "US", 60.0)])
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {view}")
