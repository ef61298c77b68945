"""The write path: ``write_partitioned`` (Spark) and ``write_table`` (Arrow) on real Lance datasets.

Covers the modes, creation, write ids, one ``__manifest`` commit per write (SPEC-NOTES 16),
the input rules (seed 000 section 4, SPEC-NOTES 12), NULL and awkward partition values,
fragment counts, plain-Lance readability, time travel by manifest version, and UTC day
partitioning whatever the session zone. Data is read back with pylance at each table's
``read_version`` (the read-side data source is not built yet).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from partitioning.errors import NamespaceAlreadyExists, SchemaError, SpecError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.field_ids import FIELD_ID_KEY
from partitioning.spec.transforms import parse_transform
from partitioning.tables.write import write_table
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.slow

UTC = dt.UTC
BUCKET16 = parse_transform("bucket[16]")
BUCKET4 = parse_transform("bucket[4]")

EVENTS = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("user_id", T.LongType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("country", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)
SIMPLE = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("country", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)
SIMPLE_ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)


# -- helpers ----------------------------------------------------------------------------------
def manifest_version(root: str) -> int:
    return lance.dataset(f"{root}/__manifest").version


def table_dirs(root: str) -> set[str]:
    return {p.name for p in Path(root).iterdir() if p.name != "__manifest"}


def by_partition(ns: PartitionedNamespace) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Rows of every partition table at its manifest ``read_version``, keyed by partition values."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for p in ns.partitions():
        assert p.key not in out, f"two tables for partition {p.key}"
        out[p.key] = ns.open_table(p).to_table().to_pylist()
    return out


def read_all(ns: PartitionedNamespace) -> pa.Table:
    tables = [ns.open_table(p).to_table() for p in ns.partitions()]
    return pa.concat_tables(tables) if tables else ns.schema.empty_table()


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=repr)


def simple_rows(spec: list[tuple[str | None, int]], start: int = 0) -> list[tuple[int, str | None, float]]:
    """``[(country, n), ...]`` -> n rows per country with consecutive ids from ``start``."""
    rows = []
    i = start
    for country, n in spec:
        for _ in range(n):
            rows.append((i, country, i * 0.5))
            i += 1
    return rows


def as_dicts(rows: list[tuple[Any, ...]], names: list[str]) -> list[dict[str, Any]]:
    return [dict(zip(names, r, strict=True)) for r in rows]


def assert_placed(ns: PartitionedNamespace, expected_key: Callable[[dict[str, Any]], tuple[Any, ...]]) -> None:
    """Every row sits in the partition whose values are the transform of its source values."""
    for key, rows in by_partition(ns).items():
        assert len(rows) > 0, f"partition {key} is empty"
        for row in rows:
            assert expected_key(row) == key, f"row {row} is in partition {key}"


def event_rows(n: int) -> list[tuple[Any, ...]]:
    """Events over 2025-11-29 .. 2025-12-02 (UTC): crosses a month boundary, 20 users."""
    base = dt.datetime(2025, 11, 29, 0, 10, tzinfo=UTC)
    countries = ["US", "DE", "JP", "FR"]
    return [
        (i, 1000 + (i * 7) % 20, base + dt.timedelta(minutes=23 * i), countries[i % 4], round(i * 1.25, 2))
        for i in range(n)
    ]


def event_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """Hand-computed (day(ts), bucket[16](user_id)) of a row read back from Lance."""
    ts = row["ts"]
    day = ts.astimezone(UTC).day if ts is not None else None
    return day, BUCKET16.apply_scalar([row["user_id"]], [pa.int64()])


@contextmanager
def session_zone(spark: SparkSession, zone: str) -> Iterator[None]:
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def simple_df(spark: SparkSession, spec: list[tuple[str | None, int]], start: int = 0) -> DataFrame:
    return spark.createDataFrame(simple_rows(spec, start), SIMPLE)


# -- the main round trip (one write, inspected by several tests) ------------------------------
@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("events") / "ns")
    rows = event_rows(240)
    df = spark.createDataFrame(rows, EVENTS)
    result = write_partitioned(df, root, partition_by=["day(ts)", "bucket[16](user_id)"])
    return root, df, rows, result


def test_round_trip_creates_namespace_and_places_rows(spark, events):
    root, df, rows, result = events
    ns = PartitionedNamespace.load(root)

    # schema defaults to the DataFrame's, with field ids 0.. assigned in column order
    assert ns.schema.names == ["id", "user_id", "ts", "country", "amount"]
    assert [f.metadata[FIELD_ID_KEY.encode()] for f in ns.schema] == [b"0", b"1", b"2", b"3", b"4"]
    assert [f.nullable for f in ns.schema] == [False, True, True, True, True]
    assert ns.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert ns.current_spec.field_ids == ["ts_day", "user_id_bucket"]

    # partition values are exactly the hand-computed (day, bucket) pairs of the input
    expected_keys = {(ts.astimezone(UTC).day, BUCKET16.apply_scalar([uid], [pa.int64()])) for _, uid, ts, _, _ in rows}
    assert {p.key for p in ns.partitions()} == expected_keys
    assert {k[0] for k in expected_keys} == {29, 30, 1, 2}
    assert len(ns.partitions()) == len(expected_keys)
    assert_placed(ns, event_key)

    # row contents are exactly the input
    actual = spark.createDataFrame(read_all(ns))
    assert actual.count() == 240
    assert_df_equality(actual, df, ignore_row_order=True, ignore_nullable=True)

    assert result.skipped is None
    assert result.rows_written == 240
    assert result.partitions_touched == len(expected_keys)
    assert result.partitions_created == len(expected_keys)
    assert result.manifest_version == manifest_version(root) == ns.manifest_version


def test_read_version_set_on_every_table(events):
    root, _, _, _ = events
    ns = PartitionedNamespace.load(root)
    versions = {p.object_id: p.read_version for p in ns.partitions()}
    assert len(versions) == len(ns.partitions())
    for p in ns.partitions():
        assert p.read_version is not None
        assert p.read_version == lance.dataset(p.uri).version


def test_clustered_write_makes_one_fragment_per_partition(events):
    root, _, _, result = events
    ns = PartitionedNamespace.load(root)
    counts = [len(ns.open_table(p).get_fragments()) for p in ns.partitions()]
    assert counts == [1] * len(ns.partitions())
    assert result.fragments_written == len(ns.partitions())


def test_partition_tables_are_plain_lance_datasets(events):
    root, _, _, _ = events
    ns = PartitionedNamespace.load(root)
    for p in ns.partitions():
        latest = lance.dataset(p.uri)
        assert sorted_rows(latest.to_table().to_pylist()) == sorted_rows(ns.open_table(p).to_table().to_pylist())
        assert latest.schema.names == ["id", "user_id", "ts", "country", "amount"]


# -- fragments --------------------------------------------------------------------------------
def test_max_rows_per_file_splits_partitions(spark, tmp_path):
    root = str(tmp_path / "ns")
    sizes = {"US": 25, "DE": 10, "JP": 7}
    df = simple_df(spark, list(sizes.items()))
    write_partitioned(df, root, partition_by=["country"], max_rows_per_file=10)
    ns = PartitionedNamespace.load(root)
    assert {p.key for p in ns.partitions()} == {("US",), ("DE",), ("JP",)}
    for p in ns.partitions():
        fragments = ns.open_table(p).get_fragments()
        n = sizes[p.values["country"]]
        assert len(fragments) == math.ceil(n / 10), p.values
        assert sum(f.count_rows() for f in fragments) == n
        assert max(f.count_rows() for f in fragments) <= 10


def test_unclustered_write_with_few_open_writers_writes_each_row_once(spark, tmp_path):
    root = str(tmp_path / "ns")
    countries = ["US", "DE", "JP", "FR", "BR", "IN"]
    rows = [(i, countries[i % 6], i * 0.5) for i in range(300)]
    df = spark.createDataFrame(rows, SIMPLE).repartition(3)
    result = write_partitioned(df, root, partition_by=["country"], cluster=False, max_open_writers=2)
    ns = PartitionedNamespace.load(root)
    assert sorted(p.values["country"] for p in ns.partitions()) == sorted(countries)
    assert_placed(ns, lambda r: (r["country"],))
    got = read_all(ns)
    assert sorted(got.column("id").to_pylist()) == list(range(300))
    assert sorted_rows(got.to_pylist()) == sorted_rows(as_dicts(rows, SIMPLE.names))
    assert result.rows_written == 300


# -- creating ---------------------------------------------------------------------------------
def test_missing_spec_on_new_root_is_spec_error(spark, tmp_path):
    root = str(tmp_path / "ns")
    with pytest.raises(SpecError, match="partition_by"):
        write_partitioned(simple_df(spark, [("US", 2)]), root)
    assert not (Path(root) / "__manifest").exists()


def test_create_from_spec_json(spark, tmp_path):
    root = str(tmp_path / "ns")
    spec = {
        "id": 1,
        "fields": [
            {"field_id": "c", "source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}},
            {
                "field_id": "idb",
                "source_ids": [0],
                "transform": {"type": "bucket", "num_buckets": 4},
                "result_type": {"type": "int32"},
            },
        ],
    }
    rows = simple_rows([("US", 6), ("DE", 5)])
    write_partitioned(spark.createDataFrame(rows, SIMPLE), root, spec=spec)
    ns = PartitionedNamespace.load(root)
    assert ns.current_spec.field_ids == ["c", "idb"]
    assert ns.current_spec.spec_id == 1

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["country"], BUCKET4.apply_scalar([r["id"]], [pa.int64()])

    assert {p.key for p in ns.partitions()} == {key(r) for r in as_dicts(rows, SIMPLE.names)}
    assert_placed(ns, key)
    assert sorted_rows(read_all(ns).to_pylist()) == sorted_rows(as_dicts(rows, SIMPLE.names))


# -- modes ------------------------------------------------------------------------------------
def test_error_mode(spark, tmp_path):
    root = str(tmp_path / "ns")
    df = simple_df(spark, [("US", 3), ("DE", 2)])
    first = write_partitioned(df, root, mode="error", partition_by=["country"])  # creates and appends
    assert first.skipped is None
    assert first.rows_written == 5
    before = manifest_version(root)
    dirs = table_dirs(root)
    with pytest.raises(NamespaceAlreadyExists) as info:
        write_partitioned(df, root, mode="error")
    assert info.value.code == 2
    assert manifest_version(root) == before
    assert table_dirs(root) == dirs
    assert read_all(PartitionedNamespace.load(root)).num_rows == 5


def test_ignore_mode(spark, tmp_path):
    root = str(tmp_path / "ns")
    df = simple_df(spark, [("US", 3), ("DE", 2)])
    first = write_partitioned(df, root, mode="ignore", partition_by=["country"])  # creates and appends
    assert first.skipped is None
    ns = PartitionedNamespace.load(root)
    assert sorted_rows(read_all(ns).to_pylist()) == sorted_rows(
        as_dicts(simple_rows([("US", 3), ("DE", 2)]), SIMPLE.names)
    )
    before = manifest_version(root)
    dirs = table_dirs(root)
    second = write_partitioned(simple_df(spark, [("FR", 4)], start=100), root, mode="ignore")
    assert isinstance(second.skipped, str)
    assert "ignore" in second.skipped
    assert second.rows_written == 0
    assert manifest_version(root) == before
    assert table_dirs(root) == dirs
    assert read_all(PartitionedNamespace.load(root)).num_rows == 5


def test_append_twice_doubles_rows_with_one_manifest_commit_each(spark, tmp_path):
    root = str(tmp_path / "ns")
    spec = [("US", 4), ("DE", 3), ("JP", 2)]
    df = simple_df(spark, spec)
    write_partitioned(df, root, partition_by=["country"])
    ns1 = PartitionedNamespace.load(root)
    v1 = {p.values["country"]: p.read_version for p in ns1.partitions()}
    before = manifest_version(root)

    result = write_partitioned(df, root, mode="append")
    assert manifest_version(root) == before + 1
    assert result.manifest_version == before + 1
    ns2 = PartitionedNamespace.load(root)
    counts = {k[0]: len(v) for k, v in by_partition(ns2).items()}
    assert counts == {"US": 8, "DE": 6, "JP": 4}
    v2 = {p.values["country"]: p.read_version for p in ns2.partitions()}
    assert set(v2) == set(v1)
    for country in v1:
        assert v2[country] > v1[country], country
    expected = as_dicts(simple_rows(spec), SIMPLE.names) * 2
    assert sorted_rows(read_all(ns2).to_pylist()) == sorted_rows(expected)
    # the old manifest version still reads the first write only
    old = PartitionedNamespace.load(root, manifest_version=before)
    assert read_all(old).num_rows == 9


def test_overwrite_replaces_everything_and_old_version_is_readable(spark, tmp_path):
    root = str(tmp_path / "ns")
    old_rows = simple_rows([("US", 4), ("DE", 3), ("JP", 2)])
    write_partitioned(spark.createDataFrame(old_rows, SIMPLE), root, partition_by=["country"])
    old_version = manifest_version(root)

    new_rows = simple_rows([("US", 2), ("BR", 3)], start=100)
    result = write_partitioned(spark.createDataFrame(new_rows, SIMPLE), root, mode="overwrite")
    assert manifest_version(root) == old_version + 1
    assert result.manifest_version == old_version + 1

    ns = PartitionedNamespace.load(root)
    assert sorted(p.values["country"] for p in ns.partitions()) == ["BR", "US"]
    assert sorted_rows(read_all(ns).to_pylist()) == sorted_rows(as_dicts(new_rows, SIMPLE.names))
    assert_placed(ns, lambda r: (r["country"],))

    old = PartitionedNamespace.load(root, manifest_version=old_version)
    assert sorted(p.values["country"] for p in old.partitions()) == ["DE", "JP", "US"]
    assert sorted_rows(read_all(old).to_pylist()) == sorted_rows(as_dicts(old_rows, SIMPLE.names))


def test_overwrite_partitions_replaces_only_touched_partitions(spark, tmp_path):
    root = str(tmp_path / "ns")
    old_rows = simple_rows([("US", 4), ("DE", 3), ("JP", 2)])
    write_partitioned(spark.createDataFrame(old_rows, SIMPLE), root, partition_by=["country"])
    before_ns = PartitionedNamespace.load(root)
    before_versions = {p.values["country"]: p.read_version for p in before_ns.partitions()}
    before = manifest_version(root)

    new_rows = simple_rows([("DE", 1), ("BR", 2)], start=100)
    write_partitioned(spark.createDataFrame(new_rows, SIMPLE), root, mode="overwrite_partitions")
    assert manifest_version(root) == before + 1

    ns = PartitionedNamespace.load(root)
    parts = {k[0]: sorted_rows(v) for k, v in by_partition(ns).items()}
    old_d = as_dicts(old_rows, SIMPLE.names)
    new_d = as_dicts(new_rows, SIMPLE.names)
    assert parts == {
        "US": sorted_rows([r for r in old_d if r["country"] == "US"]),
        "JP": sorted_rows([r for r in old_d if r["country"] == "JP"]),
        "DE": sorted_rows([r for r in new_d if r["country"] == "DE"]),
        "BR": sorted_rows([r for r in new_d if r["country"] == "BR"]),
    }
    after_versions = {p.values["country"]: p.read_version for p in ns.partitions()}
    assert after_versions["US"] == before_versions["US"]
    assert after_versions["JP"] == before_versions["JP"]
    assert after_versions["DE"] > before_versions["DE"]


def test_same_write_id_never_adds_data_twice(spark, tmp_path):
    root = str(tmp_path / "ns")
    df = simple_df(spark, [("US", 3), ("DE", 2)])
    first = write_partitioned(df, root, partition_by=["country"], write_id="job-42")
    assert first.skipped is None
    assert "job-42" in PartitionedNamespace.load(root).committed_write_ids()
    before = manifest_version(root)

    again = write_partitioned(df, root, write_id="job-42")
    assert isinstance(again.skipped, str)
    assert "job-42" in again.skipped
    assert manifest_version(root) == before
    assert read_all(PartitionedNamespace.load(root)).num_rows == 5

    other = write_partitioned(df, root, write_id="job-43")
    assert other.skipped is None
    assert manifest_version(root) == before + 1
    assert read_all(PartitionedNamespace.load(root)).num_rows == 10


# -- input rules ------------------------------------------------------------------------------
def test_unknown_column_is_rejected_and_nothing_is_written(spark, tmp_path):
    root = str(tmp_path / "ns")
    write_partitioned(simple_df(spark, [("US", 2)]), root, partition_by=["country"])
    before = manifest_version(root)
    dirs = table_dirs(root)
    extra = spark.createDataFrame([(7, "FR", 1.0, "x")], "id long, country string, amount double, bogus string")
    with pytest.raises(SchemaError) as info:
        write_partitioned(extra, root)
    message = str(info.value)
    assert "\n" not in message
    assert "bogus" in message
    assert "id, country, amount" in message
    assert manifest_version(root) == before
    assert table_dirs(root) == dirs


def test_missing_columns_become_null_or_fail_when_required(spark, tmp_path):
    root = str(tmp_path / "ns")
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("country", pa.string()),
            pa.field("note", pa.string()),
        ]
    )
    df = spark.createDataFrame([(1, "US"), (2, "DE")], "id long, country string")
    write_partitioned(df, root, partition_by=["country"], schema=schema)
    ns = PartitionedNamespace.load(root)
    assert ns.schema.names == ["id", "country", "note"]
    assert sorted_rows(read_all(ns).to_pylist()) == [
        {"id": 1, "country": "US", "note": None},
        {"id": 2, "country": "DE", "note": None},
    ]

    before = manifest_version(root)
    dirs = table_dirs(root)
    no_id = spark.createDataFrame([("FR", "n")], "country string, note string")
    with pytest.raises(SchemaError) as info:
        write_partitioned(no_id, root)
    assert "'id'" in str(info.value)
    assert "\n" not in str(info.value)
    assert manifest_version(root) == before
    assert table_dirs(root) == dirs


CAST_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.string()),
        pa.field("n", pa.int64()),
        pa.field("b", pa.int8()),
    ]
)


@pytest.mark.parametrize(
    ("ddl", "row", "column", "expected"),
    [
        (
            "id long, country string, n string",
            (1, "US", "abc"),
            "n",
            "column 'n': value 'abc' of type string cannot be stored as bigint without loss",
        ),
        (
            "id long, country string, n double",
            (1, "US", 3.5),
            "n",
            "column 'n': value '3.5' of type double cannot be stored as bigint without loss",
        ),
        (
            "id long, country string, b int",
            (1, "US", 300),
            "b",
            "column 'b': value '300' of type int cannot be stored as tinyint without loss",
        ),
    ],
    ids=["string-into-long", "fraction-into-long", "overflow-into-byte"],
)
def test_impossible_or_lossy_cast_is_one_line_schema_error(spark, tmp_path, ddl, row, column, expected):
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, CAST_SCHEMA, ["country"])
    before = manifest_version(root)
    assert before == ns.manifest_version
    good = spark.createDataFrame([(0, "US"), (2, "DE")], "id long, country string")
    df = spark.createDataFrame([row], ddl).unionByName(good, allowMissingColumns=True)
    with pytest.raises(SchemaError) as info:
        write_partitioned(df, root)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "\n" not in message
    assert f"'{column}'" in message
    assert message == expected
    assert manifest_version(root) == before
    assert PartitionedNamespace.load(root).partitions() == []


def test_safe_casts_store_namespace_types(spark, tmp_path):
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, CAST_SCHEMA, ["country"])
    df = spark.createDataFrame(
        [(1, "US", 7.0, 12), (2, "US", -4.0, -128), (3, "DE", None, 127)], "id int, country string, n double, b int"
    )
    write_partitioned(df, root)
    got = read_all(PartitionedNamespace.load(root))
    assert got.schema.field("id").type == pa.int64()
    assert got.schema.field("n").type == pa.int64()
    assert got.schema.field("b").type == pa.int8()
    assert sorted_rows(got.to_pylist()) == [
        {"id": 1, "country": "US", "n": 7, "b": 12},
        {"id": 2, "country": "US", "n": -4, "b": -128},
        {"id": 3, "country": "DE", "n": None, "b": 127},
    ]


def test_null_partition_values_go_to_the_null_partition(spark, tmp_path):
    root = str(tmp_path / "ns")
    rows = [
        (1, 1001, None, "US", 1.0),
        (2, None, None, "US", 2.0),
        (3, None, None, None, 3.0),
        (4, 1001, None, None, 4.0),
        (5, 1002, None, "DE", 5.0),
        (6, 1002, None, None, 6.0),
    ]
    df = spark.createDataFrame(rows, EVENTS)
    write_partitioned(df, root, partition_by=["country", "bucket[16](user_id)"])
    ns = PartitionedNamespace.load(root)
    b1 = BUCKET16.apply_scalar([1001], [pa.int64()])
    b2 = BUCKET16.apply_scalar([1002], [pa.int64()])
    parts = {k: sorted(r["id"] for r in v) for k, v in by_partition(ns).items()}
    assert b1 != b2
    assert parts == {
        ("US", b1): [1],
        ("US", None): [2],
        (None, None): [3],
        (None, b1): [4],
        ("DE", b2): [5],
        (None, b2): [6],
    }
    null_lines = [line for line in ns.layout().splitlines() if "[country=NULL, user_id_bucket=NULL]" in line]
    assert len(null_lines) == 1
    assert sorted_rows(read_all(ns).to_pylist()) == sorted_rows(as_dicts(rows, EVENTS.names))


def test_awkward_partition_values_round_trip(spark, tmp_path):
    root = str(tmp_path / "ns")
    values = ["a$b", "x/y", "k=v", "with space", "München", "漢字", "", "$/= ü"]
    rows = [(i, values[i % len(values)], float(i)) for i in range(3 * len(values))]
    write_partitioned(spark.createDataFrame(rows, SIMPLE), root, partition_by=["country"])
    ns = PartitionedNamespace.load(root)
    assert sorted(p.values["country"] for p in ns.partitions()) == sorted(values)
    parts = by_partition(ns)
    assert set(parts) == {(v,) for v in values}
    for v in values:
        assert sorted_rows(parts[(v,)]) == sorted_rows([r for r in as_dicts(rows, SIMPLE.names) if r["country"] == v])
    assert len(parts[("",)]) == 3
    layout = ns.layout().splitlines()
    for v in values:
        assert len([line for line in layout if f"[country={v}]" in line]) == 1, v


def test_day_partition_is_utc_whatever_the_session_zone(spark, tmp_path):
    root = str(tmp_path / "ns")
    late = dt.datetime(2025, 12, 10, 23, 30, tzinfo=UTC)
    early = dt.datetime(2025, 12, 11, 0, 30, tzinfo=UTC)
    with session_zone(spark, "America/Los_Angeles"):
        df = spark.createDataFrame([(1, 5, late, "US", 1.0), (2, 5, early, "US", 2.0)], EVENTS)
        write_partitioned(df, root, partition_by=["day(ts)"])
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    ns = PartitionedNamespace.load(root)
    parts = by_partition(ns)
    assert set(parts) == {(10,), (11,)}
    assert [(r["id"], r["ts"]) for r in parts[(10,)]] == [(1, late)]
    assert [(r["id"], r["ts"]) for r in parts[(11,)]] == [(2, early)]


# -- the Spark-free path ----------------------------------------------------------------------
def test_write_table_arrow_path(tmp_path):
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SIMPLE_ARROW, ["country"])
    first = pa.table(
        {"id": [1, 2, 3, 4, 5], "country": ["US", "US", "DE", "DE", "JP"], "amount": [1.0, 2.0, 3.0, 4.0, 5.0]}
    )
    v0 = manifest_version(root)
    write_table(ns, first, mode="append")
    assert manifest_version(root) == v0 + 1
    ns = PartitionedNamespace.load(root)
    assert sorted(p.values["country"] for p in ns.partitions()) == ["DE", "JP", "US"]
    assert_placed(ns, lambda r: (r["country"],))

    # int32 ids are cast to the namespace's int64; amount missing becomes NULL
    second = pa.table({"id": pa.array([10, 11], pa.int32()), "country": ["DE", "BR"]})
    write_table(ns, second, mode="overwrite_partitions")
    assert manifest_version(root) == v0 + 2
    ns = PartitionedNamespace.load(root)
    parts = {k[0]: sorted_rows(v) for k, v in by_partition(ns).items()}
    assert parts == {
        "US": [{"id": 1, "country": "US", "amount": 1.0}, {"id": 2, "country": "US", "amount": 2.0}],
        "JP": [{"id": 5, "country": "JP", "amount": 5.0}],
        "DE": [{"id": 10, "country": "DE", "amount": None}],
        "BR": [{"id": 11, "country": "BR", "amount": None}],
    }

    before = manifest_version(root)
    dirs = table_dirs(root)
    with pytest.raises(SchemaError) as info:
        write_table(ns, pa.table({"id": [9], "country": ["FR"], "bogus": [1]}), mode="append")
    assert "bogus" in str(info.value)
    assert "id, country, amount" in str(info.value)
    assert "\n" not in str(info.value)
    assert manifest_version(root) == before
    assert table_dirs(root) == dirs
