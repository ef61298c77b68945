"""The read path: the ``lance_partitioned`` data source and ``read_partitioned`` on real Lance datasets.

Covers full reads, pruning soundness against Spark's own filtering of the unpruned data
for every pushed filter class (SPEC-NOTES 12, 14), ``read_partitioned`` filters and
columns, snapshot isolation (a write without its ``__manifest`` commit is invisible),
time travel by ``__manifest`` version (SPEC-NOTES 15), the read-side schema rules
(seed 000 section 4), splitting a large table into several input partitions, and the
``columns`` option.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from chispa import DataFramesNotEqualError, assert_df_equality
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.tables.write import write_table
from pipelines.read.dataframe import read_partitioned
from pipelines.source.datasource import register_data_source
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.slow

UTC = dt.UTC
D = dt.date


def ts(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@pytest.fixture(scope="module", autouse=True)
def data_source(spark: SparkSession) -> None:
    register_data_source(spark)


def load(spark: SparkSession, root: str, **options: str) -> DataFrame:
    reader = spark.read.format("lance_partitioned")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(root)


def manifest_version(root: str) -> int:
    return lance.dataset(f"{root}/__manifest").version


# Columns of the generic data: a row id, then ints, strings, dates and timestamps.
ROW_ARROW = pa.schema(
    [
        pa.field("rid", pa.int64()),
        pa.field("i", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
ROW_SPARK = T.StructType(
    [
        T.StructField("rid", T.LongType()),
        T.StructField("i", T.LongType()),
        T.StructField("s", T.StringType()),
        T.StructField("d", T.DateType()),
        T.StructField("ts", T.TimestampType()),
    ]
)
COLUMNS = ROW_SPARK.names


def write_rows(root: str, rows: Sequence[Mapping[str, Any]], layout: Sequence[str]) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, ROW_ARROW, list(layout))
    write_table(ns, pa.Table.from_pylist(list(rows), schema=ROW_ARROW))
    return ns


def unpruned(spark: SparkSession, rows: Sequence[Mapping[str, Any]]) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], ROW_SPARK)


# -- a full read ----------------------------------------------------------------------------------

EVENTS = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("user_id", T.LongType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("country", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)


def event_rows() -> list[tuple[Any, ...]]:
    countries = ["US", "", None]
    base = ts(2025, 12, 9, 22, 0)
    rows = [
        (i, 1000 + (i * 7) % 5 if i % 6 else None, base + dt.timedelta(hours=5 * i), countries[i % 3], i * 1.25 - 10)
        for i in range(12)
    ]
    rows.append((100, -5, ts(1969, 12, 31, 23, 59), "US", -0.5))
    rows.append((101, 7, None, "CN", 0.0))
    return rows


@pytest.fixture(scope="module")
def events(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, DataFrame]:
    root = str(tmp_path_factory.mktemp("events") / "ns")
    df = spark.createDataFrame(event_rows(), EVENTS)
    write_partitioned(df, root, partition_by=["day(ts)", "country"])
    return root, df


def test_load_returns_the_namespace_schema_and_all_rows(spark: SparkSession, events: tuple[str, DataFrame]) -> None:
    root, written = events
    df = load(spark, root)
    assert df.schema == EVENTS
    assert_df_equality(df, written, ignore_row_order=True)


def test_read_partitioned_filter_and_columns(spark: SparkSession, events: tuple[str, DataFrame]) -> None:
    root, written = events
    df = read_partitioned(spark, root, filter="country = 'US' AND amount > 0", columns=["amount", "id"])
    assert df.columns == ["amount", "id"]
    expected = written.filter((F.col("country") == "US") & (F.col("amount") > 0)).select("amount", "id")
    assert [r[0] for r in event_rows() if r[3] == "US" and r[4] > 0] == [9]
    assert_df_equality(df, expected, ignore_row_order=True)


def test_read_partitioned_time_range(spark: SparkSession, events: tuple[str, DataFrame]) -> None:
    root, written = events
    text = "ts >= TIMESTAMP '2025-12-10T10:00:00Z' AND ts < TIMESTAMP '2025-12-11T00:00:00Z'"
    df = read_partitioned(spark, root, filter=text, columns=["id", "ts"])
    expected = written.filter(
        (F.col("ts") >= F.lit(ts(2025, 12, 10, 10))) & (F.col("ts") < F.lit(ts(2025, 12, 11)))
    ).select("id", "ts")
    # rows 3, 4 and 5 are at 13:00Z, 18:00Z and 23:00Z of 2025-12-10
    assert [r[0] for r in event_rows() if r[2] is not None and ts(2025, 12, 10, 10) <= r[2] < ts(2025, 12, 11)] == [
        3,
        4,
        5,
    ]
    assert_df_equality(df, expected, ignore_row_order=True)


def test_columns_option_reads_only_those_columns(spark: SparkSession, events: tuple[str, DataFrame]) -> None:
    root, written = events
    df = load(spark, root, columns="country,id")
    assert df.columns == ["country", "id"]
    assert_df_equality(df, written.select("country", "id"), ignore_row_order=True)


# -- every pushed filter class, against Spark's filtering of the unpruned rows ---------------------

CLASS_ROWS: list[dict[str, Any]] = [
    {
        "rid": k,
        "i": (k * 7) % 50 - 25 if k % 9 else None,
        "s": s,
        "d": D(1969, 12, 30) + dt.timedelta(days=k % 5) if k % 4 else None,
        "ts": t,
    }
    for k, (s, t) in enumerate(
        (s, t)
        for s in ("US", "CN", "", None, "UK%_")
        for t in (ts(1969, 12, 31, 23, 30), ts(2025, 12, 10, 5), ts(2025, 12, 10, 11), ts(2025, 12, 11), None)
    )
]
CLASS_LAYOUTS = {
    "s": ["s"],
    "time": ["year(ts)", "month(ts)", "day(ts)"],
    "trunc": ["truncate[10](i)"],
    "bucket": ["bucket[4](i)"],
    "d": ["d"],
}


@pytest.fixture(scope="module")
def class_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("classes")
    roots = {}
    for name, layout in CLASS_LAYOUTS.items():
        roots[name] = str(base / name)
        write_rows(roots[name], CLASS_ROWS, layout)
    return roots


FILTER_CASES: list[tuple[str, str, Callable[[], Column]]] = [
    ("EqualTo", "s", lambda: F.col("s") == "US"),
    ("EqualTo_ts", "time", lambda: F.col("ts") == F.lit(ts(2025, 12, 10, 11))),
    ("EqualNullSafe", "s", lambda: F.col("s").eqNullSafe("CN")),
    ("Not_EqualNullSafe", "s", lambda: ~F.col("s").eqNullSafe("US")),
    ("GreaterThan_ts", "time", lambda: F.col("ts") > F.lit(ts(2025, 12, 10, 10))),
    ("LessThan_ts_midday", "time", lambda: F.col("ts") < F.lit(ts(2025, 12, 10, 10))),
    (
        "seed000_range_and_EqualTo",
        "time",
        lambda: (
            (F.col("ts") >= F.lit(ts(2025, 12, 10, 10)))
            & (F.col("ts") < F.lit(ts(2025, 12, 11)))
            & (F.col("s") == "US")
        ),
    ),
    ("LessThanOrEqual_ts_pre1970", "time", lambda: F.col("ts") <= F.lit(ts(1970, 1, 1))),
    ("In", "s", lambda: F.col("s").isin("US", "")),
    ("IsNull", "s", lambda: F.col("s").isNull()),
    ("IsNotNull", "time", lambda: F.col("ts").isNotNull()),
    ("Not_In", "s", lambda: ~F.col("s").isin("US", "CN")),
    ("StringStartsWith", "s", lambda: F.col("s").startswith("U")),
    ("StringEndsWith", "s", lambda: F.col("s").endswith("N")),
    ("StringContains_wildcards", "s", lambda: F.col("s").contains("%_")),
    ("Not_StringStartsWith", "s", lambda: ~F.col("s").startswith("U")),
    ("Or_unprunable", "s", lambda: (F.col("s") == "US") | (F.col("i") < 0)),
    ("LessThan_trunc_negative", "trunc", lambda: F.col("i") < -10),
    ("GreaterThan_trunc", "trunc", lambda: F.col("i") > 15),
    ("In_bucket_and_IsNotNull", "bucket", lambda: F.col("d").isNotNull() & F.col("i").isin(3, -11, 24)),
    ("LessThan_date_pre1970", "d", lambda: F.col("d") < F.lit(D(1970, 1, 1))),
]


@pytest.mark.parametrize(("layout", "make_filter"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES])
def test_pushed_filter_equals_spark_filtering_of_unpruned_data(
    spark: SparkSession, class_roots: dict[str, str], layout: str, make_filter: Callable[[], Column]
) -> None:
    expr = make_filter()
    pruned = load(spark, class_roots[layout]).filter(expr)
    expected = unpruned(spark, CLASS_ROWS).filter(expr)
    assert_df_equality(pruned, expected, ignore_row_order=True)


# -- soundness property test with Spark ---------------------------------------------------------------

SPARK_LAYOUTS: dict[str, list[str]] = {
    "identity_s": ["s"],
    "time": ["year(ts)", "month(ts)", "day(ts)"],
    "identity_d": ["d"],
    "bucket_i": ["bucket[3](i)"],
    "truncate_s": ["truncate[1](s)"],
    "truncate_i": ["truncate[10](i)"],
    "multi_bucket": ["multi_bucket[3](i, s)"],
}
P_INTS = st.integers(-25, 25)
P_STRINGS = st.sampled_from(["", "a", "ab", "abc", "b", "é", "éa", "x%_"])
P_DATES = st.sampled_from([D(1969, 12, 31), D(1970, 1, 1), D(1950, 6, 1), D(2025, 12, 10), D(2025, 12, 11)])
P_TIMESTAMPS = st.sampled_from(
    [
        ts(1969, 12, 31, 23, 30),
        ts(1970, 1, 1, 0, 0),
        ts(1970, 1, 1, 0, 30),
        ts(2025, 12, 10, 0, 0),
        ts(2025, 12, 10, 10, 0),
        ts(2025, 12, 10, 17, 45),
        ts(2025, 12, 11, 0, 0),
    ]
)
P_VALUES: dict[str, st.SearchStrategy[Any]] = {"i": P_INTS, "s": P_STRINGS, "d": P_DATES, "ts": P_TIMESTAMPS}


@st.composite
def spark_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 20))
    return [{"rid": rid, **{c: draw(st.none() | values) for c, values in P_VALUES.items()}} for rid in range(n)]


@st.composite
def spark_leaf(draw: st.DrawFn) -> tuple[str, Column]:
    col = draw(st.sampled_from(["i", "s", "d", "ts"]))
    c = F.col(col)
    value = draw(P_VALUES[col])
    kinds = ["=", "<=>", "!=", "<", "<=", ">", ">=", "in", "isnull", "isnotnull"]
    if col == "s":
        kinds += ["startswith", "endswith", "contains"]
    kind = draw(st.sampled_from(kinds))
    comparisons: dict[str, Callable[[Column, Column], Column]] = {
        "=": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<=>": lambda a, b: a.eqNullSafe(b),
    }
    if kind in comparisons:
        return f"{col} {kind} {value!r}", comparisons[kind](c, F.lit(value))
    if kind == "in":
        values = draw(st.lists(P_VALUES[col], min_size=1, max_size=3))
        return f"{col} IN {values!r}", c.isin(*values)
    if kind == "isnull":
        return f"{col} IS NULL", c.isNull()
    if kind == "isnotnull":
        return f"{col} IS NOT NULL", c.isNotNull()
    cut = draw(st.integers(0, len(value)))
    text = value[:cut] if kind == "startswith" else value[cut:]
    return f"{col}.{kind}({text!r})", getattr(c, kind)(text)


@st.composite
def spark_filter(draw: st.DrawFn, depth: int = 2) -> tuple[str, Column]:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(spark_leaf())
    kind = draw(st.sampled_from(["not", "and", "and", "or"]))
    if kind == "not":
        text, col = draw(spark_filter(depth - 1))
        return f"NOT ({text})", ~col
    (lt, lc), (rt, rc) = draw(spark_filter(depth - 1)), draw(spark_filter(depth - 1))
    if kind == "and":
        return f"({lt}) AND ({rt})", lc & rc
    return f"({lt}) OR ({rt})", lc | rc


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rows=spark_rows(), layout=st.sampled_from(sorted(SPARK_LAYOUTS)), data=st.data())
def test_pruned_read_equals_spark_filter_of_unpruned_data(
    spark: SparkSession, rows: list[dict[str, Any]], layout: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = str(Path(tmp) / "ns")
        write_rows(root, rows, SPARK_LAYOUTS[layout])
        everything = unpruned(spark, rows)
        text, expr = data.draw(spark_filter(), label="filter")
        try:
            assert_df_equality(load(spark, root).filter(expr), everything.filter(expr), ignore_row_order=True)
        except DataFramesNotEqualError as exc:
            raise AssertionError(f"layout {layout} {SPARK_LAYOUTS[layout]}, filter {text}:{exc}") from None


# -- snapshots and time travel --------------------------------------------------------------------------


def numbered(start: int, n: int, days: Sequence[dt.date], countries: Sequence[str | None]) -> list[dict[str, Any]]:
    return [
        {"rid": start + k, "i": start + k, "s": countries[k % len(countries)], "d": days[k % len(days)], "ts": None}
        for k in range(n)
    ]


def rids(df: DataFrame) -> list[int]:
    return sorted(r.rid for r in df.select("rid").collect())


def test_a_write_without_its_manifest_commit_is_invisible(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    before = numbered(0, 20, [D(2025, 12, 10), D(2025, 12, 11)], ["US", "CN"])
    ns = write_rows(root, before, ["d", "s"])
    read_versions = {p.location: p.read_version for p in ns.partitions()}
    version = manifest_version(root)

    def crash(self: PartitionedNamespace, *args: Any, **kwargs: Any) -> int:
        raise RuntimeError("crash before the __manifest commit")

    more = unpruned(spark, numbered(100, 30, [D(2025, 12, 10), D(2025, 12, 12)], ["US", "DE"]))
    with monkeypatch.context() as patch:
        patch.setattr(PartitionedNamespace, "commit_once", crash)
        with pytest.raises(RuntimeError, match="crash before the __manifest commit"):
            write_partitioned(more, root)

    assert manifest_version(root) == version
    # the datasets of existing partitions did get new versions; readers must not see them
    advanced = [loc for loc, rv in read_versions.items() if lance.dataset(f"{root}/{loc}").version > rv]
    assert len(advanced) >= 1
    df = load(spark, root)
    assert_df_equality(df, unpruned(spark, before), ignore_row_order=True)


def test_time_travel_by_manifest_version(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    days = [D(2025, 12, 10), D(2025, 12, 11)]
    first = numbered(0, 10, days, ["US", "CN"])
    ns = write_rows(root, first, ["d", "s"])
    v_first = manifest_version(root)
    second = numbered(10, 10, [D(2025, 12, 11), D(2025, 12, 12)], ["US", None])
    write_table(ns, pa.Table.from_pylist(second, schema=ROW_ARROW))
    v_second = manifest_version(root)
    third = numbered(50, 4, [D(2026, 1, 1)], ["DE"])
    write_table(ns, pa.Table.from_pylist(third, schema=ROW_ARROW), mode="overwrite")
    v_third = manifest_version(root)
    assert v_first < v_second < v_third

    assert rids(read_partitioned(spark, root, manifest_version=v_first)) == list(range(10))
    assert rids(load(spark, root, versionAsOf=str(v_first))) == list(range(10))
    as_of_second = load(spark, root, versionAsOf=str(v_second))
    assert_df_equality(as_of_second, unpruned(spark, first + second), ignore_row_order=True)
    assert rids(load(spark, root)) == [50, 51, 52, 53]
    # pruning works on the old manifest too
    old = read_partitioned(spark, root, filter="d = DATE '2025-12-11' AND s = 'US'", manifest_version=v_second)
    assert rids(old) == [10, 12, 14, 16, 18]


# -- read-side schema rules (seed 000 section 4) --------------------------------------------------------

EVOLVED = pa.schema(
    [pa.field("id", pa.int64()), pa.field("p", pa.string()), pa.field("x", pa.int64()), pa.field("n", pa.int64())]
)
EVOLVED_SPARK = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("p", T.StringType()),
        T.StructField("x", T.LongType()),
        T.StructField("n", T.LongType()),
    ]
)


def add_partition(ns: PartitionedNamespace, p: str, table: pa.Table) -> str:
    """Write ``table`` with plain pylance as the partition ``p`` and record it in ``__manifest``."""
    values = {"p": p}
    location = ns.new_table_location(1, values)
    dataset = lance.write_dataset(table, f"{ns.root}/{location}")
    ns.commit_tables([TableCommit(1, values, location, dataset.version)])
    found = ns.find_partition(1, values)
    assert found is not None
    return found.object_id


EVOLVED_ROWS = [
    (1, "full", 10, 100),
    (2, "full", 20, 200),
    (3, "missing", None, 300),
    (4, "missing", None, 400),
    (5, "extra", 50, 500),
    (6, "narrow", 60, -2_000_000_000),
    (7, "narrow", None, 700),
]


@pytest.fixture(scope="module")
def evolved_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Partitions written by plain pylance whose schemas differ from the namespace schema.

    ``missing`` lacks column ``x``; ``extra`` has a column the namespace does not; ``narrow``
    stores ``x`` and ``n`` as int32 where the namespace says int64.
    """
    root = str(tmp_path_factory.mktemp("evolved") / "ns")
    ns = PartitionedNamespace.create(root, EVOLVED, ["p"])
    write_table(ns, pa.table({"id": [1, 2], "p": ["full", "full"], "x": [10, 20], "n": [100, 200]}, schema=EVOLVED))
    add_partition(
        ns,
        "missing",
        pa.table({"id": pa.array([3, 4], pa.int64()), "p": ["missing"] * 2, "n": pa.array([300, 400], pa.int64())}),
    )
    add_partition(
        ns,
        "extra",
        pa.table(
            {
                "id": pa.array([5], pa.int64()),
                "p": ["extra"],
                "x": pa.array([50], pa.int64()),
                "n": pa.array([500], pa.int64()),
                "surplus": ["ignored"],
            }
        ),
    )
    add_partition(
        ns,
        "narrow",
        pa.table(
            {
                "id": pa.array([6, 7], pa.int64()),
                "p": ["narrow"] * 2,
                "x": pa.array([60, None], pa.int32()),
                "n": pa.array([-2_000_000_000, 700], pa.int32()),
            }
        ),
    )
    return root


def test_partition_schema_differences_are_reconciled(spark: SparkSession, evolved_root: str) -> None:
    df = load(spark, evolved_root)
    assert df.schema == EVOLVED_SPARK
    expected = spark.createDataFrame(EVOLVED_ROWS, EVOLVED_SPARK)
    assert_df_equality(df, expected, ignore_row_order=True)
    # filters on a column a partition lacks: NULL never matches a comparison
    pruned = load(spark, evolved_root).filter((F.col("x") > 15) | F.col("x").isNull())
    assert_df_equality(pruned, expected.filter((F.col("x") > 15) | F.col("x").isNull()), ignore_row_order=True)


def test_not_in_on_a_column_missing_from_a_partition(spark: SparkSession, evolved_root: str) -> None:
    """``x NOT IN (10, 50)`` is NULL, not TRUE, for the rows of a partition that lacks ``x``."""
    expr = ~F.col("x").isin(10, 50)
    expected = spark.createDataFrame(EVOLVED_ROWS, EVOLVED_SPARK).filter(expr)
    assert_df_equality(load(spark, evolved_root).filter(expr), expected, ignore_row_order=True)


def test_an_impossible_cast_names_the_column_and_partition(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, EVOLVED, ["p"])
    write_table(ns, pa.table({"id": [1], "p": ["ok"], "x": [1], "n": [1]}, schema=EVOLVED))
    object_id = add_partition(
        ns,
        "bad",
        pa.table({"id": pa.array([2], pa.int64()), "p": ["bad"], "x": pa.array([2], pa.int64()), "n": ["abc"]}),
    )
    with pytest.raises(PySparkException) as info:
        load(spark, root).collect()
    message = str(info.value)
    assert "'n'" in message
    assert object_id in message
    # the good partition alone still reads (pruning skips the bad one)
    assert [r.id for r in read_partitioned(spark, root, filter="p = 'ok'").collect()] == [1]


# -- splitting one large table ----------------------------------------------------------------------


def test_a_large_partition_is_split_by_fragment_groups(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    rows = [{"rid": k, "i": k, "s": "US", "d": D(2025, 12, 10), "ts": None} for k in range(1000)]
    ns = PartitionedNamespace.create(root, ROW_ARROW, ["s"])
    write_table(ns, pa.Table.from_pylist(rows, schema=ROW_ARROW), max_rows_per_file=100)
    (table,) = ns.partitions()
    assert len(ns.open_table(table).get_fragments()) == 10
    df = load(spark, root, rows_per_split="250")
    assert df.rdd.getNumPartitions() >= 4
    got = [r.rid for r in df.select("rid").collect()]
    assert len(got) == 1000
    assert sorted(got) == list(range(1000))
