"""A DataFrame that is plainly parquet files is read by pyarrow in the driver
(pipelines.write.file_rows), and its rows are exactly Spark's own ``toArrow()`` of it; whatever
Spark would read differently (a filter, a cast, partition directories, dates, a column whose
case differs, a file lacking a column) is refused and left to Spark. Writes and merges of such
a source run no Spark collect and store Spark's rows."""

from __future__ import annotations

import decimal
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.write.dataframe import write_partitioned
from pipelines.write.file_rows import file_rows
from pipelines.write.merge import merge_partitioned
from tests import merge_oracle as oracle

BIG = 1 << 30
NUMBERS = pa.schema(
    [
        ("id", pa.int64()),
        ("tiny", pa.int8()),
        ("small", pa.int16()),
        ("int", pa.int32()),
        ("f", pa.float32()),
        ("d", pa.float64()),
        ("b", pa.bool_()),
        ("s", pa.string()),
        ("price", pa.decimal128(9, 2)),
        ("wide", pa.decimal128(38, 10)),
    ]
)
SPECIAL = [math.nan, -0.0, math.inf, -math.inf, None, 1e300, 5e-324]
TEXTS = ["", "naïve", "日本語", "😀 emoji", None, "a\x00b", "x" * 300]


def _numbers(start: int, count: int, *, large: bool = False) -> pa.Table:
    rows = []
    for i in range(start, start + count):
        rows.append(
            {
                "id": i,
                "tiny": [-128, 127, None, 0][i % 4],
                "small": [-32768, 32767, None, 7][i % 4],
                "int": [-(2**31), 2**31 - 1, None, i][i % 4],
                "f": SPECIAL[i % len(SPECIAL)] if i % len(SPECIAL) != 5 else 3.5,
                "d": SPECIAL[i % len(SPECIAL)],
                "b": [True, False, None][i % 3],
                "s": TEXTS[i % len(TEXTS)],
                "price": None if i % 5 == 0 else decimal.Decimal(i) / 100 - decimal.Decimal("3.07"),
                "wide": decimal.Decimal(f"-{i}.0123456789") if i % 2 else decimal.Decimal("9" * 28 + ".9999999999"),
            }
        )
    table = pa.Table.from_pylist(rows, schema=NUMBERS)
    return table.cast(NUMBERS.set(7, pa.field("s", pa.large_string()))) if large else table


def _files(tmp_path: Path, name: str = "in") -> str:
    """Three parquet files written by pyarrow (one with ``large_string``, one with small row
    groups) under a directory whose name needs escaping in a URI."""
    folder = tmp_path / f"{name} 100% ü"
    folder.mkdir()
    pq.write_table(_numbers(0, 40), folder / "a.parquet")
    pq.write_table(_numbers(40, 35, large=True), folder / "b.parquet")
    pq.write_table(_numbers(75, 50), folder / "c.parquet", row_group_size=7)
    return str(folder)


def _canonical(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows sorted by ``id``, floats as their repr (NaN and -0.0 kept apart)."""

    def value(v: Any) -> Any:
        return repr(v) if isinstance(v, float) else v

    rows = [tuple(value(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(rows, key=lambda r: r[list(table.column_names).index("id")])


def _same_as_spark(df: DataFrame) -> None:
    expected = df.toArrow()
    got = file_rows(df, max_bytes=BIG)
    assert got is not None, "a plain parquet scan was refused"
    assert got.schema == expected.schema
    assert _canonical(got) == _canonical(expected)


def test_parquet_files_read_here_equal_spark_s_own_rows(spark: SparkSession, tmp_path: Path) -> None:
    folder = _files(tmp_path)
    _same_as_spark(spark.read.parquet(folder))
    _same_as_spark(
        spark.read.parquet(folder).select(
            "id",
            F.col("s").alias("renamed"),
            F.lit("all").alias("one"),
            F.lit(7).alias("seven"),
            F.lit(None).cast("string").alias("nothing"),
            F.col("d"),
            F.col("d").alias("d_again"),
        )
    )
    _same_as_spark(spark.read.schema("s string, id bigint, price decimal(9,2)").parquet(folder))
    _same_as_spark(spark.read.option("mergeSchema", "true").parquet(folder))


def _refused(df: DataFrame) -> None:
    assert file_rows(df, max_bytes=BIG) is None


def test_what_spark_would_read_differently_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    folder = _files(tmp_path)
    read = spark.read.parquet(folder)
    _refused(read.where("id > 3"))
    _refused(read.limit(5))
    _refused(read.select(F.col("int").cast("long").alias("int")))
    _refused(read.select(F.upper("s").alias("s")))
    _refused(read.union(read))
    _refused(spark.read.schema("ID bigint").parquet(folder))  # Spark matches the case; the file says "id"
    _refused(spark.read.schema("id int").parquet(folder))  # a type Spark would convert or refuse
    _refused(spark.read.schema("id bigint, missing string").parquet(folder))

    nested = tmp_path / "nested"
    nested.mkdir()
    pq.write_table(
        pa.table({"id": [1], "when": [pa.scalar(0, pa.date32()).as_py()], "l": [[1, 2]], "bin": [b"x"]}),
        nested / "n.parquet",
    )
    for column in ("when", "l", "bin"):
        _refused(spark.read.parquet(str(nested)).select("id", column))
    _same_as_spark(spark.read.parquet(str(nested)).select("id"))

    partitioned = tmp_path / "partitioned"
    (partitioned / "p=1").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2]}), partitioned / "p=1" / "x.parquet")
    _refused(spark.read.parquet(str(partitioned)))

    uneven = tmp_path / "uneven"
    uneven.mkdir()
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "x": ["a"]}), uneven / "1.parquet")
    pq.write_table(pa.table({"id": pa.array([2], pa.int64())}), uneven / "2.parquet")
    _refused(spark.read.option("mergeSchema", "true").parquet(str(uneven)))

    dotted = tmp_path / "dotted"
    dotted.mkdir()
    pq.write_table(pa.table({"a.b": [1], "id": [2]}), dotted / "d.parquet")
    _refused(spark.read.parquet(str(dotted)))

    csv = tmp_path / "csv"
    spark.createDataFrame([(1,)], "id int").write.csv(str(csv))
    _refused(spark.read.csv(str(csv)))


def test_the_bounds_and_the_field_id_setting_are_kept(spark: SparkSession, tmp_path: Path) -> None:
    folder = _files(tmp_path)
    read = spark.read.parquet(folder)
    assert file_rows(read, max_bytes=BIG, max_rows=124) is None
    assert file_rows(read, max_bytes=BIG, max_rows=125) is not None
    assert file_rows(read, max_bytes=2_000) is None
    spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
    try:
        _refused(spark.read.parquet(folder))
    finally:
        spark.conf.unset("spark.sql.parquet.fieldId.read.enabled")


def test_a_file_pyarrow_cannot_read_is_left_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    folder = _files(tmp_path)
    read = spark.read.parquet(folder)
    Path(folder, "c.parquet").write_bytes(b"not parquet at all")  # broken after Spark listed it
    _refused(read)


def test_a_write_of_parquet_files_stores_spark_s_rows_without_a_spark_job(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _files(tmp_path)
    source = spark.read.parquet(folder).withColumn("one", F.lit("all"))
    expected = _canonical(source.toArrow())
    root = str(tmp_path / "ns")
    with monkeypatch.context() as patched:
        patched.setattr(DataFrame, "toArrow", _fail)
        patched.setattr(DataFrame, "mapInArrow", _fail)
        write_partitioned(source, root, partition_by=["bucket[4](id)", "one"])
    stored = pa.Table.from_pylist(oracle.stored_rows(root), schema=source.toArrow().schema)
    assert _canonical(stored) == expected
    assert len(PartitionedNamespace.load(root).partitions()) == 4


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the rows went through Spark")


def test_a_merge_from_parquet_files_stores_the_upsert_without_a_spark_collect(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("s", pa.string())])
    target = pa.table({"id": list(range(100)), "p": [i % 3 for i in range(100)], "s": ["old"] * 100}, schema=schema)
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, schema, ["p"]), target)
    # updates (a third move partition), inserts, and a NULL key (matches nothing: inserted)
    ids = [*range(50, 80), *range(200, 210), None]
    source = pa.table({"id": ids, "p": [(i or 0) % 4 for i in ids], "s": ["new é"] * len(ids)}, schema=schema)
    path = tmp_path / "source.parquet"
    pq.write_table(source, path)
    with monkeypatch.context() as patched:
        patched.setattr(DataFrame, "toArrow", _fail)
        merge_partitioned(spark.read.parquet(str(path)), root, on="id")
    keep = [r for r in target.to_pylist() if r["id"] not in set(ids)]
    assert oracle.canonical(oracle.stored_rows(root, "p"), schema.names) == oracle.canonical(
        keep + source.to_pylist(), schema.names
    )
