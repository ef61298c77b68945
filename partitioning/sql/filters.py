"""Row filters: a small AST that pruning reads, built from SQL text or Spark's pushed filters.

The AST holds the predicates pruning understands: ``column op literal`` (:class:`Cmp`),
:class:`In`, :class:`IsNull`, :class:`Like`, the constants TRUE/FALSE/NULL
(:class:`Const`), NOT, AND, OR, and :class:`Opaque` for anything else (a function, a
subquery, arithmetic, a nested field). An Opaque leaf means "may be true or false", so
pruning keeps every partition for it; it never makes a query fail.

``parse_filter`` reads SQL in Spark's dialect (with the session's settings, through
:class:`~partitioning.sql.parse.Dialect`) or DataFusion's. Literals keep their SQL type as
a Python type: int, Decimal (Spark's ``1.5``), float (``1.5D``, ``1e3``), str, bytes,
bool, date, aware datetime (TIMESTAMP, read in the dialect's time zone) and naive
datetime (TIMESTAMP_NTZ). :mod:`partitioning.sql.binding` later applies Spark's type
coercion against the namespace schema.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

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
    tokenize,
)

__all__ = [
    "And",
    "Approx",
    "Cmp",
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
    "from_expression",
    "is_exactly_understood",
    "negation_normal_form",
    "parse_filter",
    "referenced_columns",
    "size_of",
    "to_sql",
]

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
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


Filter: TypeAlias = TrueFilter | Const | Opaque | Approx | Cmp | In | IsNull | Like | Not | And | Or


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
    if isinstance(f, TrueFilter):
        return Const(False)
    if isinstance(f, Const):
        return Const(None if f.value is None else not f.value)
    if isinstance(f, Opaque | Approx):
        return Opaque(f"NOT ({to_sql(f)})")
    return Not(f)


# -- from SQL ---------------------------------------------------------------------------------


def parse_filter(text: str | None, dialect: Dialect | None = None, *, strict: bool = True) -> Filter:
    """Parse a SQL filter into the AST.

    With ``strict`` a text the parser cannot read raises a one-line ``InvalidInput``;
    without it, such a text becomes one :class:`Opaque` leaf (nothing is pruned).
    """
    if text is None or not text.strip():
        return TrueFilter()
    try:
        return from_expression(parse_expression(text, dialect or Dialect()))
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
            return Opaque("BETWEEN")
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


def size_of(f: Filter) -> int:
    """The number of nodes of a filter (IN lists count once)."""
    if isinstance(f, Not | Approx):
        return 1 + size_of(f.child)
    if isinstance(f, And | Or):
        return 1 + sum(size_of(c) for c in f.children)
    return 1


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
    return Opaque(f"comparison {e.op}")


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


# -- inspection and rendering -----------------------------------------------------------------


def columns_of(f: Filter) -> set[str]:
    if isinstance(f, Cmp | In | IsNull | Like):
        return {f.column}
    if isinstance(f, Not | Approx):
        return columns_of(f.child)
    if isinstance(f, And | Or):
        return set().union(*(columns_of(c) for c in f.children))
    return set()


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


# -- transitional: kept until pruning and the readers use partitioning.sql.binding --------------


def parse_date(text: str) -> dt.date:
    from partitioning.errors import InvalidInput
    from partitioning.sql.timezones import parse_date_text

    value = parse_date_text(text)
    if value is None:
        raise InvalidInput(f"invalid DATE literal {text!r}")
    return value


def parse_timestamp(text: str) -> dt.datetime:
    from partitioning.errors import InvalidInput
    from partitioning.sql.timezones import parse_timestamp_text

    value = parse_timestamp_text(text, "UTC")
    if value is None:
        raise InvalidInput(f"invalid TIMESTAMP literal {text!r}")
    return value


def to_arrow_expression(f: Filter) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(f, TrueFilter):
        return pc.scalar(True)
    if isinstance(f, Const):
        return pc.scalar(bool(f.value))
    if isinstance(f, Cmp):
        col = pc.field(f.column)
        if f.op == "<=>":
            return col.is_null() if f.value is None else pc.coalesce(col == pc.scalar(f.value), pa.scalar(False))
        ops = {"=": col.__eq__, "!=": col.__ne__, "<": col.__lt__, "<=": col.__le__, ">": col.__gt__, ">=": col.__ge__}
        return ops[f.op](pc.scalar(f.value))
    if isinstance(f, In):
        col = pc.field(f.column)
        values = [v for v in f.values if v is not None]
        found = pc.is_in(col, value_set=pa.array(values)) if values else pc.scalar(False)
        return pc.if_else(col.is_null(), pa.scalar(None, pa.bool_()), found)
    if isinstance(f, IsNull):
        return pc.field(f.column).is_null()
    if isinstance(f, Like):
        if f.kind == "pattern":
            return pc.match_like(pc.field(f.column), pattern=f.text)
        fn = {"starts": pc.starts_with, "ends": pc.ends_with, "contains": pc.match_substring}[f.kind]
        return fn(pc.field(f.column), pattern=f.text)
    if isinstance(f, Not):
        return ~to_arrow_expression(f.child)
    if isinstance(f, And | Or):
        parts = [to_arrow_expression(c) for c in f.children]
        out = parts[0]
        for p in parts[1:]:
            out = (out & p) if isinstance(f, And) else (out | p)
        return out
    raise ValueError(f"cannot evaluate {f}")
