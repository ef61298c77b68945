"""Spark Column transforms agree with the Arrow ones: golden vectors, random data, any session zone."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mmh3
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from conftest import load_conformance, vector_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.spec import murmur3 as m3
from partitioning.spec.partition_spec import PartitionField
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import parse_transform
from pipelines.columns import murmur3 as sm3
from pipelines.columns import transforms as stf
from pipelines.columns.schema import namespace_schema_from_spark, spark_schema

pytestmark = pytest.mark.slow

MURMUR3 = load_conformance("murmur3.json")
TRANSFORMS = load_conformance("transforms.json")

# Arrow spellings of the golden vectors that have a Spark type (SPEC-NOTES 7 table).
SPARK_TYPES: dict[str, T.DataType] = {
    "int8": T.ByteType(),
    "int16": T.ShortType(),
    "int32": T.IntegerType(),
    "int64": T.LongType(),
    "float32": T.FloatType(),
    "float64": T.DoubleType(),
    "date32": T.DateType(),
    "timestamp[us, tz=UTC]": T.TimestampType(),
    "timestamp[us]": T.TimestampNTZType(),
    "utf8": T.StringType(),
    "binary_hex": T.BinaryType(),
    "bool": T.BooleanType(),
    "decimal128(10, 2)": T.DecimalType(10, 2),
}
BUCKETS = (1, 2, 7, 8, 16, 1024)
ZONES = ("UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham")


@contextmanager
def session_zone(spark: SparkSession, zone: str) -> Iterator[None]:
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def test_spark_defaults_apply(spark):
    """spark-conf/spark-defaults.conf is what the session runs with."""
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"


def test_python_workers_use_the_project_interpreter(spark):
    executable = F.udf(lambda: sys.executable, T.StringType())
    workers = {r[0] for r in spark.range(4).repartition(2).select(executable()).collect()}
    assert workers == {sys.executable}


def test_seed_zero_trick_matches_the_spec_hash(spark):
    """Spark's hash() is seed 42; hash(x0, c) re-seeds it to 0 (pipelines.columns.murmur3)."""
    row = (
        spark.range(1).select(F.hash(F.lit(sm3._X0)).alias("h0"), F.hash(F.lit(sm3._X0), F.lit(34)).alias("h")).first()
    )
    assert row.h0 == 0
    assert row.h == mmh3.hash((34).to_bytes(4, "little"), 0, signed=True)
    builtin = spark.range(1).select(F.hash(F.lit("US"))).first()[0]
    assert builtin != mmh3.hash(b"US", 0, signed=True)


def _spark_vectors() -> dict[str, list[dict[str, Any]]]:
    by_type: dict[str, list[dict[str, Any]]] = {}
    for entry in MURMUR3["single"]:
        if entry["type"] in SPARK_TYPES:
            by_type.setdefault(entry["type"], []).append(entry)
    return by_type


@pytest.mark.parametrize(("type_name", "entries"), sorted(_spark_vectors().items()))
def test_murmur3_golden_vectors_in_spark(spark, type_name, entries):
    """Every golden vector with a Spark type, through all three Spark paths, and every bucket count."""
    spark_type = SPARK_TYPES[type_name]
    schema = T.StructType([T.StructField("i", T.IntegerType()), T.StructField("v", spark_type)])
    df = spark.createDataFrame([(i, vector_value(type_name, e["value"])) for i, e in enumerate(entries)], schema)
    df = sm3.with_murmur3(df, F.col("v"), "staged", spark_type)
    df = df.select(
        "i",
        "staged",
        sm3.murmur3_column(F.col("v"), spark_type).alias("column"),
        sm3.murmur3_column(F.col("v")).alias("udf"),
        *[stf.bucket(F.col("v"), n, spark_type).alias(f"b{n}") for n in BUCKETS],
    )
    expected = spark.createDataFrame(
        [
            (i, e["murmur3"], e["murmur3"], e["murmur3"], *[e["bucket"][str(n)] for n in BUCKETS])
            for i, e in enumerate(entries)
        ],
        df.schema,
    )
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("entry", MURMUR3["multi"], ids=lambda e: "+".join(c["type"] for c in e["columns"]))
def test_murmur3_multi_golden_vectors_in_spark(spark, entry):
    cols = entry["columns"]
    schema = T.StructType([T.StructField(f"c{i}", SPARK_TYPES[c["type"]]) for i, c in enumerate(cols)])
    df = spark.createDataFrame([tuple(vector_value(c["type"], c["value"]) for c in cols)], schema)
    refs = [F.col(f"c{i}") for i in range(len(cols))]
    row = df.select(
        stf.murmur3_multi(*refs).alias("h"), *[stf.multi_bucket(refs, n).alias(f"b{n}") for n in BUCKETS]
    ).first()
    assert row.h == entry["murmur3"]
    assert [row[f"b{n}"] for n in BUCKETS] == [entry["bucket"][str(n)] for n in BUCKETS]


def _time_cases() -> list[tuple[str, dict[str, Any]]]:
    return [(name, e) for name in ("year", "month", "day", "hour") for e in TRANSFORMS[name]]


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kolkata"])
def test_time_golden_vectors_in_any_session_zone(spark, zone):
    """year/month/day/hour are UTC calendar parts whatever spark.sql.session.timeZone says."""
    cases = _time_cases()
    rows = []
    for i, (name, e) in enumerate(cases):
        value = vector_value(e["type"], e["value"])
        is_ts = e["type"].startswith("timestamp")
        rows.append((i, name, value if not is_ts else None, value if is_ts else None, e["result"]))
    schema = "i int, name string, d date, ts timestamp, expected int"
    with session_zone(spark, zone):
        df = spark.createDataFrame(rows, schema)
        got = df.select(
            "i",
            F.when(
                F.col("name") == "year",
                F.coalesce(stf.year(F.col("d"), T.DateType()), stf.year(F.col("ts"), T.TimestampType())),
            )
            .when(
                F.col("name") == "month",
                F.coalesce(stf.month(F.col("d"), T.DateType()), stf.month(F.col("ts"), T.TimestampType())),
            )
            .when(
                F.col("name") == "day",
                F.coalesce(stf.day(F.col("d"), T.DateType()), stf.day(F.col("ts"), T.TimestampType())),
            )
            .otherwise(stf.hour(F.col("ts"), T.TimestampType()))
            .alias("result"),
        )
        expected = df.select("i", F.col("expected").alias("result"))
        assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_truncate_golden_vectors_in_spark(spark):
    cases = TRANSFORMS["truncate"]
    ints = [(i, e["value"], e["width"], e["result"]) for i, e in enumerate(cases) if e["type"] == "int64"]
    strs = [(i, e["value"], e["width"], e["result"]) for i, e in enumerate(cases) if e["type"] == "utf8"]
    assert len(ints) + len(strs) == len(cases)
    for rows, spark_type, ddl in ((ints, T.LongType(), "long"), (strs, T.StringType(), "string")):
        df = spark.createDataFrame(rows, f"i int, v {ddl}, w int, expected {ddl}")
        widths = sorted({r[2] for r in rows})
        got = df.select(
            "i",
            F.coalesce(*[F.when(F.col("w") == w, stf.truncate(F.col("v"), w, spark_type)) for w in widths]).alias("r"),
        )
        assert_df_equality(
            got, df.select("i", F.col("expected").alias("r")), ignore_row_order=True, ignore_nullable=True
        )


def test_every_transform_maps_null_to_null(spark):
    """The (None, None) row of every transform, for every source type it accepts."""
    schema = T.StructType(
        [
            T.StructField(n, t)
            for n, t in [
                ("i", T.IntegerType()),
                ("s", T.StringType()),
                ("d", T.DateType()),
                ("ts", T.TimestampType()),
                ("dec", T.DecimalType(10, 2)),
                ("b", T.BinaryType()),
            ]
        ]
    )
    df = spark.createDataFrame([(None, None, None, None, None, None)], schema)
    cols = [
        stf.identity(F.col("i")),
        stf.year(F.col("d"), T.DateType()),
        stf.month(F.col("ts"), T.TimestampType()),
        stf.day(F.col("ts"), T.TimestampType()),
        stf.hour(F.col("ts"), T.TimestampType()),
        stf.bucket(F.col("i"), 16, T.IntegerType()),
        stf.bucket(F.col("s"), 16, T.StringType()),
        stf.bucket(F.col("dec"), 16, T.DecimalType(10, 2)),
        stf.multi_bucket([F.col("i"), F.col("s")], 8),
        stf.truncate(F.col("i"), 10, T.IntegerType()),
        stf.truncate(F.col("s"), 3, T.StringType()),
        stf.truncate(F.col("dec"), 10, T.DecimalType(10, 2)),
        stf.truncate(F.col("b"), 2, T.BinaryType()),
    ]
    got = df.select(*[c.alias(f"c{i}") for i, c in enumerate(cols)])
    assert got.collect()[0].asDict() == {f"c{i}": None for i in range(len(cols))}
    staged = sm3.with_murmur3(df, F.col("s"), "h", T.StringType()).select("h")
    assert staged.collect()[0].h is None


# -- Spark vs Arrow on random data --------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
_COLUMNS: dict[str, tuple[T.DataType, st.SearchStrategy[Any], list[str]]] = {
    "byte": (T.ByteType(), st.integers(-(2**7), 2**7 - 1), ["bucket[7]", "truncate[10]", "truncate[3]", "identity"]),
    "short": (T.ShortType(), st.integers(-(2**15), 2**15 - 1), ["bucket[16]", "truncate[100]"]),
    "int": (T.IntegerType(), st.integers(-(2**31), 2**31 - 1), ["bucket[16]", "bucket[1]", "truncate[10]"]),
    "long": (T.LongType(), st.integers(-(2**63), 2**63 - 1), ["bucket[1024]", "truncate[1000]", "truncate[7]"]),
    "float": (T.FloatType(), st.floats(width=32), ["bucket[16]"]),
    "double": (T.DoubleType(), st.floats(), ["bucket[16]"]),
    "dec": (
        T.DecimalType(10, 2),
        st.decimals(min_value=decimal.Decimal("-99999999.99"), max_value=decimal.Decimal("99999999.99"), places=2),
        ["bucket[16]", "truncate[10]", "truncate[3]"],
    ),
    "bigdec": (
        T.DecimalType(38, 6),
        st.decimals(min_value=decimal.Decimal("-1e30"), max_value=decimal.Decimal("1e30"), places=6),
        ["bucket[8]", "truncate[5]"],
    ),
    "str": (T.StringType(), _TEXT, ["bucket[16]", "truncate[3]", "truncate[1]", "identity"]),
    "bin": (T.BinaryType(), st.binary(max_size=24), ["bucket[16]", "truncate[2]"]),
    "bool": (T.BooleanType(), st.booleans(), ["bucket[2]", "identity"]),
    "date": (
        T.DateType(),
        st.dates(dt.date(1000, 1, 1), dt.date(3000, 12, 31)),
        ["bucket[16]", "year", "month", "day"],
    ),
    "ts": (
        T.TimestampType(),
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)),
        ["bucket[16]", "year", "month", "day", "hour"],
    ),
    "ntz": (
        T.TimestampNTZType(),
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
        ["bucket[16]", "year", "month", "day", "hour"],
    ),
}
_MULTI = (["int", "str"], ["date", "long", "bool"], ["dec", "ntz"])


def _rows() -> st.SearchStrategy[list[tuple[Any, ...]]]:
    row = st.tuples(*[st.one_of(st.none(), strat) for _, strat, _ in _COLUMNS.values()])
    return st.lists(row, min_size=1, max_size=40)


def _field_schema() -> tuple[T.StructType, NamespaceSchema]:
    struct = T.StructType([T.StructField(name, t) for name, (t, _, _) in _COLUMNS.items()])
    return struct, namespace_schema_from_spark(struct)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(rows=_rows(), zone=st.sampled_from(ZONES))
def test_spark_and_arrow_transforms_agree_on_random_data(spark, rows, zone):
    """Every transform of every Spark atomic type, Spark Column form vs Arrow form, row for row."""
    struct, ns_schema = _field_schema()
    fields = []
    for name, (_, _, transforms) in _COLUMNS.items():
        source_id = ns_schema.id_of(name)
        for k, text in enumerate(transforms):
            t = parse_transform(text)
            fields.append(
                PartitionField(
                    f"{name}_{k}", [source_id], t, result_type=t.result_type([ns_schema.field_by_name(name).type])
                )
            )
    for k, names in enumerate(_MULTI):
        fields.append(PartitionField(f"multi_{k}", [ns_schema.id_of(n) for n in names], "multi_bucket[8]"))
    with session_zone(spark, zone):
        df = spark.createDataFrame(
            [(i, *r) for i, r in enumerate(rows)], T.StructType([T.StructField("row", T.IntegerType()), *struct.fields])
        )
        staged = stf.with_partition_columns(df, fields, ns_schema, prefix="staged_")
        out = staged.select("*", *[stf.partition_value(f, ns_schema, df).alias(f"col_{f.field_id}") for f in fields])
        table = out.toArrow().sort_by("row")
    for f in fields:
        sources = [table.column(ns_schema.top_level_field_by_id(i).name) for i in f.source_ids]
        expected = f.apply(sources, ns_schema).to_pylist()
        for prefix in ("staged_", "col_"):
            got = table.column(f"{prefix}{f.field_id}").to_pylist()
            if got != expected:
                bad = next(i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e)
                values = [table.column(ns_schema.top_level_field_by_id(i).name)[bad].as_py() for i in f.source_ids]
                pytest.fail(
                    f"{prefix}{f.field_id} ({f.transform}) in zone {zone}: input {values!r} "
                    f"-> Spark {got[bad]!r}, Arrow {expected[bad]!r}"
                )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(
        st.one_of(
            st.none(), _TEXT, st.text(max_size=200).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))
        ),
        max_size=60,
    )
)
def test_native_string_murmur3_matches_mmh3(spark, values):
    """The staged JVM string hash (all tail lengths, unicode, empty, long) equals mmh3 on UTF-8 bytes."""
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, s string")
    got = [r.h for r in sm3.with_murmur3(df, F.col("s"), "h", T.StringType()).orderBy("i").select("h").collect()]
    assert got == [None if v is None else mmh3.hash(v.encode(), 0, signed=True) for v in values]


def test_bucket_of_int_min_hash_does_not_overflow(spark):
    """abs(-2**31) in 64 bits (SPEC-NOTES 8): bucket of a hash equal to INT_MIN."""
    row = spark.range(1).select(sm3.bucket_column(F.lit(-(2**31)).cast("int"), 7).alias("b")).first()
    assert row.b == 2**31 % 7
    assert m3.bucket(pa.array([-(2**31)], pa.int32()), 7).to_pylist() == [2**31 % 7]


def test_truncate_of_strings_counts_code_points(spark):
    df = spark.createDataFrame([("é漢字x",), ("",), ("ab",)], "s string")
    got = [r[0] for r in df.select(stf.truncate(F.col("s"), 3, T.StringType())).collect()]
    assert got == ["é漢字", "", "ab"]


def test_hour_on_a_date_is_an_error():
    from partitioning.errors import SpecError

    with pytest.raises(SpecError, match="hour accepts timestamp columns, not date"):
        stf.hour(F.col("d"), T.DateType())


# -- schemas ----------------------------------------------------------------------------------

ATOMIC = [
    T.ByteType(),
    T.ShortType(),
    T.IntegerType(),
    T.LongType(),
    T.FloatType(),
    T.DoubleType(),
    T.DecimalType(10, 2),
    T.DecimalType(38, 18),
    T.StringType(),
    T.BinaryType(),
    T.BooleanType(),
    T.DateType(),
    T.TimestampType(),
    T.TimestampNTZType(),
]


@pytest.mark.parametrize("spark_type", ATOMIC, ids=lambda t: t.simpleString())
@pytest.mark.parametrize("nullable", [True, False])
def test_every_spark_atomic_type_round_trips_through_json(spark_type, nullable):
    struct = T.StructType([T.StructField("c", spark_type, nullable)])
    text = namespace_schema_from_spark(struct).to_json()
    assert spark_schema(NamespaceSchema.from_json(text)) == struct


def test_nested_spark_schema_round_trips_with_field_ids():
    struct = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("tags", T.ArrayType(T.StringType())),
            T.StructField("attrs", T.MapType(T.StringType(), T.DoubleType())),
            T.StructField(
                "geo", T.StructType([T.StructField("lat", T.DoubleType()), T.StructField("ts", T.TimestampType())])
            ),
        ]
    )
    ns = namespace_schema_from_spark(struct)
    back = NamespaceSchema.from_json(ns.to_json())
    assert spark_schema(back) == struct
    assert back.next_field_id == ns.next_field_id == len(ns.field_ids)
    assert sorted(ns.field_ids) == list(range(len(ns.field_ids)))


def test_unsupported_spark_type_names_the_column():
    from partitioning.errors import SchemaError

    with pytest.raises(SchemaError, match=r"column 'code': Spark type char\(3\)"):
        namespace_schema_from_spark(T.StructType([T.StructField("code", T.CharType(3))]))
