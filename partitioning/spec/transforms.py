"""Partition transforms: parsing, type rules, and one pure Arrow implementation each.

Transforms print and parse as the strings users write (``identity``, ``day``,
``bucket[16]``, ``truncate[4]``, ``multi_bucket[8]``). Each has a vectorized
``apply`` over Arrow arrays and a pure-Python ``apply_scalar`` used for literals
(pruning) and as an independent cross-check of the vectorized form.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import SpecError
from partitioning.spec import murmur3 as m3

__all__ = [
    "TRANSFORM_NAMES",
    "BucketTransform",
    "DayTransform",
    "HourTransform",
    "IdentityTransform",
    "MonthTransform",
    "MultiBucketTransform",
    "Transform",
    "TruncateTransform",
    "YearTransform",
    "parse_transform",
]

TRANSFORM_NAMES = ("identity", "year", "month", "day", "hour", "bucket[N]", "multi_bucket[N]", "truncate[W]")
_PARAM_RE = re.compile(r"^\s*([a-z_]+)\s*(?:\[\s*(-?\d+)\s*\])?\s*$")


def _is_atomic(t: pa.DataType) -> bool:
    return not pa.types.is_nested(t) and not pa.types.is_null(t)


def is_hashable_type(t: pa.DataType) -> bool:
    """Whether murmur3 has agreed bytes for values of ``t`` (see :func:`murmur3.unhashable_reason`)."""
    return m3.unhashable_reason(t) is None


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


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


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


class Transform(ABC):
    """A well-known partition transform (the spec's ``transform`` object)."""

    name: ClassVar[str]
    multi_source: ClassVar[bool] = False

    # -- text and JSON ------------------------------------------------------------------
    def __str__(self) -> str:
        return self.name

    def to_json(self) -> dict[str, Any]:
        return {"type": self.name}

    @staticmethod
    def parse(text: str | Transform) -> Transform:
        return parse_transform(text)

    # -- types ----------------------------------------------------------------------------
    def check_sources(self, sources: Sequence[pa.Field]) -> None:
        """Raise :class:`SpecError` when the source columns do not fit this transform."""
        if not self.multi_source and len(sources) != 1:
            raise SpecError(f"{self} takes exactly one source column, got {len(sources)}")
        if self.multi_source and not sources:
            raise SpecError(f"{self} needs at least one source column")
        for f in sources:
            if not self.accepts(f.type):
                why = self.refusal_reason(f.type)
                raise SpecError(
                    f"transform {self} cannot be applied to column {f.name!r} of type {f.type}"
                    f"{f' ({why})' if why else ''}; {self.name} accepts {self.accepted_types}"
                )

    @abstractmethod
    def accepts(self, t: pa.DataType) -> bool: ...

    def refusal_reason(self, t: pa.DataType) -> str | None:
        """Why a type this transform does not accept is refused, when there is more to say."""
        return None

    accepted_types: ClassVar[str]

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.int32()

    @abstractmethod
    def derived_expression(self, n_sources: int) -> str:
        """The spec's derived DataFusion expression, with ``col0``... placeholders."""

    # -- evaluation -----------------------------------------------------------------------
    @abstractmethod
    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Vectorized transform of one array per source column; NULL maps to NULL."""

    @abstractmethod
    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        """Pure-Python transform of one value per source column (``None`` is NULL)."""

    # -- properties used by pruning and joins -------------------------------------------------
    @property
    def preserves_order(self) -> bool:
        return False


@dataclass(frozen=True)
class IdentityTransform(Transform):
    name: ClassVar[str] = "identity"
    accepted_types: ClassVar[str] = "any non-nested type"

    def accepts(self, t: pa.DataType) -> bool:
        return _is_atomic(t)

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return source_types[0]

    def derived_expression(self, n_sources: int) -> str:
        return "col0"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        arr = _combine(arrays[0])
        return canonical_floats(arr) if pa.types.is_floating(arr.type) else arr

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        return canonical_float(values[0]) if pa.types.is_floating(types[0]) else values[0]

    @property
    def preserves_order(self) -> bool:
        return True


def _utc_naive(arr: pa.Array) -> pa.Array:
    """Timestamps as naive UTC wall time (Arrow stores UTC; dropping the zone keeps it)."""
    if pa.types.is_timestamp(arr.type) and arr.type.tz is not None:
        return arr.cast(pa.timestamp(arr.type.unit))
    return arr


_EPOCH_DATE = dt.date(1970, 1, 1)
_UNIT_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _to_utc_datetime(value: Any, t: pa.DataType) -> dt.datetime | dt.date:
    """A Python date/datetime (UTC, naive) for a date or timestamp value."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, dt.date):
        return value
    if isinstance(value, int):
        if pa.types.is_date32(t):
            return _EPOCH_DATE + dt.timedelta(days=value)
        if pa.types.is_date64(t):
            return _EPOCH_DATE + dt.timedelta(milliseconds=value)
        if pa.types.is_timestamp(t):
            per_s = _UNIT_PER_SECOND[t.unit]
            seconds, rem = divmod(value, per_s)
            return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds, microseconds=rem * 1_000_000 // per_s)
    raise SpecError(f"cannot read {value!r} as a date or timestamp")


class _TimeTransform(Transform):
    accepted_types: ClassVar[str] = "date, timestamp"
    _part: ClassVar[str]

    def accepts(self, t: pa.DataType) -> bool:
        return pa.types.is_date(t) or pa.types.is_timestamp(t)

    def derived_expression(self, n_sources: int) -> str:
        return f"date_part('{self.name}', col0)"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        arr = _utc_naive(_combine(arrays[0]))
        part = getattr(pc, self._part)(arr)
        return part.cast(pa.int32())

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        if values[0] is None:
            return None
        v = _to_utc_datetime(values[0], types[0])
        if self.name == "hour":
            return v.hour if isinstance(v, dt.datetime) else 0
        return int(getattr(v, self.name))

    @property
    def preserves_order(self) -> bool:
        return self.name == "year"


@dataclass(frozen=True)
class YearTransform(_TimeTransform):
    name: ClassVar[str] = "year"
    _part: ClassVar[str] = "year"


@dataclass(frozen=True)
class MonthTransform(_TimeTransform):
    name: ClassVar[str] = "month"
    _part: ClassVar[str] = "month"


@dataclass(frozen=True)
class DayTransform(_TimeTransform):
    name: ClassVar[str] = "day"
    _part: ClassVar[str] = "day"


@dataclass(frozen=True)
class HourTransform(_TimeTransform):
    name: ClassVar[str] = "hour"
    _part: ClassVar[str] = "hour"
    accepted_types: ClassVar[str] = "timestamp (not date)"

    def accepts(self, t: pa.DataType) -> bool:
        return pa.types.is_timestamp(t)


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
        days = (value - _EPOCH_DATE).days if isinstance(value, dt.date) else int(value)
        return days.to_bytes(4, "little", signed=True)
    if pa.types.is_date64(t):
        ms = (value - _EPOCH_DATE).days * 86_400_000 if isinstance(value, dt.date) else int(value)
        return ms.to_bytes(8, "little", signed=True)
    if pa.types.is_timestamp(t):
        if isinstance(value, dt.datetime):
            naive = _to_utc_datetime(value, t)
            assert isinstance(naive, dt.datetime)
            delta = naive - dt.datetime(1970, 1, 1)
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            raw = micros * _UNIT_PER_SECOND[t.unit] // 1_000_000
        else:
            raw = int(value)
        return raw.to_bytes(8, "little", signed=True)
    if pa.types.is_time(t):
        if isinstance(value, dt.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            nanos = micros * 1_000
        else:
            nanos = int(value) * 1_000_000_000 // _UNIT_PER_SECOND[t.unit]
        return m3.format_time_of_day(nanos).encode()
    if _is_string(t) or pa.types.is_string_view(t):
        return str(value).encode("utf-8")
    if _is_binary(t):
        return bytes(value)
    if pa.types.is_boolean(t):
        return b"true" if value else b"false"
    if pa.types.is_decimal(t):
        with decimal.localcontext() as ctx:
            ctx.prec = 100
            q = decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-t.scale))
        return format(q, "f").encode()
    raise SpecError(f"values of type {t} cannot be hashed; hashable types: {m3.HASHABLE_TYPES}")


def _scalar_murmur3(values: Sequence[Any], types: Sequence[pa.DataType]) -> int | None:
    present = [scalar_hash_bytes(v, t) for v, t in zip(values, types, strict=True) if v is not None]
    if not present:
        return None
    return m3.murmur3_scalar(b"".join(present))


class _BucketBase(Transform):
    num_buckets: int
    accepted_types: ClassVar[str] = m3.HASHABLE_TYPES

    def __post_init__(self) -> None:
        if not isinstance(self.num_buckets, int) or isinstance(self.num_buckets, bool) or self.num_buckets < 1:
            raise SpecError(f"{self.name}: num_buckets must be an integer >= 1, got {self.num_buckets!r}")

    def __str__(self) -> str:
        return f"{self.name}[{self.num_buckets}]"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.name, "num_buckets": self.num_buckets}

    def accepts(self, t: pa.DataType) -> bool:
        return is_hashable_type(t)

    def refusal_reason(self, t: pa.DataType) -> str | None:
        reason = m3.unhashable_reason(t)
        return reason if reason is not None and reason.startswith("refused") else None

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        h = _scalar_murmur3(values, types)
        return None if h is None else abs(h) % self.num_buckets


@dataclass(frozen=True)
class BucketTransform(_BucketBase):
    num_buckets: int
    name: ClassVar[str] = "bucket"

    def derived_expression(self, n_sources: int) -> str:
        return f"abs(murmur3(col0)) % {self.num_buckets}"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        return m3.bucket(m3.murmur3(arrays[0]), self.num_buckets)


@dataclass(frozen=True)
class MultiBucketTransform(_BucketBase):
    num_buckets: int
    name: ClassVar[str] = "multi_bucket"
    multi_source: ClassVar[bool] = True

    def derived_expression(self, n_sources: int) -> str:
        cols = ", ".join(f"col{i}" for i in range(n_sources))
        return f"abs(murmur3_multi({cols})) % {self.num_buckets}"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        return m3.bucket(m3.murmur3_multi(*arrays), self.num_buckets)


def _truncate_int(arr: pa.Array, width: int) -> pa.Array:
    """``v - (v % W)`` with ``%`` truncating toward zero, exact for every int width."""
    t = arr.type
    np_type = np.dtype(t.to_pandas_dtype())
    values = m3._numpy_values(arr, np_type)
    info = np.iinfo(np_type)
    if width > info.max:
        # Every |v| < W gives 0; only v == MIN with W == |MIN| is a multiple of W.
        out = np.where(values == info.min, values, 0) if width == -int(info.min) else np.zeros_like(values)
        out = out.astype(np_type)
    else:
        out = values - np.fmod(values, np_type.type(width))
    mask = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    return pa.array(out, type=t, mask=mask)


def _truncate_decimal(arr: pa.Array, width: int) -> pa.Array:
    t = arr.type
    unit = width * 10**t.scale
    if isinstance(t, pa.Decimal128Type) and t.precision <= 18:
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + len(arr)))
        unscaled = words[2 * arr.offset :: 2]
        if unit > np.iinfo(np.int64).max:
            out = np.zeros_like(unscaled)
        else:
            out = unscaled - np.fmod(unscaled, np.int64(unit))
        hi = np.where(out < 0, np.int64(-1), np.int64(0))
        buf = np.empty(2 * len(out), dtype=np.int64)
        buf[0::2] = out
        buf[1::2] = hi
        validity = None
        if arr.null_count:
            validity = pa.array(arr.is_valid().to_numpy(zero_copy_only=False)).buffers()[1]
        return pa.Array.from_buffers(t, len(arr), [validity, pa.py_buffer(buf)], null_count=arr.null_count)
    return pa.array([_truncate_scalar_decimal(v, width) for v in arr.to_pylist()], type=t)


def _truncate_scalar_decimal(v: decimal.Decimal | None, width: int) -> decimal.Decimal | None:
    if v is None:
        return None
    w = decimal.Decimal(width)
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        return v - (v % w)  # Decimal % truncates toward zero, as SQL does


@dataclass(frozen=True)
class TruncateTransform(Transform):
    width: int
    name: ClassVar[str] = "truncate"
    accepted_types: ClassVar[str] = "int, long, short, byte, decimal, string, binary"

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or isinstance(self.width, bool) or self.width < 1:
            raise SpecError(f"truncate: width must be an integer >= 1, got {self.width!r}")

    def __str__(self) -> str:
        return f"truncate[{self.width}]"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.name, "width": self.width}

    def accepts(self, t: pa.DataType) -> bool:
        return pa.types.is_integer(t) or pa.types.is_decimal(t) or _is_string(t) or _is_binary(t)

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return source_types[0]

    def derived_expression(self, n_sources: int) -> str:
        return f"truncate(col0, {self.width})"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        arr = _combine(arrays[0])
        t = arr.type
        if _is_string(t):
            return pc.utf8_slice_codeunits(arr, 0, self.width)
        if _is_binary(t):
            return pc.binary_slice(arr, 0, self.width)
        if pa.types.is_integer(t):
            return _truncate_int(arr, self.width)
        if pa.types.is_decimal(t):
            return _truncate_decimal(arr, self.width)
        raise SpecError(f"truncate cannot be applied to type {t}; truncate accepts {self.accepted_types}")

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        v = values[0]
        if v is None:
            return None
        if isinstance(v, str | bytes):
            return v[: self.width]
        if isinstance(v, decimal.Decimal):
            return _truncate_scalar_decimal(v, self.width)
        v = int(v)
        return v - int(np.sign(v)) * (abs(v) % self.width)

    @property
    def preserves_order(self) -> bool:
        return True


_BY_NAME: dict[str, type[Transform]] = {
    "identity": IdentityTransform,
    "year": YearTransform,
    "month": MonthTransform,
    "day": DayTransform,
    "hour": HourTransform,
}
_PARAMETERIZED: dict[str, tuple[type[Transform], str]] = {
    "bucket": (BucketTransform, "num_buckets"),
    "multi_bucket": (MultiBucketTransform, "num_buckets"),
    "truncate": (TruncateTransform, "width"),
}


def parse_transform(text: str | Transform) -> Transform:
    """Parse ``"bucket[16]"``-style text; a Transform is returned unchanged."""
    if isinstance(text, Transform):
        return text
    if not isinstance(text, str):
        raise SpecError(f"a transform must be a string like 'bucket[16]', got {text!r}")
    match = _PARAM_RE.match(text)
    if not match:
        raise SpecError(f"cannot parse transform {text!r}; allowed: {', '.join(TRANSFORM_NAMES)}")
    name, param = match.group(1), match.group(2)
    if name in _BY_NAME:
        if param is not None:
            raise SpecError(f"transform {name!r} takes no parameter, got {text!r}")
        return _BY_NAME[name]()
    if name in _PARAMETERIZED:
        cls = _PARAMETERIZED[name][0]
        if param is None:
            raise SpecError(f"transform {name!r} needs a parameter, e.g. '{name}[16]'; got {text!r}")
        return cls(int(param))  # type: ignore[call-arg]
    raise SpecError(f"unknown transform {name!r}; allowed: {', '.join(TRANSFORM_NAMES)}")


def transform_from_json(d: dict[str, Any]) -> Transform:
    """Build a Transform from the spec's transform object."""
    name = d.get("type")
    if name in _BY_NAME:
        extra = sorted(k for k in ("num_buckets", "width") if d.get(k) is not None)
        if extra:
            raise SpecError(f"transform {name!r} takes no parameters, got {', '.join(extra)}")
        return _BY_NAME[name]()
    if name in _PARAMETERIZED:
        cls, pname = _PARAMETERIZED[name]
        value = d.get(pname)
        if value is None:
            raise SpecError(f"transform {name!r} needs {pname!r}")
        return cls(value)  # type: ignore[call-arg]
    raise SpecError(f"unknown transform type {name!r}; allowed: {', '.join(TRANSFORM_NAMES)}")
