"""Applying a bound filter to rows: exactly in Arrow, or as a superset in a Lance scan.

Both take a filter from :func:`partitioning.sql.binding.bind`: negation normal form, each
literal of its column's type. In negation normal form a leaf that is NULL and one that
is FALSE select the same rows, so each leaf is evaluated as "is TRUE" (never NULL).

- :func:`arrow_predicate` follows Spark exactly: NaN equals NaN and is above every
  number, -0.0 equals 0.0, ``NULL NOT IN (...)`` and ``x NOT IN (..., NULL)`` never
  match; integer arithmetic has Spark's types and overflow rule. It refuses
  :class:`~partitioning.sql.filters.Opaque` and :class:`~partitioning.sql.filters.Approx`
  parts (one line naming them).
- :func:`lance_filter` renders the parts a Lance scan evaluates the same way (integers,
  strings, dates, timestamps, booleans, decimals, with literals typed like their
  column) and drops the rest from ANDs, so the scan returns a superset of the matching
  rows. Floats and binary stay out of it, and of integer arithmetic only ``div`` and ``%``
  by literals (:mod:`partitioning.sql.arith`), which cannot overflow.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import InvalidInput
from partitioning.sql.arith import arrow_operands, lance_sql
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
    size_of,
    to_sql,
)

__all__ = ["arrow_predicate", "exact_lance_filter", "lance_filter"]

_FALSE = pc.scalar(False)
_TRUE = pc.scalar(True)


MAX_NODES = 2_000


def arrow_predicate(f: Filter, schema: pa.Schema) -> Any:
    """A ``pyarrow.compute`` expression selecting exactly the rows Spark's filter selects."""
    if size_of(f) > MAX_NODES:
        raise InvalidInput(
            f"filter has {size_of(f)} predicates, more than the {MAX_NODES} this source evaluates itself; "
            "apply it with .where(...) or read_partitioned(filter=...)"
        )
    return _Arrow(schema).expr(f)


class _Arrow:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def expr(self, f: Filter) -> Any:
        if isinstance(f, TrueFilter):
            return _TRUE
        if isinstance(f, Const):
            return _TRUE if f.value is True else _FALSE
        if isinstance(f, Opaque | Approx):
            raise InvalidInput(f"cannot evaluate {to_sql(f)} here; apply it with Spark (DataFrame.where)")
        if isinstance(f, And | Or):
            parts = [self.expr(c) for c in f.children]
            return _balanced(parts, "and" if isinstance(f, And) else "or")
        if isinstance(f, Not):
            return self._negated(f.child)
        if isinstance(f, Computed):
            left, right = arrow_operands(f, self.schema)
            return pc.coalesce(_compare(left, f.op, right), _FALSE)
        return self._leaf(f)

    def _field(self, name: str) -> tuple[Any, pa.DataType]:
        t = self.schema.field(name).type
        col = pc.field(name)
        if pa.types.is_floating(t):
            return col.cast(pa.float64()), pa.float64()
        if pa.types.is_dictionary(t):
            return col.cast(t.value_type), t.value_type
        return col, t

    def _leaf(self, f: Filter) -> Any:
        if isinstance(f, IsNull):
            return pc.field(f.column).is_null()
        if not isinstance(f, Cmp | In | Like):
            raise InvalidInput(f"cannot evaluate {to_sql(f)}")
        col, t = self._field(f.column)
        if isinstance(f, Cmp):
            if pa.types.is_floating(t):
                return _float_cmp(col, f.op, float(f.value))
            lit = _scalar(f.value, t)
            op = "=" if f.op == "<=>" else f.op
            return pc.coalesce(_compare(col, op, lit), _FALSE)
        if isinstance(f, In):
            return pc.coalesce(self._member(col, t, f.values), _FALSE)
        if isinstance(f, Like):
            return pc.coalesce(_like(col, f), _FALSE)
        raise InvalidInput(f"cannot evaluate {to_sql(f)}")

    def _member(self, col: Any, t: pa.DataType, values: tuple[Any, ...]) -> Any:
        present = [v for v in values if v is not None]
        if not present:
            return _FALSE
        if pa.types.is_floating(t):
            numbers = [float(v) for v in present]
            wanted = [v for v in numbers if not math.isnan(v)]
            if 0.0 in wanted:  # Arrow's is_in tells -0.0 from 0.0 by bits; Spark does not
                wanted += [0.0, -0.0]
            found = pc.is_in(col, value_set=pa.array(wanted, pa.float64()))
            return found | pc.is_nan(col) if any(math.isnan(v) for v in numbers) else found
        return pc.is_in(col, value_set=pa.array(present, type=t))

    def _negated(self, child: Filter) -> Any:
        col_name = getattr(child, "column", None)
        if col_name is None:
            raise InvalidInput(f"cannot evaluate NOT {to_sql(child)}")
        valid = pc.field(col_name).is_valid()
        if isinstance(child, IsNull):
            return valid
        col, t = self._field(col_name)
        if isinstance(child, In):
            if any(v is None for v in child.values):
                return _FALSE
            return valid & ~pc.coalesce(self._member(col, t, child.values), _FALSE)
        if isinstance(child, Like):
            return valid & ~pc.coalesce(_like(col, child), _FALSE)
        if isinstance(child, Cmp) and child.op == "<=>":
            return ~self._leaf(child)
        raise InvalidInput(f"cannot evaluate NOT {to_sql(child)}")


def _balanced(parts: list[Any], how: str) -> Any:
    """AND/OR of many expressions as a balanced tree (a long chain overflows Arrow's stack)."""
    if not parts:
        return _TRUE if how == "and" else _FALSE
    while len(parts) > 1:
        paired = []
        for i in range(0, len(parts) - 1, 2):
            paired.append(parts[i] & parts[i + 1] if how == "and" else parts[i] | parts[i + 1])
        if len(parts) % 2:
            paired.append(parts[-1])
        parts = paired
    return parts[0]


def _compare(col: Any, op: str, lit: Any) -> Any:
    return {
        "=": lambda: col == lit,
        "!=": lambda: col != lit,
        "<": lambda: col < lit,
        "<=": lambda: col <= lit,
        ">": lambda: col > lit,
        ">=": lambda: col >= lit,
    }[op]()


def _float_cmp(col: Any, op: str, v: float) -> Any:
    """Spark's float comparisons: NaN = NaN, NaN above everything, -0.0 = 0.0."""
    nan = pc.coalesce(pc.is_nan(col), _FALSE)
    valid = col.is_valid()
    if math.isnan(v):
        return {
            "=": nan,
            "<=>": nan,
            "!=": valid & ~nan,
            "<": valid & ~nan,
            "<=": valid,
            ">": _FALSE,
            ">=": nan,
        }[op]
    lit = pa.scalar(v, pa.float64())
    if op in ("=", "<=>", "<", "<="):
        return pc.coalesce(_compare(col, "=" if op == "<=>" else op, lit), _FALSE)
    return pc.coalesce(_compare(col, op, lit), _FALSE) | nan


def _like(col: Any, f: Like) -> Any:
    if f.kind == "pattern":
        return pc.match_like(col, pattern=f.text)
    fn = {"starts": pc.starts_with, "ends": pc.ends_with, "contains": pc.match_substring}[f.kind]
    return fn(col, pattern=f.text)


def _scalar(value: Any, t: pa.DataType) -> pa.Scalar:
    if pa.types.is_decimal(t) and isinstance(value, decimal.Decimal):
        return pa.scalar(value, type=t)
    if pa.types.is_timestamp(t):
        return pa.scalar(value, type=pa.timestamp("us", tz=t.tz) if t.unit in ("s", "ms") else t)
    return pa.scalar(value, type=t)


# -- Lance scans --------------------------------------------------------------------------------

_INT_NAMES = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.uint8(): "TINYINT UNSIGNED",
    pa.uint16(): "SMALLINT UNSIGNED",
    pa.uint32(): "INT UNSIGNED",
    pa.uint64(): "BIGINT UNSIGNED",
}


def lance_filter(f: Filter, schema: pa.Schema, columns: dict[str, str] | None = None) -> str | None:
    """A Lance (DataFusion SQL) filter true for every row ``f`` selects, or None.

    ``columns`` maps namespace column names to the partition dataset's (after renames);
    a column missing from it (not in this partition) is never rendered.
    """
    if size_of(f) > MAX_NODES:
        return None
    return _Lance(schema, columns).render(f)


def exact_lance_filter(f: Filter, schema: pa.Schema, columns: dict[str, str] | None = None) -> str | None:
    """A Lance (DataFusion SQL) filter true for exactly the rows ``f`` selects (``TRUE`` for
    every row), or None when a part of ``f`` is not one Lance evaluates as Spark does."""
    if size_of(f) > MAX_NODES:
        return None
    return _ExactLance(schema, columns).render(f)


class _Lance:
    def __init__(self, schema: pa.Schema, columns: dict[str, str] | None) -> None:
        self.schema = schema
        self.columns = columns

    def render(self, f: Filter) -> str | None:
        if isinstance(f, TrueFilter):
            return None
        if isinstance(f, Const):
            return "FALSE" if f.value is not True else None
        if isinstance(f, Approx):
            return self.render(f.child)
        if isinstance(f, And):
            kept = [p for p in (self.render(c) for c in f.children) if p is not None]
            return None if not kept else kept[0] if len(kept) == 1 else "(" + " AND ".join(kept) + ")"
        if isinstance(f, Or):
            parts = [self.render(c) for c in f.children]
            if any(p is None for p in parts):
                return None
            return "(" + " OR ".join(str(p) for p in parts) + ")"
        if isinstance(f, Computed):
            return lance_sql(f, self.columns)
        return self._leaf(f)

    def _name(self, column: str) -> str | None:
        if self.columns is not None:
            if column not in self.columns:
                return None
            column = self.columns[column]
        return "`" + column.replace("`", "``") + "`"

    def _literal(self, value: Any, t: pa.DataType) -> str | None:
        if pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool):
            return f"CAST({value} AS {_INT_NAMES[t]})"
        if (pa.types.is_string(t) or pa.types.is_large_string(t)) and isinstance(value, str):
            if "\x00" in value:
                return None
            return "'" + value.replace("'", "''") + "'"
        if pa.types.is_boolean(t) and isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if pa.types.is_date32(t) and isinstance(value, dt.date):
            return f"DATE '{value.isoformat()}'"
        if pa.types.is_timestamp(t) and isinstance(value, dt.datetime):
            if (t.tz is None) != (value.tzinfo is None):
                return None
            wall = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo is not None else value
            if t.unit in ("s", "ms") and wall.microsecond % (1_000_000 if t.unit == "s" else 1_000):
                return None  # not a value of the column's unit: Lance would round it
            unit = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}[t.unit]
            zone = f'Some("{t.tz}")' if t.tz is not None else "None"
            text = wall.isoformat(sep="T")
            if t.tz is not None:
                return f"arrow_cast('{text}Z', 'Timestamp({unit}, {zone})')"
            return f"arrow_cast('{text}', 'Timestamp({unit}, None)')"
        if pa.types.is_decimal(t) and isinstance(value, decimal.Decimal):
            return f"CAST('{format(value, 'f')}' AS DECIMAL({t.precision}, {t.scale}))"
        return None

    def _leaf(self, f: Filter) -> str | None:
        negated = isinstance(f, Not)
        leaf = f.child if isinstance(f, Not) else f
        column = getattr(leaf, "column", None)
        if column is None:
            return None
        name = self._name(column)
        t = self.schema.field(column).type
        if name is None or pa.types.is_floating(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return None
        if isinstance(leaf, IsNull):
            return f"({name} IS {'NOT ' if negated else ''}NULL)"
        if isinstance(leaf, Cmp):
            lit = self._literal(leaf.value, t)
            if lit is None:
                return None
            if leaf.op == "<=>":
                return None if negated else f"({name} = {lit})"
            return None if negated else f"({name} {leaf.op} {lit})"
        if isinstance(leaf, In):
            if negated and any(v is None for v in leaf.values):
                return "FALSE"
            lits = [self._literal(v, t) for v in leaf.values if v is not None]
            if any(x is None for x in lits):
                return None
            if not lits:  # binding drops literals no value of the column equals
                return f"({name} IS NOT NULL)" if negated else "FALSE"
            body = f"{name} IN ({', '.join(str(x) for x in lits)})"
            return f"({name} IS NOT NULL AND NOT {body})" if negated else f"({body})"
        if isinstance(leaf, Like) and leaf.kind == "starts" and not negated:
            lit = self._literal(leaf.text, t)
            if lit is None or any(c in leaf.text for c in "%_\\"):
                return None
            return f"({name} LIKE {lit[:-1]}%')"
        return None


class _ExactLance(_Lance):
    """:class:`_Lance` where a part it cannot render is a refusal, not a dropped conjunct.
    Its leaves are exact already (a comparison of a non-float column with a literal of the
    column's type, IS NULL, IN, a prefix LIKE, integer ``div``/``%`` by literals:
    DataFusion's three-valued logic is Spark's)."""

    def render(self, f: Filter) -> str | None:
        if isinstance(f, TrueFilter):
            return "TRUE"
        if isinstance(f, Const):
            return "TRUE" if f.value is True else "FALSE"
        if isinstance(f, And | Or):
            parts = [self.render(c) for c in f.children]
            if any(p is None for p in parts):
                return None
            return "(" + (" AND " if isinstance(f, And) else " OR ").join(str(p) for p in parts) + ")"
        if isinstance(f, Approx):
            return None
        if isinstance(f, Computed):  # rendered only when no step can overflow: then exact
            return lance_sql(f, self.columns)
        return self._leaf(f)
