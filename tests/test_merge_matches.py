"""A merge's target read narrowed to the rows the source's keys can match (pipelines.write.matches).

Every case runs through Spark's tasks and is checked against the plain-Python oracle of
``tests/merge_oracle.py``: composite string/date keys with NULLs (random cases), one
timestamp key, one integer key at the int64 extremes, and the cases that must read every
row instead (a key type that differs between source and target, a float key, more keys
than the limit, and a merge that deletes unmatched target rows).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

import pipelines.write.matches as matches
import pipelines.write.merge as merge_module
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.write.merge import merge_partitioned
from tests import merge_oracle as oracle
from tests.properties import spark_settings

pytestmark = pytest.mark.usefixtures("spark_tasks")

SCHEMA = pa.schema([("s", pa.string()), ("d", pa.date32()), ("p", pa.int32()), ("v", pa.int64())])
SPARK = T.StructType(
    [
        T.StructField("s", T.StringType()),
        T.StructField("d", T.DateType()),
        T.StructField("p", T.IntegerType()),
        T.StructField("v", T.LongType()),
    ]
)
COLUMNS = ["s", "d", "p", "v"]
D1, D2 = dt.date(1969, 12, 31), dt.date(2024, 2, 29)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[DataFrame]:
    """The narrowed target DataFrames the merge reads (empty when it reads every row)."""
    seen: list[DataFrame] = []
    real = merge_module.matched_target

    def spied(*args: Any) -> DataFrame:
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(merge_module, "matched_target", spied)
    return seen


def _merge(
    spark: SparkSession,
    root: str,
    schema: pa.Schema,
    spark_schema: Any,
    target: list,
    source: list,
    keys: list[str],
    upsert: bool = False,
) -> None:
    ns = PartitionedNamespace.create(root, schema, ["p"])
    write_table(ns, pa.Table.from_pylist(target, schema=schema))
    src = spark.createDataFrame([tuple(r[c] for c in schema.names) for r in source], spark_schema)
    # every column from the source, as the default, but spelled out: the join path, whose
    # narrowed read these tests count (the default merge is an upsert: no join, no narrowed read)
    merge_partitioned(src, root, on=keys, set=None if upsert else {c: f"source.`{c}`" for c in schema.names})


def _rows(size: int) -> Any:
    return st.lists(
        st.fixed_dictionaries(
            {
                "s": st.one_of(st.none(), st.sampled_from(["a", "b", "B", "é", ""])),
                "d": st.one_of(st.none(), st.sampled_from([D1, D2])),
                "p": st.integers(0, 2),
                "v": st.integers(-3, 3),
            }
        ),
        min_size=1,
        max_size=size,
    )


@spark_settings(4)
@given(target=_rows(12), source=_rows(6))
@example(
    target=[
        {"s": "a", "d": D1, "p": 0, "v": 1},
        {"s": "a", "d": D2, "p": 1, "v": 2},
        {"s": "B", "d": D1, "p": 2, "v": 3},
        {"s": None, "d": D1, "p": 0, "v": 4},
        {"s": "é", "d": None, "p": 1, "v": 5},
    ],
    source=[
        {"s": "a", "d": D2, "p": 2, "v": 20},
        {"s": "B", "d": D1, "p": 2, "v": 30},
        {"s": "b", "d": D1, "p": 0, "v": 40},
        {"s": None, "d": D1, "p": 0, "v": 50},
        {"s": "é", "d": None, "p": 1, "v": 60},
    ],
)
def test_composite_string_and_date_keys_match_the_oracle(
    spark: SparkSession, tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch, target: list, source: list
) -> None:
    _composite(spark, tmp_path_factory, monkeypatch, target, source, upsert=False)


@spark_settings(4)
@given(target=_rows(12), source=_rows(6))
def test_composite_keys_as_an_upsert_match_the_oracle(
    spark: SparkSession, tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch, target: list, source: list
) -> None:
    """The default merge: the target's keys probed in the driver (no join, no narrowed read)
    unless a key the source has is held by two target rows."""
    _composite(spark, tmp_path_factory, monkeypatch, target, source, upsert=True)


def _composite(
    spark: SparkSession, factory: Any, monkeypatch: pytest.MonkeyPatch, target: list, source: list, *, upsert: bool
) -> None:
    keys = ["s", "d"]
    try:
        expected = oracle.merge(target, source, keys, oracle.Case())
    except oracle.Duplicate:
        return  # the refusal is tested in test_merge; here the rows read
    seen = _counted(monkeypatch)
    root = str(factory.mktemp("m") / "ns")
    _merge(spark, root, SCHEMA, SPARK, target, source, keys, upsert=upsert)
    assert oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS) == oracle.canonical(expected, COLUMNS)
    wanted = {(r["s"], r["d"]) for r in source if r["s"] is not None and r["d"] is not None}
    held = [(r["s"], r["d"]) for r in target if (r["s"], r["d"]) in wanted]
    twins = len(held) != len(set(held))
    assert len(seen) == (1 if not upsert or twins else 0)  # the join's narrowed read, or none


def test_the_join_sees_only_target_rows_whose_keys_the_source_has(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])
    low, high = -(2**63), 2**63 - 1
    target = [{"id": i, "p": i % 3, "v": 0} for i in range(200)]
    target += [{"id": low, "p": 0, "v": 1}, {"id": high, "p": 1, "v": 1}, {"id": None, "p": 2, "v": 1}]
    source = [{"id": i, "p": 0, "v": 9} for i in (low, 5, 77, 1000, high)] + [{"id": None, "p": 1, "v": 9}]
    seen = _counted(monkeypatch)
    root = str(tmp_path / "ns")
    _merge(spark, root, schema, "id long, p int, v long", target, source, ["id"])
    expected = oracle.merge(target, source, ["id"], oracle.Case())
    assert oracle.canonical(oracle.stored_rows(root, "p"), ["id", "p", "v"]) == oracle.canonical(
        expected, ["id", "p", "v"]
    )
    (narrowed,) = seen
    assert sorted(r.id for r in narrowed.select("id").collect()) == [low, 5, 77, high]


def test_a_timestamp_key(spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC")), ("p", pa.int32()), ("v", pa.int64())])
    utc = dt.UTC
    base = dt.datetime(2025, 3, 30, 0, 59, 59, 999999, tzinfo=utc)
    target = [{"t": base + dt.timedelta(microseconds=i), "p": i % 2, "v": i} for i in range(6)]
    source = [{"t": base + dt.timedelta(microseconds=i), "p": 1, "v": 100 + i} for i in (1, 4, 9)]
    seen = _counted(monkeypatch)
    root = str(tmp_path / "ns")
    _merge(spark, root, schema, "t timestamp, p int, v long", target, source, ["t"])
    expected = oracle.merge(target, source, ["t"], oracle.Case())
    got = oracle.stored_rows(root, "p")
    assert oracle.canonical(got, ["t", "p", "v"]) == oracle.canonical(expected, ["t", "p", "v"])
    narrowed = [r.t.astimezone(utc) for r in seen[0].select("t").orderBy("t").collect()]
    assert narrowed == [base + dt.timedelta(microseconds=i) for i in (1, 4)]


@pytest.mark.parametrize(
    ("case", "source_type"),
    [("a narrower source key", "int"), ("a float key", "double"), ("more keys than the limit", "long")],
)
def test_other_keys_read_every_row_and_stay_exact(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, case: str, source_type: str
) -> None:
    key_type = pa.float64() if source_type == "double" else pa.int64()
    schema = pa.schema([("id", key_type), ("p", pa.int32()), ("v", pa.int64())])
    if case == "more keys than the limit":
        monkeypatch.setattr(matches, "MAX_KEY_ROWS", 1)
    cast = float if source_type == "double" else int
    target = [{"id": cast(i), "p": i % 3, "v": 0} for i in range(10)]
    if source_type == "double":
        target.append({"id": -0.0, "p": 0, "v": 5})
    source = [{"id": cast(i), "p": 2, "v": 7} for i in (1, 2, 30)]
    if source_type == "double":
        source.append({"id": 0.0, "p": 1, "v": 6})  # Spark matches 0.0 with -0.0
    seen = _counted(monkeypatch)
    root = str(tmp_path / "ns")
    _merge(spark, root, schema, f"id {source_type}, p int, v long", target, source, ["id"])
    assert seen == []
    # Python's 0.0 == -0.0, like Spark's join (and unlike a bitwise comparison)
    expected = oracle.merge(target, source, ["id"], oracle.Case())
    got = oracle.canonical(oracle.stored_rows(root, "p"), ["id", "p", "v"])
    assert got == oracle.canonical(expected, ["id", "p", "v"])


def test_deleting_unmatched_target_rows_reads_every_row(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])
    target = [{"id": i, "p": i % 3, "v": 0} for i in range(9)]
    source = [{"id": i, "p": 0, "v": 1} for i in (2, 20)]
    seen = _counted(monkeypatch)
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, schema, ["p"])
    write_table(ns, pa.Table.from_pylist(target, schema=schema))
    src = spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in source], "id long, p int, v long")
    merge_partitioned(src, root, on="id", when_not_matched_by_source="delete")
    assert seen == []
    case = oracle.Case(when_not_matched_by_source="delete")
    expected = oracle.merge(target, source, ["id"], case)
    assert oracle.canonical(oracle.stored_rows(root, "p"), ["id", "p", "v"]) == oracle.canonical(
        expected, ["id", "p", "v"]
    )


def test_wide_rows_are_probed_in_small_chunks(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole target rows (``set=`` reads every column) held at most one batch at a time:
    every chunk is probed with the same keys, cast once to the target's types."""
    monkeypatch.setattr(matches, "CHUNK_BYTES", 1)
    schema = pa.schema([("k", pa.string()), ("p", pa.int32()), ("v", pa.int64())])
    target = [{"k": f"k{i}", "p": i % 4, "v": i} for i in range(40)]
    source = [{"k": f"k{i}", "p": 0, "v": 1} for i in (3, 17, 39, 99)]
    seen = _counted(monkeypatch)
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, schema, ["p"])
    for part in range(4):  # several fragments, so several batches per task
        write_table(ns, pa.Table.from_pylist([r for r in target if r["p"] == part], schema=schema))
    src = spark.createDataFrame([(r["k"], r["p"], r["v"]) for r in source], "k string, p int, v long")
    merge_partitioned(src, root, on="k", set={"v": "source.v + target.v"})
    add = ({"v": "source.v + target.v"}, lambda s, t: {**t, "v": s["v"] + t["v"]})
    expected = oracle.merge(target, source, ["k"], oracle.Case(assignments=add))
    columns = ["k", "p", "v"]
    assert oracle.canonical(oracle.stored_rows(root, "p"), columns) == oracle.canonical(expected, columns)
    assert sorted(r.k for r in seen[0].collect()) == ["k17", "k3", "k39"]


def test_a_source_that_is_not_deterministic_reads_every_row(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys collected in one pass could differ from the rows joined in the next."""
    from pyspark.sql import functions as F

    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])
    target = [{"id": i, "p": i % 3, "v": 0} for i in range(9)]
    seen = _counted(monkeypatch)
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, schema, ["p"])
    write_table(ns, pa.Table.from_pylist(target, schema=schema))
    src = spark.range(0, 12).selectExpr("id", "CAST(id % 3 AS INT) AS p").withColumn("v", (F.rand(7) * 0).cast("long"))
    merge_partitioned(src, root, on="id")
    assert seen == []
    expected = [{"id": i, "p": i % 3, "v": 0} for i in range(12)]
    assert oracle.canonical(oracle.stored_rows(root, "p"), ["id", "p", "v"]) == oracle.canonical(
        expected, ["id", "p", "v"]
    )
