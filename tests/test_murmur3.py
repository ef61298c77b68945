"""murmur3 / bucket: golden vectors (conformance/murmur3.json), mmh3 properties, SPEC-NOTES 7 and 8.

Expected values come from the golden file, from ``mmh3`` over bytes built by the
test-local reference encoder :func:`ref_bytes` (written from SPEC-NOTES 7), or from
hand computation.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import mmh3
import pyarrow as pa
import pytest
from conftest import load_conformance, vector_array, vector_type, vector_value
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.errors import SpecError
from partitioning.spec.murmur3 import bucket, murmur3, murmur3_multi, to_hash_bytes
from partitioning.spec.scalar_hash import scalar_hash_bytes
from partitioning.spec.transforms import BucketTransform, MultiBucketTransform

_VECTORS = load_conformance("murmur3.json")
PROPERTY_SETTINGS = settings(max_examples=50, deadline=None, database=None)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


def _single_params() -> list:
    return [pytest.param(e, id=f"{e['type']}-{e['value']}") for e in _VECTORS["single"]]


def _multi_params() -> list:
    params = []
    for e in _VECTORS["multi"]:
        label = "+".join(f"{c['type']}-{c['value']}" for c in e["columns"])
        params.append(pytest.param(e, id=label))
    return params


# ------------------------------------------------------------------------------------------
# Reference byte encoder, written from SPEC-NOTES 7 (independent of partitioning.*)
# ------------------------------------------------------------------------------------------
def ref_bytes(value, t: pa.DataType) -> bytes:
    if pa.types.is_integer(t):
        return int(value).to_bytes(t.bit_width // 8, "little", signed=pa.types.is_signed_integer(t))
    if pa.types.is_float32(t):
        return struct.pack("<f", value)
    if pa.types.is_float64(t):
        return struct.pack("<d", value)
    if pa.types.is_date32(t):
        return (value - _EPOCH_DATE).days.to_bytes(4, "little", signed=True)
    if pa.types.is_timestamp(t):
        assert t.unit == "us"
        delta = (value.astimezone(dt.UTC) - _EPOCH_UTC) if value.tzinfo is not None else (value - _EPOCH)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros.to_bytes(8, "little", signed=True)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return value.encode("utf-8")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes(value)
    if pa.types.is_boolean(t):
        return b"true" if value else b"false"
    if pa.types.is_decimal(t):
        q = decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-t.scale))
        return format(q, "f").encode()
    raise AssertionError(f"no reference encoding for {t}")


def ref_hash(value, t: pa.DataType) -> int | None:
    return None if value is None else mmh3.hash(ref_bytes(value, t), 0, signed=True)


def ref_multi(values, types) -> int | None:
    present = [ref_bytes(v, t) for v, t in zip(values, types, strict=True) if v is not None]
    return mmh3.hash(b"".join(present), 0, signed=True) if present else None


def ref_bucket(h: int | None, n: int) -> int | None:
    return None if h is None else abs(h) % n


# ------------------------------------------------------------------------------------------
# Golden vectors: single column
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", _single_params())
def test_golden_murmur3_vectorized(entry):
    arr = vector_array(entry["type"], entry["value"])
    assert murmur3(arr).to_pylist() == [entry["murmur3"]]
    assert murmur3(arr).type == pa.int32()


@pytest.mark.parametrize("entry", _single_params())
def test_golden_hash_bytes_vectorized(entry):
    arr = vector_array(entry["type"], entry["value"])
    expected = None if entry["bytes_hex"] is None else bytes.fromhex(entry["bytes_hex"])
    assert to_hash_bytes(arr).to_pylist() == [expected]


@pytest.mark.parametrize("entry", _single_params())
def test_golden_bucket_vectorized(entry):
    arr = vector_array(entry["type"], entry["value"])
    hashes = murmur3(arr)
    for n, expected in entry["bucket"].items():
        got = bucket(hashes, int(n))
        assert got.type == pa.int32()
        assert got.to_pylist() == [expected], f"N={n}"
        assert BucketTransform(int(n)).apply(arr).to_pylist() == [expected], f"N={n}"


@pytest.mark.parametrize("entry", _single_params())
def test_golden_bucket_scalar(entry):
    value = vector_value(entry["type"], entry["value"])
    t = vector_type(entry["type"])
    for n, expected in entry["bucket"].items():
        assert BucketTransform(int(n)).apply_scalar([value], [t]) == expected, f"N={n}"


@pytest.mark.parametrize("entry", _single_params())
def test_golden_hash_bytes_scalar(entry):
    if entry["value"] is None:
        assert entry["bytes_hex"] is None
        return
    value = vector_value(entry["type"], entry["value"])
    t = vector_type(entry["type"])
    assert scalar_hash_bytes(value, t).hex() == entry["bytes_hex"]
    # the golden file agrees with mmh3 over its own bytes
    assert mmh3.hash(bytes.fromhex(entry["bytes_hex"]), 0, signed=True) == entry["murmur3"]


def test_golden_file_covers_the_spec_notes_types():
    types = {e["type"] for e in _VECTORS["single"]}
    assert {"int32", "int64", "utf8", "date32", "binary_hex", "bool", "decimal128(10, 2)"} <= types
    assert any(e["value"] is None for e in _VECTORS["single"])


def test_timezone_is_ignored_when_hashing_timestamps():
    """SPEC-NOTES 7: the raw int64 in its unit is hashed; the zone does not matter."""
    entry = next(e for e in _VECTORS["single"] if e["type"] == "timestamp[us, tz=UTC]")
    instant = vector_value(entry["type"], entry["value"])
    for tz in ("UTC", "America/New_York", "Asia/Kolkata"):
        arr = pa.array([instant], type=pa.timestamp("us", tz=tz))
        assert murmur3(arr).to_pylist() == [entry["murmur3"]], tz
    naive = pa.array([instant.replace(tzinfo=None)], type=pa.timestamp("us"))
    assert murmur3(naive).to_pylist() == [entry["murmur3"]]


# ------------------------------------------------------------------------------------------
# Golden vectors: multi column
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", _multi_params())
def test_golden_murmur3_multi(entry):
    arrays = [vector_array(c["type"], c["value"]) for c in entry["columns"]]
    assert murmur3_multi(*arrays).to_pylist() == [entry["murmur3"]]
    if entry["bytes_hex"] is not None:
        assert mmh3.hash(bytes.fromhex(entry["bytes_hex"]), 0, signed=True) == entry["murmur3"]


@pytest.mark.parametrize("entry", _multi_params())
def test_golden_multi_bucket(entry):
    arrays = [vector_array(c["type"], c["value"]) for c in entry["columns"]]
    values = [vector_value(c["type"], c["value"]) for c in entry["columns"]]
    types = [vector_type(c["type"]) for c in entry["columns"]]
    for n, expected in entry["bucket"].items():
        transform = MultiBucketTransform(int(n))
        out = transform.apply(*arrays)
        assert out.type == pa.int32()
        assert out.to_pylist() == [expected], f"N={n}"
        assert transform.apply_scalar(values, types) == expected, f"N={n}"


def test_multi_with_several_rows_and_mixed_nulls():
    a = pa.array(["ab", None, "x", None], pa.string())
    b = pa.array(["12", "x", None, None], pa.string())
    # hand-built from SPEC-NOTES 7: concatenate the non-null arguments, hash once
    expected = [
        mmh3.hash(b"ab12", 0, signed=True),
        mmh3.hash(b"x", 0, signed=True),
        mmh3.hash(b"x", 0, signed=True),
        None,
    ]
    assert murmur3_multi(a, b).to_pylist() == expected


def test_multi_needs_a_column():
    with pytest.raises(SpecError):
        murmur3_multi()


# ------------------------------------------------------------------------------------------
# bucket arithmetic (SPEC-NOTES 8)
# ------------------------------------------------------------------------------------------
def test_bucket_of_int32_min_does_not_overflow():
    hashes = pa.array([-(2**31), 2**31 - 1, -1, 0, None], pa.int32())
    assert bucket(hashes, 7).to_pylist() == [2147483648 % 7, 2147483647 % 7, 1, 0, None]
    assert bucket(hashes, 7).to_pylist()[0] == 2
    assert bucket(hashes, 2**31 - 1).to_pylist() == [1, 0, 1, 0, None]


def test_bucket_result_is_in_range():
    hashes = pa.array([-(2**31), -(2**31) + 1, -17, 17, 2**31 - 1], pa.int32())
    for n in (1, 2, 3, 16, 1024, 2**31 - 1):
        out = bucket(hashes, n).to_pylist()
        assert out == [abs(h) % n for h in hashes.to_pylist()]
        assert all(0 <= v < n for v in out)


@pytest.mark.parametrize("n", [0, -1, -16])
def test_bucket_rejects_num_buckets_below_one(n):
    with pytest.raises(SpecError) as info:
        bucket(pa.array([1], pa.int32()), n)
    assert isinstance(info.value, ValueError)
    assert "num_buckets" in str(info.value)
    with pytest.raises(SpecError):
        BucketTransform(n)
    with pytest.raises(SpecError):
        MultiBucketTransform(n)


# ------------------------------------------------------------------------------------------
# Property tests against mmh3
# ------------------------------------------------------------------------------------------
def _ints(bits: int, signed: bool):
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return st.one_of(st.sampled_from([lo, hi, 0, -1 if signed else 1]), st.integers(lo, hi))


_BASE_CASES: list[tuple[str, pa.DataType, st.SearchStrategy]] = [
    ("int8", pa.int8(), _ints(8, True)),
    ("int16", pa.int16(), _ints(16, True)),
    ("int32", pa.int32(), _ints(32, True)),
    ("int64", pa.int64(), _ints(64, True)),
    ("uint8", pa.uint8(), _ints(8, False)),
    ("uint16", pa.uint16(), _ints(16, False)),
    ("uint32", pa.uint32(), _ints(32, False)),
    ("uint64", pa.uint64(), _ints(64, False)),
    (
        "float32",
        pa.float32(),
        st.one_of(st.sampled_from([-0.0, 0.0, float("inf"), -float("inf")]), st.floats(width=32, allow_nan=False)),
    ),
    (
        "float64",
        pa.float64(),
        st.one_of(st.sampled_from([-0.0, 0.0, float("inf"), -float("inf")]), st.floats(allow_nan=False)),
    ),
    ("date32", pa.date32(), st.dates()),
    (
        "timestamp_us_naive",
        pa.timestamp("us"),
        st.datetimes(min_value=dt.datetime(1800, 1, 1), max_value=dt.datetime(2300, 1, 1)),
    ),
    (
        "timestamp_us_utc",
        pa.timestamp("us", tz="UTC"),
        st.datetimes(min_value=dt.datetime(1800, 1, 1), max_value=dt.datetime(2300, 1, 1), timezones=st.just(dt.UTC)),
    ),
    (
        "utf8",
        pa.string(),
        st.one_of(
            st.just(""),
            st.text(max_size=5),
            st.text(min_size=17, max_size=60),
            st.sampled_from(["漢字", "München/$=", "é" * 9]),
        ),
    ),
    ("large_utf8", pa.large_string(), st.text(max_size=40)),
    ("binary", pa.binary(), st.one_of(st.just(b""), st.binary(max_size=40))),
    ("bool", pa.bool_(), st.booleans()),
    (
        "decimal128_10_2",
        pa.decimal128(10, 2),
        st.decimals(
            min_value=decimal.Decimal("-99999999.99"),
            max_value=decimal.Decimal("99999999.99"),
            places=2,
            allow_nan=False,
            allow_infinity=False,
        ),
    ),
]
_CASES = {name: (t, s) for name, t, s in _BASE_CASES}


def _column(name: str):
    _, values = _CASES[name]
    return st.lists(st.one_of(st.none(), values), min_size=0, max_size=20)


@pytest.mark.parametrize("name", list(_CASES))
def test_murmur3_matches_mmh3_row_by_row(name):
    t, _ = _CASES[name]

    @PROPERTY_SETTINGS
    @given(values=_column(name), n=st.sampled_from([1, 2, 7, 16, 1024]))
    def check(values, n):
        arr = pa.array(values, type=t)
        py = arr.to_pylist()  # the values as Arrow stores them (float32 rounding, UTC, ...)
        expected = [ref_hash(v, t) for v in py]
        got = murmur3(arr)
        assert got.type == pa.int32()
        assert got.to_pylist() == expected
        # the bytes hashed
        assert to_hash_bytes(arr).to_pylist() == [None if v is None else ref_bytes(v, t) for v in py]
        for v in py:
            if v is not None:
                assert scalar_hash_bytes(v, t) == ref_bytes(v, t)
        # buckets, vectorized and scalar
        expected_buckets = [ref_bucket(h, n) for h in expected]
        assert bucket(got, n).to_pylist() == expected_buckets
        assert BucketTransform(n).apply(arr).to_pylist() == expected_buckets
        assert [BucketTransform(n).apply_scalar([v], [t]) for v in py] == expected_buckets
        # slices keep their offsets
        for k in range(0, len(arr) + 1, max(1, len(arr) // 4)):
            assert murmur3(arr.slice(k)).to_pylist() == expected[k:]
            assert murmur3(arr.slice(0, k)).to_pylist() == expected[:k]
            assert to_hash_bytes(arr.slice(k)).to_pylist() == [None if v is None else ref_bytes(v, t) for v in py[k:]]
            assert bucket(got.slice(k), n).to_pylist() == expected_buckets[k:]
            # chunked input
            chunked = pa.chunked_array([arr.slice(0, k), arr.slice(k)], type=t)
            assert murmur3(chunked).to_pylist() == expected
        assert murmur3(pa.chunked_array([arr], type=t)).to_pylist() == expected

    check()


@pytest.mark.parametrize(
    "left,right",
    [
        ("utf8", "int32"),
        ("int64", "date32"),
        ("binary", "utf8"),
        ("bool", "decimal128_10_2"),
        ("float64", "timestamp_us_utc"),
    ],
)
def test_murmur3_multi_matches_mmh3(left, right):
    lt, _ = _CASES[left]
    rt, _ = _CASES[right]

    @PROPERTY_SETTINGS
    @given(
        pairs=st.lists(
            st.tuples(st.one_of(st.none(), _CASES[left][1]), st.one_of(st.none(), _CASES[right][1])),
            max_size=15,
        ),
        shift=st.integers(0, 3),
        n=st.sampled_from([1, 8, 16]),
    )
    def check(pairs, shift, n):
        a = pa.array([p[0] for p in pairs], type=lt)
        b = pa.array([p[1] for p in pairs], type=rt)
        pa_, pb_ = a.to_pylist(), b.to_pylist()
        expected = [ref_multi([x, y], [lt, rt]) for x, y in zip(pa_, pb_, strict=True)]
        assert murmur3_multi(a, b).to_pylist() == expected
        expected_buckets = [ref_bucket(h, n) for h in expected]
        assert MultiBucketTransform(n).apply(a, b).to_pylist() == expected_buckets
        assert [
            MultiBucketTransform(n).apply_scalar([x, y], [lt, rt]) for x, y in zip(pa_, pb_, strict=True)
        ] == expected_buckets
        # arguments sliced at different offsets
        k = min(shift, len(pairs))
        a2 = pa.array([None] * k + pa_, type=lt).slice(k)
        b2 = pa.chunked_array([b.slice(0, k), b.slice(k)], type=rt)
        assert murmur3_multi(a2, b2).to_pylist() == expected

    check()


def test_murmur3_float_nan_and_signed_zero():
    arr = pa.array([float("nan"), -0.0, 0.0], pa.float64())
    expected = [mmh3.hash(struct.pack("<d", v), 0, signed=True) for v in (float("nan"), -0.0, 0.0)]
    assert murmur3(arr).to_pylist() == expected
    assert expected[1] != expected[2]  # native bytes: -0.0 and 0.0 hash differently


def test_murmur3_of_empty_arrays():
    assert murmur3(pa.array([], pa.int32())).to_pylist() == []
    assert murmur3(pa.array([], pa.string())).to_pylist() == []
    assert murmur3(pa.chunked_array([], pa.int64())).to_pylist() == []


def test_murmur3_all_null_string_array():
    arr = pa.array([None, None, None], pa.string())
    assert murmur3(arr).to_pylist() == [None, None, None]
    assert bucket(murmur3(arr), 16).to_pylist() == [None, None, None]


# ------------------------------------------------------------------------------------------
# More SPEC-NOTES 7 byte rules, hand-built
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arr,raw",
    [
        # date64: 8-byte milliseconds; 2024-01-01 is 19723 days after the epoch
        (pa.array([dt.date(2024, 1, 1)], pa.date64()), (19723 * 86_400_000).to_bytes(8, "little", signed=True)),
        # timestamps: the raw int64 in their own unit
        (pa.array([-1], pa.int64()).cast(pa.timestamp("s")), (-1).to_bytes(8, "little", signed=True)),
        (
            pa.array([1_700_000_000_123_456_789], pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
            (1_700_000_000_123_456_789).to_bytes(8, "little", signed=True),
        ),
        # binary flavours: the raw bytes
        (pa.array([b"\x00abc\xff"], pa.large_binary()), b"\x00abc\xff"),
        (pa.array(["漢字"], pa.large_string()), "漢字".encode()),
    ],
    ids=["date64", "timestamp_s", "timestamp_ns_utc", "large_binary", "large_utf8"],
)
def test_hash_bytes_of_other_arrow_types(arr, raw):
    assert to_hash_bytes(arr).to_pylist() == [raw]
    assert murmur3(arr).to_pylist() == [mmh3.hash(raw, 0, signed=True)]
    # the scalar path takes timestamps as their raw int64 here (ns does not fit a datetime)
    scalar = arr.cast(pa.int64())[0].as_py() if pa.types.is_timestamp(arr.type) else arr[0].as_py()
    assert scalar_hash_bytes(scalar, arr.type) == raw


@pytest.mark.parametrize(
    "t,value,display",
    [
        (pa.decimal128(10, 7), "0.0000001", "0.0000001"),
        (pa.decimal128(10, 7), "-0.0000001", "-0.0000001"),
        (pa.decimal128(20, 10), "0", "0.0000000000"),
        (pa.decimal128(38, 18), "0.000000000000000001", "0.000000000000000001"),
        (pa.decimal128(38, 18), "1.5", "1.500000000000000000"),
    ],
)
def test_decimal_display_string_is_plain_not_scientific(t, value, display):
    """SPEC-NOTES 7: decimals hash the display string the Lance Rust extension (arrow-rs) prints,
    e.g. DataFusion's ``cast(cast('0.0000001' as decimal(10,7)) as varchar)`` is '0.0000001';
    the scalar path (pruning) must agree with the vectorized path (writing)."""
    arr = pa.array([decimal.Decimal(value)], t)
    expected_hash = mmh3.hash(display.encode(), 0, signed=True)
    assert scalar_hash_bytes(decimal.Decimal(value), t) == display.encode()
    assert BucketTransform(1024).apply_scalar([decimal.Decimal(value)], [t]) == abs(expected_hash) % 1024
    assert to_hash_bytes(arr).to_pylist() == [display.encode()]
    assert murmur3(arr).to_pylist() == [expected_hash]
