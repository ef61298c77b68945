"""Data skipping: which partition tables a filter may match, judged by their column statistics.

For a bound filter (:func:`partitioning.sql.binding.bind`: negation normal form, literals of
their column's type) and the ``__manifest`` rows of the tables partition pruning kept,
:func:`may_match` gives a mask that is False only for a table whose statistics prove no row
matches. Every leaf asks a question the statistics answer soundly:

- ``c = v``, ``c < v``, ``IN``, ``LIKE 'p%'``: may a value lie in the range? Values only
  shrink under deletes, so the recorded range still encloses them;
- ``IS NULL``: were NULLs ever counted; ``IS NOT NULL``: were values or NaNs;
- NaN follows Spark: NaN equals NaN and is above every number, so ``c > v`` and ``c >= v``
  keep a table with NaNs, ``c = NaN`` keeps only those.

Anything else keeps every table (a ``NOT`` other than ``NOT IS NULL``, computed columns,
nested fields, binary columns, comparisons with NULL); ``AND`` keeps a table every child
keeps, ``OR`` one any child keeps. A table without statistics for a column, or whose
statistics hold for another version than the one its row reads, keeps every leaf on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.spec.field_ids import field_id_of
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import literal_fits
from partitioning.sql.filters import And, Approx, Cmp, Const, Filter, In, IsNull, Like, Not, Or, columns_of, like_prefix
from partitioning.stats.bounds import STATS_KEY, ColumnStats, raised, raw_stats, stats_type

__all__ = ["RowStats"]


class RowStats:
    """The column statistics of a list of ``__manifest`` table rows (``metadata`` and the
    ``read_*`` columns), decoded on first use and kept: a manifest version's state holds one
    per spec version. A plan decodes only the rows partition pruning kept; a plan of every
    row keeps each column's ranges, so later plans of the version decode nothing."""

    _NAMES = ("metadata", "read_version", "read_branch", "read_tag")

    def __init__(self, rows: pa.Table) -> None:
        self._rows = rows
        self._decoded: dict[int, Mapping[str, Any] | None] = {}
        self._ranges: dict[tuple[str, str], _Ranges] = {}

    def _columns(self, rows: np.ndarray | None) -> list[Mapping[str, Any] | None]:
        """Per row (of ``rows``; default every row), its statistics' ``columns`` if they hold
        for the version the row reads."""
        wanted = range(self._rows.num_rows) if rows is None else rows.tolist()
        missing = [i for i in wanted if i not in self._decoded]
        if missing:
            part = self._rows.select(list(self._NAMES))
            part = part if len(missing) == self._rows.num_rows else part.take(pa.array(missing, pa.int64()))
            values = zip(*(part.column(c).to_pylist() for c in self._NAMES), strict=True)
            for i, (metadata, version, branch, tag) in zip(missing, values, strict=True):
                self._decoded[i] = _decode(metadata, version, branch, tag)
        return [self._decoded[i] for i in wanted]

    def ranges(self, field: pa.Field, rows: np.ndarray | None = None) -> _Ranges:
        """The column's ranges over ``rows`` (default every row, then kept)."""
        if rows is not None:
            return _Ranges.of(self._columns(rows), field)
        key = (str(field_id_of(field)), str(field.type))
        found = self._ranges.get(key)
        if found is None:
            found = self._ranges[key] = _Ranges.of(self._columns(None), field)
        return found

    def may_match(self, f: Filter, schema: NamespaceSchema, rows: np.ndarray | None = None) -> np.ndarray | None:
        """Per row (of ``rows``, indices; default every row), False when its table's statistics
        prove no row matches ``f``; None when no column of ``f`` has statistics to judge by."""
        arrow = schema.arrow
        names = [c for c in columns_of(f) if arrow.get_field_index(c) >= 0]
        fields = {c: arrow.field(c) for c in names if stats_type(arrow.field(c).type) is not None}
        n = self._rows.num_rows if rows is None else len(rows)
        if not fields or not n or all(c is None for c in self._columns(rows)):
            return None
        return _Judge({c: self.ranges(field, rows) for c, field in fields.items()}, n).keep(f)


def _decode(metadata: Any, version: Any, branch: Any, tag: Any) -> Mapping[str, Any] | None:
    """A table row's statistics' ``columns``, if they hold for the version the row reads."""
    if not metadata or STATS_KEY not in metadata or branch is not None or tag is not None:
        return None
    try:
        props = json.loads(metadata)
    except ValueError:
        return None
    body = raw_stats(props.get(STATS_KEY), version) if isinstance(props, dict) else None
    return body["columns"] if body is not None else None


@dataclass(frozen=True)
class _Ranges:
    """One column's statistics across the tables, as arrays; a table without them may hold anything."""

    type: pa.DataType
    values: np.ndarray
    nulls: np.ndarray
    nans: np.ndarray
    lo: pa.Array
    hi: pa.Array

    @classmethod
    def of(cls, columns: Sequence[Mapping[str, Any] | None], field: pa.Field) -> _Ranges:
        fid, t = str(field_id_of(field)), field.type
        kind = stats_type(t)
        n = len(columns)
        values, nulls, nans = np.ones(n, bool), np.ones(n, bool), np.ones(n, bool)
        lo: list[Any] = [None] * n
        hi: list[Any] = [None] * n
        for i, recorded in enumerate(columns):
            c = ColumnStats.from_raw(recorded.get(fid)) if recorded is not None and fid in recorded else None
            if c is None or c.type != kind:
                continue
            values[i], nulls[i], nans[i] = c.values > 0, c.nulls > 0, c.nans > 0
            lo[i], hi[i] = c.lo, c.hi
        wide = pa.float64() if pa.types.is_floating(t) else t
        return cls(wide, values, nulls, nans, _typed(lo, t, wide), _typed(hi, t, wide))


def _typed(bounds: list[Any], t: pa.DataType, wide: pa.DataType) -> pa.Array:
    """Recorded bounds as an array of the column's type; one that does not fit is unbounded."""
    storage = pa.int64() if pa.types.is_timestamp(t) or pa.types.is_date64(t) else t
    storage = pa.int32() if pa.types.is_date32(t) else storage
    checked = []
    for b in bounds:
        try:
            ok = b is not None and pa.scalar(b, type=storage).is_valid
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            ok = False
        ok = ok and isinstance(b, bool) == pa.types.is_boolean(t)
        checked.append(b if ok and not (isinstance(b, float) and math.isnan(b)) else None)
    try:
        return pa.array(checked, type=storage).cast(wide)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.nulls(len(bounds), wide)


class _Judge:
    """Evaluates a filter over the columns' ranges: True where a table may hold a matching row."""

    def __init__(self, ranges: dict[str, _Ranges], n: int) -> None:
        self.ranges = ranges
        self.n = n

    def _all(self) -> np.ndarray:
        return np.ones(self.n, bool)

    def keep(self, f: Filter) -> np.ndarray:
        if isinstance(f, Approx):
            return self.keep(f.child)
        if isinstance(f, Const):
            return self._all() if f.value is True else np.zeros(self.n, bool)
        if isinstance(f, And):
            out = self._all()
            for c in f.children:
                out &= self.keep(c)
            return out
        if isinstance(f, Or):
            out = np.zeros(self.n, bool)
            for c in f.children:
                out |= self.keep(c)
            return out
        if isinstance(f, Not) and isinstance(f.child, IsNull) and f.child.column in self.ranges:
            r = self.ranges[f.child.column]
            return r.values | r.nans
        if not isinstance(f, Cmp | In | IsNull | Like) or f.column not in self.ranges:
            return self._all()
        r = self.ranges[f.column]
        if isinstance(f, IsNull):
            return r.nulls.copy()
        if isinstance(f, Cmp):
            if f.value is None:
                return r.nulls.copy() if f.op == "<=>" else self._all()
            return self._cmp(r, "=" if f.op == "<=>" else f.op, f.value)
        if isinstance(f, In):
            out = np.zeros(self.n, bool)
            for v in f.values:
                if v is not None:  # x IN (..., NULL) is never TRUE through the NULL
                    out |= self._cmp(r, "=", v)
            return out
        return self._like(r, f)

    def _cmp(self, r: _Ranges, op: str, v: Any) -> np.ndarray:
        if not literal_fits(v, r.type):
            return self._all()
        if isinstance(v, float) and math.isnan(v):
            nan_rule = {"=": r.nans, ">=": r.nans, ">": np.zeros(self.n, bool), "<=": r.values | r.nans}
            return nan_rule.get(op, r.values).copy()  # "<" and "!=": every number
        try:
            lit = pa.scalar(v, type=r.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            return self._all()
        above = _true_if_null(pc.greater_equal(r.hi, lit))
        strictly_above = _true_if_null(pc.greater(r.hi, lit))
        below = _true_if_null(pc.less_equal(r.lo, lit))
        strictly_below = _true_if_null(pc.less(r.lo, lit))
        nans = r.nans if pa.types.is_floating(r.type) else np.zeros(self.n, bool)
        if op == "=":
            return r.values & above & below
        if op == "!=":
            only_v = ~_true_if_null(pc.not_equal(r.lo, lit)) & ~_true_if_null(pc.not_equal(r.hi, lit))
            return (r.values & ~only_v) | nans
        if op == "<":
            return r.values & strictly_below
        if op == "<=":
            return r.values & below
        if op == ">":
            return (r.values & strictly_above) | nans
        if op == ">=":
            return (r.values & above) | nans
        return self._all()

    def _like(self, r: _Ranges, f: Like) -> np.ndarray:
        prefix = like_prefix(f.text) if f.kind == "pattern" else f.text if f.kind == "starts" else ""
        if not prefix or (not pa.types.is_string(r.type) and not pa.types.is_large_string(r.type)):
            return r.values.copy()
        lit = pa.scalar(prefix, type=r.type)
        out = r.values & _true_if_null(pc.greater_equal(r.hi, lit))
        above = raised(prefix)
        if above is not None:
            out &= _true_if_null(pc.less(r.lo, pa.scalar(above, type=r.type)))
        return out


def _true_if_null(a: pa.Array) -> np.ndarray:
    """An unknown bound may hold anything."""
    return np.asarray(pc.fill_null(a, True).to_numpy(zero_copy_only=False), dtype=bool)
