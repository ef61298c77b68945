"""Regression tests for the numbered cases of the trust issue (11), each against Spark's own answer.

0 decimal comparisons, 2 session time zones, 3 float rules in pruning, 4 decimals of 38
digits, 12 errors, 13 filter strings that ``df.where`` accepts. (1 is tests/test_reuse.py,
5 tests/test_refs.py; the differential suite is tests/test_differential.py.)
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from partitioning import InvalidInput, PartitionedNamespace, PartitioningError
from partitioning.tables.deletes import delete_rows as delete_rows_local
from partitioning.tables.write import write_table
from pipelines.maintenance.operations import compact, delete_rows, drop_partitions
from pipelines.read.dataframe import read_partitioned
from pipelines.source.datasource import register_data_source

UTC = dt.UTC
LA = "America/Los_Angeles"


@contextmanager
def zone(spark: SparkSession, name: str) -> Iterator[None]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", name)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before or "UTC")


def ids(df) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(r[0] for r in df.select("id").collect())


# -- 0: decimal columns under every comparison ------------------------------------------------------

DECIMAL_TYPES = [(10, 2), (20, 4), (38, 2)]


@pytest.mark.parametrize(("precision", "scale"), DECIMAL_TYPES)
def test_decimal_comparisons_give_sparks_rows(spark: SparkSession, tmp_path: Path, precision: int, scale: int) -> None:
    root = str(tmp_path / "ns")
    t = pa.decimal128(precision, scale)
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("amount", t)])
    values = ["-1.25", "0", "0.5", "0.01", "1.25", "12.5", None]
    rows = [(i, "ab"[i % 2], None if v is None else decimal.Decimal(v)) for i, v in enumerate(values)]
    ns = PartitionedNamespace.create(root, schema, ["p"])
    write_table(ns, pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema))
    src = spark.createDataFrame(rows, f"id long, p string, amount decimal({precision},{scale})")
    register_data_source(spark)
    reused = spark.read.format("lance_partitioned").load(root)
    for f in ["amount > 0", "amount <= 1.25", "amount = 0.5", "amount >= 0.005", "amount < 12.50", "amount <> 0"]:
        want = ids(src.where(f))
        assert ids(read_partitioned(spark, root, filter=f)) == want, f
        assert ids(reused.where(f)) == want, f
        assert ids(spark.read.format("lance_partitioned").option("filter", f).load(root)) == want, f


# -- 2: timestamps without a zone are read in the session time zone ----------------------------------


@pytest.fixture()
def hours(tmp_path: Path) -> str:
    """One row per hour of 2025-12-09 20:00Z .. 2025-12-10 12:00Z, partitioned by day(ts) and ts itself."""
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    start = dt.datetime(2025, 12, 9, 20, tzinfo=UTC)
    rows = [{"id": h, "ts": start + dt.timedelta(hours=h)} for h in range(17)]
    ns = PartitionedNamespace.create(root, schema, ["day(ts)", "ts AS t"])
    write_table(ns, pa.Table.from_pylist(rows, schema=schema))
    return root


def _hours_src(spark: SparkSession):  # type: ignore[no-untyped-def]
    start = dt.datetime(2025, 12, 9, 20, tzinfo=UTC)
    return spark.createDataFrame([(h, start + dt.timedelta(hours=h)) for h in range(17)], "id long, ts timestamp")


def test_read_filters_read_zone_less_timestamps_in_the_session_zone(spark: SparkSession, hours: str) -> None:
    with zone(spark, LA):
        src = _hours_src(spark)
        for f in [
            "ts >= TIMESTAMP '2025-12-10 00:00:00'",
            "ts < '2025-12-10'",
            "ts = TIMESTAMP '2025-12-09 16:00:00'",
            "ts >= DATE '2025-12-10'",
        ]:
            want = ids(src.where(f))
            assert want, f
            assert ids(read_partitioned(spark, root := hours, filter=f)) == want, f
            assert ids(spark.read.format("lance_partitioned").load(root).where(f)) == want, f


def test_plan_scan_takes_a_time_zone(hours: str) -> None:
    ns = PartitionedNamespace.load(hours)
    utc = ns.plan_scan("ts = TIMESTAMP '2025-12-10 00:00:00'")
    la = ns.plan_scan("ts = TIMESTAMP '2025-12-10 00:00:00'", time_zone=LA)
    assert [t.object_id for t in utc] != [t.object_id for t in la]
    table = {t.object_id: t for t in ns.partitions()}
    assert [table[t.object_id].values["t"] for t in utc] == [dt.datetime(2025, 12, 10, tzinfo=UTC)]
    assert [table[t.object_id].values["t"] for t in la] == [dt.datetime(2025, 12, 10, 8, tzinfo=UTC)]


def test_option_filter_refuses_a_zone_less_timestamp_without_time_zone(spark: SparkSession, hours: str) -> None:
    register_data_source(spark)
    f = "ts >= TIMESTAMP '2025-12-10 00:00:00'"
    with pytest.raises(PySparkException, match="needs one here"):
        spark.read.format("lance_partitioned").option("filter", f).load(hours).count()
    got = spark.read.format("lance_partitioned").option("filter", f).option("timeZone", LA).load(hours)
    with zone(spark, LA):
        assert ids(got) == ids(_hours_src(spark).where(f))


def test_maintenance_filters_use_the_session_zone(spark: SparkSession, hours: str) -> None:
    with zone(spark, LA):
        src = _hours_src(spark)
        f = "ts < TIMESTAMP '2025-12-09 15:00:00'"  # 23:00Z: ids 0..2
        assert ids(src.where(f)) == [0, 1, 2]
        assert delete_rows(hours, f, spark=spark).rows == 3
        report = drop_partitions(hours, "ts = TIMESTAMP '2025-12-10 00:00:00'", spark=spark)  # 08:00Z, id 12
        assert report.tables == 1
        compact(hours, "ts >= TIMESTAMP '2025-12-10 00:00:00'", spark=spark)
        left = ids(read_partitioned(spark, hours))
    assert left == [i for i in range(17) if i not in (0, 1, 2, 12)]


def test_spark_free_delete_rows_reads_timestamps_as_utc(hours: str) -> None:
    """Without a session the filter is DataFusion SQL: zone-less timestamps are UTC, as in Lance."""
    assert delete_rows_local(hours, "ts < TIMESTAMP '2025-12-09 23:00:00'").rows == 3


# -- 3: floats in pruning ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [["f"], ["bucket[8](f)"]])
def test_float_filters_follow_spark(spark: SparkSession, tmp_path: Path, layout: list[str]) -> None:
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    values = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.5, None]
    ns = PartitionedNamespace.create(root, schema, layout)
    write_table(ns, pa.table({"id": list(range(len(values))), "f": values}, schema=schema))
    src = spark.createDataFrame(list(enumerate(values)), "id long, f double")
    for f in [
        "f = 0.0",
        "f = -0.0D",
        "f = 'NaN'",
        "f > 1",
        "f >= CAST('NaN' AS DOUBLE)",
        "f < 'NaN'",
        "f IN (0, 'NaN')",
    ]:
        want = ids(src.where(f))
        assert ids(read_partitioned(spark, root, filter=f)) == want, f


def test_the_exact_filter_option_treats_minus_zero_as_zero_in_in_lists(spark: SparkSession, tmp_path: Path) -> None:
    """``.option("filter", f)`` evaluates IN itself: Arrow's is_in tells -0.0 from 0.0, Spark
    does not (found by the slow differential run: ``NOT (r NOT IN (-0.0D, NULL) AND ...)``)."""
    from pipelines import register_data_source

    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("r", pa.float32())])
    values = [0.0, -0.0, 1.5, math.nan, None]
    ns = PartitionedNamespace.create(root, schema, ["p"])
    write_table(ns, pa.table({"id": list(range(5)), "p": ["a"] * 5, "r": values}, schema=schema))
    src = spark.createDataFrame([(i, "a", v) for i, v in enumerate(values)], "id long, p string, r float")
    register_data_source(spark)
    for f in ["r IN (-0.0D, 2.0D)", "r IN (0.0D)", "r NOT IN (-0.0D, NULL)", "NOT (r NOT IN (-0.0D, NULL))"]:
        got = ids(spark.read.format("lance_partitioned").option("filter", f).load(root))
        assert got == ids(src.where(f)), f


def test_not_in_a_literal_the_column_cannot_hold_keeps_every_non_null_row(spark: SparkSession, tmp_path: Path) -> None:
    """``dsm NOT IN (-0.00015)`` on decimal(10,4): binding drops the literal (no value equals
    it), and the Lance scan filter of ``NOT IN ()`` must be ``IS NOT NULL``, not FALSE
    (found by the slow differential run: read_partitioned returned no rows)."""
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("dsm", pa.decimal128(10, 4))])
    values = [decimal.Decimal("-99.5000"), decimal.Decimal("1.2500"), decimal.Decimal("-0.0001"), None]
    ns = PartitionedNamespace.create(root, schema, ["truncate[50](dsm)"])
    write_table(ns, pa.table({"id": list(range(4)), "dsm": values}, schema=schema))
    src = spark.createDataFrame(list(enumerate(values)), "id long, dsm decimal(10,4)")
    for f in ["dsm NOT IN (-0.00015)", "dsm NOT IN (-0.00015) OR dsm <=> NULL", "dsm IN (-0.00015)"]:
        assert ids(read_partitioned(spark, root, filter=f)) == ids(src.where(f)), f


# -- 4: decimals of 38 digits -----------------------------------------------------------------------


@pytest.mark.parametrize("layout", [["dec"], ["bucket[4](dec)"], ["truncate[1000](dec)"]])
def test_decimal_literals_of_38_digits_prune(tmp_path: Path, layout: list[str]) -> None:
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("dec", pa.decimal128(38, 2))])
    big = decimal.Decimal("123456789012345678901234567890123456.78")
    ns = PartitionedNamespace.create(root, schema, layout)
    write_table(ns, pa.table({"id": [1, 2], "dec": [big, decimal.Decimal("1.00")]}, schema=schema))
    tables = {t.object_id: t for t in ns.partitions()}
    cases = [(f"dec = {big}", {1}), (f"dec >= {big}", {1}), (f"dec < {big}", {2}), (f"dec = -{big}", set())]
    for f, must_keep in cases:
        kept = {
            i
            for t in ns.plan_scan(f)
            for i in lance.dataset(tables[t.object_id].uri).to_table().column("id").to_pylist()
        }
        assert must_keep <= kept, f
        if layout == ["dec"]:
            assert kept == must_keep, f


# -- 13: what df.where accepts, read_partitioned accepts ---------------------------------------------


def test_filter_strings_accept_what_where_accepts(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    rows = [
        (1, True, 4, "A", [1, 2], {"a": 3}, b"\x03", "a\\b", dt.datetime(2025, 1, 1, 10), math.nan),
        (2, False, -5, "b", [1], {"a": 1}, b"\x04", "a_b", dt.datetime(2025, 1, 2, 10), 1.0),
        (3, None, None, None, None, None, None, None, None, None),
    ]
    spark_schema = (
        "id long, b boolean, t int, x string, arr array<int>, m struct<a: int>, bin binary, s string, "
        "ntz timestamp_ntz, f double"
    )
    src = spark.createDataFrame(rows, spark_schema)
    from pipelines import write_partitioned

    write_partitioned(src, root, partition_by=["x"])
    for f in [
        "b",
        "NOT b",
        "id % 2 = 0",
        "abs(t) > 3",
        "coalesce(t, 0) > 1",
        "size(arr) = 2",
        "lower(x) = 'a'",
        "m.a > 2",
        "bin = X'03'",
        "x RLIKE '^[Ab]$'",
        "s LIKE 'a\\\\\\\\%'",
        "s LIKE 'a!_b' ESCAPE '!'",
        "ntz > TIMESTAMP_NTZ '2025-01-01 12:00:00'",
        "f = 'NaN'",
        '"p" = x',
    ]:
        want = ids(src.where(f))
        assert ids(read_partitioned(spark, root, filter=f)) == want, f


def test_a_filter_spark_cannot_parse_is_one_line(spark: SparkSession, tmp_path: Path, hours: str) -> None:
    with pytest.raises(InvalidInput) as info:
        read_partitioned(spark, hours, filter="id = = 1")
    assert "\n" not in str(info.value)
    assert "id = = 1" in str(info.value)


# -- 12: errors name the partition and the cause -----------------------------------------------------


def test_a_missing_data_file_names_the_partition_and_file(spark: SparkSession, hours: str) -> None:
    ns = PartitionedNamespace.load(hours)
    table = ns.partitions()[0]
    data_file = next(Path(table.uri, "data").iterdir())
    data_file.unlink()
    with pytest.raises(PartitioningError) as info:
        delete_rows_local(hours, "id >= 0")
    message = str(info.value)
    assert table.object_id in message and data_file.name in message
    assert "\n" not in message
    from pipelines.spark_errors import spark_error_line

    with pytest.raises(PySparkException) as spark_info:
        read_partitioned(spark, hours).collect()
    line = spark_error_line(spark_info.value)
    assert table.object_id in line
    assert data_file.name in line
    assert "\n" not in line


def test_a_bad_manifest_version_names_the_versions(spark: SparkSession, hours: str) -> None:
    with pytest.raises(InvalidInput, match=r"has no __manifest version 99; the readable versions are 2\.\.\d+$"):
        read_partitioned(spark, hours, manifest_version=99)
    register_data_source(spark)
    with pytest.raises(PySparkException, match="versionAsOf must be a __manifest version number"):
        spark.read.format("lance_partitioned").option("versionAsOf", "latest").load(hours).count()


def test_spec_strings_with_as_aliases(tmp_path: Path) -> None:
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("country", pa.string()), ("user_id", pa.int64())])
    ns = PartitionedNamespace.create(
        str(tmp_path / "ns"), schema, ["day(ts) AS d", "country as c", "bucket[16](user_id) AS ub"]
    )
    assert ns.current_spec.field_ids == ["d", "c", "ub"]
    for bad in (["country AS"], ["day(ts) AS 1x y"], ["country AS c d"]):
        with pytest.raises(InvalidInput) as info:
            PartitionedNamespace.create(str(tmp_path / f"bad{len(str(bad))}"), schema, bad)
        assert "\n" not in str(info.value)


def test_the_query_job_prints_the_cause_of_a_task_failure(spark: SparkSession, hours: str, capsys) -> None:  # type: ignore[no-untyped-def]
    from jobs import query

    table = PartitionedNamespace.load(hours).partitions()[0]
    next(Path(table.uri, "data").iterdir()).unlink()
    capsys.readouterr()
    assert query.main(["--root", hours]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: scan partition table {table.object_id}: a file of a committed version is missing")
    assert "\n" not in err
