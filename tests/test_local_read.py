"""Small reads are read in the driver and handed to Spark as a local relation (``pipelines.read.local``).

Oracle: Spark's own ``src.where(f)`` over the DataFrame that was written, under session
time zones that are not UTC, for every column type a partition holds; and the same read
forced through the ``lance_partitioned`` source's tasks (bounds lowered to 0) for the
fallbacks.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

import pipelines.read.local as local_read
from partitioning import PartitionedNamespace
from partitioning.errors import PartitioningError
from pipelines import read_partitioned, write_partitioned
from pipelines.read.dataframe import read_partitioned_with_plan
from pipelines.spark_errors import spark_errors

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("country", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("day", pa.date32()),
        ("amount", pa.decimal128(12, 3)),
        ("score", pa.float64()),
        ("raw", pa.binary()),
        ("flag", pa.bool_()),
        ("v", pa.list_(pa.float32(), 2)),
    ]
)
SPARK_SCHEMA = (
    "id long, country string, ts timestamp, local timestamp_ntz, day date, amount decimal(12,3), "
    "score double, raw binary, flag boolean, v array<float>"
)
UTC = dt.UTC


def _rows() -> pa.Table:
    countries = ["US", "DE", "Ünïcode", None]
    rows = []
    for i in range(48):
        rows.append(
            {
                "id": i,
                "country": countries[i % 4],
                "ts": dt.datetime(2025, 3, 30, 0, 30, tzinfo=UTC) + dt.timedelta(hours=5 * i) if i % 7 else None,
                "local": dt.datetime(2025, 3, 30, 1, 30) + dt.timedelta(hours=3 * i) if i % 5 else None,
                "day": dt.date(2025, 3, 28) + dt.timedelta(days=i % 6) if i % 9 else None,
                "amount": decimal.Decimal(i * 1234) / 1000 if i % 6 else None,
                "score": [float("nan"), -0.0, 1.5, None][i % 4] if i % 2 else i / 3,
                "raw": bytes([i, 255 - i]) if i % 8 else None,
                "flag": [True, False, None][i % 3],
                "v": [float(i), -float(i)] if i % 10 else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@pytest.fixture
def zone(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", request.param)
    yield request.param
    spark.conf.set("spark.sql.session.timeZone", before)


@pytest.fixture
def written(spark: SparkSession, tmp_path: Path) -> tuple[str, DataFrame]:
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["country", "day(ts)"])
    src = spark.createDataFrame(_rows(), schema=SPARK_SCHEMA)
    write_partitioned(src, root)
    return root, src


def _is_local(df: DataFrame) -> bool:
    plan = str(df._jdf.queryExecution().optimizedPlan().toString())
    return "LocalRelation" in plan and "PythonDataSource" not in plan


FILTERS = [
    "country = 'US'",
    "country = 'Ünïcode' AND ts >= TIMESTAMP '2025-03-31 02:00:00'",
    "ts < TIMESTAMP '2025-04-01 00:00:00' AND local >= TIMESTAMP_NTZ '2025-03-30 10:00:00'",
    "country IS NULL OR amount > 20.5",
    "day IN (DATE '2025-03-29', DATE '2025-03-31') AND score > 0",
    "raw IS NOT NULL AND flag",
    "country = 'nowhere'",
]


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Pacific/Chatham"], indirect=True)
@pytest.mark.parametrize("f", FILTERS)
def test_a_small_read_is_local_and_equals_sparks_own_where(
    spark: SparkSession, written: tuple[str, DataFrame], zone: str, f: str
) -> None:
    root, src = written
    got, plan = read_partitioned_with_plan(spark, root, filter=f)
    assert _is_local(got) == (len(plan) <= local_read.LOCAL_MAX_TABLES)
    want = src.where(f)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)


def test_the_filters_cover_both_routes(spark: SparkSession, written: tuple[str, DataFrame]) -> None:
    root, _ = written
    planned = [len(read_partitioned_with_plan(spark, root, filter=f)[1]) for f in FILTERS]
    assert min(planned) <= local_read.LOCAL_MAX_TABLES < max(planned), planned


def test_columns_with_a_filter_on_other_columns(spark: SparkSession, written: tuple[str, DataFrame]) -> None:
    root, src = written
    f = "country = 'DE' AND amount < 40"
    got = read_partitioned(spark, root, filter=f, columns=["v", "id"])
    assert _is_local(got) and got.columns == ["v", "id"]
    assert_df_equality(got, src.where(f).select("v", "id"), ignore_row_order=True, ignore_nullable=True)


def test_reads_over_the_bounds_go_through_spark_tasks_with_the_same_rows(
    spark: SparkSession, written: tuple[str, DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, src = written
    f = "country = 'US' OR country IS NULL"
    for bound in ("LOCAL_MAX_ROWS", "LOCAL_MAX_BYTES", "LOCAL_MAX_TABLES"):
        with monkeypatch.context() as patch:
            patch.setattr(local_read, bound, 0)
            got = read_partitioned(spark, root, filter=f)
            assert not _is_local(got), bound
            assert_df_equality(got, src.where(f), ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)


def test_a_table_that_cannot_be_read_fails_at_the_action_in_one_line(
    spark: SparkSession, written: tuple[str, DataFrame]
) -> None:
    root, _ = written
    ns = PartitionedNamespace.load(root)
    table = next(p for p in ns.partitions() if p.values["country"] == "DE")
    data = Path(table.uri) / "data"
    for file in data.iterdir():
        file.unlink()
    df = read_partitioned(spark, root, filter="country = 'DE'")
    assert not _is_local(df)
    with pytest.raises(PartitioningError) as info, spark_errors("read"):
        df.collect()
    assert "\n" not in str(info.value) and table.object_id in str(info.value)
