"""identity partitions of floats follow Spark's equality: -0.0 = 0.0 and NaN = NaN (issue 11, item 3).

The partition value is normalised in the transform (-0.0 -> 0.0, every NaN -> the
canonical quiet NaN, Spark's ``Double.NaN``/``Float.NaN`` bits); the stored rows keep
their own bits. Expected values are hand-written bit patterns; the Spark Column form is
checked against the Arrow form row for row, bit for bit.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.errors import SpecError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.transforms import IdentityTransform, TruncateTransform
from partitioning.spec.values import canonical_float
from partitioning.tables.write import write_table
from pipelines.columns import transforms as stf
from pipelines.write.dataframe import write_partitioned

# (arrow type, spark type, numpy unsigned bits dtype, canonical NaN, a NaN with another payload, negative NaN, -0.0)
_KINDS = {
    "double": (
        pa.float64(),
        T.DoubleType(),
        np.uint64,
        0x7FF8_0000_0000_0000,
        0x7FF8_0000_0000_0001,
        0xFFF8_0000_0000_0000,
    ),
    "float": (pa.float32(), T.FloatType(), np.uint32, 0x7FC0_0000, 0x7FC0_0001, 0xFFC0_0000),
}
_NEG_ZERO = {"double": 0x8000_0000_0000_0000, "float": 0x8000_0000}
_ONE = {"double": 0x3FF0_0000_0000_0000, "float": 0x3F80_0000}


def _float_array(kind: str, bits: list[int | None]) -> pa.Array:
    """An Arrow float array with exactly these bit patterns (None is NULL)."""
    arrow_type, _, bits_dtype, *_ = _KINDS[kind]
    raw = np.array([0 if b is None else b for b in bits], dtype=bits_dtype)
    validity = pa.array([b is not None for b in bits], pa.bool_()).buffers()[1]
    nulls = sum(b is None for b in bits)
    return pa.Array.from_buffers(
        arrow_type, len(bits), [validity if nulls else None, pa.py_buffer(raw.tobytes())], nulls
    )


def _bits(arr: pa.Array | pa.ChunkedArray, kind: str) -> list[int | None]:
    """The bit pattern of every value (None for NULL)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    bits_dtype = _KINDS[kind][2]
    raw = np.frombuffer(arr.buffers()[1], dtype=bits_dtype, count=arr.offset + len(arr))[arr.offset :]
    valid = arr.is_valid().to_pylist()
    return [int(b) if ok else None for b, ok in zip(raw, valid, strict=True)]


def _canonical_bits(kind: str, bits: int | None) -> int | None:
    """Hand-written rule: +-0.0 -> 0, any NaN (all exponent bits set, mantissa non-zero) -> the canonical NaN."""
    if bits is None:
        return None
    mantissa_bits, exponent_mask = (52, 0x7FF) if kind == "double" else (23, 0xFF)
    sign_mask = 1 << (mantissa_bits + (11 if kind == "double" else 8))
    exponent = (bits >> mantissa_bits) & exponent_mask
    if exponent == exponent_mask and bits & ((1 << mantissa_bits) - 1):
        return _KINDS[kind][3]
    return 0 if bits & ~sign_mask == 0 else bits


def _input_rows(kind: str) -> tuple[list[int | None], list[int | None]]:
    """ids and x bits: -0.0, 0.0, NaN, NaN with another payload, negative NaN, 1.0, NULL, and (None, None)."""
    _, _, _, nan, other_nan, neg_nan = _KINDS[kind]
    ids = [0, 1, 2, 3, 4, 5, 6, None]
    bits = [_NEG_ZERO[kind], 0, nan, other_nan, neg_nan, _ONE[kind], None, None]
    return ids, bits


def _input_table(kind: str) -> pa.Table:
    ids, bits = _input_rows(kind)
    return pa.table({"id": pa.array(ids, pa.int64()), "x": _float_array(kind, bits)})


def _read_partitions(root: str, kind: str) -> list[tuple[Any, dict[int | None, int | None]]]:
    """(partition value, {id: stored x bits}) for every partition, read with pylance directly."""
    out = []
    for p in PartitionedNamespace.load(root).partitions():
        (value,) = p.values.values()
        table = lance.dataset(p.uri, version=p.read_version).to_table()
        ids = table.column("id").to_pylist()
        out.append((value, dict(zip(ids, _bits(table.column("x"), kind), strict=True))))
    return out


def _check_partitions(root: str, kind: str) -> None:
    ids, bits = _input_rows(kind)
    original = dict(zip(ids, bits, strict=True))
    parts = _read_partitions(root, kind)
    by_class: dict[str, list[tuple[Any, dict[int | None, int | None]]]] = {}
    for value, rows in parts:
        label = "null" if value is None else "nan" if math.isnan(value) else "zero" if value == 0 else repr(value)
        by_class.setdefault(label, []).append((value, rows))
    assert sorted(by_class) == ["1.0", "nan", "null", "zero"], parts
    assert all(len(v) == 1 for v in by_class.values()), f"one partition per Spark-equal value: {parts}"
    zero_value, zero_rows = by_class["zero"][0]
    assert math.copysign(1.0, zero_value) == 1.0, "the partition value of {-0.0, 0.0} is +0.0"
    assert set(zero_rows) == {0, 1}
    assert set(by_class["nan"][0][1]) == {2, 3, 4}
    assert set(by_class["null"][0][1]) == {6, None}
    assert set(by_class["1.0"][0][1]) == {5}
    stored = {i: b for _, rows in parts for i, b in rows.items()}
    assert stored == original, "rows keep their own bits (sign of -0.0, NaN payloads)"
    value_fmt, bits_fmt = ("<d", "<Q") if kind == "double" else ("<f", "<I")
    negative_zero = struct.unpack(value_fmt, struct.pack(bits_fmt, stored[0]))[0]
    assert negative_zero == 0.0 and math.copysign(1.0, negative_zero) == -1.0


# -- Arrow form -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(_KINDS))
def test_identity_normalises_zero_and_nan_bits(kind):
    _, _, _, nan, other_nan, neg_nan = _KINDS[kind]
    bits = [_NEG_ZERO[kind], 0, nan, other_nan, neg_nan, _ONE[kind], None]
    got = IdentityTransform().apply(_float_array(kind, bits))
    assert _bits(got, kind) == [0, 0, nan, nan, nan, _ONE[kind], None]
    sliced = IdentityTransform().apply(_float_array(kind, bits).slice(3, 3))
    assert _bits(sliced, kind) == [nan, nan, _ONE[kind]]


def test_identity_normalises_float16():
    arr = pa.Array.from_buffers(
        pa.float16(), 5, [None, pa.py_buffer(np.array([0x8000, 0x7E01, 0xFE00, 0x3C00, 0], np.uint16).tobytes())]
    )
    got = IdentityTransform().apply(arr)
    assert np.frombuffer(got.buffers()[1], np.uint16).tolist() == [0, 0x7E00, 0x7E00, 0x3C00, 0]


def test_identity_leaves_other_types_alone():
    arr = pa.array([-1, 0, None], pa.int64())
    assert IdentityTransform().apply(arr) is arr
    assert IdentityTransform().apply_scalar([-0], [pa.int64()]) == 0
    assert IdentityTransform().apply_scalar([-0.0], [pa.decimal128(5, 1)]) == -0.0  # not a float column


def test_identity_scalar_normalises_like_the_vector_form():
    t = pa.float64()
    zero = IdentityTransform().apply_scalar([-0.0], [t])
    assert zero == 0.0 and math.copysign(1.0, zero) == 1.0
    nan = IdentityTransform().apply_scalar([float("nan")], [t])
    assert math.isnan(nan)
    other = struct.unpack("<d", struct.pack("<Q", 0xFFF8_0000_0000_0001))[0]
    same = IdentityTransform().apply_scalar([other], [pa.float32()])
    assert same is nan, "every NaN maps to one object, so tuples holding it are equal dict keys"
    assert struct.pack("<d", same) == struct.pack("<Q", 0x7FF8_0000_0000_0000)
    assert (IdentityTransform().apply_scalar([other], [t]),) == (nan,)
    assert IdentityTransform().apply_scalar([None], [t]) is None
    assert IdentityTransform().apply_scalar([2.5], [t]) == 2.5
    assert canonical_float("x") == "x"


@pytest.mark.parametrize("t", [pa.float16(), pa.float32(), pa.float64()])
def test_truncate_does_not_apply_to_floats(t):
    with pytest.raises(SpecError, match=r"column 'x' of type .*truncate accepts"):
        TruncateTransform(10).check_sources([pa.field("x", t)])
    with pytest.raises(SpecError, match="truncate"):
        TruncateTransform(10).apply(pa.array([1.5], t))


@pytest.mark.parametrize("spark_type", [T.FloatType(), T.DoubleType()])
def test_spark_truncate_refuses_floats(spark: SparkSession, spark_type):
    with pytest.raises(SpecError, match=spark_type.simpleString()):
        stf.truncate(F.col("x"), 10, spark_type)


# -- writes, Spark and Spark-free -------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(_KINDS))
def test_write_table_puts_spark_equal_floats_in_one_partition(tmp_path: Path, kind):
    root = str(tmp_path / "t")
    table = _input_table(kind)
    ns = PartitionedNamespace.create(root, table.schema, ["x"])
    write_table(ns, table, max_open_writers=1)
    _check_partitions(root, kind)


@pytest.mark.parametrize("kind", list(_KINDS))
def test_write_partitioned_puts_spark_equal_floats_in_one_partition(spark: SparkSession, tmp_path: Path, kind):
    root = str(tmp_path / "t")
    df = spark.createDataFrame(_input_table(kind))
    assert _bits(df.toArrow().column("x"), kind) == _input_rows(kind)[1], "Spark keeps the input bits"
    write_partitioned(df, root, partition_by=["x"])
    _check_partitions(root, kind)


# -- Spark Column form == Arrow form -----------------------------------------------------------------
def _special_bits(kind: str) -> st.SearchStrategy[int]:
    _, _, _, nan, other_nan, neg_nan = _KINDS[kind]
    width = 64 if kind == "double" else 32
    exponent = (0x7FF << 52) if kind == "double" else (0xFF << 23)
    sign = 1 << (width - 1)
    mantissa = st.integers(1, (1 << (52 if kind == "double" else 23)) - 1)
    any_nan = st.tuples(st.booleans(), mantissa).map(lambda t: exponent | t[1] | (sign if t[0] else 0))
    return st.one_of(st.sampled_from([nan, other_nan, neg_nan, _NEG_ZERO[kind], 0, exponent, exponent | sign]), any_nan)


def _value_bits(kind: str) -> st.SearchStrategy[int | None]:
    fmt, width = ("<d", "<Q") if kind == "double" else ("<f", "<I")
    floats = st.floats(width=64 if kind == "double" else 32).map(lambda v: struct.unpack(width, struct.pack(fmt, v))[0])
    return st.one_of(st.none(), _special_bits(kind), floats)


@pytest.mark.parametrize("kind", list(_KINDS))
def test_spark_identity_equals_arrow_identity_bit_for_bit(spark: SparkSession, kind):
    spark_type = _KINDS[kind][1]

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(values=st.lists(_value_bits(kind), min_size=1, max_size=30))
    def check(values):
        source = pa.table({"row": pa.array(range(len(values)), pa.int32()), "x": _float_array(kind, values)})
        df = spark.createDataFrame(source)
        out = df.select("row", "x", stf.identity(F.col("x"), spark_type).alias("p")).toArrow().sort_by("row")
        assert _bits(out.column("x"), kind) == values, "Spark kept the input bits"
        arrow = _bits(IdentityTransform().apply(out.column("x").combine_chunks()), kind)
        assert _bits(out.column("p"), kind) == arrow
        assert arrow == [_canonical_bits(kind, b) for b in values]

    check()


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_later_writes_of_nan_and_negative_zero_join_the_existing_partitions(tmp_path: Path, kind: str) -> None:
    """Python's NaN never equals itself as a dict key; every write must still find the one NaN
    partition (and the 0.0 partition for -0.0) instead of creating another."""
    arrow_type, _, _, canonical, other_payload, negative = _KINDS[kind]
    schema = pa.schema([("id", pa.int64()), ("x", arrow_type)])
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, ["x"])
    batches = [[canonical, 0], [other_payload, _NEG_ZERO[kind]], [negative, None]]
    for k, bits in enumerate(batches):
        table = pa.table({"id": pa.array([10 * k, 10 * k + 1], pa.int64()), "x": _float_array(kind, bits)})
        write_table(ns, table)
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    values = sorted(repr(p.values["x"]) for p in ns.partitions())
    assert values == ["0.0", "None", "nan"]
    rows = {p.values["x"] is None: ns.open_table(p).count_rows() for p in ns.partitions()}
    assert sum(ns.open_table(p).count_rows() for p in ns.partitions()) == 6
    assert rows[True] == 1
