"""Row filters: a small AST that pruning reads, built from SQL text or Spark's pushed filters.

The AST holds the predicates pruning understands: ``column op literal`` (:class:`Cmp`),
:class:`In`, :class:`IsNull`, :class:`Like`, the constants TRUE/FALSE/NULL
(:class:`Const`), NOT, AND, OR, a comparison of integer arithmetic (:class:`Computed`,
:mod:`partitioning.sql.arith`), and :class:`Opaque` for anything else (a function, a
subquery, other arithmetic, a nested field). An Opaque leaf means "may be true or false", so
pruning keeps every partition for it; it never makes a query fail.

This module holds the nodes and what is done with a tree (negation normal form, size,
columns, SQL text for plans and messages). Trees are built from SQL text by
:mod:`partitioning.sql.from_sql` and from Spark's pushed filters by
:mod:`partitioning.sql.predicates`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from partitioning.sql.nodes import Binary, Column, Expr, Literal, Unary
from partitioning.sql.tokens import Dialect

__all__ = [
    "And",
    "Approx",
    "Cmp",
    "Computed",
    "Const",
    "Dialect",
    "Filter",
    "In",
    "IsNull",
    "Like",
    "Not",
    "Opaque",
    "Or",
    "TrueFilter",
    "columns_of",
    "conjunction",
    "is_exactly_understood",
    "negation_normal_form",
    "size_of",
    "to_sql",
]

_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class TrueFilter:
    """No filter."""


@dataclass(frozen=True)
class Const:
    """A constant predicate: TRUE, FALSE or NULL (``None``)."""

    value: bool | None


@dataclass(frozen=True)
class Opaque:
    """A predicate pruning does not understand: it may be true for any row."""

    text: str


@dataclass(frozen=True)
class Approx:
    """A superset of a predicate: true wherever the predicate is, maybe elsewhere too.

    Binding makes one where Spark's exact semantics depend on more than the literal (a
    TIMESTAMP_NTZ column compared with an instant in a zone with daylight saving time).
    Pruning and Lance scans may use it; exact row evaluation refuses it.
    """

    child: Filter


@dataclass(frozen=True)
class Cmp:
    """``column op value``; ``<=>`` is null-safe equality."""

    column: str
    op: str
    value: Any


@dataclass(frozen=True)
class Computed:
    """``left op right`` where a side is integer arithmetic over columns and literals
    (:mod:`partitioning.sql.arith`). Pruning reads it as "may match"; rows are evaluated
    exactly."""

    left: Expr
    op: str
    right: Expr


@dataclass(frozen=True)
class In:
    column: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class IsNull:
    column: str


@dataclass(frozen=True)
class Like:
    """``kind`` is ``starts``, ``ends`` or ``contains`` (``text`` is plain text), or
    ``pattern`` (``text`` is a SQL LIKE pattern whose escape character is a backslash)."""

    column: str
    kind: str
    text: str


@dataclass(frozen=True)
class Not:
    child: Filter


@dataclass(frozen=True)
class And:
    children: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Filter, ...]


Filter: TypeAlias = TrueFilter | Const | Opaque | Approx | Cmp | Computed | In | IsNull | Like | Not | And | Or


def conjunction(filters: Sequence[Filter]) -> Filter:
    parts = [f for f in filters if not isinstance(f, TrueFilter)]
    if not parts:
        return TrueFilter()
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def negation_normal_form(f: Filter, negate: bool = False) -> Filter:
    """Push NOT down to the leaves, exactly under SQL's three-valued logic.

    ``NOT (c op v)`` is ``c !op v`` (both are NULL when ``c`` is NULL), De Morgan for
    AND/OR; a NOT that cannot be pushed (LIKE, IN, IS NULL, null-safe equality) stays on
    its leaf, and NOT of an opaque predicate is opaque. Deep trees are walked without
    recursion limits mattering: the parser bounds their depth.
    """
    if isinstance(f, Not):
        return negation_normal_form(f.child, not negate)
    if isinstance(f, And | Or):
        children = tuple(negation_normal_form(c, negate) for c in f.children)
        if negate:
            return Or(children) if isinstance(f, And) else And(children)
        return type(f)(children)
    if not negate:
        return f
    if isinstance(f, Cmp) and f.op in _NEGATE:
        return Cmp(f.column, _NEGATE[f.op], f.value)
    if isinstance(f, Computed):
        return Computed(f.left, _NEGATE[f.op], f.right)
    if isinstance(f, TrueFilter):
        return Const(False)
    if isinstance(f, Const):
        return Const(None if f.value is None else not f.value)
    if isinstance(f, Opaque | Approx):
        return Opaque(f"NOT ({to_sql(f)})")
    return Not(f)


def size_of(f: Filter) -> int:
    """The number of nodes of a filter (IN lists count once)."""
    if isinstance(f, Not | Approx):
        return 1 + size_of(f.child)
    if isinstance(f, And | Or):
        return 1 + sum(size_of(c) for c in f.children)
    return 1


# -- inspection and rendering -----------------------------------------------------------------


def like_prefix(pattern: str) -> str:
    """The plain text a backslash-escaped LIKE pattern starts with."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c in "%_":
            break
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def columns_of(f: Filter) -> set[str]:
    if isinstance(f, Cmp | In | IsNull | Like):
        return {f.column}
    if isinstance(f, Not | Approx):
        return columns_of(f.child)
    if isinstance(f, And | Or):
        return set().union(*(columns_of(c) for c in f.children))
    if isinstance(f, Computed):
        return _expr_columns(f.left) | _expr_columns(f.right)
    return set()


def _expr_columns(e: Expr) -> set[str]:
    if isinstance(e, Column):
        return {".".join(e.parts)}
    if isinstance(e, Unary):
        return _expr_columns(e.arg)
    if isinstance(e, Binary):
        return _expr_columns(e.left) | _expr_columns(e.right)
    return set()


def is_exactly_understood(f: Filter) -> bool:
    """Whether ``f`` holds no :class:`Opaque` or :class:`Approx` part."""
    if isinstance(f, Opaque | Approx):
        return False
    if isinstance(f, Not):
        return is_exactly_understood(f.child)
    if isinstance(f, And | Or):
        return all(is_exactly_understood(c) for c in f.children)
    return True


def _ident(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


def sql_literal(value: Any) -> str:
    """A literal for display (and for the parser): Spark SQL spelling, timestamps in UTC."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            text = value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")
            return f"TIMESTAMP '{text}Z'"
        return f"TIMESTAMP_NTZ '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, float):
        if value != value:
            return "CAST('NaN' AS DOUBLE)"
        if value in (float("inf"), float("-inf")):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        return repr(value) + "D"
    if isinstance(value, int | decimal.Decimal):
        text = str(value) if isinstance(value, int) else format(value, "f")
        return text + ("BD" if isinstance(value, decimal.Decimal) and "." not in text else "")
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def to_sql(f: Filter) -> str | None:
    """Spark SQL text of a filter (for plans and messages), or None for no filter."""
    if isinstance(f, TrueFilter):
        return None
    if isinstance(f, Const):
        return sql_literal(f.value)
    if isinstance(f, Opaque):
        return f"<{f.text}>"
    if isinstance(f, Approx):
        return f"(about {to_sql(f.child)})"
    if isinstance(f, Cmp):
        return f"({_ident(f.column)} {f.op} {sql_literal(f.value)})"
    if isinstance(f, Computed):
        return f"({_expr_sql(f.left)} {f.op} {_expr_sql(f.right)})"
    if isinstance(f, In):
        return f"({_ident(f.column)} IN ({', '.join(sql_literal(v) for v in f.values)}))"
    if isinstance(f, IsNull):
        return f"({_ident(f.column)} IS NULL)"
    if isinstance(f, Like):
        if f.kind == "pattern":
            pattern = f.text
        else:
            escaped = f.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            pattern = {"starts": f"{escaped}%", "ends": f"%{escaped}", "contains": f"%{escaped}%"}[f.kind]
        return f"({_ident(f.column)} LIKE {sql_literal(pattern)})"
    if isinstance(f, Not):
        return f"(NOT {to_sql(f.child)})"
    joiner = " AND " if isinstance(f, And) else " OR "
    return "(" + joiner.join(str(to_sql(c)) for c in f.children) + ")"


def _expr_sql(e: Expr) -> str:
    """Spark SQL of an arithmetic expression of a :class:`Computed` leaf."""
    if isinstance(e, Column):
        return ".".join(_ident(p) for p in e.parts)
    if isinstance(e, Literal):
        return str(e.value)
    if isinstance(e, Unary):
        return f"(- {_expr_sql(e.arg)})"
    if isinstance(e, Binary):
        return f"({_expr_sql(e.left)} {e.op} {_expr_sql(e.right)})"
    return "?"
