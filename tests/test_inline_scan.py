"""A small plan's rows ride with the plan (pipelines/jvm/source.py ``inline_rows``, the jar's
InlineScan): SQL and ``.where`` answer from them with one JVM task and no Python worker
reading a table. Oracle: Spark's own answer over a parquet copy of the same rows."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table

MARK = "(rows read while planning)"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("country", pa.string()),
        ("name", pa.string()),
        ("ok", pa.bool_()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("amount", pa.decimal128(20, 4)),
        ("score", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("place", pa.struct([("lat", pa.float32()), ("city", pa.string())])),
        ("v", pa.list_(pa.float32(), 3)),
    ]
)
COLUMNS = [f.name for f in SCHEMA if f.name != "v"]


def _rows(n: int, text: int = 8) -> pa.Table:
    rng = np.random.default_rng(5)
    ids = np.arange(n)
    return pa.table(
        {
            "id": ids,
            "country": [("US", "DE", "JP")[i % 3] for i in ids],
            "name": [None if i % 7 == 0 else f"ü{i}-" + "x" * (i % text) for i in ids],
            "ok": [None if i % 5 == 0 else bool(i % 2) for i in ids],
            "ts": [dt.datetime(2025, 3, 30, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=int(i)) for i in ids],
            "day": [dt.date(1969, 12, 31) + dt.timedelta(days=int(i)) for i in ids],
            "amount": [None if i % 4 == 0 else decimal.Decimal(int(i) * 12345) / 10_000 for i in ids],
            "score": [float("nan") if i % 11 == 0 else float(x) for i, x in zip(ids, rng.normal(size=n), strict=True)],
            "tags": [None if i % 6 == 0 else [f"t{j}" for j in range(int(i) % 3)] for i in ids],
            "place": [None if i % 9 == 0 else {"lat": float(i) / 3, "city": f"c{i % 4}"} for i in ids],
            "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3, dtype=np.float32)), 3),
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def catalog(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog over a warehouse of this module's own (Spark keeps a catalog once loaded)."""
    warehouse = tmp_path_factory.mktemp("inline") / "wh"
    spark.conf.set("spark.sql.catalog.inl", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.inl.warehouse", str(warehouse))
    return warehouse


def _both(spark: SparkSession, warehouse: Path, table: pa.Table, name: str) -> None:
    ns = PartitionedNamespace.create(str(warehouse / "db" / name), SCHEMA, ["country"])
    write_table(ns, table)
    path = str(warehouse.parent / f"{name}.parquet")
    pq.write_table(table, path)
    spark.read.parquet(path).createOrReplaceTempView(f"{name}_parquet")


def _plain(value: object) -> object:
    """NaN as a string (NaN is not equal to itself), so rows compare as Spark means them."""
    return "NaN" if isinstance(value, float) and value != value else value


def _sorted(rows: list) -> list:  # type: ignore[type-arg]
    return sorted((tuple(_plain(v) for v in r) for r in rows), key=repr)


@pytest.mark.parametrize(
    "where",
    [
        "country = 'US'",
        "country IN ('DE', 'JP') AND id % 2 = 0",
        "country = 'JP' AND ts >= TIMESTAMP '2025-03-30 01:30:00 UTC' AND name LIKE 'ü%'",
        "country = 'US' AND (score > 0 OR isnan(score)) AND amount IS NOT NULL",
        "country = 'XX'",
    ],
)
def test_small_plans_answer_from_their_rows_like_spark(spark: SparkSession, catalog: Path, where: str) -> None:
    if not (catalog / "db" / "small").exists():
        _both(spark, catalog, _rows(300), "small")
    columns = ", ".join(COLUMNS)
    query = spark.sql(f"SELECT {columns}, v FROM inl.db.small WHERE {where}")
    explained = query._jdf.queryExecution().executedPlan().toString()  # classic-only (the local[2] suite)
    assert MARK in explained and "BatchScan" in explained
    got = [(*r[:-1], None if r[-1] is None else [round(x, 6) for x in r[-1]]) for r in query.collect()]
    want = spark.sql(f"SELECT {columns}, v FROM small_parquet WHERE {where}").collect()
    want = [(*r[:-1], None if r[-1] is None else [round(x, 6) for x in r[-1]]) for r in want]
    assert _sorted(got) == _sorted(want)
    via_format = spark.read.format("lance_partitioned").load(str(catalog / "db" / "small")).where(where)
    assert _sorted(via_format.select(*COLUMNS).collect()) == _sorted([r[:-1] for r in want])


def test_a_plan_too_large_to_carry_is_read_by_tasks(spark: SparkSession, catalog: Path) -> None:
    """768 KiB is the most a plan carries: these rows are larger, and the tasks read them."""
    _both(spark, catalog, _rows(6_000, text=2_000), "large")
    query = spark.sql("SELECT id, name FROM inl.db.large WHERE country = 'US'")
    explained = query._jdf.queryExecution().executedPlan().toString()  # classic-only (the local[2] suite)
    assert MARK not in explained and "LancePartitionedScan" in explained
    want = spark.sql("SELECT id, name FROM large_parquet WHERE country = 'US'").collect()
    assert _sorted(query.collect()) == _sorted(want)


def test_the_catalog_reuses_a_description_only_while_it_is_the_latest(spark: SparkSession, catalog: Path) -> None:
    """Each load reads the latest ``__manifest``; a description is reused only while the
    latest version file is the one it read: a write by another client, and a namespace
    removed and made again under the same name (same version numbers, another schema),
    are seen by the next query."""
    import shutil

    root = catalog / "db" / "again"
    first = pa.schema([("id", pa.int64()), ("c", pa.string())])
    write_table(PartitionedNamespace.create(str(root), first, ["c"]), pa.table({"id": [1], "c": ["a"]}, schema=first))
    assert spark.sql("SELECT * FROM inl.db.again").collect() == [(1, "a")]
    assert spark.sql("SELECT * FROM inl.db.again").columns == ["id", "c"]  # described once more, from the listing
    write_table(PartitionedNamespace.load(str(root)), pa.table({"id": [2], "c": ["b"]}, schema=first))
    assert sorted(spark.sql("SELECT id FROM inl.db.again").collect()) == [(1,), (2,)]
    shutil.rmtree(root)
    second = pa.schema([("key", pa.string()), ("c", pa.string()), ("n", pa.int32())])
    ns = PartitionedNamespace.create(str(root), second, ["c"])
    write_table(ns, pa.table({"key": ["k"], "c": ["z"], "n": [7]}, schema=second))
    write_table(ns.refresh(), pa.table({"key": ["l"], "c": ["z"], "n": [8]}, schema=second))
    again = spark.sql("SELECT * FROM inl.db.again")
    assert again.columns == ["key", "c", "n"]
    assert sorted(again.collect()) == [("k", "z", 7), ("l", "z", 8)]
