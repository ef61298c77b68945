"""Scalar murmur3 for the bucket transforms: the bytes one Python value of an Arrow type hashes as (SPEC-NOTES 7).

The vectorized hash lives in :mod:`partitioning.spec.murmur3`; this is the pure-Python
form that ``apply_scalar`` (pruning by literals) uses and that the tests hold it to.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from partitioning.errors import SpecError
from partitioning.spec import murmur3 as m3
from partitioning.spec.values import (
    EPOCH_DATE,
    UNIT_PER_SECOND,
    is_binary_type,
    is_string_type,
    to_utc_datetime,
)


def is_hashable_type(t: pa.DataType) -> bool:
    """Whether murmur3 has agreed bytes for values of ``t`` (see :func:`murmur3.unhashable_reason`)."""
    return m3.unhashable_reason(t) is None


def scalar_hash_bytes(value: Any, t: pa.DataType) -> bytes:
    """The bytes murmur3 hashes for one Python value of Arrow type ``t`` (SPEC-NOTES 7)."""
    reason = m3.unhashable_reason(t)
    if reason is not None:
        raise SpecError(f"values of type {t} cannot be hashed ({reason}); hashable types: {m3.HASHABLE_TYPES}")
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return int(value).to_bytes(t.bit_width // 8, "little", signed=pa.types.is_signed_integer(t))
    if pa.types.is_float32(t):
        return struct.pack("<f", value)
    if pa.types.is_float64(t):
        return struct.pack("<d", value)
    if pa.types.is_date32(t):
        days = (value - EPOCH_DATE).days if isinstance(value, dt.date) else int(value)
        return days.to_bytes(4, "little", signed=True)
    if pa.types.is_date64(t):
        ms = (value - EPOCH_DATE).days * 86_400_000 if isinstance(value, dt.date) else int(value)
        return ms.to_bytes(8, "little", signed=True)
    if pa.types.is_timestamp(t):
        if isinstance(value, dt.datetime):
            naive = to_utc_datetime(value, t)
            assert isinstance(naive, dt.datetime)
            delta = naive - dt.datetime(1970, 1, 1)
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            raw = micros * UNIT_PER_SECOND[t.unit] // 1_000_000
        else:
            raw = int(value)
        return raw.to_bytes(8, "little", signed=True)
    if pa.types.is_time(t):
        if isinstance(value, dt.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            nanos = micros * 1_000
        else:
            nanos = int(value) * 1_000_000_000 // UNIT_PER_SECOND[t.unit]
        return m3.format_time_of_day(nanos).encode()
    if is_string_type(t) or pa.types.is_string_view(t):
        return str(value).encode("utf-8")
    if is_binary_type(t):
        return bytes(value)
    if pa.types.is_boolean(t):
        return b"true" if value else b"false"
    if pa.types.is_decimal(t):
        with decimal.localcontext() as ctx:
            ctx.prec = 100
            q = decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-t.scale))
        return format(q, "f").encode()
    raise SpecError(f"values of type {t} cannot be hashed; hashable types: {m3.HASHABLE_TYPES}")


def scalar_murmur3(values: Sequence[Any], types: Sequence[pa.DataType]) -> int | None:
    present = [scalar_hash_bytes(v, t) for v, t in zip(values, types, strict=True) if v is not None]
    if not present:
        return None
    return m3.murmur3_scalar(b"".join(present))
