"""Data skipping by column statistics through every door, and every writer keeping them sound.

A namespace partitioned by day whose ids grow with time: a lookup on ``id`` should open one
table. The oracle is always Spark's own answer over a plain DataFrame of the rows the
namespace holds (read back with pylance, never through the code under test); the plan's own
line says how many tables column statistics skipped.
"""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from partitioning import PartitionedNamespace
from pipelines import (
    backfill_columns,
    compact,
    create_scalar_index,
    delete_rows,
    merge_partitioned,
    read_partitioned,
    update_rows,
    write_partitioned,
)

CATALOG = "lance_skip"
DAYS = 20
PER_DAY = 50
SKIPPED = re.compile(r"scanning (\d+) of (\d+) partition tables \(.*?(?:; (\d+) skipped by column statistics)?\)")


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("skip-warehouse"))
    spark.conf.set(f"spark.sql.catalog.{CATALOG}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.warehouse", path)
    return path


def _rows(first_day: int = 0, days: int = DAYS) -> list[dict[str, Any]]:
    return [
        {"day": d, "id": d * PER_DAY + i, "s": f"user{(d * PER_DAY + i) % 97:03d}", "v": float(i)}
        for d in range(first_day, first_day + days)
        for i in range(PER_DAY)
    ]


def _events(spark: SparkSession, warehouse: str) -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    root = str(Path(warehouse, "db", name))
    df = spark.createDataFrame(_rows(), "day INT, id BIGINT, s STRING, v DOUBLE")
    write_partitioned(df, root, partition_by=["day"])
    return root, f"{CATALOG}.db.{name}"


def _stored(spark: SparkSession, root: str) -> DataFrame:
    """The rows the namespace holds, read with pylance: the oracle's input."""
    ns = PartitionedNamespace.load(root)
    tables = [ns.open_table(t).to_table() for t in ns.partitions()]
    return spark.createDataFrame(pa.concat_tables(tables).to_pandas())


def _same(got: DataFrame, want: DataFrame) -> None:
    columns = sorted(want.columns)
    assert sorted(map(tuple, got.select(columns).collect())) == sorted(map(tuple, want.select(columns).collect()))


def _scanned(text: str) -> tuple[int, int, int]:
    found = SKIPPED.findall(text)
    assert found, text
    kept, total, skipped = found[0]
    return int(kept), int(total), int(skipped or 0)


def test_every_door_reads_one_table_for_a_point_lookup(
    spark: SparkSession, warehouse: str, caplog: pytest.LogCaptureFixture
) -> None:
    root, table = _events(spark, warehouse)
    oracle = _stored(spark, root)
    # the tables whose id and s ranges admit the filter (day d holds ids 50d .. 50d + 49)
    admitted = {"id = 512": 1, "id BETWEEN 100 AND 149": 1, "id IN (3, 999)": 2, "s = 'user005' AND id < 60": 2}
    for f, tables in {**admitted, "id > 100000": 0}.items():
        want = oracle.where(f)
        with caplog.at_level(logging.INFO, logger="lance_partitioned"):
            _same(read_partitioned(spark, root, filter=f), want)
        line = [r.getMessage() for r in caplog.records if "scanning" in r.getMessage()][-1]
        assert _scanned(line) == (tables, DAYS, DAYS - tables), (f, line)
        where = spark.read.format("lance_partitioned").load(root).where(f)
        _same(where, want)
        assert _scanned(where._jdf.queryExecution().executedPlan().toString())[0] == tables
        sql = spark.sql(f"SELECT * FROM {table} WHERE {f}")
        _same(sql, want)
        explain = "\n".join(r[0] for r in spark.sql(f"EXPLAIN SELECT * FROM {table} WHERE {f}").collect())
        assert _scanned(explain) == (tables, DAYS, DAYS - tables), explain
        assert spark.sql(f"SELECT count(*) FROM {table} WHERE {f}").first()[0] == want.count()
    # inside the table read, Lance's scan uses a zone map on id; the plan's line says so
    create_scalar_index(root, "id", "ZONEMAP", spark=spark)
    with caplog.at_level(logging.INFO, logger="lance_partitioned"):
        _same(read_partitioned(spark, root, filter="id = 512"), oracle.where("id = 512"))
    line = [r.getMessage() for r in caplog.records if "scanning" in r.getMessage()][-1]
    assert line.endswith("; 1 scanned with a scalar index on id"), line
    explain = "\n".join(r[0] for r in spark.sql(f"EXPLAIN SELECT * FROM {table} WHERE id = 512").collect())
    assert "1 scanned with a scalar index on id" in explain, explain
    assert "scalar index" not in PartitionedNamespace.load(root).plan_scan("id = 512").summary


def test_writers_keep_statistics_that_never_hide_a_row(spark: SparkSession, warehouse: str) -> None:
    root, table = _events(spark, warehouse)
    ns = PartitionedNamespace.load(root)

    def check(f: str, *, at_most: int | None = None) -> None:
        _same(read_partitioned(spark, root, filter=f), _stored(spark, root).where(f))
        if at_most is not None:
            assert len(PartitionedNamespace.load(root).plan_scan(f)) <= at_most, f

    # an append to existing partitions and new ones: merged statistics
    more = spark.createDataFrame(_rows(DAYS - 2, 4), "day INT, id BIGINT, s STRING, v DOUBLE")
    write_partitioned(more.selectExpr("day", "id + 100000 AS id", "s", "v"), root)
    check("id = 100975", at_most=1)
    check("id = 5", at_most=1)
    # a merge: updated rows, inserted rows, a row that moves to another partition
    changes = [(3, 7, "moved", 1.0), (25, 200000, "new", 2.0), (4, 210, "updated", 3.0)]
    source = spark.createDataFrame(changes, "day INT, id BIGINT, s STRING, v DOUBLE")
    merge_partitioned(source, root, on="id")
    check("id = 200000", at_most=1)
    check("id = 7")
    check("s = 'moved'")
    # Lance's UPDATE changes ids: day 2's id bounds widen to the values written (100 .. 500149)
    update_rows(root, set={"id": "id + 500000"}, where="day = 2", spark=spark)
    check("id = 500100", at_most=1)
    check("id = 5", at_most=1)
    check("s = 'user005' AND day = 2", at_most=1)
    # SQL UPDATE of another column, DELETE, compaction, an index: the rows stay findable
    spark.sql(f"UPDATE {table} SET v = v + 1000 WHERE day = 5")
    check("v = 1010.0", at_most=DAYS + 3)
    delete_rows(root, "id % 2 = 0", spark=spark)
    check("id = 601", at_most=2)
    compact(root, spark=spark)
    check("id = 603", at_most=2)
    create_scalar_index(root, "id", "BTREE", spark=spark)
    check("id = 605", at_most=2)
    spark.sql(
        f"MERGE INTO {table} t USING (SELECT 9 AS day, 300001 AS id, 'sql' AS s, 0.5 AS v) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    check("id = 300001", at_most=2)
    spark.sql(f"DELETE FROM {table} WHERE id = 300001")
    check("id = 300001", at_most=2)
    assert ns.manifest_version < PartitionedNamespace.load(root).manifest_version


def test_a_backfilled_column_is_read_wherever_its_values_may_match(spark: SparkSession, warehouse: str) -> None:
    root, _ = _events(spark, warehouse)
    spark.sql(f"ALTER TABLE lance_skip.db.{Path(root).name} ADD COLUMNS (w BIGINT)")
    backfill_columns(spark, root, {"w": "id * 2"})
    _same(read_partitioned(spark, root, filter="w = 1024"), _stored(spark, root).where("w = 1024"))
    assert read_partitioned(spark, root, filter="w = 1024").count() == 1


def test_collations_and_string_bounds(spark: SparkSession, warehouse: str) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}"
    root = str(Path(warehouse, "db", name))
    rows = [(1, "ABC"), (1, "abd"), (2, "zzz" + "\U0010ffff" * 40), (2, "Zeta"), (3, None)]
    df = spark.createDataFrame(rows, "p INT, s STRING")
    write_partitioned(df, root, partition_by=["p"])
    oracle = _stored(spark, root)
    for f in [
        "s COLLATE UTF8_LCASE = 'abc'",
        "s = 'zzz'",
        "s > 'zzz'",
        "s LIKE 'zz%'",
        "s IS NULL",
        "lower(s) = 'zeta'",
        "s COLLATE UNICODE_CI < 'b'",
    ]:
        _same(spark.sql(f"SELECT * FROM {CATALOG}.db.{name} WHERE {f}"), oracle.where(f))
        _same(read_partitioned(spark, root, filter=f), oracle.where(f))


def test_statistics_are_recorded_in_the_table_rows(spark: SparkSession, warehouse: str) -> None:
    root, _ = _events(spark, warehouse)
    manifest = lance.dataset(str(Path(root, "__manifest"))).to_table(filter="object_type = 'table'")
    assert all("lance_partitioned.stats" in m for m in manifest.column("metadata").to_pylist())


def test_a_stream_with_compaction_keeps_statistics(spark: SparkSession, tmp_path: Path) -> None:
    """Micro-batches commit their rows' statistics and auto-compaction keeps them: the ids the
    stream wrote are found, and ids beyond them skip every table."""
    from tests.test_streaming import add_files, stream_files

    expected = add_files(tmp_path / "in", 0, 8, rows=30)
    root = tmp_path / "ns"
    stream_files(spark, tmp_path / "in", root, tmp_path / "ck", auto_compact_after="3").awaitTermination()
    ns = PartitionedNamespace.load(str(root))
    assert "COMPACT" in [r["operation"] for r in ns.history().to_pylist()]
    for i in (0, 31, 239, 240, -1):
        got = read_partitioned(spark, str(root), filter=f"id = {i}").toPandas()
        assert sorted(got.id) == sorted(expected[expected.id == i].id)
        kept = ns.plan_scan(f"id = {i}")
        assert (len(kept) == 0) == (not 0 <= i < 240), kept.summary
