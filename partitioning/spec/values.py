"""Source values as transforms read them: type families, canonical floats, naive UTC date/times.

Spark compares -0.0 = 0.0 and NaN = NaN, so floats are folded to one value each before they
become partition values (:func:`canonical_floats`, :func:`canonical_float`). Dates and
timestamps are read as naive UTC wall time (:func:`utc_naive`, :func:`to_utc_datetime`), which
the time transforms and scalar hashing share.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa

from partitioning.errors import SpecError


def is_atomic_type(t: pa.DataType) -> bool:
    return not pa.types.is_nested(t) and not pa.types.is_null(t)


def is_string_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_binary_type(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def literal_fits(value: Any, t: pa.DataType) -> bool:
    """Whether a bound filter literal is a value of a column of type ``t`` (a timestamp's
    zone-awareness matching the column's)."""
    return (
        (pa.types.is_timestamp(t) and isinstance(value, dt.datetime) and (value.tzinfo is None) == (t.tz is None))
        or (pa.types.is_date(t) and isinstance(value, dt.date) and not isinstance(value, dt.datetime))
        or (pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool))
        or (pa.types.is_decimal(t) and isinstance(value, decimal.Decimal))
        or (pa.types.is_floating(t) and isinstance(value, float))
        or (is_string_type(t) and isinstance(value, str))
        or (pa.types.is_boolean(t) and isinstance(value, bool))
        or (is_binary_type(t) and isinstance(value, bytes))
    )


def as_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One Arrow array: a chunked array's chunks combined (a single chunk as it is)."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


_CANONICAL_NAN_BITS: dict[int, tuple[np.dtype, np.dtype, int]] = {
    16: (np.dtype(np.float16), np.dtype(np.uint16), 0x7E00),
    32: (np.dtype(np.float32), np.dtype(np.uint32), 0x7FC0_0000),
    64: (np.dtype(np.float64), np.dtype(np.uint64), 0x7FF8_0000_0000_0000),
}


def canonical_floats(arr: pa.Array) -> pa.Array:
    """Float values with -0.0 as 0.0 and every NaN as the canonical quiet NaN; NULLs stay.

    Spark compares -0.0 = 0.0 and NaN = NaN, so an ``identity`` partition value must be
    one value for each: Spark's ``Double.NaN``/``Float.NaN`` bits (and float16's 0x7E00).
    """
    t = arr.type
    if len(arr) == 0:
        return arr
    float_dtype, bits_dtype, nan_bits = _CANONICAL_NAN_BITS[t.bit_width]
    count = arr.offset + len(arr)
    bits = np.frombuffer(arr.buffers()[1], dtype=bits_dtype, count=count)
    values = bits.view(float_dtype)
    out = np.where(np.isnan(values), bits_dtype.type(nan_bits), np.where(values == 0, bits_dtype.type(0), bits))
    return pa.Array.from_buffers(
        t,
        len(arr),
        [arr.buffers()[0], pa.py_buffer(out.astype(bits_dtype))],
        null_count=arr.null_count,
        offset=arr.offset,
    )


CANONICAL_NAN = float("nan")
"""The one NaN object scalar partition values use, so tuples holding it are equal dict keys."""


def canonical_float(value: Any) -> Any:
    """The scalar form of :func:`canonical_floats`: -0.0 becomes 0.0 and any NaN :data:`CANONICAL_NAN`."""
    if isinstance(value, float):
        if value != value:
            return CANONICAL_NAN
        if value == 0.0:
            return 0.0
    return value


EPOCH_DATE = dt.date(1970, 1, 1)


UNIT_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def utc_naive(arr: pa.Array) -> pa.Array:
    """Timestamps as naive UTC wall time (Arrow stores UTC; dropping the zone keeps it)."""
    if pa.types.is_timestamp(arr.type) and arr.type.tz is not None:
        return arr.cast(pa.timestamp(arr.type.unit))
    return arr


def to_utc_datetime(value: Any, t: pa.DataType) -> dt.datetime | dt.date:
    """A Python date/datetime (UTC, naive) for a date or timestamp value."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, dt.date):
        return value
    if isinstance(value, int):
        if pa.types.is_date32(t):
            return EPOCH_DATE + dt.timedelta(days=value)
        if pa.types.is_date64(t):
            return EPOCH_DATE + dt.timedelta(milliseconds=value)
        if pa.types.is_timestamp(t):
            per_s = UNIT_PER_SECOND[t.unit]
            seconds, rem = divmod(value, per_s)
            return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds, microseconds=rem * 1_000_000 // per_s)
    raise SpecError(f"cannot read {value!r} as a date or timestamp")
