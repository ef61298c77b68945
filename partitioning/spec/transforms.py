"""Partition transforms: parsing, type rules, and one pure Arrow implementation each.

Transforms print and parse as the strings users write (``identity``, ``day``,
``bucket[16]``, ``truncate[4]``, ``multi_bucket[8]``). Each has a vectorized
``apply`` over Arrow arrays and a pure-Python ``apply_scalar`` used for literals
(pruning) and as an independent cross-check of the vectorized form.

The value handling they share lives beside them: :mod:`partitioning.spec.values`
(canonical floats, UTC date/times), :mod:`partitioning.spec.scalar_hash` (what a bucket
hashes) and :mod:`partitioning.spec.truncation` (integer and decimal truncation).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import SpecError
from partitioning.spec import murmur3 as m3
from partitioning.spec.scalar_hash import is_hashable_type, scalar_murmur3
from partitioning.spec.truncation import truncate_decimal, truncate_int, truncate_scalar_decimal
from partitioning.spec.values import (
    as_array,
    canonical_float,
    canonical_floats,
    is_atomic_type,
    is_binary_type,
    is_string_type,
    to_utc_datetime,
    utc_naive,
)

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
        return is_atomic_type(t)

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return source_types[0]

    def derived_expression(self, n_sources: int) -> str:
        return "col0"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        arr = as_array(arrays[0])
        return canonical_floats(arr) if pa.types.is_floating(arr.type) else arr

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        return canonical_float(values[0]) if pa.types.is_floating(types[0]) else values[0]

    @property
    def preserves_order(self) -> bool:
        return True


class _TimeTransform(Transform):
    accepted_types: ClassVar[str] = "date, timestamp"
    _part: ClassVar[str]

    def accepts(self, t: pa.DataType) -> bool:
        return pa.types.is_date(t) or pa.types.is_timestamp(t)

    def derived_expression(self, n_sources: int) -> str:
        return f"date_part('{self.name}', col0)"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        arr = utc_naive(as_array(arrays[0]))
        part = getattr(pc, self._part)(arr)
        return part.cast(pa.int32())

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        if values[0] is None:
            return None
        v = to_utc_datetime(values[0], types[0])
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
        h = scalar_murmur3(values, types)
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
        return pa.types.is_integer(t) or pa.types.is_decimal(t) or is_string_type(t) or is_binary_type(t)

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return source_types[0]

    def derived_expression(self, n_sources: int) -> str:
        return f"truncate(col0, {self.width})"

    def apply(self, *arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
        arr = as_array(arrays[0])
        t = arr.type
        if is_string_type(t):
            return pc.utf8_slice_codeunits(arr, 0, self.width)
        if is_binary_type(t):
            return pc.binary_slice(arr, 0, self.width)
        if pa.types.is_integer(t):
            return truncate_int(arr, self.width)
        if pa.types.is_decimal(t):
            return truncate_decimal(arr, self.width)
        raise SpecError(f"truncate cannot be applied to type {t}; truncate accepts {self.accepted_types}")

    def apply_scalar(self, values: Sequence[Any], types: Sequence[pa.DataType]) -> Any:
        v = values[0]
        if v is None:
            return None
        if isinstance(v, str | bytes):
            return v[: self.width]
        if isinstance(v, decimal.Decimal):
            return truncate_scalar_decimal(v, self.width)
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
