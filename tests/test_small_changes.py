"""Small changes take the driver's path (pipelines.write.small): no Spark task reads or writes
rows, the answers are those of the independent oracles, and what is too large, or cannot
be sized, still goes through Spark's tasks."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

import pipelines.write.small as small
import pipelines.write.targets as targets
from partitioning.errors import PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import delete_rows, merge_partitioned, update_rows, write_partitioned
from tests import merge_oracle as oracle

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("country", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("amount", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.string())),
        ("v", pa.list_(pa.float32(), 3)),
    ]
)
SPARK_SCHEMA = (
    "id long, country string, ts timestamp, day date, amount decimal(10,2), tags array<string>, v array<float>"
)
COLUMNS = SCHEMA.names
T0 = dt.datetime(2025, 3, 30, 0, 30, tzinfo=dt.UTC)


def _row(i: int, country: str, amount: str | None, v: float = 0.5) -> dict[str, Any]:
    return {
        "id": i,
        "country": country,
        "ts": T0 + dt.timedelta(hours=i),
        "day": dt.date(2025, 1, 1) + dt.timedelta(days=i),
        "amount": None if amount is None else decimal.Decimal(amount),
        "tags": [country.lower(), f"t{i}"] if i % 2 else None,
        "v": [v, -v, float(i)],
    }


TARGET = [_row(1, "US", "1.50"), _row(2, "FR", "2.25"), _row(3, "US", None), _row(4, "DE", "4.00")]
SOURCE = [_row(1, "US", "9.99", 2.0), _row(2, "DE", "0.01"), _row(7, "FR", "7.70")]


def _namespace(root: str, rows: list[dict[str, Any]] = TARGET) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    write_table(ns, pa.Table.from_pylist(rows, schema=SCHEMA))


def _source(spark: SparkSession, rows: list[dict[str, Any]] = SOURCE) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], SPARK_SCHEMA)


def _stored(root: str) -> list[tuple[Any, ...]]:
    return oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS)


@pytest.fixture
def no_tasks(monkeypatch: pytest.MonkeyPatch, spark: SparkSession) -> None:
    """Any read or write of rows by Spark's tasks fails the test."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a small change read or wrote rows through Spark's tasks")

    monkeypatch.setattr(targets, "_spark_rows", refused)
    monkeypatch.setattr(type(spark.range(1)), "mapInArrow", refused)
    monkeypatch.setattr("pipelines.source.datasource.register_data_source", refused)


def test_a_small_merge_update_delete_and_append_start_no_task(spark: SparkSession, tmp_path: Any, no_tasks: None):
    root = str(tmp_path / "ns")
    _namespace(root)
    result = merge_partitioned(_source(spark), root, on="id")
    expected = oracle.merge(TARGET, SOURCE, ["id"], oracle.Case())
    assert (result.rows_updated, result.rows_inserted) == (2, 1)
    assert _stored(root) == oracle.canonical(expected, COLUMNS)

    update_rows(root, set={"amount": "amount * 2", "country": "'IT'"}, where="id = 7", spark=spark)
    expected = oracle.update(
        expected, lambda r: {**r, "amount": r["amount"] * 2, "country": "IT"}, lambda r: r["id"] == 7
    )
    assert _stored(root) == oracle.canonical(expected, COLUMNS)

    delete_rows(root, "amount IS NULL OR id = 2", spark=spark)
    expected = [r for r in expected if not (r["amount"] is None or r["id"] == 2)]
    assert _stored(root) == oracle.canonical(expected, COLUMNS)

    write_partitioned(_source(spark, [_row(9, "JP", "0.09")]), root, mode="append")
    assert _stored(root) == oracle.canonical([*expected, _row(9, "JP", "0.09")], COLUMNS)


@pytest.mark.parametrize("via", ["driver", "tasks"])
def test_both_paths_store_what_delta_rs_stores(spark: SparkSession, tmp_path: Any, via: str, request: Any):
    """The same merge on a schema with zones, dates, decimals, lists and vectors: the
    driver's path and the tasks' path store exactly delta-rs's rows."""
    from deltalake import DeltaTable, write_deltalake

    if via == "tasks":
        request.getfixturevalue("spark_tasks")
    root = str(tmp_path / "ns")
    _namespace(root)
    merge_partitioned(_source(spark), root, on="id", set={"amount": "source.amount", "tags": "source.tags"})
    plain = pa.schema([f.with_type(pa.list_(pa.float32())) if f.name == "v" else f for f in SCHEMA])
    delta = str(tmp_path / "delta")
    write_deltalake(delta, pa.Table.from_pylist(TARGET, schema=plain), partition_by=["country"])
    merger = DeltaTable(delta).merge(
        pa.Table.from_pylist(SOURCE, schema=plain),
        "target.id = source.id",
        source_alias="source",
        target_alias="target",
    )
    merger.when_matched_update(
        {"amount": "source.amount", "tags": "source.tags"}
    ).when_not_matched_insert_all().execute()
    expected = DeltaTable(delta).to_pyarrow_table().to_pylist()
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def test_a_target_beyond_the_bounds_is_read_by_tasks(spark: SparkSession, tmp_path: Any, monkeypatch: Any):
    root = str(tmp_path / "ns")
    _namespace(root)
    monkeypatch.setattr(small, "SMALL_MAX_ROWS", 3)  # the target holds 4 rows
    reads: list[list[str]] = []
    real = targets._spark_rows

    def spied(session: Any, ns: Any, read: Any, *args: Any) -> Any:
        reads.append(sorted(read))
        return real(session, ns, read, *args)

    monkeypatch.setattr(targets, "_spark_rows", spied)
    update_rows(root, set={"amount": "amount + 1"}, spark=spark)
    assert len(reads) == 1 and len(reads[0]) == 3
    expected = oracle.update(
        TARGET, lambda r: {**r, "amount": None if r["amount"] is None else r["amount"] + 1}, lambda r: True
    )
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def test_python_rows_beyond_the_bound_are_not_collected(spark: SparkSession, monkeypatch: Any):
    monkeypatch.setattr(small, "SMALL_MAX_ROWS", 2)
    assert small.small_rows(_source(spark)) is None  # 3 rows
    assert small.small_copy(_source(spark)) is None
    assert small.small_rows(_source(spark, SOURCE[:2])).num_rows == 2
    held = small.small_copy(_source(spark, SOURCE[:2]))
    assert held is not None and sorted(r.id for r in held.collect()) == [1, 2]


def test_rows_read_from_files_are_collected_by_their_size_in_memory(
    spark: SparkSession, tmp_path: Any, monkeypatch: Any
):
    """200,000 rows of 200 characters are 40 MB in memory but a few hundred KB of parquet: the
    size on disk does not make rows small. pyarrow reads such files in the driver only while
    the rows it has read fit the budget (pipelines.write.file_rows), and stops beyond it."""
    path = str(tmp_path / "big.parquet")
    spark.range(200_000).selectExpr("id", "repeat('x', 200) AS s").write.parquet(path)
    held = small.small_rows(spark.read.parquet(path))
    assert held is not None and held.num_rows == 200_000 and held.nbytes > 40_000_000
    monkeypatch.setattr(small, "MEASURED_WRITE_BYTES", 16 << 20)
    assert small.small_rows(spark.read.parquet(path)) is None
    assert small.small_copy(spark.read.parquet(path).limit(5)) is None
    assert small.small_rows(spark.range(5).selectExpr("id", "repeat('x', 200) AS s")) is not None
    assert small.small_rows(spark.range(300_000)) is None  # beyond SMALL_MAX_ROWS


@pytest.mark.parametrize("via", ["driver", "tasks"])
def test_a_bad_row_is_one_line_and_nothing_is_committed(spark: SparkSession, tmp_path: Any, via: str, request: Any):
    if via == "tasks":
        request.getfixturevalue("spark_tasks")
    root = str(tmp_path / "ns")
    _namespace(root)
    before = PartitionedNamespace.load(root).manifest_version
    bad = [{**SOURCE[0], "v": [1.0, 2.0]}]  # a vector of 2 values in a 3-value column
    with pytest.raises(PartitioningError) as info:
        merge_partitioned(_source(spark, bad), root, on="id")
    assert "\n" not in str(info.value) and "'v'" in str(info.value)
    assert PartitionedNamespace.load(root).manifest_version == before
    assert _stored(root) == oracle.canonical(TARGET, COLUMNS)


def test_a_cached_dataframe_of_measured_size_is_written_by_the_driver(
    spark: SparkSession, tmp_path: Any, no_tasks: None, monkeypatch: Any
):
    """A cached, materialized DataFrame whose counted size is within the bound is collected
    and written by the driver: the stored rows are Spark's rows. Not yet materialized, over
    the bound, or with a plan that can multiply rows, it is left to the tasks."""
    path = str(tmp_path / "src.parquet")
    spark.range(50_000).selectExpr("id", "CAST(id % 7 AS STRING) AS k", "repeat('x', id % 50) AS s").write.parquet(path)
    cached = spark.read.parquet(path).cache()
    assert small.small_rows(cached) is None  # not materialized: its size is still an estimate
    cached.count()
    root = str(tmp_path / "ns")
    write_partitioned(cached.where("id % 3 = 0"), root, partition_by=["k"])
    stored = sorted(
        (r["id"], r["k"], r["s"])
        for p in PartitionedNamespace.load(root).partitions()
        for r in PartitionedNamespace.load(root).open_table(p).to_table().to_pylist()
    )
    assert stored == sorted((r.id, r.k, r.s) for r in cached.where("id % 3 = 0").collect())
    assert small.small_rows(cached.selectExpr("explode(array(id, id)) AS id")) is None
    assert small.small_rows(cached.join(cached, "id")) is None
    monkeypatch.setattr(small, "MEASURED_WRITE_BYTES", 1000)
    assert small.small_rows(cached) is None
    cached.unpersist()


WIDE = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("x", pa.float64()), ("s", pa.string()), ("n", pa.int64())])
WIDE_FILTERS = [
    # (where, the oracle in plain Python with Spark's semantics, read in the driver)
    ("s = 'ß3'", lambda r: r["s"] == "ß3", True),  # pushed into Lance's scan
    ("x > 1990.5", lambda r: r["x"] is not None and (r["x"] != r["x"] or r["x"] > 1990.5), True),  # NaN is largest
    ("s IS NULL AND id < 300", lambda r: r["s"] is None and r["id"] < 300, True),
    ("id % 50 = 0", lambda r: r["id"] % 50 == 0, True),  # integer arithmetic: exactly Spark's in Arrow
    ("abs(id) % 50 = 0", lambda r: abs(r["id"]) % 50 == 0, False),  # a function: Spark's tasks read
    ("id >= 400", lambda r: r["id"] >= 400, False),  # more rows than the bound: Spark's tasks read
]


def test_a_filter_narrows_the_rows_the_driver_reads(spark: SparkSession, tmp_path: Any, monkeypatch: Any) -> None:
    """Tables beyond the bound whose rows a filter narrows to a few are read in the driver
    (only those rows); Spark still evaluates the filter and the new values, so the answers
    are a plain-Python replay's. What the filter cannot narrow, or narrows to too many
    rows, goes through Spark's tasks, with the same answers."""
    rows = [
        {
            "id": i,
            "p": i % 8,
            "x": float("nan") if i % 97 == 0 else None if i % 89 == 0 else float(i),
            "s": None if i % 83 == 0 else f"ß{i % 41}",
            "n": 0,
        }
        for i in range(2_000)
    ]
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, WIDE, ["p"]), pa.Table.from_pylist(rows, schema=WIDE))
    monkeypatch.setattr(small, "SMALL_MAX_ROWS", 150)  # each table holds 250 rows; each filter's rows differ
    reads: list[str] = []
    real = targets._spark_rows

    def spied(session: Any, ns: Any, read: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append("tasks")
        return real(session, ns, read, *args, **kwargs)

    monkeypatch.setattr(targets, "_spark_rows", spied)
    for where, selects, driver in WIDE_FILTERS:
        reads.clear()
        update_rows(root, set={"n": "n + 1"}, where=where, spark=spark)
        assert (reads == []) is driver, where
        for r in rows:
            r["n"] += 1 if selects(r) else 0
    stored = oracle.stored_rows(root, "p")
    assert sorted((r["id"], r["n"]) for r in stored) == sorted((r["id"], r["n"]) for r in rows)
    assert sum(r["n"] for r in rows) > 600  # every filter selected rows
