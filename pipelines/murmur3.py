"""murmur3 (x86_32, seed 0) as Spark Columns: JVM-native where exact, ``arrow_udf`` otherwise.

Spark's ``hash()`` is murmur3 with seed 42, and it folds a multi-column hash by
using each result as the next seed. ``hash(x0, c)``, with ``x0`` the int whose
seed-42 hash is 0, is therefore murmur3 of ``c`` with seed 0. For ints, longs,
dates and timestamps Spark hashes exactly the bytes SPEC-NOTES 7 prescribes, so
that is the whole answer. For strings and binary only the trailing 1-3 bytes are
hashed differently by Spark; the aligned prefix is hashed natively, its finalizer
is inverted, and the spec's tail step is applied with 64-bit integer arithmetic.
Bytes and shorts (1 and 2 bytes) use the same arithmetic. Floats, doubles and
decimals go through the vectorized Arrow implementation in an ``arrow_udf``.
"""

from __future__ import annotations

import re

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning import murmur3 as m3

__all__ = ["bucket_column", "murmur3_column", "murmur3_multi_column", "native_murmur3_supported", "with_murmur3"]

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_F1 = 0x85EBCA6B
_F2 = 0xC2B2AE35
_INV_F1 = pow(_F1, -1, 2**32)
_INV_F2 = pow(_F2, -1, 2**32)
# Spark: hash(_X0) == 0 under seed 42, so hash(_X0, c) hashes c with seed 0.
_X0 = -1693959553
_HASH_TRUE = m3.murmur3_scalar(b"true")
_HASH_FALSE = m3.murmur3_scalar(b"false")

_NATIVE_FIXED = (T.IntegerType, T.LongType, T.DateType, T.TimestampType, T.TimestampNTZType)
_NATIVE_SMALL = {T.ByteType: (0xFF, 1), T.ShortType: (0xFFFF, 2)}


def _lit(v: int) -> Column:
    return F.lit(v).cast("long")


def _and(c: Column, mask: int) -> Column:
    return c.bitwiseAND(_lit(mask))


class _Stages:
    """Names intermediate values as columns of successive projections.

    murmur3 reuses each intermediate value several times; inlined into one Column,
    every reuse would copy the whole tree below it and the ~20 chained steps would
    grow exponentially. Spark does not collapse a projection into the next when
    that would duplicate a non-trivial expression, so each value is computed once,
    and whole-stage codegen still fuses the stages into one loop.
    """

    def __init__(self, df: DataFrame, tag: str) -> None:
        self.df = df
        self.tag = tag
        self.names: list[str] = []

    def let(self, value: Column) -> Column:
        name = f"__m3_{self.tag}_{len(self.names)}"
        self.df = self.df.withColumn(name, value)
        self.names.append(name)
        return F.col(name)

    def finish(self, out: str, value: Column) -> DataFrame:
        return self.df.withColumn(out, value).drop(*self.names)


def _mul32(st: _Stages, a: Column, const: int) -> Column:
    """``(a * const) mod 2**32`` for ``a`` in [0, 2**32) without 64-bit overflow."""
    x = st.let(a)
    lo = _and(x, 0xFFFF) * _lit(const)
    hi = _and(F.shiftrightunsigned(x, 16) * _lit(const), 0xFFFF)
    return _and(lo + F.shiftleft(hi, 16), _MASK)


def _xorshift(st: _Stages, a: Column, s: int) -> Column:
    x = st.let(a)
    return x.bitwiseXOR(F.shiftrightunsigned(x, s))


def _unxorshift(st: _Stages, a: Column, s: int) -> Column:
    """Inverse of ``a ^ (a >>> s)`` on 32-bit values."""
    x = st.let(a)
    out = x
    for shift in range(s, 32, s):
        out = out.bitwiseXOR(F.shiftrightunsigned(x, shift))
    return out


def _rotl(st: _Stages, a: Column, r: int) -> Column:
    x = st.let(a)
    return _and(F.shiftleft(x, r).bitwiseOR(F.shiftrightunsigned(x, 32 - r)), _MASK)


def _mix_k(st: _Stages, k: Column) -> Column:
    return _mul32(st, _rotl(st, _mul32(st, k, _C1), 15), _C2)


def _fmix(st: _Stages, h: Column, length: Column) -> Column:
    h = _xorshift(st, h.bitwiseXOR(length), 16)
    h = _xorshift(st, _mul32(st, h, _F1), 13)
    return _xorshift(st, _mul32(st, h, _F2), 16)


def _fmix_inverse(st: _Stages, h: Column, length: Column) -> Column:
    h = _mul32(st, _unxorshift(st, h, 16), _INV_F2)
    h = _mul32(st, _unxorshift(st, h, 13), _INV_F1)
    return _unxorshift(st, h, 16).bitwiseXOR(length)


def _signed(st: _Stages, h: Column) -> Column:
    x = st.let(h)
    return F.when(x >= _lit(2**31), x - _lit(2**32)).otherwise(x).cast("int")


def _seed0_hash(c: Column) -> Column:
    """Spark's murmur3 of ``c`` with seed 0 (NULL-skipping, like Spark's ``hash``)."""
    return F.hash(F.lit(_X0).cast("int"), c)


def _small_int_hash(st: _Stages, c: Column, mask: int, width: int) -> Column:
    return _signed(st, _fmix(st, _mix_k(st, _and(c.cast("long"), mask)), _lit(width)))


def _bytes_hash(st: _Stages, b: Column) -> Column:
    """Spec murmur3 of a binary column: native aligned prefix plus the spec's tail step."""
    b = st.let(b)
    length = st.let(F.length(b).cast("long"))
    tail_len = st.let(F.pmod(length, _lit(4)))
    aligned = st.let(length - tail_len)
    prefix_hash = _and(_seed0_hash(b.substr(F.lit(1), aligned.cast("int"))).cast("long"), _MASK)
    h1 = _fmix_inverse(st, prefix_hash, aligned)
    tail = b.substr((aligned + 1).cast("int"), tail_len.cast("int"))
    big_endian = st.let(F.coalesce(F.conv(F.hex(tail), 16, 10).cast("long"), _lit(0)))
    little_endian = (
        F.when(tail_len == 2, F.shiftleft(_and(big_endian, 0xFF), 8).bitwiseOR(F.shiftrightunsigned(big_endian, 8)))
        .when(
            tail_len == 3,
            F.shiftleft(_and(big_endian, 0xFF), 16)
            .bitwiseOR(_and(big_endian, 0xFF00))
            .bitwiseOR(F.shiftrightunsigned(big_endian, 16)),
        )
        .otherwise(big_endian)
    )
    return _signed(st, _fmix(st, h1.bitwiseXOR(_mix_k(st, little_endian)), length))


def native_murmur3_supported(source_type: T.DataType) -> bool:
    """Whether :func:`with_murmur3` hashes this Spark type without Python."""
    return isinstance(source_type, (*_NATIVE_FIXED, T.BooleanType, T.ByteType, T.ShortType, T.StringType, T.BinaryType))


@F.arrow_udf(T.IntegerType())  # type: ignore[call-overload, misc]
def _murmur3_udf(values: pa.Array) -> pa.Array:
    return m3.murmur3(values)


@F.arrow_udf(T.IntegerType())  # type: ignore[call-overload, misc]
def _murmur3_multi_udf(*values: pa.Array) -> pa.Array:
    return m3.murmur3_multi(*values)


def _null_safe(col: Column, hashed: Column) -> Column:
    return F.when(col.isNull(), F.lit(None).cast("int")).otherwise(hashed)


def murmur3_column(col: Column, source_type: T.DataType | None = None) -> Column:
    """The spec's ``murmur3(col)`` as one composable Column (signed int, NULL for NULL).

    Ints, longs, dates, timestamps and booleans are hashed natively in the JVM;
    other types use the vectorized Arrow ``arrow_udf``. :func:`with_murmur3` also
    hashes strings, binary, bytes and shorts natively.
    """
    if isinstance(source_type, _NATIVE_FIXED):
        return _null_safe(col, _seed0_hash(col))
    if isinstance(source_type, T.BooleanType):
        return _null_safe(col, F.when(col, F.lit(_HASH_TRUE)).otherwise(F.lit(_HASH_FALSE)))
    return _murmur3_udf(col)


def with_murmur3(df: DataFrame, col: Column, out: str, source_type: T.DataType | None) -> DataFrame:
    """``df`` plus column ``out`` = murmur3 of ``col``, natively wherever exact."""
    if isinstance(source_type, T.StringType | T.BinaryType | T.ByteType | T.ShortType):
        st = _Stages(df, re.sub(r"\W", "_", out))
        if isinstance(source_type, T.StringType):
            hashed = _bytes_hash(st, col.cast("binary"))
        elif isinstance(source_type, T.BinaryType):
            hashed = _bytes_hash(st, col)
        else:
            mask, width = _NATIVE_SMALL[type(source_type)]
            hashed = _small_int_hash(st, col, mask, width)
        return st.finish(out, _null_safe(col, hashed))
    return df.withColumn(out, murmur3_column(col, source_type))


def murmur3_multi_column(*cols: Column) -> Column:
    """The spec's ``murmur3_multi``: hash of the concatenated non-null values (Arrow UDF)."""
    return _murmur3_multi_udf(*cols)


def bucket_column(hashed: Column, num_buckets: int) -> Column:
    """``abs(h) % N`` in 64 bits, as int in ``[0, N)``."""
    return F.pmod(F.abs(hashed.cast("long")), _lit(num_buckets)).cast("int")
