"""Filters from SQL text: the parsed expression read into the filter AST, and the columns a text names.

``parse_filter`` reads SQL in Spark's dialect (with the session's settings, through
:class:`~partitioning.sql.tokens.Dialect`) or DataFusion's. Literals keep their SQL type as
a Python type: int, Decimal (Spark's ``1.5``), float (``1.5D``, ``1e3``), str, bytes,
bool, date, aware datetime (TIMESTAMP, read in the dialect's time zone) and naive
datetime (TIMESTAMP_NTZ). :mod:`partitioning.sql.binding` later applies Spark's type
coercion against the namespace schema. What the AST cannot hold becomes an
:class:`~partitioning.sql.filters.Opaque` leaf.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from partitioning.sql.arith import SUFFIXED, computed
from partitioning.sql.filters import And, Cmp, Computed, Const, Filter, In, IsNull, Like, Not, Opaque, Or, TrueFilter
from partitioning.sql.parse import (
    Between,
    Binary,
    BoolOp,
    Column,
    Dialect,
    Expr,
    InList,
    Is,
    LikeOp,
    Literal,
    SqlSyntaxError,
    Unary,
    parse_expression,
)
from partitioning.sql.tokens import tokenize

__all__ = ["from_expression", "parse_filter", "referenced_columns"]

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}


def parse_filter(text: str | None, dialect: Dialect | None = None, *, strict: bool = True) -> Filter:
    """Parse a SQL filter into the AST.

    With ``strict`` a text the parser cannot read raises a one-line ``InvalidInput``;
    without it, such a text becomes one :class:`Opaque` leaf (nothing is pruned).
    """
    if text is None or not text.strip():
        return TrueFilter()
    try:
        parsed = from_expression(parse_expression(text, dialect or Dialect()))
        return _without_computed(parsed) if SUFFIXED.search(text) else parsed
    except SqlSyntaxError:
        if strict:
            raise
        return Opaque(text)


def _column(e: Expr) -> str | None:
    return e.parts[0] if isinstance(e, Column) and len(e.parts) == 1 else None


def _literal(e: Expr) -> tuple[bool, Any]:
    return (True, e.value) if isinstance(e, Literal) and e.kind != "other" else (False, None)


def from_expression(e: Expr) -> Filter:
    """The filter AST of a parsed boolean expression (Opaque where not understood)."""
    if isinstance(e, BoolOp):
        children = tuple(from_expression(a) for a in e.args)
        return And(children) if e.op == "and" else _merged_or(children)
    if isinstance(e, Unary) and e.op == "not":
        return Not(from_expression(e.arg))
    if isinstance(e, Column):
        name = _column(e)
        return Cmp(name, "=", True) if name is not None else Opaque(".".join(e.parts))
    if isinstance(e, Literal):
        if e.kind == "null":
            return Const(None)
        if e.kind == "bool":
            return Const(bool(e.value))
        return Opaque(repr(e.value))
    if isinstance(e, Binary) and e.op in COMPARISONS:
        return _comparison(e)
    if isinstance(e, InList):
        name = _column(e.arg)
        values = [_literal(i) for i in e.items]
        if name is None or not all(ok for ok, _ in values):
            return Opaque("IN")
        f: Filter = In(name, tuple(v for _, v in values))
        return Not(f) if e.negated else f
    if isinstance(e, Between):
        name = _column(e.arg)
        (lo_ok, lo), (hi_ok, hi) = _literal(e.low), _literal(e.high)
        if name is None or not (lo_ok and hi_ok):
            low, high = computed(Binary(">=", e.arg, e.low)), computed(Binary("<=", e.arg, e.high))
            if low is None or high is None:
                return Opaque("BETWEEN")
            f = And((low, high))
            return Not(f) if e.negated else f
        f = And((_cmp(name, ">=", lo), _cmp(name, "<=", hi)))
        return Not(f) if e.negated else f
    if isinstance(e, LikeOp):
        return _like(e)
    if isinstance(e, Is):
        return _is(e)
    return Opaque(type(e).__name__)


def _merged_or(children: tuple[Filter, ...]) -> Filter:
    """``a = 1 OR a = 2 OR ...`` as ``a IN (1, 2, ...)`` (the same rows, NULLs included):
    long equality chains stay one small predicate for pruning and Arrow."""
    values: dict[str, list[Any]] = {}
    rest: list[Filter] = []
    for c in children:
        if isinstance(c, Cmp) and c.op == "=":
            values.setdefault(c.column, []).append(c.value)
        elif isinstance(c, In):
            values.setdefault(c.column, []).extend(c.values)
        else:
            rest.append(c)
    merged = [In(col, tuple(vs)) if len(vs) > 1 else Cmp(col, "=", vs[0]) for col, vs in values.items()]
    out = [*merged, *rest]
    return out[0] if len(out) == 1 else Or(tuple(out))


def _cmp(column: str, op: str, value: Any) -> Filter:
    if value is None:
        return IsNull(column) if op == "<=>" else Const(None)
    return Cmp(column, op, value)


def _comparison(e: Binary) -> Filter:
    left, right = _column(e.left), _column(e.right)
    (lok, lv), (rok, rv) = _literal(e.left), _literal(e.right)
    if left is not None and rok:
        return _cmp(left, e.op, rv)
    if right is not None and lok:
        return _cmp(right, _FLIP[e.op], lv)
    if lok and rok and (lv is None or rv is None):
        return Const((lv is None and rv is None) if e.op == "<=>" else None)
    if lok and rok and _same_kind(e.left, e.right):
        return Const(_OPS[e.op](lv, rv))
    return computed(e) or Opaque(f"comparison {e.op}")


def _without_computed(f: Filter) -> Filter:
    """``f`` with arithmetic leaves opaque: a literal with a type suffix (``1L``) was read
    without its type, which decides where Spark's arithmetic overflows."""
    if isinstance(f, Computed):
        return Opaque("arithmetic with a typed literal")
    if isinstance(f, Not):
        return Not(_without_computed(f.child))
    if isinstance(f, And | Or):
        return type(f)(tuple(_without_computed(c) for c in f.children))
    return f


_FOLDABLE = ("string", "int", "decimal", "bool", "date", "binary", "timestamp", "timestamp_ntz")
_OPS: dict[str, Any] = {
    "=": lambda a, b: a == b,
    "<=>": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _same_kind(a: Expr, b: Expr) -> bool:
    """Two literals Spark compares without any cast, so Python's comparison is Spark's."""
    return isinstance(a, Literal) and isinstance(b, Literal) and a.kind == b.kind and a.kind in _FOLDABLE


def _like(e: LikeOp) -> Filter:
    name = _column(e.arg)
    ok, pattern = _literal(e.pattern)
    if e.op != "like" or name is None or not ok or not isinstance(pattern, str):
        return Opaque(e.op.upper())
    normal = _backslash_pattern(pattern, e.escape if e.escape is not None else "\\")
    if normal is None:
        return Opaque("LIKE with an invalid escape")
    f = like_filter(name, normal)
    return Not(f) if e.negated else f


def _backslash_pattern(pattern: str, escape: str) -> str | None:
    """A LIKE pattern rewritten to use backslash as its escape character (None if invalid)."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 >= len(pattern):
                return None
            nxt = pattern[i + 1]
            if nxt not in ("%", "_", escape):
                return None
            out.append("\\" + nxt)
            i += 2
        elif c == "\\":
            out.append("\\\\")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


_WILD = re.compile(r"(?<!\\)(?:\\\\)*[%_]")


def like_filter(column: str, pattern: str) -> Filter:
    """A Like node for a backslash-escaped pattern, simplified where it is plain text."""
    tokens = re.findall(r"\\.|.", pattern, re.DOTALL)
    literal = [t[-1] if t.startswith("\\") and len(t) == 2 else t for t in tokens]
    wild = [t in ("%", "_") for t in tokens]
    if not any(wild):
        return Cmp(column, "=", "".join(literal))
    core = [i for i, w in enumerate(wild) if not (w and tokens[i] == "%")]
    if all(not wild[i] for i in core) and core:
        lo, hi = core[0], core[-1]
        if core == list(range(lo, hi + 1)):
            text = "".join(literal[lo : hi + 1])
            starts, ends = lo > 0, hi < len(tokens) - 1
            if starts and ends:
                return Like(column, "contains", text)
            if ends:
                return Like(column, "starts", text)
            if starts:
                return Like(column, "ends", text)
    return Like(column, "pattern", pattern)


def _is(e: Is) -> Filter:
    name = _column(e.arg)
    if name is None:
        return Opaque("IS")
    if e.what == "null":
        f: Filter = IsNull(name)
    elif e.what in ("true", "false"):
        f = Cmp(name, "<=>", e.what == "true")
    elif e.what == "unknown":
        f = IsNull(name)
    else:
        ok, value = _literal(e.other) if e.other is not None else (False, None)
        if not ok:
            return Opaque("IS DISTINCT FROM")
        f = _cmp(name, "<=>", value)
        return f if e.negated else Not(f)
    return Not(f) if e.negated else f


def referenced_columns(
    text: str | None, names: Sequence[str], case_sensitive: bool = False, dialect: Dialect | None = None
) -> list[str]:
    """Every column of ``names`` that appears as an identifier in ``text``: a superset of the
    columns the filter reads, whatever functions it uses (all of them if it cannot be read)."""
    if not text:
        return []
    try:
        tokens = tokenize(text, dialect or Dialect())
    except SqlSyntaxError:
        return list(names)
    words = set()
    for t in tokens:
        if t.kind == "ident":
            words.add(t.text)
        elif t.kind == "qident":
            words.add(t.value)
    if not case_sensitive:
        words = {w.lower() for w in words}
    return [n for n in names if (n if case_sensitive else n.lower()) in words]
