"""murmur3 (x86_32, seed 0) as Spark Columns: JVM-native where exact, ``arrow_udf`` otherwise.

Spark's ``hash()`` is murmur3 with seed 42, and it folds a multi-column hash by
using each result as the next seed. ``hash(x0, c)``, with ``x0`` the int whose
seed-42 hash is 0, is therefore murmur3 of ``c`` with seed 0. For ints, longs,
dates and timestamps Spark hashes exactly the bytes SPEC-NOTES 7 prescribes, so
that is the whole answer. For strings and binary only the trailing 1-3 bytes are
hashed differently by Spark; the value padded with zero bytes to whole 4-byte
blocks is hashed natively, and the last block's step and the finalizer are undone
and redone with 64-bit integer arithmetic (:func:`_padded_hash`). Bytes and shorts
(1 and 2 bytes) use the same arithmetic. Floats, doubles and decimals go through
the vectorized Arrow implementation in an ``arrow_udf``.

Where the session has the jar `make` builds from ``java/`` (:data:`pipelines.session.UDF_JAR`,
in ``spark.jars``), strings and binaries are hashed by that Java UDF instead: the reference
algorithm over the bytes, about two thirds of the padded path's time. A session started
without it (a notebook's own ``SparkSession``, a job submitted without ``--jars``) gets the
jar added at run time (``ADD JAR``, which also ships it to executors) when it is on this
machine; only where that fails (no jar here, a server that refuses it) does the session use
the padded path, and it says so in one WARNING line. Both give the same values.
"""

from __future__ import annotations

import logging
import re

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.spec import murmur3 as m3
from pipelines import session as sessions
from pipelines.jar import PROBE_CLASS, PROBE_FUNCTION, add_to_session, loadable

__all__ = [
    "bucket_column",
    "java_murmur3",
    "murmur3_column",
    "murmur3_multi_column",
    "native_murmur3_supported",
    "with_murmur3",
]

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_F1 = 0x85EBCA6B
_F2 = 0xC2B2AE35
_INV_F1 = pow(_F1, -1, 2**32)
_INV_F2 = pow(_F2, -1, 2**32)
_N1 = 0xE6546B64
_INV_5 = pow(5, -1, 2**32)
# Spark: hash(_X0) == 0 under seed 42, so hash(_X0, c) hashes c with seed 0.
_X0 = -1693959553
_HASH_TRUE = m3.murmur3_scalar(b"true")
_HASH_FALSE = m3.murmur3_scalar(b"false")

_NATIVE_FIXED = (T.IntegerType, T.LongType, T.DateType, T.TimestampType, T.TimestampNTZType)
_NATIVE_SMALL = {T.ByteType: (0xFF, 1), T.ShortType: (0xFFFF, 2)}
JAVA_UDF = PROBE_FUNCTION
_JAVA_CLASS = PROBE_CLASS
# A session conf: "registered" or "unavailable", so a session tries the registration once.
JAVA_MARKER = "spark.lance_partitioned.javaMurmur3"
log = logging.getLogger("lance_partitioned")


def _lit(v: int) -> Column:
    return F.lit(v).cast("long")


def _signed32(v: int) -> int:
    return v - 2**32 if v >= 2**31 else v


class _Stages:
    """Names intermediate values as columns of successive projections.

    murmur3 reuses each intermediate value several times; inlined into one Column,
    every reuse would copy the whole tree below it and the chained steps would
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


def _mul32(a: Column, const: int) -> Column:
    """``(a * const) mod 2**32`` for ``a`` in [0, 2**32): one 64-bit multiply by the signed constant.

    ``|a * const| < 2**32 * 2**31``, so the product never overflows a long (ANSI mode
    included) and its low 32 bits are those of the unsigned product.
    """
    return (a * _lit(_signed32(const))).bitwiseAND(_lit(_MASK))


def _xorshift(st: _Stages, a: Column, s: int) -> Column:
    x = st.let(a)
    return x.bitwiseXOR(F.shiftrightunsigned(x, s))


def _rotl(st: _Stages, a: Column, r: int) -> Column:
    x = st.let(a)
    return F.shiftleft(x, r).bitwiseOR(F.shiftrightunsigned(x, 32 - r)).bitwiseAND(_lit(_MASK))


def _mix_k(st: _Stages, k: Column) -> Column:
    return _mul32(_rotl(st, _mul32(k, _C1), 15), _C2)


def _fmix(st: _Stages, h: Column) -> Column:
    h = _mul32(_xorshift(st, h, 16), _F1)
    h = _mul32(_xorshift(st, h, 13), _F2)
    return _xorshift(st, h, 16)


def _fmix_inverse(st: _Stages, h: Column) -> Column:
    """Inverse of :func:`_fmix` (``x ^ x >>> 16`` is its own inverse on 32 bits)."""
    h = _mul32(_xorshift(st, h, 16), _INV_F2)
    x = st.let(h)
    h = _mul32(x.bitwiseXOR(F.shiftrightunsigned(x, 13)).bitwiseXOR(F.shiftrightunsigned(x, 26)), _INV_F1)
    return _xorshift(st, h, 16)


def _mix_h_inverse(st: _Stages, h: Column) -> Column:
    """The ``h ^ k`` that the body step ``rotl(h ^ k, 13) * 5 + 0xe6546b64`` turned into ``h``."""
    x = st.let(_mul32(h - _lit(_N1), _INV_5))
    return F.shiftrightunsigned(x, 13).bitwiseOR(F.shiftleft(x, 19)).bitwiseAND(_lit(_MASK))


def _to_signed(h: Column) -> Column:
    return (h.bitwiseXOR(_lit(2**31)) - _lit(2**31)).cast("int")


def _unsigned(h: Column) -> Column:
    return h.cast("long").bitwiseAND(_lit(_MASK))


def _seed0_hash(c: Column) -> Column:
    """Spark's murmur3 of ``c`` with seed 0 (NULL-skipping, like Spark's ``hash``)."""
    return F.hash(F.lit(_X0).cast("int"), c)


def _small_int_hash(st: _Stages, c: Column, mask: int, width: int) -> Column:
    k = _mix_k(st, c.cast("long").bitwiseAND(_lit(mask)))
    return _to_signed(_fmix(st, k.bitwiseXOR(_lit(width))))


def _padded_hash(st: _Stages, value: Column, *, binary: bool) -> Column:
    """Spec murmur3 of a string's UTF-8 bytes (or of a binary) from one native ``hash()``.

    ``value`` padded with 1-4 zero bytes to a multiple of 4 is hashed by Spark as whole
    4-byte blocks, and its last block is the spec's zero-padded tail word ``k``. Undoing
    the finalizer and that block's ``rotl(h ^ mix(k), 13) * 5 + n`` step leaves
    ``h ^ mix(k)``, which the spec finalizes with the unpadded length. A NULL ``value``
    has a NULL length, which the arithmetic carries through to a NULL result.
    """
    n = st.let(F.octet_length(value).cast("long"))
    rem = n.bitwiseAND(_lit(3))
    pads = [b"\0" * (4 - r) for r in range(4)]

    def pad(r: int) -> Column:
        return F.lit(bytearray(pads[r])) if binary else F.lit(pads[r].decode())

    padding = F.when(rem == 0, pad(0)).when(rem == 1, pad(1)).when(rem == 2, pad(2)).otherwise(pad(3))
    padded_len = n.bitwiseOR(_lit(3)) + _lit(1)
    native = _unsigned(_seed0_hash(F.concat(value, padding)))
    body = _mix_h_inverse(st, _fmix_inverse(st, native).bitwiseXOR(padded_len))
    return _to_signed(_fmix(st, body.bitwiseXOR(n)))


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


def java_murmur3(spark: SparkSession) -> bool:
    """Whether ``spark`` hashes strings and binaries with the Java UDF :data:`JAVA_UDF`.

    The first call registers it (a temporary function) and remembers the outcome in the
    session conf :data:`JAVA_MARKER`. A class the session cannot load is added at run time
    from :data:`pipelines.session.UDF_JAR` (``ADD JAR``) and registered again; if that
    fails too, the session uses the padded path and one WARNING line says how to turn the
    fast path on.
    """
    state = spark.conf.get(JAVA_MARKER, None)
    if state is None:
        state = "registered" if loadable(spark) or _add_jar_and_register(spark) else "unavailable"
        if state == "unavailable":
            log.warning(
                "string and binary buckets use the slower padded hash: class %s is not on this session's classpath; "
                "start Spark with --jars %s (spark.jars) to hash them natively",
                _JAVA_CLASS,
                sessions.UDF_JAR,
            )
        spark.conf.set(JAVA_MARKER, state)
    return state == "registered"


def _add_jar_and_register(spark: SparkSession) -> bool:
    return add_to_session(spark, sessions.UDF_JAR) and loadable(spark)


def with_murmur3(df: DataFrame, col: Column, out: str, source_type: T.DataType | None) -> DataFrame:
    """``df`` plus column ``out`` = murmur3 of ``col``, natively wherever exact."""
    if isinstance(source_type, T.StringType | T.BinaryType) and java_murmur3(df.sparkSession):
        # a string's UTF-8 bytes, whatever its collation
        value = col if isinstance(source_type, T.BinaryType) else col.cast("binary")
        return df.withColumn(out, F.call_function(JAVA_UDF, value))
    if isinstance(source_type, T.StringType | T.BinaryType | T.ByteType | T.ShortType):
        st = _Stages(df, re.sub(r"\W", "_", out))
        if isinstance(source_type, T.StringType) and source_type.collation == "UTF8_BINARY":
            return st.finish(out, _padded_hash(st, col, binary=False))
        if isinstance(source_type, T.StringType | T.BinaryType):
            # a collated string hashes by its collation key: hash its UTF-8 bytes instead
            return st.finish(out, _padded_hash(st, col.cast("binary"), binary=True))
        mask, width = _NATIVE_SMALL[type(source_type)]
        return st.finish(out, _null_safe(col, _small_int_hash(st, col, mask, width)))
    return df.withColumn(out, murmur3_column(col, source_type))


def murmur3_multi_column(*cols: Column) -> Column:
    """The spec's ``murmur3_multi``: hash of the concatenated non-null values (Arrow UDF)."""
    return _murmur3_multi_udf(*cols)


def bucket_column(hashed: Column | str, num_buckets: int) -> Column:
    """``abs(h) % N`` in 64 bits, as int in ``[0, N)``; ``abs`` is never negative, so no ``pmod``.

    Given a column name, ``abs`` is the branch-free ``(h ^ s) - s`` with ``s = h >> 63``
    (the name is read three times): Spark's ``abs`` is a branch that hashes mispredict
    half the time, which costs as much as the hash itself. For a power-of-two ``N`` the
    remainder is a mask.
    """
    if isinstance(hashed, str):
        h = F.col(hashed).cast("long")
        sign = F.shiftright(h, 63)
        magnitude = h.bitwiseXOR(sign) - sign
    else:
        magnitude = F.abs(hashed.cast("long"))
    if num_buckets & (num_buckets - 1) == 0:
        return magnitude.bitwiseAND(_lit(num_buckets - 1)).cast("int")
    return (magnitude % _lit(num_buckets)).cast("int")
