"""murmur3 inputs for the less common Arrow types (issue 11, item 7): matched to SPEC-NOTES 7, or refused.

Expected hashes are ``mmh3.hash(bytes, 0, signed=True)`` over the bytes the rule
prescribes, written here by hand. For display-string types the display string is
arrow-rs's (the Lance extension's), taken from DataFusion's ``arrow_cast(x, 'Utf8')``
or written out by hand; pyarrow's own cast prints times differently
(``10:30:00.500000``) and is not the rule.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import mmh3
import pyarrow as pa
import pytest
from datafusion import SessionContext
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning import PartitionedNamespace
from partitioning.errors import SchemaError, SpecError
from partitioning.spec.murmur3 import HASHABLE_TYPES, murmur3, murmur3_multi, to_hash_bytes, unhashable_reason
from partitioning.spec.scalar_hash import scalar_hash_bytes
from partitioning.spec.transforms import BucketTransform, MultiBucketTransform


def _h(data: bytes) -> int:
    return int(mmh3.hash(data, 0, signed=True))


def _check(arr: pa.Array, raw: list[bytes | None], scalars: list[object] | None = None) -> None:
    """Vector hash, hash bytes, bucket and (for non-null values) the scalar path all follow ``raw``."""
    expected = [None if b is None else _h(b) for b in raw]
    assert to_hash_bytes(arr).to_pylist() == raw
    assert murmur3(arr).to_pylist() == expected
    assert BucketTransform(1024).apply(arr).to_pylist() == [None if h is None else abs(h) % 1024 for h in expected]
    values = scalars if scalars is not None else arr.to_pylist()
    for value, b in zip(values, raw, strict=True):
        if b is not None:
            assert scalar_hash_bytes(value, arr.type) == b
            assert BucketTransform(1024).apply_scalar([value], [arr.type]) == abs(_h(b)) % 1024


# -- matched types --------------------------------------------------------------------------------
def test_string_view_hashes_utf8_bytes():
    arr = pa.array(["US", None, "", "München/$=", "a string longer than twelve bytes"], pa.string_view())
    _check(arr, [b"US", None, b"", "München/$=".encode(), b"a string longer than twelve bytes"])
    assert murmur3(arr).to_pylist()[0] == -629525236  # conformance/murmur3.json: utf8 "US"


@pytest.mark.parametrize("value_type", [pa.string(), pa.large_string(), pa.string_view()])
@pytest.mark.parametrize("index_type", [pa.int8(), pa.int32(), pa.uint16()])
def test_dictionary_of_strings_hashes_the_strings(value_type, index_type):
    arr = pa.DictionaryArray.from_arrays(
        pa.array([1, 0, None, 1, 2], index_type), pa.array(["CN", "US", "漢字"], value_type)
    )
    _check(arr, [b"US", b"CN", None, b"US", "漢字".encode()])
    assert murmur3(arr.slice(1, 3)).to_pylist() == [-406051842, None, -629525236]  # golden CN, NULL, US


def test_large_string_and_large_binary_match_their_small_forms():
    _check(pa.array(["iceberg", None], pa.large_string()), [b"iceberg", None])
    _check(pa.array([b"abc", None], pa.large_binary()), [b"abc", None])
    assert murmur3(pa.array([b"abc"], pa.large_binary())).to_pylist() == [-1277324294]  # golden binary 616263


@pytest.mark.parametrize(
    "t,raw,display",
    [
        (pa.time32("s"), 37_800, "10:30:00"),
        (pa.time32("s"), 0, "00:00:00"),
        (pa.time32("ms"), 37_800_120, "10:30:00.120"),
        (pa.time32("ms"), 1, "00:00:00.001"),
        (pa.time64("us"), 37_800_500_000, "10:30:00.500"),
        (pa.time64("us"), 37_800_123_456, "10:30:00.123456"),
        (pa.time64("us"), 86_399_999_999, "23:59:59.999999"),
        (pa.time64("ns"), 1, "00:00:00.000000001"),
        (pa.time64("ns"), 37_800_123_456_000, "10:30:00.123456"),
        (pa.time64("ns"), 37_800_000_000_000, "10:30:00"),
    ],
)
def test_times_hash_the_arrow_rs_display_string(t, raw, display):
    """arrow-rs prints a time with 0, 3, 6 or 9 fraction digits by value, not by unit."""
    arr = pa.array([raw, None], pa.int64()).cast(pa.int32() if t.bit_width == 32 else pa.int64()).view(t)
    _check(arr, [display.encode(), None], scalars=[raw, None])
    assert _datafusion_display(arr)[0] == display


def _datafusion_display(arr: pa.Array) -> list[str | None]:
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.RecordBatch.from_arrays([arr], names=["x"])]])
    return ctx.sql("SELECT arrow_cast(x, 'Utf8') AS s FROM t").to_arrow_table().column("s").to_pylist()


_TIME_UNITS = {"s": (pa.time32("s"), 86_400), "ms": (pa.time32("ms"), 86_400_000)}
_TIME_UNITS |= {"us": (pa.time64("us"), 86_400_000_000), "ns": (pa.time64("ns"), 86_400_000_000_000)}


@pytest.mark.parametrize("unit", list(_TIME_UNITS))
def test_times_match_datafusion_display_on_random_values(unit):
    t, per_day = _TIME_UNITS[unit]
    storage = pa.int32() if t.bit_width == 32 else pa.int64()
    special = st.sampled_from([0, per_day - 1, per_day // 2, 1])

    @settings(max_examples=40, deadline=None, database=None)
    @given(values=st.lists(st.one_of(st.none(), special, st.integers(0, per_day - 1)), min_size=1, max_size=30))
    def check(values):
        arr = pa.array(values, storage).view(t)
        display = _datafusion_display(arr)
        assert murmur3(arr).to_pylist() == [None if s is None else _h(s.encode()) for s in display]

    check()


def test_time_out_of_a_day_is_an_error():
    with pytest.raises(SpecError, match="outside"):
        murmur3(pa.array([86_400], pa.int32()).view(pa.time32("s")))


@pytest.mark.parametrize(
    "t,value,display",
    [
        (pa.decimal32(5, 2), "1.50", "1.50"),
        (pa.decimal64(12, 2), "-0.05", "-0.05"),
        (pa.decimal128(38, 6), "12345678901234567890123456789012.123456", "12345678901234567890123456789012.123456"),
        (pa.decimal128(38, 0), "-99999999999999999999999999999999999999", "-99999999999999999999999999999999999999"),
        (pa.decimal256(50, 3), "1.5", "1.500"),
        (pa.decimal128(10, 0), "0", "0"),
    ],
)
def test_decimals_hash_the_display_string(t, value, display):
    arr = pa.array([decimal.Decimal(value), None], t)
    _check(arr, [display.encode(), None])
    assert _datafusion_display(arr)[0] == display


def test_multi_bucket_over_the_new_types():
    s = pa.array(["ab", None], pa.string_view())
    d = pa.array(["x", "y"]).dictionary_encode()
    tm = pa.array([37_800_500_000, None], pa.int64()).view(pa.time64("us"))
    got = murmur3_multi(s, d, tm).to_pylist()
    assert got == [_h(b"abx10:30:00.500"), _h(b"y")]
    types = [s.type, d.type, tm.type]
    assert MultiBucketTransform(8).apply_scalar(["ab", "x", dt.time(10, 30, 0, 500_000)], types) == abs(got[0]) % 8


# -- refused types --------------------------------------------------------------------------------
_REFUSED = [
    (pa.float16(), pa.array([1.5], pa.float16())),
    (pa.binary(3), pa.array([b"abc"], pa.binary(3))),
    (pa.binary_view(), pa.array([b"abc"], pa.binary_view())),
    (pa.dictionary(pa.int8(), pa.int32()), pa.array([5], pa.int32()).dictionary_encode()),
    (pa.decimal128(5, -2), pa.array([decimal.Decimal("1E+2")], pa.decimal128(5, -2))),
    (pa.duration("s"), pa.array([1], pa.duration("s"))),
    (pa.list_(pa.int32()), pa.array([[1]], pa.list_(pa.int32()))),
]


def _multi_sources(t: pa.DataType) -> list[pa.Field]:
    return [pa.field("id", pa.int64()), pa.field("c", t)]


def _assert_one_line_naming_c(text: str, t: pa.DataType) -> None:
    assert "\n" not in text
    assert "'c'" in text and str(t) in text and HASHABLE_TYPES in text, text


@pytest.mark.parametrize("t,arr", _REFUSED, ids=[str(t) for t, _ in _REFUSED])
def test_refused_types_fail_when_the_spec_is_created(tmp_path: Path, t, arr):
    assert unhashable_reason(t) is not None
    for transform, sources in ((BucketTransform(8), [pa.field("c", t)]), (MultiBucketTransform(8), _multi_sources(t))):
        with pytest.raises(SpecError) as info:
            transform.check_sources(sources)
        _assert_one_line_naming_c(str(info.value), t)
    schema = pa.schema([("id", pa.int64()), ("c", t)])
    if pa.types.is_binary_view(t) or pa.types.is_dictionary(t):
        with pytest.raises(SchemaError, match="not supported in a namespace schema"):
            PartitionedNamespace.create(str(tmp_path / "t"), schema, ["id"])
    else:
        for partition_by in (["bucket[8](c)"], ["multi_bucket[8](id, c)"]):
            with pytest.raises(SpecError) as info:
                PartitionedNamespace.create(str(tmp_path / "t"), schema, partition_by)
            _assert_one_line_naming_c(str(info.value), t)
            assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
    with pytest.raises(SpecError, match="cannot be hashed"):
        murmur3(arr)
    if not pa.types.is_list(t):
        with pytest.raises(SpecError, match="cannot be hashed"):
            scalar_hash_bytes(arr[0].as_py(), t)


@pytest.mark.parametrize(
    "t,needle",
    [
        (pa.float16(), "native bytes"),
        (pa.binary(3), "raw bytes"),
        (pa.binary_view(), "raw bytes"),
        (pa.dictionary(pa.int32(), pa.int64()), "dictionaries of strings"),
        (pa.decimal128(5, -2), "negative scale"),
    ],
)
def test_refusals_say_why(t, needle):
    with pytest.raises(SpecError) as info:
        BucketTransform(4).check_sources([pa.field("col", t)])
    assert needle in str(info.value)
    assert str(info.value).startswith(f"transform bucket[4] cannot be applied to column 'col' of type {t} (refused")
