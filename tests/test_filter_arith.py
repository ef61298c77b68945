"""Integer arithmetic in a filter (``(id div 60) % 100 = 0``) is evaluated exactly as Spark
evaluates it (partitioning.sql.arith): the rows Arrow selects are the rows Spark's own ``where``
selects on the same rows, ANSI on and off, over each integer type's extremes and NULLs. Under
ANSI only ``div`` and ``%`` are taken (whether Spark raises on an overflow depends on its
optimizer); with ANSI off ``+ - *`` wrap as Spark's do. A Lance scan given the rendered filter
returns every row Spark selects. An update with such a filter runs no Spark job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

import pipelines.write.targets as targets
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.binding import bind
from partitioning.sql.filters import Computed, Opaque, is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import arrow_predicate, lance_filter
from partitioning.sql.tokens import Dialect
from partitioning.tables.write import write_table
from pipelines import update_rows
from tests import merge_oracle as oracle

SCHEMA = pa.schema(
    [("k", pa.int32()), ("id", pa.int64()), ("n", pa.int32()), ("s", pa.int16()), ("b", pa.int8()), ("p", pa.int32())]
)
SPARK_SCHEMA = "k int, id bigint, n int, s smallint, b tinyint, p int"
I64, I32 = 2**63 - 1, 2**31 - 1
VALUES = [
    (0, 0, 0, 0),
    (-1, -1, -1, -1),
    (7, 7, 7, 7),
    (-7, -7, -7, -7),
    (60, 60, 120, 100),
    (-121, 599, -600, -100),
    (I64, I32, 32767, 127),
    (-I64 - 1, -I32 - 1, -32768, -128),
    (2**53 + 1, 46341, 181, 12),
    (None, None, None, None),
    (6000, None, 3, None),
    (None, 5, None, 5),
]
TABLE = pa.Table.from_pylist(
    [
        {"k": i, "id": a, "n": n, "s": s, "b": b, "p": i % 3}
        for i, (a, n, s, b) in enumerate(VALUES + [(x * 37 - 500, x * 11 - 90, x - 40, x % 50) for x in range(60)])
    ],
    SCHEMA,
)
FILTERS = [
    "(id div 60) % 100 = 0",
    "id % 7 = -1",
    "id % -7 != 0",
    "n div 2 >= -3",
    "n div -2 < 3",
    "s % 3 = 2",
    "b % 2 = 1",
    "id + 1 > 0",  # overflows on the largest bigint: legacy mode wraps
    "n * 2 < 0",  # INT arithmetic: overflows on n's extremes
    "n * 2 > 3000000000",  # a BIGINT literal beside INT arithmetic
    "s * 1000 < 0",  # SMALLINT times an INT literal is INT: no overflow
    "b + b > 100",  # TINYINT + TINYINT is TINYINT: overflows
    "-n < 0",
    "-id >= 0",
    "id - n = 0",
    "n + s * b <= 10",
    "(n % 10) * (id div 1000) > 5",
    "0 = (id div 60) % 100",
    "NOT (id % 3 = 0)",
    "id % 3 = 0 OR n % 5 = 1",
    "id % 1000 BETWEEN 1 AND 5 OR (n div 7) % 2 = 0",
    "n % 2147483647 = 1",
    "id % 9223372036854775807 = 0",
    "n % 100 = 2.5",  # a decimal literal: refused
    "id div 0 = 1",  # refused: a zero divisor
    "id % -1 = 0",  # refused: -1
    "id % n = 0",  # refused: a column divisor
    "id + 1L > 0",  # refused: the suffix types the literal
]


def _spark_ids(spark: SparkSession, text: str) -> list[int] | None:
    """The ``k`` of the rows Spark's ``where`` selects, or None when Spark raises."""
    df = spark.createDataFrame(TABLE.to_pylist(), SPARK_SCHEMA)
    try:
        return sorted(r.k for r in df.where(text).select("k").collect())
    except PySparkException:
        return None


def _arrow_ids(text: str, ansi: bool) -> list[int] | None:
    """The ``k`` of the rows Arrow selects, or None when the filter is refused."""
    dialect = Dialect(ansi=ansi)
    bound = bind(parse_filter(text, dialect), SCHEMA, dialect)
    if not is_exactly_understood(bound):
        return None
    return sorted(TABLE.filter(arrow_predicate(bound, SCHEMA)).column("k").to_pylist())


OVERFLOWING = ("+", "*", "-n", "-id", "id - n")


@pytest.mark.parametrize("ansi", [True, False])
def test_the_rows_arrow_selects_are_the_rows_spark_selects(spark: SparkSession, ansi: bool) -> None:
    session = spark.newSession()
    session.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    refused = []
    for text in FILTERS:
        ours = _arrow_ids(text, ansi)
        if ours is None:
            refused.append(text)
            continue
        assert ours == _spark_ids(session, text), text
    may_overflow = [t for t in FILTERS[:-5] if any(op in t for op in OVERFLOWING)]
    assert refused == ([*may_overflow, *FILTERS[-5:]] if ansi else FILTERS[-5:])
    if not ansi:  # the rows reach the overflows: Spark answers with wrapped values
        assert _spark_ids(session, "id + 1 > 0") != _spark_ids(session, "id > -1")


def test_a_lance_scan_given_the_rendered_filter_keeps_every_row_spark_selects(
    spark: SparkSession, tmp_path: Path
) -> None:
    dataset = lance.write_dataset(TABLE, str(tmp_path / "t"))
    rendered = 0
    legacy = spark.newSession()
    legacy.conf.set("spark.sql.ansi.enabled", "false")
    for text in FILTERS:
        bound = bind(parse_filter(text), SCHEMA)
        where = lance_filter(bound, SCHEMA)
        if where is None:
            continue
        rendered += 1
        scanned = set(dataset.to_table(filter=where, columns=["k"]).column("k").to_pylist())
        wanted = set(_spark_ids(legacy, text) or [])
        assert wanted <= scanned, (text, where)
        if all(op not in text for op in OVERFLOWING):
            assert scanned == wanted, (text, where)  # only div and % rendered: exactly Spark's rows
    assert rendered >= 10


def test_arithmetic_on_a_non_integer_column_or_in_another_dialect_stays_opaque() -> None:
    schema = pa.schema([("x", pa.float64()), ("id", pa.int64())])
    assert isinstance(bind(parse_filter("x % 2 = 1"), schema), Opaque)
    datafusion = Dialect(name="datafusion")
    assert isinstance(bind(parse_filter("id % 2 = 1", datafusion), schema, datafusion), Opaque)
    assert isinstance(bind(parse_filter("id % 2 = 1"), schema), Computed)


def test_pruning_never_skips_a_partition_for_arithmetic_on_its_column(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), TABLE)
    ns = PartitionedNamespace.load(root)
    legacy = Dialect(ansi=False)
    for text in ("p * 2 = 4", "p % 2 = 1", "NOT (p div 2 = 0)"):
        f = parse_filter(text, legacy)
        assert isinstance(bind(f, SCHEMA, legacy), Computed)
        assert len(list(ns.plan_scan(f, dialect=legacy))) == 3, text


def test_an_update_with_arithmetic_in_its_filter_runs_no_spark_job(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), TABLE)
    where = "(id div 60) % 100 = 0 AND n % 2 = 0"
    chosen = set(_spark_ids(spark, where) or [])

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the update handed rows to Spark")

    monkeypatch.setattr(targets, "_spark_rows", refused)
    monkeypatch.setattr(type(spark), "createDataFrame", refused)
    result = update_rows(root, set={"n": "n + 1"}, where=where, spark=spark)
    assert result.rows_updated == len(chosen) >= 3
    stored = {r["k"]: r for r in oracle.stored_rows(root, "p")}
    for row in TABLE.to_pylist():
        want = row["n"] + 1 if row["k"] in chosen else row["n"]
        assert stored[row["k"]]["n"] == want, row
