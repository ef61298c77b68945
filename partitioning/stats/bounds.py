"""Column statistics of one partition table: collected from rows, merged, kept as JSON.

:class:`TableStats` holds, per top-level column of an orderable type (integers, floats,
decimals, dates, timestamps, strings, booleans), keyed by the column's field id: how many
values are NULL, how many are NaN (floats), how many are neither, and the lowest and highest
of those. Strings are bounded by a prefix of :data:`STRING_PREFIX` characters: the lower
bound is the lowest value's prefix, the upper bound the highest value's prefix with its last
character raised by one (Iceberg's ``truncate`` bounds), or no upper bound when no character
can be raised. Infinite float bounds are left out (unbounded), so the JSON stays strict.

Counts only ever grow when rows are added and stay as they were when rows are deleted, so
after deletes they are upper bounds and the bounds still enclose every value: pruning with
them stays sound. A table's statistics hold for one table version
(:data:`STATS_KEY` in its ``__manifest`` row's ``metadata``, with that version): a row whose
``read_version`` moved without them has none, and is always read.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.spec.field_ids import field_id_of

__all__ = [
    "STATS_KEY",
    "STRING_PREFIX",
    "ColumnStats",
    "StatsChange",
    "TableStats",
    "collect_stats",
    "raised",
    "raw_stats",
    "stats_type",
]

STATS_KEY = "lance_partitioned.stats"
STRING_PREFIX = 32
_MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True)
class ColumnStats:
    """One column's statistics: ``values`` counts rows neither NULL nor NaN, bounded by
    ``lo``..``hi`` (None: unbounded on that side while ``values`` > 0)."""

    type: str
    nulls: int
    nans: int
    values: int
    lo: Any = None
    hi: Any = None

    def merged(self, other: ColumnStats) -> ColumnStats | None:
        if other.type != self.type:
            return None
        return ColumnStats(
            self.type,
            self.nulls + other.nulls,
            self.nans + other.nans,
            self.values + other.values,
            _side(self, other, "lo", min),
            _side(self, other, "hi", max),
        )

    @classmethod
    def from_raw(cls, c: Any) -> ColumnStats | None:
        """One column's entry as JSON decoded it; None if it is not one :meth:`to_json` makes."""
        try:
            counts = (c["nulls"], c["nans"], c["values"])
            kind = str(c["type"])
            lo, hi = _decode(kind, c.get("lo")), _decode(kind, c.get("hi"))
        except (TypeError, KeyError, AttributeError):
            return None
        return cls(kind, counts[0], counts[1], counts[2], lo, hi) if all(_is_count(n) for n in counts) else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "nulls": self.nulls, "nans": self.nans, "values": self.values}
        if self.values and self.lo is not None:
            out["lo"] = _encode(self.lo)
        if self.values and self.hi is not None:
            out["hi"] = _encode(self.hi)
        return out


@dataclass(frozen=True)
class TableStats:
    """Statistics of a table's rows (``rows``: how many, an upper bound after deletes)."""

    rows: int
    columns: Mapping[str, ColumnStats] = field(default_factory=dict)

    def merged(self, other: TableStats) -> TableStats:
        """Statistics of both sets of rows: a column only one side records is dropped."""
        if not other.rows:
            return TableStats(self.rows, self.columns)
        if not self.rows:
            return TableStats(other.rows, other.columns)
        columns = {}
        for fid, mine in self.columns.items():
            theirs = other.columns.get(fid)
            both = mine.merged(theirs) if theirs is not None else None
            if both is not None:
                columns[fid] = both
        return TableStats(self.rows + other.rows, columns)

    def without(self, field_ids: frozenset[str]) -> TableStats:
        return TableStats(self.rows, {f: c for f, c in self.columns.items() if f not in field_ids})

    def to_json(self, version: int | None) -> str:
        """JSON for a ``__manifest`` row (holding for table ``version``) or, without one, a commit message."""
        body: dict[str, Any] = {"rows": self.rows, "columns": {f: c.to_json() for f, c in self.columns.items()}}
        if version is not None:
            body["version"] = version
        return json.dumps(body, separators=(",", ":"), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, version: int | None) -> TableStats | None:
        """The statistics in ``text`` if they hold for table ``version``; None when they do not,
        or when they are not well-formed (a row written by hand or by another engine)."""
        body = raw_stats(text, version)
        return cls._parse(body) if body is not None else None

    @classmethod
    def from_message(cls, text: str) -> TableStats | None:
        """The statistics a write task sent (:meth:`to_json` without a version)."""
        try:
            return cls._parse(json.loads(text))
        except ValueError:
            return None

    @classmethod
    def _parse(cls, body: Any) -> TableStats | None:
        try:
            columns = {str(fid): ColumnStats.from_raw(c) for fid, c in body["columns"].items()}
            rows = body["rows"]
        except (TypeError, KeyError, AttributeError):
            return None
        if not _is_count(rows) or any(c is None for c in columns.values()):
            return None
        return cls(rows, {f: c for f, c in columns.items() if c is not None})


def raw_stats(text: Any, version: int | None) -> dict[str, Any] | None:
    """The decoded JSON of statistics recorded for table ``version`` (their ``columns`` a
    mapping), or None when ``text`` holds none for that version."""
    if not isinstance(text, str) or version is None:
        return None
    try:
        body = json.loads(text)
        recorded = body["version"]
    except (ValueError, TypeError, KeyError):
        return None
    if isinstance(recorded, bool) or recorded != version or not isinstance(body.get("columns"), dict):
        return None
    return body


@dataclass(frozen=True)
class StatsChange:
    """What a table commit does to the table's statistics.

    ``added``: the statistics of the rows it adds (an empty :class:`TableStats` for a commit
    that only deletes rows or rewrites files); ``base_version``: the table version whose rows
    it kept (None: the new version holds only the added rows, as a new table or an overwrite
    does); ``forget``: field ids whose values it changed without knowing to what;
    ``replace``: columns whose statistics for the whole table it knows (a backfill);
    ``widen``: the statistics of new values of some columns, merged into the table's (Lance's
    ``UPDATE``: the rows it rewrote, whose old values the bounds keep enclosing). A table
    built on a version keeps statistics only when its recorded ones hold for that version;
    a commit without a :class:`StatsChange` leaves the table without any.
    """

    added: TableStats
    base_version: int | None
    forget: frozenset[str] = frozenset()
    replace: Mapping[str, ColumnStats] = field(default_factory=dict)
    widen: Mapping[str, ColumnStats] = field(default_factory=dict)

    def apply(self, before: TableStats | None, before_version: int | None) -> TableStats | None:
        """The statistics after the commit, given those recorded for ``before_version``."""
        if self.base_version is None:
            after: TableStats | None = self.added
        elif before is None or before_version != self.base_version:
            after = None
        else:
            after = before.merged(self.added)
        if after is None:
            return None
        kept = after.without(self.forget)
        columns = {**kept.columns, **self.replace}
        for fid, wider in self.widen.items():
            merged = columns[fid].merged(wider) if fid in columns else None
            if merged is not None:
                columns[fid] = merged
            else:
                columns.pop(fid, None)
        return TableStats(kept.rows, columns)


def stats_type(t: pa.DataType) -> str | None:
    """The name statistics record for a column of type ``t``; None if it gets none."""
    supported = (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
    )
    return str(t) if supported else None


def collect_stats(table: pa.Table, schema: pa.Schema) -> TableStats:
    """Statistics of ``table``'s rows, for each top-level column of ``schema`` (the namespace
    schema, whose fields carry their field ids) of an orderable type."""
    columns = {}
    names = table.schema.names
    for name, fid, kind, t in _stats_columns(schema):
        i = names.index(name) if name in names else -1
        if i >= 0 and table.schema.field(i).type == t:
            columns[fid] = _column_stats(table.column(i), t, kind)
    return TableStats(table.num_rows, columns)


@functools.lru_cache(maxsize=64)
def _stats_columns(schema: pa.Schema) -> tuple[tuple[str, str, str, pa.DataType], ...]:
    """(name, field id, recorded type name, type) of each column of ``schema`` that gets statistics."""
    out = []
    for f in schema:
        kind = stats_type(f.type)
        if kind is not None:
            out.append((f.name, str(field_id_of(f)), kind, f.type))
    return tuple(out)


def _column_stats(column: pa.ChunkedArray, t: pa.DataType, kind: str) -> ColumnStats:
    nulls = column.null_count
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        column = column.cast(pa.int64())  # bounds are kept as the stored integers
    elif pa.types.is_date32(t):
        column = column.cast(pa.int32())
    if not nulls and (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        return _numeric_stats(column, kind)
    nans = 0
    if pa.types.is_floating(t):
        is_nan = pc.is_nan(column)
        nans = pc.sum(is_nan).as_py() or 0
        if nans:
            column = pc.filter(column, pc.invert(is_nan))  # drops the NULLs too
    values = len(column) - column.null_count
    if not values:
        return ColumnStats(kind, nulls, nans, 0)
    low, high = (x.as_py() for x in pc.min_max(column).values())
    if pa.types.is_floating(t):
        low, high = _finite(low), _finite(high)
    elif isinstance(low, str):
        low, high = low[:STRING_PREFIX], _upper_prefix(high)
    return ColumnStats(kind, nulls, nans, values, low, high)


def _numeric_stats(column: pa.ChunkedArray, kind: str) -> ColumnStats:
    """A numeric column without NULLs, read by numpy without a copy (most columns written)."""
    arrays = [c.to_numpy(zero_copy_only=True) for c in column.chunks if len(c)]
    nans = 0
    if arrays and arrays[0].dtype.kind == "f":
        masks = [np.isnan(a) for a in arrays]
        nans = int(sum(int(m.sum()) for m in masks))
        if nans:
            arrays = [a[~m] for a, m in zip(arrays, masks, strict=True)]
    arrays = [a for a in arrays if len(a)]
    if not arrays:
        return ColumnStats(kind, 0, nans, 0)
    low, high = min(a.min() for a in arrays).item(), max(a.max() for a in arrays).item()
    if isinstance(low, float):
        low, high = _finite(low), _finite(high)
    return ColumnStats(kind, 0, nans, sum(len(a) for a in arrays), low, high)


def _finite(bound: float) -> float | None:
    """An infinite bound is no bound."""
    return None if math.isinf(bound) else bound


def _upper_prefix(value: str) -> str | None:
    """An upper bound of ``value`` at most :data:`STRING_PREFIX` characters long."""
    return value if len(value) <= STRING_PREFIX else raised(value[:STRING_PREFIX])


def raised(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (code point order,
    which is UTF-8 byte order: Spark's and Arrow's), or None if there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        code = 0xE000 if 0xD800 <= code <= 0xDFFF else code
        if code <= _MAX_CODE_POINT:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def _side(a: ColumnStats, b: ColumnStats, side: str, pick: Any) -> Any:
    """The merged bound: a side without values gives way; an unbounded side stays unbounded."""
    if not a.values:
        return getattr(b, side)
    if not b.values:
        return getattr(a, side)
    x, y = getattr(a, side), getattr(b, side)
    if x is None or y is None:
        return None
    return pick(x, y)


def _is_count(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _decode(kind: str, value: Any) -> Any:
    """A recorded bound as the value :func:`collect_stats` made (None: not one of those)."""
    if value is None:
        return None
    if kind.startswith("decimal"):
        try:
            number = decimal.Decimal(value) if isinstance(value, str) else None
        except decimal.InvalidOperation:
            return None
        return number if number is not None and number.is_finite() else None
    if kind in ("string", "large_string"):
        return value if isinstance(value, str) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind.startswith(("float", "double", "halffloat")):
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _encode(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date):  # pragma: no cover - dates and times are kept as integers
        raise TypeError(f"unexpected bound {value!r}")
    return value
