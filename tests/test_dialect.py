"""One filter, one dialect (issue 18, item 6): every route reads a filter string as Spark does.

Backslash escapes and double quotes differ between Spark SQL (``'a\\nb'`` is a newline,
``"p"`` is a string) and standard SQL. ``read_partitioned``, the format route, the
``filter`` option and ``plan_scan`` with the session's dialect must all agree with
Spark's own ``src.where(f)`` on the same rows.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning import InvalidInput, PartitionedNamespace
from partitioning.sql.binding import bind
from partitioning.sql.filters import is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.tables.write import write_table
from pipelines.read.dataframe import read_partitioned, session_dialect
from pipelines.source.datasource import register_data_source

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("f", pa.float64())])
VALUES = ["a\\nb", "a\nb", "US", "p", "x\\", "it's", "50%", None]
FILTERS = [
    "p = 'a\\nb'",
    "p = 'a\\\\nb'",
    "f < 0 OR p != 'a\\nb'",
    "f < 0 OR p != 'a\\\\nb'",
    "\"p\" = 'US'",
    '"p" = p',
    "p = 'x\\\\'",
    "p LIKE 'x\\\\\\\\%'",
    "p = 'it\\'s'",
    "p = 'it''s'",
    "p LIKE '50\\\\%'",
    "p IN ('a\\nb', 'US')",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("dialect") / "ns")
    ns = PartitionedNamespace.create(path, SCHEMA, ["p"])
    rows = [{"id": i, "p": v, "f": float(i)} for i, v in enumerate(VALUES)]
    write_table(ns, pa.Table.from_pylist(rows, schema=SCHEMA))
    return path


def _ids(df) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(r["id"] for r in df.select("id").collect())


@pytest.mark.parametrize("f", FILTERS)
def test_every_route_reads_the_filter_as_spark_does(spark: SparkSession, root: str, f: str) -> None:
    src = spark.createDataFrame([(i, v, float(i)) for i, v in enumerate(VALUES)], "id long, p string, f double")
    want = _ids(src.where(f))
    register_data_source(spark)
    assert _ids(read_partitioned(spark, root, filter=f)) == want
    assert _ids(spark.read.format("lance_partitioned").load(root).where(f)) == want
    ns = PartitionedNamespace.load(root)
    dialect = session_dialect(spark)
    assert is_exactly_understood(bind(parse_filter(f, dialect), ns.schema, dialect))
    exact = spark.read.format("lance_partitioned").option("filter", f).option("timeZone", "UTC").load(root)
    assert _ids(exact) == want
    kept = {t.object_id for t in ns.plan_scan(f, dialect=session_dialect(spark))}
    home = {r: t.object_id for t in ns.partitions() for r in ns.open_table(t).to_table().column("id").to_pylist()}
    assert {home[i] for i in want} <= kept


def test_a_filter_spark_cannot_parse_is_one_line(spark: SparkSession, root: str) -> None:
    with pytest.raises(InvalidInput) as info:
        read_partitioned(spark, root, filter="p = 'x\\'")
    assert "\n" not in str(info.value)


BEYOND = [
    "l NOT BETWEEN 9223372036854775807.5 AND 1",
    "l < 9223372036854775807.5",
    "NOT (l >= 9223372036854775808)",
    "l > -9223372036854775808.5",
    "NOT (l >= 1e19)",
    "i < 2147483647.5",
    "NOT (i >= 2147483648)",
    "l != 9223372036854775807.5",
]


@pytest.fixture(scope="module")
def ints_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    schema = pa.schema([("id", pa.int64()), ("l", pa.int64()), ("i", pa.int32())])
    path = str(tmp_path_factory.mktemp("beyond") / "ns")
    ns = PartitionedNamespace.create(path, schema, ["l", "i"])
    rows = [{"id": 0, "l": None, "i": None}, {"id": 1, "l": 5, "i": 5}, {"id": 2, "l": 0, "i": None}]
    write_table(ns, pa.Table.from_pylist(rows, schema=schema))
    return path


@pytest.mark.parametrize("f", BEYOND)
def test_a_literal_beyond_an_integer_columns_range_prunes_as_spark_reads_it(
    spark: SparkSession, ints_root: str, f: str
) -> None:
    """Spark 4.3.0 folds ``bigint < <decimal beyond its range>`` to TRUE, NULLs included: the
    pruner keeps those partitions (an independent oracle: Spark's where on the same rows)."""
    src = spark.createDataFrame([(0, None, None), (1, 5, 5), (2, 0, None)], "id long, l long, i int")
    want = _ids(src.where(f))
    assert _ids(read_partitioned(spark, ints_root, filter=f)) == want
    assert _ids(spark.read.format("lance_partitioned").load(ints_root).where(f)) == want
