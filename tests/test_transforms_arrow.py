"""Arrow transforms: golden vectors (conformance/transforms.json), NULL, UTC, scalar/vector consistency.

SPEC-NOTES 9 (time parts in UTC), 10 (truncate), 11 (identity), 12 (NULL).
Expected values come from the golden file, from hand computation, or from the
test-local references below, written from the spec's derived expressions.
"""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from conftest import load_conformance, vector_array, vector_type, vector_value
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.errors import SpecError
from partitioning.spec.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    MultiBucketTransform,
    Transform,
    TruncateTransform,
    YearTransform,
    parse_transform,
    transform_from_json,
)

_VECTORS = load_conformance("transforms.json")
PROPERTY_SETTINGS = settings(max_examples=50, deadline=None, database=None)
_TRANSFORM_KEYS = ("year", "month", "day", "hour", "truncate")


def _golden_params() -> list:
    params = []
    for key in _TRANSFORM_KEYS:
        for e in _VECTORS[key]:
            name = key if key != "truncate" else f"truncate[{e['width']}]"
            params.append(pytest.param(name, e, id=f"{name}-{e['type']}-{e['value']}"))
    return params


# ------------------------------------------------------------------------------------------
# Golden vectors
# ------------------------------------------------------------------------------------------
def test_golden_file_has_every_transform_key():
    assert all(len(_VECTORS[k]) > 0 for k in _TRANSFORM_KEYS)


@pytest.mark.parametrize("name,entry", _golden_params())
def test_golden_vectorized(name, entry):
    transform = parse_transform(name)
    arr = vector_array(entry["type"], entry["value"])
    out = transform.apply(arr)
    assert out.to_pylist() == [entry["result"]]
    if name in ("year", "month", "day", "hour"):
        assert out.type == pa.int32()
    else:
        assert out.type == vector_type(entry["type"])


@pytest.mark.parametrize("name,entry", _golden_params())
def test_golden_scalar(name, entry):
    transform = parse_transform(name)
    value = vector_value(entry["type"], entry["value"])
    assert transform.apply_scalar([value], [vector_type(entry["type"])]) == entry["result"]


# ------------------------------------------------------------------------------------------
# NULL in -> NULL out, for every transform and source type it accepts (SPEC-NOTES 12)
# ------------------------------------------------------------------------------------------
_NULL_CASES = [
    ("identity", pa.int64()),
    ("identity", pa.string()),
    ("identity", pa.date32()),
    ("identity", pa.timestamp("us", tz="UTC")),
    ("identity", pa.bool_()),
    ("year", pa.date32()),
    ("year", pa.timestamp("us", tz="UTC")),
    ("year", pa.timestamp("us")),
    ("month", pa.date32()),
    ("month", pa.timestamp("us", tz="UTC")),
    ("day", pa.date32()),
    ("day", pa.timestamp("us")),
    ("hour", pa.timestamp("us", tz="UTC")),
    ("hour", pa.timestamp("us")),
    ("bucket[16]", pa.int32()),
    ("bucket[16]", pa.int64()),
    ("bucket[16]", pa.string()),
    ("bucket[16]", pa.date32()),
    ("bucket[16]", pa.decimal128(10, 2)),
    ("bucket[16]", pa.bool_()),
    ("bucket[16]", pa.binary()),
    ("multi_bucket[8]", pa.string()),
    ("multi_bucket[8]", pa.int64()),
    ("truncate[4]", pa.int32()),
    ("truncate[4]", pa.int64()),
    ("truncate[4]", pa.string()),
    ("truncate[4]", pa.binary()),
    ("truncate[4]", pa.decimal128(10, 2)),
    ("truncate[4]", pa.decimal128(38, 4)),
]


@pytest.mark.parametrize("name,t", _NULL_CASES, ids=[f"{n}-{t}" for n, t in _NULL_CASES])
def test_null_in_null_out(name, t):
    transform = parse_transform(name)
    arr = pa.array([None], type=t)
    if transform.multi_source:
        assert transform.apply(arr, pa.array([None], pa.int32())).to_pylist() == [None]
        assert transform.apply_scalar([None, None], [t, pa.int32()]) is None
    else:
        assert transform.apply(arr).to_pylist() == [None]
        assert transform.apply_scalar([None], [t]) is None


def test_every_transform_kind_has_a_null_case():
    kinds = {parse_transform(n).name for n, _ in _NULL_CASES}
    assert kinds == {"identity", "year", "month", "day", "hour", "bucket", "multi_bucket", "truncate"}


def test_nulls_between_values_stay_in_place():
    arr = pa.array([dt.date(2025, 12, 10), None, dt.date(1969, 12, 31)], pa.date32())
    assert YearTransform().apply(arr).to_pylist() == [2025, None, 1969]
    ints = pa.array([None, -11, None, 17], pa.int64())
    assert TruncateTransform(10).apply(ints).to_pylist() == [None, -10, None, 10]


# ------------------------------------------------------------------------------------------
# Time parts are UTC (SPEC-NOTES 9)
# ------------------------------------------------------------------------------------------
def test_time_parts_use_utc_not_the_column_zone():
    instant = dt.datetime(2025, 12, 10, 2, 30, tzinfo=dt.UTC)  # 2025-12-09 21:30 in New York
    arr = pa.array([instant], type=pa.timestamp("us", tz="America/New_York"))
    assert DayTransform().apply(arr).to_pylist() == [10]
    assert HourTransform().apply(arr).to_pylist() == [2]
    assert MonthTransform().apply(arr).to_pylist() == [12]
    assert YearTransform().apply(arr).to_pylist() == [2025]
    t = arr.type
    local = arr[0].as_py()  # an aware datetime in America/New_York
    assert local.hour == 21  # sanity: the local wall time differs
    assert DayTransform().apply_scalar([local], [t]) == 10
    assert HourTransform().apply_scalar([local], [t]) == 2


def test_time_parts_new_years_eve_in_a_zone_ahead_of_utc():
    # 2025-01-01T00:30+05:30 is 2024-12-31T19:00Z
    instant = dt.datetime(2025, 1, 1, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    arr = pa.array([instant], type=pa.timestamp("us", tz="Asia/Kolkata"))
    for transform, expected in (
        (YearTransform(), 2024),
        (MonthTransform(), 12),
        (DayTransform(), 31),
        (HourTransform(), 19),
    ):
        assert transform.apply(arr).to_pylist() == [expected]
        assert transform.apply_scalar([instant], [arr.type]) == expected


@pytest.mark.parametrize(
    "t,raw,expected",
    [
        # -1 in each unit is the last instant of 1969-12-31 (UTC)
        (pa.timestamp("s"), -1, (1969, 12, 31, 23)),
        (pa.timestamp("ms", tz="UTC"), -1, (1969, 12, 31, 23)),
        (pa.timestamp("us"), -1, (1969, 12, 31, 23)),
        (pa.timestamp("ns", tz="UTC"), -1, (1969, 12, 31, 23)),
        # -86_400 s = 1969-12-31T00:00Z; -86_401 s = 1969-12-30T23:59:59Z
        (pa.timestamp("s", tz="UTC"), -86_400, (1969, 12, 31, 0)),
        (pa.timestamp("s"), -86_401, (1969, 12, 30, 23)),
        # 1900-03-01T13:00Z = -2203844400 s (hand computed: 25508 days before the epoch, +13 h)
        (pa.timestamp("s", tz="UTC"), -25508 * 86_400 + 13 * 3600, (1900, 3, 1, 13)),
    ],
)
def test_pre_1970_timestamps(t, raw, expected):
    arr = pa.array([raw], type=pa.int64()).cast(t)
    year, month, day, hour = expected
    for transform, value in (
        (YearTransform(), year),
        (MonthTransform(), month),
        (DayTransform(), day),
        (HourTransform(), hour),
    ):
        assert transform.apply(arr).to_pylist() == [value], transform
        assert transform.apply_scalar([raw], [t]) == value, transform
        assert transform.apply_scalar([arr[0].as_py()], [t]) == value, transform


@pytest.mark.parametrize(
    "days,expected",
    [(-1, (1969, 12, 31)), (-365, (1969, 1, 1)), (-25508, (1900, 3, 1)), (-719162, (1, 1, 1)), (0, (1970, 1, 1))],
)
def test_pre_1970_dates(days, expected):
    arr = pa.array([days], pa.int32()).cast(pa.date32())
    for transform, value in zip((YearTransform(), MonthTransform(), DayTransform()), expected, strict=True):
        assert transform.apply(arr).to_pylist() == [value]
        assert transform.apply_scalar([arr[0].as_py()], [pa.date32()]) == value
        assert transform.apply_scalar([days], [pa.date32()]) == value


def test_date64_time_parts():
    arr = pa.array([dt.date(1969, 12, 31), dt.date(2024, 2, 29)], pa.date64())
    assert YearTransform().apply(arr).to_pylist() == [1969, 2024]
    assert MonthTransform().apply(arr).to_pylist() == [12, 2]
    assert DayTransform().apply(arr).to_pylist() == [31, 29]


# ------------------------------------------------------------------------------------------
# truncate details (SPEC-NOTES 10)
# ------------------------------------------------------------------------------------------
def _ref_truncate_int(v: int, w: int) -> int:
    """v - (v % w) with % truncating toward zero (SQL / DataFusion)."""
    rem = abs(v) % w
    return v - rem if v >= 0 else v + rem


def _ref_truncate_decimal(v: decimal.Decimal, w: int, scale: int) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 100  # exact: 38 digits must not be rounded to the default 28
        unscaled = int(v.scaleb(scale))
        out = _ref_truncate_int(unscaled, w * 10**scale)
        return decimal.Decimal(out).scaleb(-scale)


@pytest.mark.parametrize(
    "t,v,w,expected",
    [
        (pa.int8(), -128, 3, -126),
        (pa.int8(), 127, 10, 120),
        (pa.int8(), -128, 10, -120),
        (pa.int16(), -32768, 1000, -32000),
        (pa.int32(), -(2**31), 10, -2147483640),
        (pa.int64(), -(2**63), 10, -9223372036854775800),
        (pa.int64(), 2**63 - 1, 10, 9223372036854775800),
        (pa.uint8(), 255, 10, 250),
        (pa.uint64(), 2**64 - 1, 10, 18446744073709551610),
        (pa.int32(), 5, 10**12, 0),  # width wider than the type
        (pa.int8(), -128, 200, 0),  # -128 % 200 = -128
    ],
)
def test_truncate_int_edges(t, v, w, expected):
    assert expected == _ref_truncate_int(v, w)
    out = TruncateTransform(w).apply(pa.array([v], t))
    assert out.type == t
    assert out.to_pylist() == [expected]
    assert TruncateTransform(w).apply_scalar([v], [t]) == expected


@pytest.mark.parametrize(
    "t,bits",
    [(pa.int8(), 8), (pa.int16(), 16), (pa.int32(), 32), (pa.int64(), 64)],
    ids=["int8", "int16", "int32", "int64"],
)
def test_truncate_int_min_with_width_equal_to_its_magnitude(t, bits):
    """truncate(MIN, 2**(bits-1)): MIN % W == 0 (truncating), so the value is kept unchanged."""
    v = -(2 ** (bits - 1))
    w = 2 ** (bits - 1)
    assert TruncateTransform(w).apply_scalar([v], [t]) == v
    assert TruncateTransform(w).apply(pa.array([v], t)).to_pylist() == [v]


@pytest.mark.parametrize(
    "t,v,w,expected",
    [
        (pa.decimal128(10, 2), "-0.05", 1, "0.00"),
        (pa.decimal128(10, 2), "-11.50", 10, "-10.00"),
        (pa.decimal128(10, 2), "12345678.91", 7, "12345676.00"),
        (pa.decimal128(10, 2), "1.50", 1, "1.00"),
        (pa.decimal128(38, 4), "-1234567890123456789012345678.9012", 7, "-1234567890123456789012345674.0000"),
        (
            pa.decimal128(38, 4),
            "9999999999999999999999999999999999.9999",
            10,
            "9999999999999999999999999999999990.0000",
        ),
    ],
)
def test_truncate_decimal_edges(t, v, w, expected):
    value = decimal.Decimal(v)
    assert _ref_truncate_decimal(value, w, t.scale) == decimal.Decimal(expected)
    out = TruncateTransform(w).apply(pa.array([value], t))
    assert out.type == t
    assert out.to_pylist() == [decimal.Decimal(expected)]
    assert TruncateTransform(w).apply_scalar([value], [t]) == decimal.Decimal(expected)


def test_truncate_strings_count_code_points():
    arr = pa.array(["é漢字x", "ab", "", "🎉🎉🎉🎉", None], pa.string())
    assert TruncateTransform(3).apply(arr).to_pylist() == ["é漢字", "ab", "", "🎉🎉🎉", None]
    large = arr.cast(pa.large_string())
    out = TruncateTransform(3).apply(large)
    assert out.type == pa.large_string()
    assert out.to_pylist() == ["é漢字", "ab", "", "🎉🎉🎉", None]


def test_truncate_binary_counts_bytes():
    arr = pa.array([b"abcdef", b"", b"\x00\xff", None], pa.binary())
    assert TruncateTransform(3).apply(arr).to_pylist() == [b"abc", b"", b"\x00\xff", None]
    assert TruncateTransform(3).apply_scalar([b"abcdef"], [pa.binary()]) == b"abc"


def test_identity_is_unchanged():
    arr = pa.array([1, None, -5], pa.int16())
    out = IdentityTransform().apply(arr)
    assert out.type == pa.int16()
    assert out.to_pylist() == [1, None, -5]
    assert IdentityTransform().apply_scalar(["x"], [pa.string()]) == "x"


# ------------------------------------------------------------------------------------------
# Hypothesis: vector apply == [apply_scalar] == reference
# ------------------------------------------------------------------------------------------
_TS_MIN = dt.datetime(1900, 1, 1)
_TS_MAX = dt.datetime(2200, 1, 1)
_OFFSETS = st.builds(
    dt.timezone,
    st.timedeltas(min_value=dt.timedelta(hours=-14), max_value=dt.timedelta(hours=14)).map(
        lambda d: dt.timedelta(minutes=d // dt.timedelta(minutes=1))
    ),
)
_TIME_CASES = {
    "date32": (pa.date32(), st.dates()),
    "timestamp_us_naive": (pa.timestamp("us"), st.datetimes(min_value=_TS_MIN, max_value=_TS_MAX)),
    "timestamp_us_utc": (
        pa.timestamp("us", tz="UTC"),
        st.datetimes(min_value=_TS_MIN, max_value=_TS_MAX, timezones=st.one_of(st.just(dt.UTC), _OFFSETS)),
    ),
}


def _ref_time_part(name: str, v):
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        v = v.astimezone(dt.UTC)
    return getattr(v, name)


@pytest.mark.parametrize("case", list(_TIME_CASES))
@pytest.mark.parametrize("name", ["year", "month", "day", "hour"])
def test_time_transforms_vector_equals_scalar(name, case):
    t, values = _TIME_CASES[case]
    transform = parse_transform(name)
    if not transform.accepts(t):
        assert name == "hour" and pa.types.is_date(t)
        return

    @PROPERTY_SETTINGS
    @given(st.lists(st.one_of(st.none(), values), max_size=20))
    def check(vals):
        arr = pa.array(vals, type=t)
        expected = [None if v is None else _ref_time_part(name, v) for v in vals]
        out = transform.apply(arr)
        assert out.type == pa.int32()
        assert out.to_pylist() == expected
        assert [transform.apply_scalar([v], [t]) for v in vals] == expected
        # sliced input keeps its offset
        assert transform.apply(arr.slice(1)).to_pylist() == expected[1:]

    check()


def test_hour_is_rejected_on_dates():
    assert not HourTransform().accepts(pa.date32())
    assert HourTransform().accepts(pa.timestamp("us"))
    with pytest.raises(SpecError):
        HourTransform().check_sources([pa.field("d", pa.date32())])


_INT_TYPES = {
    "int8": (pa.int8(), 8),
    "int16": (pa.int16(), 16),
    "int32": (pa.int32(), 32),
    "int64": (pa.int64(), 64),
}


@pytest.mark.parametrize("name", list(_INT_TYPES))
def test_truncate_ints_vector_equals_scalar(name):
    t, bits = _INT_TYPES[name]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    ints = st.one_of(st.sampled_from([lo, hi, 0, -1, 1, lo + 1]), st.integers(lo, hi))

    @PROPERTY_SETTINGS
    @given(
        vals=st.lists(st.one_of(st.none(), ints), max_size=20),
        w=st.one_of(st.integers(1, 20), st.integers(1, 2**bits)),
    )
    def check(vals, w):
        arr = pa.array(vals, type=t)
        expected = [None if v is None else _ref_truncate_int(v, w) for v in vals]
        out = TruncateTransform(w).apply(arr)
        assert out.type == t
        assert out.to_pylist() == expected
        assert [TruncateTransform(w).apply_scalar([v], [t]) for v in vals] == expected
        assert TruncateTransform(w).apply(arr.slice(1)).to_pylist() == expected[1:]

    check()


_EXACT = decimal.Context(prec=100)
_DECIMAL_CASES = {
    "decimal128_10_2": (pa.decimal128(10, 2), decimal.Decimal("99999999.99"), 2),
    "decimal128_38_4": (pa.decimal128(38, 4), decimal.Decimal("9999999999999999999999999999999999.9999"), 4),
}


@pytest.mark.parametrize("name", list(_DECIMAL_CASES))
def test_truncate_decimals_vector_equals_scalar(name):
    t, bound, places = _DECIMAL_CASES[name]
    # built from the unscaled integer: exact, unlike st.decimals near 38 digits (28-digit context)
    max_unscaled = int(bound.scaleb(places, context=_EXACT))
    unscaled = st.one_of(
        st.sampled_from([max_unscaled, -max_unscaled, 0, 1, -1]), st.integers(-max_unscaled, max_unscaled)
    )
    decs = unscaled.map(lambda u: decimal.Decimal(u).scaleb(-places, context=_EXACT))

    @PROPERTY_SETTINGS
    @given(
        vals=st.lists(st.one_of(st.none(), decs), max_size=15),
        w=st.one_of(st.integers(1, 100), st.integers(1, 10**40)),
    )
    def check(vals, w):
        arr = pa.array(vals, type=t)
        py = arr.to_pylist()
        expected = [None if v is None else _ref_truncate_decimal(v, w, t.scale) for v in py]
        out = TruncateTransform(w).apply(arr)
        assert out.type == t
        assert out.to_pylist() == expected
        assert [TruncateTransform(w).apply_scalar([v], [t]) for v in py] == expected
        assert TruncateTransform(w).apply(arr.slice(1)).to_pylist() == expected[1:]

    check()


@pytest.mark.parametrize("t", [pa.string(), pa.large_string()], ids=["utf8", "large_utf8"])
def test_truncate_strings_vector_equals_scalar(t):
    texts = st.one_of(st.just(""), st.text(max_size=30), st.sampled_from(["é漢字x", "🎉a🎉b", "München/$="]))

    @PROPERTY_SETTINGS
    @given(vals=st.lists(st.one_of(st.none(), texts), max_size=20), w=st.integers(1, 40))
    def check(vals, w):
        arr = pa.array(vals, type=t)
        expected = [None if v is None else v[:w] for v in vals]
        assert TruncateTransform(w).apply(arr).to_pylist() == expected
        assert [TruncateTransform(w).apply_scalar([v], [t]) for v in vals] == expected
        assert TruncateTransform(w).apply(arr.slice(1)).to_pylist() == expected[1:]

    check()


# ------------------------------------------------------------------------------------------
# parse / print / JSON
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["identity", "year", "month", "day", "hour", "bucket[16]", "multi_bucket[8]", "truncate[4]"]
)
def test_parse_print_round_trip(text):
    transform = parse_transform(text)
    assert isinstance(transform, Transform)
    assert str(transform) == text
    assert parse_transform(str(transform)) == transform


def test_parse_returns_the_right_classes_and_parameters():
    assert parse_transform("bucket[16]") == BucketTransform(16)
    assert parse_transform("multi_bucket[8]") == MultiBucketTransform(8)
    assert parse_transform("truncate[4]") == TruncateTransform(4)
    assert parse_transform("year") == YearTransform()
    assert parse_transform(BucketTransform(3)) == BucketTransform(3)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("bucket", "'bucket' needs a parameter"),
        ("bucket[0]", "num_buckets must be an integer >= 1, got 0"),
        ("truncate[-1]", "width must be an integer >= 1, got -1"),
        ("nope", "unknown transform 'nope'"),
        ("year[3]", "'year' takes no parameter"),
        ("", "cannot parse transform ''"),
        ("bucket[x]", "cannot parse transform 'bucket[x]'"),
        ("truncate[0]", "width must be an integer >= 1, got 0"),
    ],
)
def test_parse_rejects_bad_strings(text, needle):
    with pytest.raises(SpecError) as info:
        parse_transform(text)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "\n" not in message
    assert needle in message


@pytest.mark.parametrize(
    "transform,expected",
    [
        (IdentityTransform(), {"type": "identity"}),
        (YearTransform(), {"type": "year"}),
        (MonthTransform(), {"type": "month"}),
        (DayTransform(), {"type": "day"}),
        (HourTransform(), {"type": "hour"}),
        (BucketTransform(16), {"type": "bucket", "num_buckets": 16}),
        (MultiBucketTransform(8), {"type": "multi_bucket", "num_buckets": 8}),
        (TruncateTransform(4), {"type": "truncate", "width": 4}),
    ],
    ids=str,
)
def test_transform_json_round_trip(transform, expected):
    assert transform.to_json() == expected
    assert transform_from_json(expected) == transform
    assert transform_from_json(transform.to_json()) == transform


@pytest.mark.parametrize(
    "d",
    [
        {"type": "bucket"},
        {"type": "bucket", "num_buckets": 0},
        {"type": "truncate", "width": -1},
        {"type": "nope"},
        {"type": "year", "width": 3},
    ],
)
def test_transform_from_json_rejects_bad_objects(d):
    with pytest.raises(SpecError):
        transform_from_json(d)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("year", "date_part('year', col0)"),
        ("month", "date_part('month', col0)"),
        ("day", "date_part('day', col0)"),
        ("hour", "date_part('hour', col0)"),
        ("bucket[16]", "abs(murmur3(col0)) % 16"),
        ("identity", "col0"),
    ],
)
def test_derived_expressions_match_the_spec_table(text, expected):
    assert parse_transform(text).derived_expression(1) == expected


def test_multi_bucket_derived_expression():
    assert MultiBucketTransform(8).derived_expression(3) == "abs(murmur3_multi(col0, col1, col2)) % 8"
