"""Binding a filter to the namespace schema: Spark's type coercion, done once, exactly.

``bind`` takes a parsed filter, puts it in negation normal form, resolves column names
(case-insensitively unless the dialect says otherwise) and rewrites every comparison
so that its literal is a value of the column's own type, with the meaning Spark gives
it. Spark compares ``int_col > 2.5`` as decimals, ``bigint_col = 1e19D`` as doubles,
``date_col < TIMESTAMP '...'`` as instants in the session zone, ``ts_col = '2025-12-10'``
by casting the string in the session zone; after binding these read ``int_col >= 3``,
``FALSE``, ``date_col <= DATE '...'``, ``ts_col = <instant>``. Pruning, Lance scans
and the exact Arrow evaluation then compare like with like.

In negation normal form, AND/OR above the leaves are monotone, so a leaf that is NULL
and one that is FALSE select the same rows; binding uses that to fold comparisons that
can never hold into ``FALSE``. What binding cannot express exactly stays
:class:`~partitioning.sql.filters.Opaque` (or :class:`~partitioning.sql.filters.Approx`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from partitioning.errors import SchemaError
from partitioning.sql.arith import bind_computed
from partitioning.sql.filters import (
    And,
    Approx,
    Cmp,
    Computed,
    Const,
    Filter,
    In,
    IsNull,
    Like,
    Not,
    Opaque,
    Or,
    TrueFilter,
    negation_normal_form,
)
from partitioning.sql.timezones import (
    is_fixed_offset,
    local_to_instant,
    parse_date_text,
    parse_timestamp_text,
    resolve_zone,
)
from partitioning.sql.tokens import DECIMAL_CONTEXT, Dialect

__all__ = ["UnknownColumn", "bind", "resolve_column"]

NOT_NULL = "not_null"
_DST_SLACK = dt.timedelta(hours=3)
_EPOCH = dt.date(1970, 1, 1)


class UnknownColumn(SchemaError):
    """A filter names a column the schema does not have."""

    def __init__(self, column: str, names: list[str]) -> None:
        super().__init__(f"unknown column {column!r} in filter; columns are: {', '.join(names)}")
        self.column = column


class _NoMatch(Exception):
    """The literal cannot be compared with the column the way binding knows."""


def resolve_column(name: str, schema: pa.Schema, case_sensitive: bool) -> str:
    """The schema's spelling of ``name`` (Spark resolves names case-insensitively by default)."""
    if name in schema.names:
        return name
    if not case_sensitive:
        matches = [n for n in schema.names if n.lower() == name.lower()]
        if len(matches) == 1:
            return matches[0]
    raise UnknownColumn(name, list(schema.names))


def bind(f: Filter, schema: pa.Schema, dialect: Dialect | None = None) -> Filter:
    """``f`` in negation normal form with every literal coerced to its column's type."""
    return _Binder(schema, dialect or Dialect()).bind(negation_normal_form(f))


class _Binder:
    def __init__(self, schema: pa.Schema, dialect: Dialect) -> None:
        self.schema = schema
        self.dialect = dialect

    @property
    def zone(self) -> dt.tzinfo:
        return resolve_zone(self.dialect.zone)

    def bind(self, f: Filter) -> Filter:
        if isinstance(f, And | Or):
            return type(f)(tuple(self.bind(c) for c in f.children))
        if isinstance(f, TrueFilter | Const | Opaque | Approx):
            return f
        if isinstance(f, Computed):
            resolve = lambda name: resolve_column(name, self.schema, self.dialect.case_sensitive)  # noqa: E731
            return bind_computed(f, self.schema, resolve, spark=self.dialect.name == "spark", ansi=self.dialect.ansi)
        negated = isinstance(f, Not)
        leaf = f.child if isinstance(f, Not) else f
        assert isinstance(leaf, Cmp | In | IsNull | Like)
        name = resolve_column(leaf.column, self.schema, self.dialect.case_sensitive)
        t = self.schema.field(name).type
        if isinstance(leaf, Cmp) and leaf.value is None:
            if leaf.op != "<=>":
                return Const(None)
            leaf = IsNull(name)
        if isinstance(leaf, IsNull):
            return Not(IsNull(name)) if negated else IsNull(name)
        if pa.types.is_nested(t) or pa.types.is_dictionary(t):
            return Opaque(f"comparison on {name} ({t})")
        if not self.dialect.ansi and self.dialect.name == "spark" and _text_against_other(leaf, t):
            # without ANSI mode Spark may compare a string and another type as text
            # (r IN (0.1, 'NaN') on a float: CAST(r AS STRING) IN ('0.1', 'NaN'))
            return Opaque(f"a string compared with {name} ({t}) without ANSI mode")
        if isinstance(leaf, Like):
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                return Opaque(f"LIKE on {name} ({t})")
            like = Like(name, leaf.kind, leaf.text)
            return Not(like) if negated else like
        try:
            if isinstance(leaf, In):
                return self._in(name, t, leaf.values, negated)
            if negated:  # only NOT (c <=> v) stays negated in negation normal form
                eq = self._cmp(name, t, "=", leaf.value)
                return Or((IsNull(name), _negate_equality(eq, name)))
            return self._cmp(name, t, leaf.op, leaf.value)
        except _NoMatch:
            return Opaque(f"{name} ({t}) {leaf} ")

    # -- one comparison ---------------------------------------------------------------------
    def _cmp(self, name: str, t: pa.DataType, op: str, value: Any) -> Filter:
        if op == "<=>":
            op = "="
        if pa.types.is_integer(t):
            lo, hi = _int_range(t)
            a, b = self._int_bounds(value, lo, hi)
            if not isinstance(value, float) and _always_true_beyond_range(op, a, b, lo, hi):
                # Spark folds a bigint compared with a decimal beyond its range to TRUE, NULLs
                # included, and an int to IS NOT NULL (4.3.0): neither is pruned on
                raise _NoMatch
            return _discrete(name, op, a, b, lo, hi)
        if pa.types.is_decimal(t):
            return self._decimal(name, t, op, value)
        if pa.types.is_floating(t):
            return Cmp(name, op, _float_value(value, t))
        if pa.types.is_date(t):
            return self._date(name, op, value)
        if pa.types.is_timestamp(t):
            return self._timestamp(name, t, op, value)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if isinstance(value, str):
                return Cmp(name, op, value)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            if isinstance(value, bytes):
                return Cmp(name, op, value)
            if isinstance(value, str):
                return Cmp(name, op, value.encode())
        elif pa.types.is_boolean(t) and isinstance(value, bool):
            return Cmp(name, op, value)
        raise _NoMatch

    def _in(self, name: str, t: pa.DataType, values: tuple[Any, ...], negated: bool) -> Filter:
        pieces = [self._cmp(name, t, "=", v) for v in values if v is not None]
        has_null = any(v is None for v in values)
        exact = [p.value for p in pieces if isinstance(p, Cmp) and p.op == "="]
        if len(exact) + sum(isinstance(p, Const) for p in pieces) == len(pieces):
            members = tuple(exact) + ((None,) if has_null else ())
            return Not(In(name, members)) if negated else In(name, members)
        if negated:
            return Opaque(f"NOT IN on {name}")
        return Or(tuple(pieces)) if pieces else Const(False)

    # -- integers and decimals: discrete domains ----------------------------------------------
    def _int_bounds(self, value: Any, lo: int, hi: int) -> tuple[int, int]:
        """(a, b): the smallest ints with ``x >= value`` and ``x > value`` in Spark's comparison."""
        if isinstance(value, bool):
            raise _NoMatch
        if isinstance(value, int):
            return value, value + 1
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise _NoMatch
            return _ceil(value), _floor(value) + 1
        if isinstance(value, float):
            return _float_bounds(value, lo, hi, float)
        raise _NoMatch

    def _decimal(self, name: str, t: pa.DataType, op: str, value: Any) -> Filter:
        step = decimal.Decimal(1).scaleb(-t.scale)
        limit = 10**t.precision - 1
        if isinstance(value, bool):
            raise _NoMatch
        if isinstance(value, int | decimal.Decimal):
            scaled = decimal.Decimal(value).scaleb(t.scale, context=DECIMAL_CONTEXT)
            a, b = _ceil(scaled), _floor(scaled) + 1
        elif isinstance(value, float):
            a, b = _float_bounds(
                value, -limit, limit, lambda k: float(decimal.Decimal(k).scaleb(-t.scale, context=DECIMAL_CONTEXT))
            )
        else:
            raise _NoMatch
        out = _discrete(name, op, a, b, -limit, limit)
        return _map_values(
            out,
            lambda k: (
                decimal.Decimal(k).scaleb(-t.scale, context=DECIMAL_CONTEXT).quantize(step, context=DECIMAL_CONTEXT)
            ),
        )

    # -- dates and timestamps ------------------------------------------------------------------
    def _date(self, name: str, op: str, value: Any) -> Filter:
        if isinstance(value, str):
            parsed = parse_date_text(value)
            if parsed is None:
                raise _NoMatch
            value = parsed
        if isinstance(value, dt.datetime):
            # Spark compares the date's midnight (in the session zone) with the instant.
            if value.tzinfo is None:
                day = value.date()
                exact = value == dt.datetime.combine(day, dt.time())
            else:
                day = value.astimezone(self.zone).date()
                exact = local_to_instant(dt.datetime.combine(day, dt.time()), self.zone) == value
            a = (day - _EPOCH).days + (0 if exact else 1)
            b = (day - _EPOCH).days + 1
            out = _discrete(name, op, a, b, -(10**8), 10**8)
            return _map_values(out, lambda k: _EPOCH + dt.timedelta(days=k))
        if isinstance(value, dt.date):
            return Cmp(name, op, value)
        raise _NoMatch

    def _timestamp(self, name: str, t: pa.DataType, op: str, value: Any) -> Filter:
        if isinstance(value, str):
            parsed = parse_timestamp_text(value, None)
            if parsed is None or (t.tz is None and parsed.tzinfo is not None):
                raise _NoMatch
            value = parsed
        elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            midnight = dt.datetime.combine(value, dt.time())
            value = local_to_instant(midnight, self.zone) if t.tz is not None else midnight
        if not isinstance(value, dt.datetime):
            raise _NoMatch
        if t.tz is not None:
            instant = value if value.tzinfo is not None else local_to_instant(value, self.zone)
            return Cmp(name, op, instant)
        if value.tzinfo is None:
            return Cmp(name, op, value)
        wall = value.astimezone(self.zone).replace(tzinfo=None)
        if is_fixed_offset(self.zone):
            return Cmp(name, op, wall)
        # Spark casts the column to an instant in the session zone; around DST changes that
        # is not monotone in the wall time, so only a widened range is certain.
        if op == "=":
            return Approx(And((Cmp(name, ">=", wall - _DST_SLACK), Cmp(name, "<=", wall + _DST_SLACK))))
        if op in ("<", "<="):
            return Approx(Cmp(name, "<=", wall + _DST_SLACK))
        if op in (">", ">="):
            return Approx(Cmp(name, ">=", wall - _DST_SLACK))
        return Approx(Not(IsNull(name)))


def _text_against_other(leaf: Filter, t: pa.DataType) -> bool:
    """Whether ``leaf`` compares a string literal with a column that is not a string."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return False
    values = leaf.values if isinstance(leaf, In) else (getattr(leaf, "value", None),)
    return any(isinstance(v, str) for v in values)


def _negate_equality(eq: Filter, name: str) -> Filter:
    """NOT of a bound ``c = v`` for non-NULL ``c``."""
    if isinstance(eq, Cmp) and eq.op == "=":
        return Cmp(name, "!=", eq.value)
    if isinstance(eq, Const):
        return Not(IsNull(name)) if eq.value is False else Const(False)
    if isinstance(eq, And) and all(isinstance(c, Cmp) for c in eq.children):
        flipped = {">=": "<", "<": ">=", "<=": ">", ">": "<="}
        return Or(tuple(Cmp(c.column, flipped[c.op], c.value) for c in eq.children if isinstance(c, Cmp)))
    return Opaque(f"NOT (null-safe equality on {name})")


def _always_true_beyond_range(op: str, a: int, b: int, lo: int, hi: int) -> bool:
    """Whether ``x op v`` holds for every non-NULL ``x`` in [lo, hi] because ``v`` lies beyond it."""
    return (op == "<" and a > hi) or (op == "<=" and b > hi) or (op == ">" and b <= lo) or (op == ">=" and a <= lo)


def _discrete(name: str, op: str, a: int, b: int, lo: int, hi: int) -> Filter:
    """``op`` on an integer domain [lo, hi], given a = min{x >= v} and b = min{x > v}."""
    a, b = max(lo, min(a, hi + 1)), max(lo, min(b, hi + 1))

    def below(k: int) -> Filter:  # x < k
        return Not(IsNull(name)) if k > hi else Const(False) if k <= lo else Cmp(name, "<", k)

    def at_least(k: int) -> Filter:  # x >= k
        return Const(False) if k > hi else Not(IsNull(name)) if k <= lo else Cmp(name, ">=", k)

    if op == "<":
        return below(a)
    if op == "<=":
        return below(b)
    if op == ">":
        return at_least(b)
    if op == ">=":
        return at_least(a)
    if op == "=":
        if a >= b:
            return Const(False)
        return Cmp(name, "=", a) if b - a == 1 else And((at_least(a), below(b)))
    if op == "!=":
        if a >= b:
            return Not(IsNull(name))
        return Cmp(name, "!=", a) if b - a == 1 else Or((below(a), at_least(b)))
    raise ValueError(f"unknown comparison {op!r}")


def _map_values(f: Filter, fn: Callable[[int], Any]) -> Filter:
    if isinstance(f, Cmp):
        return Cmp(f.column, f.op, fn(f.value))
    if isinstance(f, And | Or):
        return type(f)(tuple(_map_values(c, fn) for c in f.children))
    return f


def _int_range(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), int(info.max)


def _floor(d: decimal.Decimal) -> int:
    return int(d.to_integral_value(rounding=decimal.ROUND_FLOOR, context=DECIMAL_CONTEXT))


def _ceil(d: decimal.Decimal) -> int:
    return int(d.to_integral_value(rounding=decimal.ROUND_CEILING, context=DECIMAL_CONTEXT))


def _float_bounds(value: float, lo: int, hi: int, as_float: Callable[[int], float]) -> tuple[int, int]:
    """(a, b) for ``as_float(k) op value`` over the ints [lo, hi] (as_float is monotone).

    NaN is above every number in Spark, so nothing is >= NaN.
    """
    if math.isnan(value):
        return hi + 1, hi + 1
    return _first(lo, hi, lambda k: as_float(k) >= value), _first(lo, hi, lambda k: as_float(k) > value)


def _first(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The smallest k in [lo, hi] with ``pred(k)`` (pred is monotone), or hi + 1."""
    left, right = lo, hi + 1
    while left < right:
        mid = (left + right) // 2
        if pred(mid):
            right = mid
        else:
            left = mid + 1
    return left


def _float_value(value: Any, t: pa.DataType) -> float:
    if isinstance(value, bool):
        raise _NoMatch
    if isinstance(value, int):
        # Spark compares a float column with an integer literal as FLOAT (32-bit).
        return float(np.float32(value)) if t == pa.float32() else float(value)
    if isinstance(value, decimal.Decimal | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        special = {"nan": math.nan, "infinity": math.inf, "inf": math.inf, "+infinity": math.inf}
        special.update({"-infinity": -math.inf, "-inf": -math.inf})
        if text in special:
            return special[text]
        try:
            return float(decimal.Decimal(text))
        except decimal.InvalidOperation:
            raise _NoMatch from None
    raise _NoMatch
