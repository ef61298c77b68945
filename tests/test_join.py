"""Storage-partitioned join: the Spark-free planner and local join, ``join_partitioned`` and ``jobs/join.py``.

Every SPJ result is compared with Spark's own ``left.join(right, on, how)`` of the same
rows (the source rows as a DataFrame, or ``read_partitioned`` of both namespaces), for
every join type, with NULL keys on both sides and keys present on one side only.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from jobs import join as join_job
from partitioning import InvalidInput, NamespaceSchema, PartitionedNamespace, PartitionTable, parse_partition_by
from partitioning.plan.join import JoinSide, plan_join, plan_namespace_join
from partitioning.plan.join_columns import join_output_names, join_output_schema, validate_join
from partitioning.plan.join_local import local_join
from partitioning.tables.write import write_table
from pipelines import join_partitioned
from pipelines.read.dataframe import read_partitioned
from pipelines.read.join import join_partitioned_with_plan
from pipelines.read.join_source import LancePartitionedJoinDataSource

UTC = dt.UTC
HOWS = ["inner", "left", "right", "full"]
INT64 = pa.int64()


# -- helpers ------------------------------------------------------------------------------------


def make_namespace(root: Path, table: pa.Table, partition_by: Sequence[str]) -> str:
    ns = PartitionedNamespace.create(str(root), table.schema, list(partition_by))
    write_table(ns, table)
    return str(root)


def left_rows(key_type: pa.DataType = INT64) -> pa.Table:
    """Keys 0..59, duplicates of 5 and 40, and two NULL keys."""
    keys = [*range(60), 5, 40, None, None]
    return pa.table(
        {"k": pa.array(keys, key_type), "a": pa.array(range(len(keys)), pa.int64())},
    )


def right_rows(key_type: pa.DataType = INT64) -> pa.Table:
    """Keys 30..89, duplicates of 40 and 41, and one NULL key."""
    keys = [*range(30, 90), 40, 41, None]
    return pa.table({"k": pa.array(keys, key_type), "b": pa.array([f"r{i}" for i in range(len(keys))])})


def spark_join(
    spark: SparkSession,
    left: pa.Table,
    right: pa.Table,
    on: Sequence[str],
    how: str,
    filter_left: str | None = None,
    filter_right: str | None = None,
) -> DataFrame:
    """The expected result: Spark's own join of the source rows."""
    lhs, rhs = spark.createDataFrame(left), spark.createDataFrame(right)
    if filter_left:
        lhs = lhs.filter(filter_left)
    if filter_right:
        rhs = rhs.filter(filter_right)
    return lhs.join(rhs, on=list(on), how=how)


def physical_plan(df: DataFrame) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def assert_same(actual: DataFrame, expected: DataFrame) -> None:
    """chispa's comparison, on the result collected once (sorting it in Spark would scan it again)."""
    assert actual.columns == expected.columns
    collected = actual.sparkSession.createDataFrame(actual.toArrow())
    assert_df_equality(collected, expected, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)


@pytest.fixture(scope="module")
def buckets(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Left bucket[16](k), right bucket[8](k)."""
    base = tmp_path_factory.mktemp("buckets")
    return (
        make_namespace(base / "left", left_rows(), ["bucket[16](k)"]),
        make_namespace(base / "right", right_rows(), ["bucket[8](k)"]),
    )


# -- the planner, without Spark -----------------------------------------------------------------


def test_planner_matches_fine_bucket_j_with_coarse_bucket_j_mod_8(buckets):
    left, right = (PartitionedNamespace.load(r) for r in buckets)
    plan = plan_namespace_join(left, right, ["k"], "full")
    assert plan.compatible, plan.reason
    assert plan.reason == "grouped by k (bucket % 8)"
    [grouping] = plan.groupings
    assert (grouping.kind, grouping.param) == ("bucket", 8)
    seen_left, seen_right = set(), set()
    for task in plan.tasks:
        if task.group is None:  # the NULL-key partition of each side, on its own
            assert len(task.left) + len(task.right) == 1
            assert all(t.values["k_bucket"] is None for t in (*task.left, *task.right))
            continue
        (g,) = task.group
        assert [t.values["k_bucket"] for t in task.right] == [g]
        assert all(t.values["k_bucket"] % 8 == g for t in task.left)
        seen_left.update(t.object_id for t in task.left)
        seen_right.update(t.object_id for t in task.right)
    # every non-NULL partition is in exactly one group
    assert seen_left == {p.object_id for p in left.partitions() if p.values["k_bucket"] is not None}
    assert seen_right == {p.object_id for p in right.partitions() if p.values["k_bucket"] is not None}
    # the inner join drops the NULL-key partitions; the left join keeps the left one only
    inner = plan_namespace_join(left, right, ["k"], "inner")
    assert all(t.group is not None and t.left and t.right for t in inner.tasks)
    left_join = plan_namespace_join(left, right, ["k"], "left")
    nulls = [t for t in left_join.tasks if t.group is None]
    assert len(nulls) == 1 and nulls[0].left and not nulls[0].right


_COLUMNS = pa.schema(
    [
        ("k", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("s", pa.string()),
        ("x", pa.float64()),
        ("other", pa.int64()),
    ]
)


_SAMPLE = {"int32": 1, "int64": 1, "string": "abcd", "double": 1.5, "timestamp[us, tz=UTC]": dt.datetime(2025, 1, 1)}


def side(
    on: str, versions: dict[int, Sequence[str]], values: dict[int, list[dict[str, Any]]] | None = None
) -> JoinSide:
    """A side with the key ``on`` and the columns its spec ``versions`` name, with one (or the given)
    partition table(s) per version."""
    texts = " ".join(e for exprs in versions.values() for e in exprs)
    schema = NamespaceSchema.from_arrow(
        pa.schema([f for f in _COLUMNS if f.name == on or re.search(rf"\b{f.name}\b", texts)])
    )
    specs = {i: parse_partition_by(list(exprs), schema, spec_id=i) for i, exprs in versions.items()}
    tables = []
    for i, spec in specs.items():
        default = {f.field_id: _SAMPLE[str(f.arrow_result_type(schema))] for f in spec.fields}
        rows = (values or {}).get(i) or [default]
        for n, row in enumerate(rows):
            oid = f"v{i}$t{n}$dataset"
            tables.append(PartitionTable(oid, f"00000000_{oid}", f"/nowhere/{oid}", i, row, 1))
    return JoinSide("/nowhere", schema, specs, tuple(tables))


@pytest.mark.parametrize(
    ("left", "right", "on", "expected"),
    [
        ({1: ["k"]}, {1: ["k"]}, "k", "k (identity)"),
        ({1: ["k"]}, {1: ["bucket[8](k)"]}, "k", "k (bucket % 8)"),
        ({1: ["bucket[16](k)"], 2: ["bucket[24](k) AS k24"]}, {1: ["bucket[12](k)"]}, "k", "k (bucket % 4)"),
        ({1: ["year(ts)", "month(ts)", "day(ts)"]}, {1: ["year(ts)", "month(ts)"]}, "ts", "ts (year/month)"),
        ({1: ["day(ts)"]}, {1: ["day(ts)"]}, "ts", "ts (day)"),
        ({1: ["ts"]}, {1: ["month(ts)", "year(ts)"]}, "ts", "ts (year/month)"),
        ({1: ["truncate[4](s)"]}, {1: ["truncate[4](s)"]}, "s", "s (truncate[4])"),
        ({1: ["s"]}, {1: ["truncate[4](s)"]}, "s", "s (truncate[4])"),
        ({1: ["other", "bucket[4](k)"]}, {1: ["bucket[8](k)"]}, "k", "k (bucket % 4)"),
    ],
)
def test_planner_finds_a_common_grouping(left, right, on, expected):
    plan = plan_join(side(on, left), side(on, right), [on], "inner")
    assert plan.compatible, plan.reason
    assert plan.reason == f"grouped by {expected}"


@pytest.mark.parametrize(
    ("left", "right", "on", "reason"),
    [
        ({1: ["bucket[16](k)"]}, {1: ["bucket[5](k)"]}, "k", "bucket counts 5, 16 have no common divisor > 1"),
        ({1: ["month(ts)"]}, {1: ["year(ts)", "month(ts)"]}, "ts", "do not include year"),
        ({1: ["truncate[4](s)"]}, {1: ["truncate[8](s)"]}, "s", "truncate widths differ"),
        ({1: ["bucket[4](other)"]}, {1: ["bucket[8](k)"]}, "k", "key 'k': left v1 has no partition field on it"),
        ({1: ["bucket[8](k)"], 2: ["other"]}, {1: ["bucket[8](k)"]}, "k", "key 'k': left v2 has no partition field"),
        ({1: ["x"]}, {1: ["x"]}, "x", "key 'x' is double: Spark's join equates -0.0 with 0.0"),
    ],
)
def test_planner_explains_an_incompatible_join(left, right, on, reason):
    plan = plan_join(side(on, left), side(on, right), [on], "inner")
    assert not plan.compatible
    assert plan.reason.startswith("no join key is partitioned compatibly on both sides: ")
    assert reason in plan.reason


def test_planner_time_groups_from_identity_and_time_fields_agree():
    """Identity timestamps derive (year, month, day) in UTC to match a year/month/day partition."""
    plus_two = dt.timezone(dt.timedelta(hours=2))
    ts = [dt.datetime(2025, 1, 1, 1, tzinfo=plus_two), dt.datetime(2025, 1, 1, 1, tzinfo=UTC), None]
    left = side("ts", {1: ["year(ts)", "month(ts)", "day(ts)"]}, {1: [{"ts_year": 2025, "ts_month": 1, "ts_day": 1}]})
    right = side("ts", {1: ["ts"]}, {1: [{"ts": v} for v in ts]})
    plan = plan_join(left, right, ["ts"], "full")
    groups = {t.group: ([p.values for p in t.left], [p.values for p in t.right]) for t in plan.tasks}
    assert groups == {
        ((2025, 1, 1),): ([{"ts_year": 2025, "ts_month": 1, "ts_day": 1}], [{"ts": ts[1]}]),
        ((2024, 12, 31),): ([], [{"ts": ts[0]}]),
        None: ([], [{"ts": None}]),
    }


def test_planner_multi_version_uses_the_gcd_of_every_version():
    left = side("k", {1: ["bucket[16](k)"], 2: ["bucket[8](k) AS kb8"]}, {1: [{"k_bucket": 13}], 2: [{"kb8": 5}]})
    right = side("k", {1: ["bucket[16](k)"]}, {1: [{"k_bucket": 5}, {"k_bucket": 13}]})
    plan = plan_join(left, right, ["k"], "inner")
    assert plan.reason == "grouped by k (bucket % 8)"
    [task] = plan.tasks  # 13 % 8 == 5: all four tables can hold the same keys
    assert task.group == (5,)
    assert sorted(t.spec_id for t in task.left) == [1, 2]
    assert len(task.right) == 2


def test_local_join_never_matches_null_keys():
    left = pa.table({"k": [1, None, 2, None], "j": [10, 10, None, None], "a": ["l1", "ln", "l2", "lnn"]})
    right = pa.table({"k": [1, None, 3], "j": [10, 10, None], "b": pa.array([[1], [2], [3]])})  # nested payload
    out = join_output_schema(
        NamespaceSchema.from_arrow(left.schema), NamespaceSchema.from_arrow(right.schema), ["k", "j"]
    )
    rows = {
        how: local_join(left, right, ["k", "j"], how, out).to_pylist() for how in ("inner", "left", "right", "full")
    }
    match = {"k": 1, "j": 10, "a": "l1", "b": [1]}
    left_only = [
        {"k": None, "j": 10, "a": "ln", "b": None},
        {"k": 2, "j": None, "a": "l2", "b": None},
        {"k": None, "j": None, "a": "lnn", "b": None},
    ]
    right_only = [{"k": None, "j": 10, "a": None, "b": [2]}, {"k": 3, "j": None, "a": None, "b": [3]}]

    def key(r: dict[str, Any]) -> str:
        return repr(sorted(r.items()))

    assert rows["inner"] == [match]
    assert sorted(rows["left"], key=key) == sorted([match, *left_only], key=key)
    assert sorted(rows["right"], key=key) == sorted([match, *right_only], key=key)
    assert sorted(rows["full"], key=key) == sorted([match, *left_only, *right_only], key=key)


@pytest.mark.parametrize("how", HOWS)
def test_local_join_equals_spark_on_null_nan_and_signed_zero_keys(spark, how):
    nan = float("nan")
    left = pa.table(
        {"k": [0.0, -0.0, nan, None, 1.0, 2.0], "j": [1, 1, 1, 1, None, 1], "a": ["a", "b", "c", "d", "e", "f"]}
    )
    right = pa.table({"k": [-0.0, nan, None, 3.0, 2.0], "j": [1, 1, 1, 1, 1], "b": [10, 20, 30, 40, 50]})
    out = join_output_schema(
        NamespaceSchema.from_arrow(left.schema), NamespaceSchema.from_arrow(right.schema), ["k", "j"]
    )
    actual = spark.createDataFrame(local_join(left, right, ["k", "j"], how, out))
    expected = spark.createDataFrame(left).join(spark.createDataFrame(right), ["k", "j"], how)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)


def test_bad_join_requests_are_one_line_invalid_input(buckets, tmp_path):
    left, right = (PartitionedNamespace.load(r) for r in buckets)
    with pytest.raises(InvalidInput, match=r"^unknown join type 'outer'; allowed: inner, left, right, full$"):
        plan_namespace_join(left, right, ["k"], "outer")
    with pytest.raises(InvalidInput, match=r"^unknown join key 'nope': the left side has no such column; left columns"):
        plan_namespace_join(left, right, ["nope"], "inner")
    with pytest.raises(InvalidInput, match=r"filter_right uses unknown column\(s\) 'zz'; right columns are: k, b"):
        plan_namespace_join(left, right, ["k"], "inner", filter_right="zz = 1")
    # a non-key column on both sides is not refused (Spark keeps both): see the tests of shared columns below
    clash = make_namespace(tmp_path / "clash", left_rows(), ["bucket[8](k)"])
    assert plan_namespace_join(left, PartitionedNamespace.load(clash), ["k"], "inner").compatible


# -- join_partitioned -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOWS)
def test_bucket_16_vs_8_every_join_type_without_exchange(spark, buckets, how):
    df, plan = join_partitioned_with_plan(spark, *buckets, ["k"], how)
    assert plan.compatible, plan.reason
    assert "Exchange" not in physical_plan(df)
    assert "lance_partitioned_join" in physical_plan(df)
    assert_same(df, spark_join(spark, left_rows(), right_rows(), ["k"], how))


def test_equals_spark_join_of_read_partitioned(spark, buckets):
    left, right = buckets
    expected = read_partitioned(spark, left).join(read_partitioned(spark, right), ["k"], "full")
    assert_same(join_partitioned(spark, left, right, ["k"], "full"), expected)


@pytest.mark.parametrize("how", ["inner", "full"])
def test_filters_on_each_side_apply_before_the_join(spark, buckets, how):
    fl, fr = "k IN (1, 5, 40, 41, 50) OR k IS NULL", "b LIKE 'r1%'"
    df, plan = join_partitioned_with_plan(spark, *buckets, ["k"], how, filter_left=fl, filter_right=fr)
    assert plan.compatible
    assert plan.left_tables < 17  # the IN list pruned buckets
    assert_same(df, spark_join(spark, left_rows(), right_rows(), ["k"], how, fl, fr))


def test_identity_vs_identity_on_strings_with_a_float_filter(spark, tmp_path):
    """A filter on a float column runs in Arrow, with Spark's NaN order (NaN >= 2.0 is true)."""
    nan = float("nan")
    left = pa.table(
        {"c": ["x", "x", "y", None, "w", "y"], "a": [1, 2, 3, 4, 5, 6], "f": [0.5, 2.5, nan, 3.0, nan, -0.0]}
    )
    right = pa.table({"c": ["y", "z", None, "x"], "b": [10, 20, 30, 40]})
    roots = make_namespace(tmp_path / "l", left, ["c"]), make_namespace(tmp_path / "r", right, ["c"])
    for how, fl in (("full", "f >= 2.0"), ("inner", None), ("left", "NOT f < 1")):
        df, plan = join_partitioned_with_plan(spark, *roots, "c", how, filter_left=fl)
        assert plan.reason == "grouped by c (identity)"
        assert "Exchange" not in physical_plan(df)
        assert_same(df, spark_join(spark, left, right, ["c"], how, filter_left=fl))


def test_identity_vs_bucket(spark, tmp_path):
    left = pa.table({"k": pa.array([*range(8), 3, None, *range(30, 34)], pa.int64()), "a": list(range(14))})
    right = right_rows()
    roots = make_namespace(tmp_path / "l", left, ["k"]), make_namespace(tmp_path / "r", right, ["bucket[8](k)"])
    for how in ("left", "right"):
        df, plan = join_partitioned_with_plan(spark, *roots, ["k"], how)
        assert plan.reason == "grouped by k (bucket % 8)"
        assert "Exchange" not in physical_plan(df)
        assert_same(df, spark_join(spark, left, right, ["k"], how))


def test_year_month_day_vs_year_month(spark, tmp_path):
    def ts(*args: int) -> dt.datetime:
        return dt.datetime(*args, tzinfo=UTC)

    stamps = [ts(2024, 12, 31, 23), ts(2025, 1, 1), ts(2025, 1, 15, 12), ts(2025, 2, 1), ts(2024, 12, 15)]
    tstype = pa.timestamp("us", tz="UTC")
    left = pa.table({"ts": pa.array([*stamps, stamps[1], None], tstype), "a": list(range(7))})
    right = pa.table(
        {"ts": pa.array([stamps[1], stamps[2], ts(2025, 1, 2), stamps[0], None], tstype), "b": list("vwxyz")}
    )
    roots = (
        make_namespace(tmp_path / "l", left, ["year(ts)", "month(ts)", "day(ts)"]),
        make_namespace(tmp_path / "r", right, ["year(ts)", "month(ts)"]),
    )
    for how in ("full", "inner"):
        df, plan = join_partitioned_with_plan(spark, *roots, ["ts"], how)
        assert plan.reason == "grouped by ts (year/month)"
        assert "Exchange" not in physical_plan(df)
        assert_same(df, spark_join(spark, left, right, ["ts"], how))


def test_multiple_keys_group_by_the_partitioned_one(spark, tmp_path):
    keys = [*range(20), 4, None, 7]
    left = pa.table({"c": [("p", "q")[i % 2] if i % 7 else None for i in range(23)], "k": keys, "a": list(range(23))})
    right = pa.table(
        {"c": [("p", "q")[i % 3 % 2] for i in range(20)], "k": [*range(2, 21), None], "b": list(range(20))}
    )
    roots = (
        make_namespace(tmp_path / "l", left, ["c", "bucket[4](k)"]),
        make_namespace(tmp_path / "r", right, ["bucket[8](k)"]),
    )
    for how in ("right", "full"):
        df, plan = join_partitioned_with_plan(spark, *roots, ["c", "k"], how)
        assert plan.reason == "grouped by k (bucket % 4); not grouped by key 'c': right v1 has no partition field on it"
        assert "Exchange" not in physical_plan(df)
        assert_same(df, spark_join(spark, left, right, ["c", "k"], how))


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("gcd_1", "key 'k': no common grouping of left v1 bucket[16], right v1 bucket[5]"),
        ("types", "key 'k' is int32 on the left but int64 on the right"),
        ("non_key", "key 'k': left v1 has no partition field on it"),
    ],
)
def test_incompatible_joins_fall_back_to_spark(spark, tmp_path, caplog, case, reason):
    left, right = left_rows(pa.int32() if case == "types" else pa.int64()), right_rows()
    left_by = {"gcd_1": "bucket[16](k)", "types": "bucket[8](k)", "non_key": "bucket[4](a)"}[case]
    right_by = "bucket[5](k)" if case == "gcd_1" else "bucket[8](k)"
    roots = make_namespace(tmp_path / "l", left, [left_by]), make_namespace(tmp_path / "r", right, [right_by])
    with caplog.at_level("WARNING", logger="lance_partitioned"):
        df, plan = join_partitioned_with_plan(spark, *roots, ["k"], "full")
    assert not plan.compatible
    assert reason in plan.reason
    lines = [r.getMessage() for r in caplog.records if r.name == "lance_partitioned"]
    assert lines == [f"lance_partitioned: storage-partitioned join not used: {plan.reason}"]
    assert "Exchange" in physical_plan(df)
    assert_same(df, spark_join(spark, left, right, ["k"], "full"))


def _evolved_left(root: Path, second_spec: str, second_a: int) -> tuple[str, pa.Table]:
    """Left bucket[16](k) with rows 0..29, then ``second_spec`` with rows 30..59 (a = second_a + i % 3)."""
    first = pa.table({"k": pa.array([*range(30), None], pa.int64()), "a": pa.array([i % 3 for i in range(31)])})
    second = pa.table({"k": pa.array([*range(25, 60), None], pa.int64()), "a": [second_a + i % 3 for i in range(36)]})
    make_namespace(root, first, ["bucket[16](k)"])
    ns = PartitionedNamespace.load(str(root))
    ns.evolve_partition_spec([second_spec])
    write_table(ns, second)
    return str(root), pa.concat_tables([first, second])


def test_multi_version_bucket_16_then_8_still_joins_without_shuffle(spark, tmp_path):
    left_root, left = _evolved_left(tmp_path / "l", "bucket[8](k) AS kb8", 0)
    right_root = make_namespace(tmp_path / "r", right_rows(), ["bucket[16](k)"])
    assert sorted(PartitionedNamespace.load(left_root).specs) == [1, 2]
    for how in ("inner", "full"):
        df, plan = join_partitioned_with_plan(spark, left_root, right_root, ["k"], how)
        assert plan.reason == "grouped by k (bucket % 8)"
        assert {t.spec_id for task in plan.tasks for t in task.left} == {1, 2}
        assert "Exchange" not in physical_plan(df)
        assert_same(df, spark_join(spark, left, right_rows(), ["k"], how))


def test_multi_version_with_an_incompatible_version_falls_back_for_the_whole_join(spark, tmp_path):
    left_root, left = _evolved_left(tmp_path / "l", "a", 100)
    right_root = make_namespace(tmp_path / "r", right_rows(), ["bucket[8](k)"])
    df, plan = join_partitioned_with_plan(spark, left_root, right_root, ["k"], "left")
    assert not plan.compatible
    assert "key 'k': left v2 has no partition field on it" in plan.reason
    assert "Exchange" in physical_plan(df)
    assert_same(df, spark_join(spark, left, right_rows(), ["k"], "left"))
    # a filter that prunes every table of v2 leaves only v1, which is compatible
    df, plan = join_partitioned_with_plan(spark, left_root, right_root, ["k"], "full", filter_left="a < 50")
    assert plan.compatible, plan.reason
    assert "Exchange" not in physical_plan(df)
    assert_same(df, spark_join(spark, left, right_rows(), ["k"], "full", filter_left="a < 50"))


# -- jobs/join.py ---------------------------------------------------------------------------------


def test_join_job_writes_the_result(spark, buckets, tmp_path, capsys):
    out = str(tmp_path / "joined")
    args = ["--left", buckets[0], "--right", buckets[1], "--on", "k", "--how", "left", "--output", out]
    assert join_job.main(args) == 0
    printed = capsys.readouterr().out
    assert "join: storage-partitioned join used (" in printed
    assert "grouped by k (bucket % 8)" in printed
    assert f"join: wrote parquet to {out}" in printed
    assert_same(spark.read.parquet(out), spark_join(spark, left_rows(), right_rows(), ["k"], "left"))


def test_join_job_bad_key_is_one_line_and_exit_2(buckets, capsys):
    assert join_job.main(["--left", buckets[0], "--right", buckets[1], "--on", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown join key 'nope': the left side has no such column; left columns are: k, a")
    assert "\n" not in err
    assert join_job.main(["--left", buckets[0], "--right", buckets[1], "--on", "k", "--how", "cross"]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown join type 'cross'; allowed: inner, left, right, full"


# -- non-key columns on both sides: Spark's columns, or suffixes ------------------------------------

SHARED_NAMES = ["k", "a", "s", "b", "a", "S"]  # Spark keeps both copies; 's' and 'S' are one name to Spark


def shared_left() -> pa.Table:
    """``left_rows`` plus a string column ``s``."""
    table = left_rows()
    return table.append_column("s", pa.array([f"l{i}" if i % 5 else None for i in range(table.num_rows)]))


def shared_right() -> pa.Table:
    """``right_rows`` plus ``a`` (a string here, an int64 on the left) and ``S`` (a double, with NaN)."""
    table = right_rows()
    n = table.num_rows
    table = table.append_column("a", pa.array([f"ra{i}" if i % 4 else None for i in range(n)]))
    return table.append_column("S", pa.array([float("nan") if i % 7 == 0 else i / 2 for i in range(n)]))


def suffixed_join(
    spark: SparkSession, suffixes: tuple[str, str], how: str, fl: str | None = None, fr: str | None = None
) -> DataFrame:
    """The oracle with suffixes: Spark's join of the source rows, the shared columns renamed by hand first."""
    lhs, rhs = spark.createDataFrame(shared_left()), spark.createDataFrame(shared_right())
    lhs, rhs = lhs.filter(fl) if fl else lhs, rhs.filter(fr) if fr else rhs
    lhs = lhs.withColumnsRenamed({"a": "a" + suffixes[0], "s": "s" + suffixes[0]})
    rhs = rhs.withColumnsRenamed({"a": "a" + suffixes[1], "S": "S" + suffixes[1]})
    return lhs.join(rhs, ["k"], how)


def assert_same_columns(actual: DataFrame, expected: DataFrame, names: Sequence[str]) -> None:
    """Same column names (duplicates included) in the same order, then the same rows and types,
    compared by position (chispa cannot sort by a duplicated name)."""
    assert actual.columns == expected.columns == list(names)
    positional = [f"c{i}" for i in range(len(names))]
    assert_same(actual.toDF(*positional), expected.toDF(*positional))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Left bucket[16](k) and right bucket[8](k), with non-key columns on both sides."""
    base = tmp_path_factory.mktemp("shared")
    return (
        make_namespace(base / "left", shared_left(), ["bucket[16](k)"]),
        make_namespace(base / "right", shared_right(), ["bucket[8](k)"]),
    )


def test_output_names_follow_spark_or_the_suffixes(shared):
    left, right = (PartitionedNamespace.load(r).namespace_schema for r in shared)
    assert join_output_names(left, right, ["k"]) == SHARED_NAMES
    assert join_output_schema(left, right, ["k"]).names == SHARED_NAMES
    assert join_output_names(left, right, ["k"], ("_l", "_r")) == ["k", "a_l", "s_l", "b", "a_r", "S_r"]
    assert join_output_names(left, right, ["k"], ("", "_r")) == ["k", "a", "s", "b", "a_r", "S_r"]
    assert validate_join(left, right, ["k"], "full", ("_l", "_r")) == (("k",), "full")


@pytest.mark.parametrize(
    ("suffixes", "message"),
    [
        (("_x", "_x"), r"^suffixes \('_x', '_x'\) leave duplicate output column\(s\) 'a_x', 'S_x'; choose suffixes"),
        (("", ""), r"^suffixes \('', ''\) leave duplicate output column\(s\) 'a', 'S'; choose suffixes"),
        (("_X", "_x"), r"^suffixes \('_X', '_x'\) leave duplicate output column\(s\) 'a_x', 'S_x'; choose"),
        ("_l", r"^suffixes must be two strings \(left, right\), e\.g\. \('_left', '_right'\); got '_l'$"),
        (("_l", "_r", "_x"), r"^suffixes must be two strings"),
        (("_l", 1), r"^suffixes must be two strings"),
    ],
)
def test_bad_suffixes_are_one_line_invalid_input(shared, suffixes, message):
    left, right = (PartitionedNamespace.load(r).namespace_schema for r in shared)
    with pytest.raises(InvalidInput, match=message):
        validate_join(left, right, ["k"], "inner", suffixes)


def test_the_join_data_source_needs_suffixes_for_shared_columns(shared):
    """A Python data source cannot return two columns of one name, so its schema asks for suffixes."""
    options = {"left": shared[0], "right": shared[1], "on": '["k"]', "how": "inner"}
    with pytest.raises(InvalidInput, match=r"^format 'lance_partitioned_join' cannot return two columns of one name"):
        LancePartitionedJoinDataSource(options).schema()
    schema = LancePartitionedJoinDataSource({**options, "suffixes": '["_l", "_r"]'}).schema()
    assert schema.names == ["k", "a_l", "s_l", "b", "a_r", "S_r"]


@pytest.mark.parametrize("how", HOWS)
def test_shared_columns_spj_gives_sparks_columns_without_exchange(spark, shared, how):
    df, plan = join_partitioned_with_plan(spark, *shared, ["k"], how)
    assert plan.compatible, plan.reason
    assert "Exchange" not in physical_plan(df)
    assert "lance_partitioned_join" in physical_plan(df)
    assert_same_columns(df, spark_join(spark, shared_left(), shared_right(), ["k"], how), SHARED_NAMES)


def test_shared_columns_spj_with_suffixes_and_filters(spark, shared):
    fl, fr = "a < 50 OR k IS NULL", "a IS NOT NULL"  # each side's own 'a'
    names = ["k", "a_left", "s_left", "b", "a_right", "S_right"]
    for how in ("full", "inner"):
        df, plan = join_partitioned_with_plan(
            spark, *shared, ["k"], how, filter_left=fl, filter_right=fr, suffixes=("_left", "_right")
        )
        assert plan.compatible, plan.reason
        assert "Exchange" not in physical_plan(df)
        assert_same_columns(df, suffixed_join(spark, ("_left", "_right"), how, fl, fr), names)
    df = join_partitioned(spark, *shared, "k", "left", suffixes=("", "_r"))
    assert_same_columns(df, suffixed_join(spark, ("", "_r"), "left"), ["k", "a", "s", "b", "a_r", "S_r"])


def test_shared_columns_fallback_gives_sparks_columns_or_the_suffixes(spark, tmp_path, caplog):
    roots = (
        make_namespace(tmp_path / "l", shared_left(), ["bucket[16](k)"]),
        make_namespace(tmp_path / "r", shared_right(), ["bucket[5](k)"]),
    )
    with caplog.at_level("WARNING", logger="lance_partitioned"):
        df, plan = join_partitioned_with_plan(spark, *roots, ["k"], "full")
    assert not plan.compatible
    assert "Exchange" in physical_plan(df)
    assert_same_columns(df, spark_join(spark, shared_left(), shared_right(), ["k"], "full"), SHARED_NAMES)
    df = join_partitioned(spark, *roots, ["k"], "right", suffixes=("_left", "_right"))
    names = ["k", "a_left", "s_left", "b", "a_right", "S_right"]
    assert_same_columns(df, suffixed_join(spark, ("_left", "_right"), "right"), names)


def test_join_job_parquet_with_shared_columns_needs_suffixes(spark, shared, tmp_path, capsys):
    out = tmp_path / "joined"
    args = ["--left", shared[0], "--right", shared[1], "--on", "k", "--output", str(out)]
    assert join_job.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: column(s) 'a', 'S' are on both sides of the join and parquet cannot hold two columns of one name; "
        "pass --suffixes LEFT RIGHT (e.g. --suffixes _left _right) or --output-format csv"
    )
    assert not out.exists()
    assert join_job.main([*args, "--how", "full", "--suffixes", "_l", "_r"]) == 0
    assert f"join: wrote parquet to {out}" in capsys.readouterr().out
    expected = suffixed_join(spark, ("_l", "_r"), "full")
    assert_same_columns(spark.read.parquet(str(out)), expected, ["k", "a_l", "s_l", "b", "a_r", "S_r"])


def test_join_job_csv_keeps_sparks_duplicate_columns(shared, tmp_path, capsys):
    out = tmp_path / "joined"
    args = ["--left", shared[0], "--right", shared[1], "--on", "k", "--output", str(out), "--output-format", "csv"]
    assert join_job.main(args) == 0
    assert f"join: wrote csv to {out}" in capsys.readouterr().out
    headers = {p.read_text().splitlines()[0] for p in out.glob("part-*.csv") if p.read_text()}
    assert headers == {",".join(SHARED_NAMES)}
