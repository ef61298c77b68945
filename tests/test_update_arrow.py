"""An update whose rows and values the driver computes exactly as Spark would runs no Spark job
(partitioning.sql.assign, pipelines.write.small.exact_rows). Spark is the oracle: every value
the Arrow evaluator gives is compared with Spark's own ``selectExpr`` on the same rows, ANSI on
and off, and whatever might differ (an overflow) is left to Spark."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

import pipelines.write.small as small
import pipelines.write.targets as targets
from partitioning.errors import PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.assign import NotExact, assignments
from partitioning.tables.write import write_table
from pipelines import update_rows
from pipelines.read_options import session_dialect
from tests import merge_oracle as oracle

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("n", pa.int32()),
        ("b", pa.int8()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("flag", pa.bool_()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("p", pa.int32()),
    ]
)
SPARK_TYPES = {"id": "bigint", "n": "int", "b": "tinyint", "x": "double", "s": "string", "flag": "boolean"}
I64, I32 = 2**63 - 1, 2**31 - 1
ROWS = [
    {"id": 0, "n": 0, "b": 0, "x": 0.0, "s": "", "flag": True},
    {"id": -1, "n": -1, "b": -1, "x": -0.0, "s": "ß", "flag": False},
    {"id": I64, "n": I32, "b": 127, "x": float("nan"), "s": "日本", "flag": None},
    {"id": -I64 - 1, "n": -I32 - 1, "b": -128, "x": float("inf"), "s": None, "flag": True},
    {"id": 2**53 + 1, "n": 46341, "b": 3, "x": 1e308, "s": "a'b", "flag": False},
    {"id": None, "n": None, "b": None, "x": None, "s": "x", "flag": None},
    {"id": 7, "n": 7, "b": 7, "x": -1.5e-300, "s": "\u0301e", "flag": True},
]
TABLE = pa.Table.from_pylist(
    [{**r, "ts": dt.datetime(2025, 3, 30, i, 30, tzinfo=dt.UTC), "p": i % 3} for i, r in enumerate(ROWS)], SCHEMA
)
# (column, expression): each in the grammar; some overflow on some rows
EXPRESSIONS = [
    ("x", "x + 1"),
    ("x", "x * 1.1"),
    ("x", "x - 2.5E0"),
    ("x", "-x"),
    ("x", "id + x"),
    ("x", "n * x"),
    ("x", "x * id"),
    ("x", "n"),
    ("x", "x * -0.0"),  # a decimal -0.0 is 0.0: the product's sign is the column's
    ("x", "x * -0E0"),
    ("x", "x + 0." + "1" * 38),  # DECIMAL(38, 38): the widest decimal literal Spark types
    ("id", "id + 1"),
    ("id", "id - 1"),
    ("id", "id * 2"),
    ("id", "-id"),
    ("id", "n + 1"),
    ("id", "n * n"),
    ("id", "id + 2147483648"),
    ("id", "b * 2"),
    ("id", "ID + 0"),
    ("n", "n + 1"),
    ("n", "n * 46341"),
    ("n", "-n"),
    ("n", "b + n"),
    ("n", "7"),
    ("s", "s || 'z'"),
    ("s", "'日' || s || s"),
    ("s", "'const'"),
    ("s", "NULL"),
    ("flag", "TRUE"),
    ("flag", "flag"),
    ("x", "NULL"),
]
# outside the grammar: Spark computes these
REFUSED = [
    ("x", "x / 2"),
    ("n", "n + 1L"),
    ("b", "b + 1"),
    ("id", "x + 1"),
    ("x", "abs(x)"),
    ("s", "upper(s)"),
    ("n", "n * 1.5"),
    ("x", "x + NULL"),
    ("id", "CAST(x AS BIGINT)"),
    ("s", "s || 1"),
    ("x", "t.x + 1"),
    ("x", "missing + 1"),
    ("x", "x + 1e400"),  # beyond DOUBLE: Spark refuses the literal
    ("x", "x * 1" + "0" * 40 + ".0"),  # beyond DECIMAL(38)
]


def _same(ours: Any, spark: Any) -> bool:
    if isinstance(ours, float) and isinstance(spark, float):
        if math.isnan(ours) or math.isnan(spark):
            return math.isnan(ours) and math.isnan(spark)
        return ours == spark and math.copysign(1.0, ours) == math.copysign(1.0, spark)
    return type(ours) is type(spark) and ours == spark


@pytest.mark.parametrize("ansi", [True, False])
def test_every_value_the_arrow_evaluator_gives_is_sparks(spark: SparkSession, ansi: bool) -> None:
    session = spark.newSession()
    session.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    dialect = session_dialect(session)
    data = TABLE.select(list(SPARK_TYPES))
    df = session.createDataFrame(data.to_pylist(), ", ".join(f"{c} {t}" for c, t in SPARK_TYPES.items()))
    answered = 0
    for column, text in EXPRESSIONS:
        assign = assignments({column: text}, SCHEMA, dialect)
        assert assign is not None, text
        try:
            expected = [r[0] for r in df.selectExpr(f"CAST(({text}) AS {SPARK_TYPES[column]})").collect()]
        except PySparkException:
            expected = None  # Spark's ANSI mode refuses (an overflow): ours must not answer
        try:
            got = assign(TABLE)[column].to_pylist()
        except NotExact:
            continue  # Spark computes it (its error, or in legacy mode its wrapped value)
        assert expected is not None, f"{text}: Spark refuses, the Arrow evaluator answered {got}"
        assert len(got) == len(expected)
        assert all(_same(o, s) for o, s in zip(got, expected, strict=True)), (text, got, expected)
        answered += 1
    assert answered >= 20  # the rows hold every type's extremes: the 11 that overflow on one go to Spark
    for column, text in REFUSED:
        assert assignments({column: text}, SCHEMA, dialect) is None, text


def test_an_overflow_is_left_to_spark() -> None:
    from partitioning.sql.tokens import Dialect

    with pytest.raises(NotExact):
        assignments({"id": "id + 1"}, SCHEMA, Dialect())(TABLE)  # row 2 holds the largest bigint
    with pytest.raises(NotExact):
        assignments({"n": "n * 46341"}, SCHEMA, Dialect())(TABLE)
    nullable = pa.schema([SCHEMA.field("s").with_nullable(False), SCHEMA.field("id")])
    with pytest.raises(NotExact):
        assignments({"s": "NULL"}, nullable, Dialect())(pa.table({"s": ["a"], "id": [1]}, nullable))


def _refuse_spark(monkeypatch: pytest.MonkeyPatch, spark: SparkSession) -> None:
    """From here on, any rows handed to Spark (a DataFrame made, a read by tasks) fail the test."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the update handed rows to Spark")

    monkeypatch.setattr(targets, "_spark_rows", refused)
    monkeypatch.setattr(type(spark), "createDataFrame", refused)


def _namespace(root: str) -> None:
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), TABLE)


# a cutoff in each zone that selects some rows and not others; Berlin's is in the hour its
# clocks skip that night (Spark reads it as 03:30 CEST, 01:30 UTC: a row's own time)
CUTOFFS = {
    "UTC": "2025-03-30 03:00:00",
    "Europe/Berlin": "2025-03-30 02:30:00",
    "America/New_York": "2025-03-29 23:00:00",
    "Asia/Kolkata": "2025-03-30 08:00:00",
}


@pytest.mark.parametrize("zone", sorted(CUTOFFS))
def test_an_update_computed_in_arrow_runs_no_spark_job_and_matches_spark(
    spark: SparkSession, tmp_path: Any, zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows a timestamp filter selects in the session's zone, and their new values, are
    what Spark selects and computes on the same rows (collected before the update)."""
    root = str(tmp_path / "ns")
    _namespace(root)
    where = f"ts < TIMESTAMP '{CUTOFFS[zone]}' AND s IS NOT NULL"
    session = spark.newSession()
    session.conf.set("spark.sql.session.timeZone", zone)
    spark_schema = "id long, n int, b byte, x double, s string, flag boolean, ts timestamp, p int"
    df = session.createDataFrame(TABLE.to_pylist(), spark_schema)
    new = df.where(where).selectExpr("id", "x * 1.1 + id AS x", "s || '!' AS s", "n - 1 AS n").collect()
    chosen = {r.id: r for r in new}
    _refuse_spark(monkeypatch, session)
    result = update_rows(root, set={"x": "x * 1.1 + id", "s": "s || '!'", "n": "n - 1"}, where=where, spark=session)
    assert result.rows_updated == len(chosen) > 0
    assert_updated_as(root, chosen)


def assert_updated_as(root: str, chosen: dict[Any, Any]) -> None:
    """The stored rows hold ``chosen``'s ``x``, ``s`` and ``n`` (Spark's rows by id) where
    chosen, their values before elsewhere."""
    stored = {r["id"]: r for r in oracle.stored_rows(root, "p")}
    assert len(stored) == len(ROWS)
    for row in TABLE.to_pylist():
        got, want = stored[row["id"]], chosen.get(row["id"])
        if want is None:
            assert _same(got["x"], row["x"]) and (got["s"], got["n"]) == (row["s"], row["n"]), got
        else:
            assert _same(got["x"], want.x) and (got["s"], got["n"]) == (want.s, want.n), (got, want)


@pytest.mark.parametrize("ansi", [True, False])
def test_an_overflowing_update_gets_sparks_answer(spark: SparkSession, tmp_path: Any, ansi: bool) -> None:
    """ANSI mode: Spark's one-line error and nothing committed; legacy mode: Spark's wrapped value."""
    root = str(tmp_path / "ns")
    _namespace(root)
    session = spark.newSession()
    session.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    before = PartitionedNamespace.load(root).manifest_version
    if ansi:
        with pytest.raises(PartitioningError) as info:
            update_rows(root, set={"n": "n + 1"}, where="n > 0", spark=session)
        assert "\n" not in str(info.value)
        assert PartitionedNamespace.load(root).manifest_version == before
        return
    update_rows(root, set={"n": "n + 1"}, where="n > 0", spark=session)
    stored = sorted(r["n"] for r in oracle.stored_rows(root, "p") if r["n"] is not None)
    assert stored == sorted(
        ((r["n"] + 1 + 2**31) % 2**32 - 2**31) if r["n"] > 0 else r["n"] for r in ROWS if r["n"] is not None
    )


def test_beyond_the_driver_bounds_spark_computes_the_update(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    monkeypatch.setattr(small, "SMALL_MAX_ROWS", 1)
    update_rows(root, set={"n": "n + 1"}, where="id = 7", spark=spark)  # integer arithmetic: not Lance's
    stored = {r["id"]: r["n"] for r in oracle.stored_rows(root, "p")}
    assert stored[7] == 8


@pytest.mark.parametrize("where", ["x > 0 OR s = 'ß'", "flag AND n <> 0", "s LIKE '%b' OR b IN (3, -128)"])
def test_a_delete_the_driver_selects_runs_no_spark_job_and_matches_spark(
    spark: SparkSession, tmp_path: Any, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NaN above every number, NULLs, LIKE and IN: the rows left are those Spark's where keeps."""
    from pipelines import delete_rows

    root = str(tmp_path / "ns")
    _namespace(root)
    df = spark.createDataFrame(TABLE.to_pylist(), "id long, n int, b byte, x double, s string, flag boolean, p int")
    kept = sorted(r.id for r in df.where(f"NOT coalesce(({where}), false)").select("id").collect() if r.id is not None)
    assert 0 < len(kept) < len(ROWS) - 1
    _refuse_spark(monkeypatch, spark)
    delete_rows(root, where, spark=spark)
    assert sorted(r["id"] for r in oracle.stored_rows(root, "p") if r["id"] is not None) == kept


MERGE_SCHEMA = pa.schema(
    [("id", pa.int64()), ("p", pa.int32()), ("n", pa.int32()), ("x", pa.float64()), ("s", pa.string())]
)
MERGE_TARGET = pa.table(
    {
        "id": [1, 2, 3, 4, 5, 6],
        "p": [0, 1, 2, 0, 1, 2],
        "n": [10, 20, None, 40, 50, 60],
        "x": [1.5, float("nan"), -0.0, None, 2.25, 1e300],
        "s": ["a", None, "ß", "d", "e", "日"],
    },
    MERGE_SCHEMA,
)
MERGE_SOURCE = pa.table(
    {
        "id": [2, 4, 6, 7, None, 8],
        "p": [2, 0, 2, 1, 0, 2],
        "n": [1, None, 3, 4, 5, 6],
        "x": [0.5, 1.0, 1e300, None, 3.0, -1.0],
        "s": ["x", "y", None, "z", "w", "v"],
    },
    MERGE_SCHEMA,
)
SET = {"n": "target.n + source.n * 2", "x": "source.x + target.x", "s": "target.s || source.s", "p": "source.p"}


def test_a_set_merge_computed_in_the_driver_stores_what_delta_rs_stores(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matched rows recomputed from source. and target. columns (one moves partition), NULL
    keys inserted, NaN, -0.0 and infinity: no join in Spark, delta-rs's rows."""
    from deltalake import DeltaTable, write_deltalake

    import pipelines.write.merge as merge_module
    from pipelines import merge_partitioned

    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, MERGE_SCHEMA, ["p"]), MERGE_TARGET)
    source = spark.createDataFrame(MERGE_SOURCE.to_pylist(), "id long, p int, n int, x double, s string")

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the merge joined in Spark")

    monkeypatch.setattr(merge_module, "_join", refused)
    result = merge_partitioned(source, root, on="id", set=SET)
    monkeypatch.undo()
    delta = str(tmp_path / "delta")
    write_deltalake(delta, MERGE_TARGET, partition_by=["p"])
    merger = DeltaTable(delta).merge(
        MERGE_SOURCE, "target.id = source.id", source_alias="source", target_alias="target"
    )
    merger.when_matched_update(updates=SET).when_not_matched_insert_all().execute()
    expected = DeltaTable(delta).to_pyarrow_table().to_pylist()
    assert (result.rows_updated, result.rows_inserted) == (3, 3)
    key = lambda r: (r["id"] is None, r["id"] or 0, r["p"])  # noqa: E731
    got = sorted(oracle.stored_rows(root, "p"), key=key)
    want = sorted(expected, key=key)
    assert len(got) == len(want) == 9
    for g, w in zip(got, want, strict=True):
        assert {c: g[c] for c in MERGE_SCHEMA.names if c != "x"} == {c: w[c] for c in MERGE_SCHEMA.names if c != "x"}
        assert (g["x"] is None and w["x"] is None) or _same(g["x"], w["x"]), (g, w)


@pytest.mark.parametrize("ansi", [True, False])
def test_a_set_merge_that_overflows_gets_sparks_answer(spark: SparkSession, tmp_path: Any, ansi: bool) -> None:
    from pipelines import merge_partitioned

    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, MERGE_SCHEMA, ["p"]), MERGE_TARGET)
    session = spark.newSession()
    session.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    source = session.createDataFrame([(1, 0, I32, 0.0, "q")], "id long, p int, n int, x double, s string")
    before = PartitionedNamespace.load(root).manifest_version
    if ansi:
        with pytest.raises(PartitioningError) as info:
            merge_partitioned(source, root, on="id", set={"n": "target.n + source.n"})
        assert "\n" not in str(info.value)
        assert PartitionedNamespace.load(root).manifest_version == before
        return
    merge_partitioned(source, root, on="id", set={"n": "target.n + source.n"})
    stored = {r["id"]: r["n"] for r in oracle.stored_rows(root, "p")}
    assert stored[1] == 10 + I32 - 2**32  # Spark's legacy mode wraps


def test_rows_with_vectors_lists_and_decimals_are_written_back_whole(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The columns an update does not set (a vector, a list, a decimal, a zoned timestamp)
    come back exactly as they were, the row moved to its new partition."""
    from tests.test_small_changes import COLUMNS, TARGET, _namespace, _stored

    root = str(tmp_path / "ns")
    _namespace(root)
    _refuse_spark(monkeypatch, spark)
    update_rows(root, set={"country": "'IT'", "id": "id * 10"}, where="id >= 3", spark=spark)
    expected = oracle.update(TARGET, lambda r: {**r, "country": "IT", "id": r["id"] * 10}, lambda r: r["id"] >= 3)
    assert _stored(root) == oracle.canonical(expected, COLUMNS)
