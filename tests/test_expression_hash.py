"""murmur3 / murmur3_multi in ``expression`` fields hash each argument by its own type after casts (issue 11, item 6).

Oracles: ``mmh3`` over bytes built here from SPEC-NOTES 7 (little-endian ints of the
cast width, UTF-8, display strings), and the Arrow implementation
(:mod:`partitioning.spec.murmur3`) applied to the argument as DataFusion alone evaluates it.
"""

from __future__ import annotations

import datetime as dt
import decimal

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from datafusion import SessionContext
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.errors import SpecError
from partitioning.spec import murmur3 as m3
from partitioning.spec.expression import evaluate_expression, find_calls, validate_expression
from partitioning.spec.partition_spec import PartitionField
from partitioning.spec.schema import NamespaceSchema

SETTINGS = settings(max_examples=30, deadline=None, database=None)

# Arrow integer type -> DataFusion SQL spelling of the same type
INT_TYPES: dict[str, tuple[pa.DataType, str]] = {
    "Int8": (pa.int8(), "TINYINT"),
    "Int16": (pa.int16(), "SMALLINT"),
    "Int32": (pa.int32(), "INT"),
    "Int64": (pa.int64(), "BIGINT"),
    "UInt8": (pa.uint8(), "TINYINT UNSIGNED"),
    "UInt16": (pa.uint16(), "SMALLINT UNSIGNED"),
    "UInt32": (pa.uint32(), "INT UNSIGNED"),
    "UInt64": (pa.uint64(), "BIGINT UNSIGNED"),
}


def _range(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(np.dtype(t.to_pandas_dtype()))
    return int(info.min), int(info.max)


def _int_bytes(v: int, t: pa.DataType) -> bytes:
    return v.to_bytes(t.bit_width // 8, "little", signed=pa.types.is_signed_integer(t))


def _h(data: bytes) -> int:
    return int(mmh3.hash(data, 0, signed=True))


def _datafusion_eval(sql: str, arrays: list[pa.Array]) -> pa.Array:
    """``sql`` evaluated by DataFusion alone (no project UDFs) over col0..colK."""
    ctx = SessionContext()
    batch = pa.RecordBatch.from_arrays(arrays, names=[f"col{i}" for i in range(len(arrays))])
    ctx.register_record_batches("t", [[batch]])
    return ctx.sql(f"SELECT ({sql}) AS a FROM t").to_arrow_table().column("a").combine_chunks()


# -- every integer width, with casts between widths ------------------------------------------------
@pytest.mark.parametrize("source", list(INT_TYPES))
@pytest.mark.parametrize("target", list(INT_TYPES))
def test_murmur3_of_a_cast_hashes_the_cast_width(source, target):
    src_type, _ = INT_TYPES[source]
    dst_type, sql_type = INT_TYPES[target]
    lo = max(_range(src_type)[0], _range(dst_type)[0])
    hi = min(_range(src_type)[1], _range(dst_type)[1])

    @SETTINGS
    @given(values=st.lists(st.one_of(st.none(), st.sampled_from([lo, hi, 0]), st.integers(lo, hi)), max_size=20))
    def check(values):
        col = pa.array(values, src_type)
        expected = [None if v is None else _h(_int_bytes(v, dst_type)) for v in values]
        arrow = m3.murmur3(col.cast(dst_type)).to_pylist()
        assert arrow == expected
        for expression in (f"murmur3(CAST(col0 AS {sql_type}))", f"murmur3(arrow_cast(col0, '{target}'))"):
            assert evaluate_expression(expression, [col], pa.int32()).to_pylist() == expected, expression

    check()


@pytest.mark.parametrize("source", list(INT_TYPES))
def test_murmur3_of_a_column_hashes_its_own_width(source):
    t, _ = INT_TYPES[source]
    lo, hi = _range(t)
    values = [lo, hi, 0, 1, None, lo + 1, hi // 3]
    got = evaluate_expression("murmur3(col0)", [pa.array(values, t)], pa.int32()).to_pylist()
    assert got == [None if v is None else _h(_int_bytes(v, t)) for v in values]


def test_int64_cast_to_int_hashes_four_bytes():
    """The issue's case: 8 bytes were hashed for ``murmur3(CAST(col0 AS INT))`` on a long column."""
    got = evaluate_expression("murmur3(CAST(col0 AS INT))", [pa.array([1, 34, -1], pa.int64())], pa.int32())
    assert got.to_pylist() == [-68075478, -1928742653, 1982413648]  # conformance/murmur3.json, int32 entries
    assert got.to_pylist() != evaluate_expression("murmur3(col0)", [pa.array([1, 34, -1], pa.int64())], pa.int32())


# -- other argument types, against DataFusion's own evaluation of the argument ---------------------------
_STRINGS = pa.array(["Ab", None, "", "München/$=", "漢字", "hello world, long enough for blocks"])
_INTS = pa.array([1, None, -7, 0, 2**31 - 1, 123456], pa.int64())
_SMALL = pa.array([3, 4, None, -2, 0, 9], pa.int32())
_DATES = pa.array([dt.date(2024, 1, 1), None, dt.date(1969, 12, 31), dt.date(2000, 2, 29), dt.date(1, 1, 1), None])
_TS = pa.array(
    [
        dt.datetime(2025, 12, 10, 10, 30),
        None,
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2000, 1, 1),
        dt.datetime(1970, 1, 1),
        dt.datetime(2262, 1, 1),
    ],
    pa.timestamp("us", tz="UTC"),
)
_DECS = pa.array(
    [decimal.Decimal(v) if v else None for v in ("1.50", None, "-0.05", "0.00", "12.3", "99999999.99")],
    pa.decimal128(10, 2),
)
_SOURCES = [_STRINGS, _INTS, _SMALL, _DATES, _TS, _DECS]
_ARGUMENTS = [
    "lower(col0)",
    "upper(col0)",
    "concat(col0, 'x')",
    "CAST(col1 AS VARCHAR)",
    "col1 + 1",
    "col2 * 2",
    "CAST(col2 AS BIGINT)",
    "CAST(abs(col1) % 1000 AS SMALLINT UNSIGNED)",
    "col3",
    "CAST(col4 AS DATE)",
    "arrow_cast(col3, 'Date64')",
    "col4",
    "CAST(col4 AS TIMESTAMP)",
    "arrow_cast(col4, 'Timestamp(Millisecond, None)')",
    "col5",
    "CAST(col5 AS DECIMAL(20, 4))",
    "CAST(col2 AS DECIMAL(10, 2))",
    "col5 * 2",
    "col2 > 3",
    "CAST(col0 AS BYTEA)",
    "NULL",
]


@pytest.mark.parametrize("argument", _ARGUMENTS)
def test_murmur3_hashes_the_argument_as_datafusion_types_it(argument):
    arg = _datafusion_eval(argument, list(_SOURCES))
    got = evaluate_expression(f"murmur3({argument})", _SOURCES, pa.int32()).to_pylist()
    assert got == m3.murmur3(arg).to_pylist(), arg.type
    expected_bytes = m3.to_hash_bytes(arg).to_pylist()
    assert got == [None if b is None else _h(b) for b in expected_bytes]


@pytest.mark.parametrize(
    "argument,value,raw",
    [
        # hand-built bytes for each argument type (SPEC-NOTES 7), independent of the project
        ("CAST(col0 AS SMALLINT)", 300, (300).to_bytes(2, "little", signed=True)),
        ("CAST(col0 AS TINYINT UNSIGNED)", 200, b"\xc8"),
        ("CAST(col0 AS VARCHAR)", 42, b"42"),
        ("CAST(col0 AS DECIMAL(10, 2))", 5, b"5.00"),
        ("CAST(col0 AS DOUBLE)", 1, (0x3FF0_0000_0000_0000).to_bytes(8, "little")),
        ("CAST(col0 AS REAL)", 1, (0x3F80_0000).to_bytes(4, "little")),
        ("col0 > 0", 5, b"true"),
        ("arrow_cast(col0, 'Date32')", 19723, (19723).to_bytes(4, "little", signed=True)),
        ("arrow_cast(col0, 'Timestamp(Second, None)')", -1, (-1).to_bytes(8, "little", signed=True)),
        ("arrow_cast(col0, 'Time64(Microsecond)')", 37_800_500_000, b"10:30:00.500"),
    ],
)
def test_murmur3_argument_bytes_by_hand(argument, value, raw):
    got = evaluate_expression(f"murmur3({argument})", [pa.array([value, None], pa.int64())], pa.int32())
    assert got.to_pylist() == [_h(raw), None]


def test_murmur3_multi_hashes_each_argument_by_its_own_type():
    ids = pa.array([7, None, 300, None], pa.int64())
    names = pa.array(["ab", "x", None, None])
    got = evaluate_expression("murmur3_multi(CAST(col0 AS SMALLINT), upper(col1))", [ids, names], pa.int32())
    assert got.to_pylist() == [_h(b"\x07\x00AB"), _h(b"X"), _h(b"\x2c\x01"), None]
    small = pa.array([1, 2, None, None], pa.int32())
    got = evaluate_expression("murmur3_multi(col0, CAST(col1 AS BIGINT))", [names, small], pa.int32())
    eight = [(1).to_bytes(8, "little"), (2).to_bytes(8, "little")]
    assert got.to_pylist() == [_h(b"ab" + eight[0]), _h(b"x" + eight[1]), None, None]


def test_nested_and_repeated_hash_calls():
    col = pa.array([1, -1, None], pa.int64())
    inner = [None if v is None else _h(_int_bytes(v, pa.int32())) for v in col.to_pylist()]
    nested = evaluate_expression("murmur3(murmur3(CAST(col0 AS INT)))", [col], pa.int32()).to_pylist()
    assert nested == [None if h is None else _h(_int_bytes(h, pa.int32())) for h in inner]
    twice = evaluate_expression(
        "murmur3(CAST(col0 AS INT)) - MURMUR3(CAST(col0 AS BIGINT))", [col], pa.int64()
    ).to_pylist()
    longs = [None if v is None else _h(_int_bytes(v, pa.int64())) for v in col.to_pylist()]
    assert twice == [None if a is None else a - b for a, b in zip(inner, longs, strict=True)]


def test_hash_call_text_in_strings_and_comments_is_not_code():
    col = pa.array([1], pa.int32())
    sql = "concat('murmur3(x) ''q''', CAST(murmur3(col0) AS VARCHAR)) -- murmur3(col9)"
    one = _h((1).to_bytes(4, "little"))
    assert evaluate_expression(sql, [col], pa.string()).to_pylist() == [f"murmur3(x) 'q'{one}"]


def test_find_calls_spans():
    sql = "murmur3(f(a, b)) + \"murmur3_multi\"(x, (y)) + t.murmur3(z) + murmur3() + 'murmur3(s)'"
    sql += " /* murmur3(c) */ || E'it\\'s murmur3(e)' -- murmur3(d)"
    calls = find_calls(sql, ("murmur3", "murmur3_multi"))
    assert [(c.name, [sql[a:b] for a, b in c.args]) for c in calls] == [
        ("murmur3", ["f(a, b)"]),
        ("murmur3_multi", ["x", " (y)"]),
        ("murmur3", []),
    ]


# -- spec creation ------------------------------------------------------------------------------
@pytest.fixture
def schema() -> NamespaceSchema:
    return NamespaceSchema.from_arrow(pa.schema([("id", pa.int64()), ("name", pa.string()), ("h", pa.float16())]))


_IDS = [5, None, -3]
_NAMES = ["Ab", "c", None]


def _b8(raw: bytes | None) -> int | None:
    return None if raw is None else abs(_h(raw)) % 8


@pytest.mark.parametrize(
    "expression,source_ids,expected",
    [
        (
            "abs(murmur3(CAST(col0 AS INT))) % 8",
            [0],
            [_b8(None if v is None else _int_bytes(v, pa.int32())) for v in _IDS],
        ),
        ("abs(murmur3(col0 + 1)) % 8", [0], [_b8(None if v is None else _int_bytes(v + 1, pa.int64())) for v in _IDS]),
        ("abs(murmur3(lower(col0))) % 8", [1], [_b8(b"ab"), _b8(b"c"), None]),
        (
            "abs(murmur3_multi(col1, CAST(col0 AS BIGINT))) % 8",
            [0, 1],
            [_b8(b"Ab" + _int_bytes(5, pa.int64())), _b8(b"c"), _b8(_int_bytes(-3, pa.int64()))],
        ),
    ],
)
def test_valid_expressions_are_accepted_at_spec_creation(schema, expression, source_ids, expected):
    field = PartitionField("e", source_ids, expression=expression, result_type="int32")
    field.validate(schema)
    columns = [pa.array(_IDS, pa.int64()), pa.array(_NAMES)]
    assert field.apply([columns[i] for i in source_ids], schema).to_pylist() == expected


@pytest.mark.parametrize(
    "expression,needles",
    [
        ("murmur3(col0)", ["halffloat", "refused", "hashable types"]),
        ("murmur3(arrow_cast(1, 'Float16'))", ["halffloat"]),
        ("murmur3(arrow_cast(CAST(1 AS VARCHAR), 'BinaryView'))", ["binary_view"]),
        ("murmur3(arrow_cast(CAST(1 AS DECIMAL(5, 0)), 'Decimal128(5, -2)'))", ["decimal128(5, -2)"]),
        ("murmur3(make_array(1, 2))", ["list", "no hash rule"]),
        ("murmur3()", ["murmur3 takes exactly one argument, got 0"]),
        ("murmur3(col0, col0)", ["murmur3 takes exactly one argument, got 2"]),
        ("murmur3_multi()", ["murmur3_multi needs at least one argument"]),
        ("murmur3(nosuchfn(col0))", ["nosuchfn"]),
        ("murmur3(col0 + random())", ["random", "deterministic"]),
        ("murmur3_multi(col0, now())", ["now", "deterministic"]),
    ],
)
def test_bad_hash_calls_are_refused_with_one_line(expression, needles):
    with pytest.raises(SpecError) as info:
        validate_expression(expression, [pa.float16()], pa.int32())
    text = str(info.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text


def test_spark_expression_field_hashes_the_cast_width(spark):
    """The Spark side (``pipelines.columns.transforms.partition_value``) evaluates the same bound expression."""
    from pipelines.columns import transforms as stf

    ns_schema = NamespaceSchema.from_arrow(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    field = PartitionField(
        "e", [0, 1], expression="abs(murmur3_multi(CAST(col0 AS INT), upper(col1))) % 1024", result_type="int32"
    )
    field.validate(ns_schema)
    rows = [(0, 5, "ab"), (1, None, "x"), (2, -3, None), (3, None, None)]
    df = spark.createDataFrame(rows, "row int, id long, name string")
    got = [r.p for r in df.select("row", stf.partition_value(field, ns_schema, df).alias("p")).orderBy("row").collect()]
    four = [(5).to_bytes(4, "little", signed=True), (-3).to_bytes(4, "little", signed=True)]
    assert got == [abs(_h(four[0] + b"AB")) % 1024, abs(_h(b"X")) % 1024, abs(_h(four[1])) % 1024, None]
