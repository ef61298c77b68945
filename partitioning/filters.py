"""Row filters: a small AST, a parser for SQL filter strings, and SQL rendering for Lance scans.

Spark's pushed ``Filter`` objects and the ``filter=`` strings of ``plan_scan`` /
``read_partitioned`` both become this AST, which pruning (:mod:`partitioning.pruning`)
reads and which renders back to SQL for the Lance scanner's pushed-down filter.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from partitioning.errors import InvalidInput

__all__ = [
    "And",
    "Cmp",
    "Filter",
    "In",
    "IsNull",
    "Like",
    "Not",
    "Or",
    "TrueFilter",
    "conjunction",
    "negation_normal_form",
    "parse_filter",
    "to_sql",
]

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class TrueFilter:
    """No filter."""


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
    """``kind`` is ``starts``, ``ends`` or ``contains`` (from LIKE patterns or Spark's String* filters)."""

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


Filter: TypeAlias = TrueFilter | Cmp | In | IsNull | Like | Not | And | Or


def conjunction(filters: Sequence[Filter]) -> Filter:
    parts = [f for f in filters if not isinstance(f, TrueFilter)]
    if not parts:
        return TrueFilter()
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def negation_normal_form(f: Filter, negate: bool = False) -> Filter:
    """Push NOT down to the leaves, exactly under SQL's three-valued logic.

    ``NOT (c op v)`` is ``c !op v`` (both are NULL when ``c`` is NULL), De Morgan for
    AND/OR; a NOT that cannot be pushed (LIKE, IN, null-safe equality) stays.
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
        return f
    return Not(f)


# -- parsing ---------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | '(?P<str>(?:[^']|'')*)'
      | `(?P<bq>[^`]+)`
      | "(?P<dq>[^"]+)"
      | (?P<op><=>|<=|>=|!=|<>|=|<|>|\(|\)|,)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "between", "like", "true", "false", "date", "timestamp"}


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise InvalidInput(f"cannot parse filter {text!r} at position {pos}: {text[pos : pos + 20]!r}")
        pos = m.end()
        if m.group("num") is not None:
            raw = m.group("num")
            out.append(("lit", int(raw) if re.fullmatch(r"-?\d+", raw) else decimal.Decimal(raw)))
        elif m.group("str") is not None:
            out.append(("lit", m.group("str").replace("''", "'")))
        elif m.group("bq") is not None or m.group("dq") is not None:
            out.append(("ident", m.group("bq") or m.group("dq")))
        elif m.group("op") is not None:
            out.append(("op", "!=" if m.group("op") == "<>" else m.group("op")))
        else:
            word = m.group("word")
            out.append(("kw", word.lower()) if word.lower() in _KEYWORDS else ("ident", word))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, Any]:
        tok = self.peek()
        if tok is None:
            raise InvalidInput(f"filter {self.text!r} ends too early")
        self.i += 1
        return tok

    def accept(self, kind: str, value: Any = None) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == kind and (value is None or tok[1] == value):
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: Any) -> None:
        if not self.accept(kind, value):
            raise InvalidInput(f"filter {self.text!r}: expected {value!r} at token {self.i + 1}")

    def parse(self) -> Filter:
        f = self.disjunction()
        if self.peek() is not None:
            raise InvalidInput(f"filter {self.text!r}: unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return f

    def disjunction(self) -> Filter:
        parts = [self.conj()]
        while self.accept("kw", "or"):
            parts.append(self.conj())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def conj(self) -> Filter:
        parts = [self.unary()]
        while self.accept("kw", "and"):
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self) -> Filter:
        if self.accept("kw", "not"):
            return Not(self.unary())
        if self.accept("op", "("):
            f = self.disjunction()
            self.expect("op", ")")
            return f
        return self.predicate()

    def literal(self) -> Any:
        kind, value = self.take()
        if kind == "lit":
            return value
        if kind == "kw" and value in ("true", "false"):
            return value == "true"
        if kind == "kw" and value == "null":
            return None
        if kind == "kw" and value in ("date", "timestamp"):
            k2, text = self.take()
            if k2 != "lit" or not isinstance(text, str):
                raise InvalidInput(f"filter {self.text!r}: {value.upper()} must be followed by a quoted string")
            return parse_date(text) if value == "date" else parse_timestamp(text)
        raise InvalidInput(f"filter {self.text!r}: expected a literal, got {value!r}")

    def predicate(self) -> Filter:
        kind, column = self.take()
        if kind != "ident":
            if kind in ("lit",) or (kind == "kw" and column in ("true", "false", "null", "date", "timestamp")):
                self.i -= 1
                value = self.literal()
                op_kind, op = self.take()
                if op_kind != "op" or op not in COMPARISONS:
                    raise InvalidInput(f"filter {self.text!r}: expected a comparison after {value!r}")
                k2, col = self.take()
                if k2 != "ident":
                    raise InvalidInput(f"filter {self.text!r}: comparisons need a column on one side")
                return Cmp(col, _FLIP[op], value)
            raise InvalidInput(f"filter {self.text!r}: expected a column name, got {column!r}")
        negated = self.accept("kw", "not")
        if self.accept("kw", "in"):
            self.expect("op", "(")
            values = [self.literal()]
            while self.accept("op", ","):
                values.append(self.literal())
            self.expect("op", ")")
            f: Filter = In(column, tuple(values))
        elif self.accept("kw", "between"):
            low = self.literal()
            self.expect("kw", "and")
            high = self.literal()
            f = And((Cmp(column, ">=", low), Cmp(column, "<=", high)))
        elif self.accept("kw", "like"):
            pattern = self.literal()
            f = _like(column, pattern, self.text)
        elif not negated and self.accept("kw", "is"):
            is_not = self.accept("kw", "not")
            self.expect("kw", "null")
            return Not(IsNull(column)) if is_not else IsNull(column)
        else:
            if negated:
                raise InvalidInput(f"filter {self.text!r}: NOT must be followed by IN, BETWEEN or LIKE here")
            op_kind, op = self.take()
            if op_kind != "op" or op not in COMPARISONS:
                raise InvalidInput(f"filter {self.text!r}: expected a comparison after {column!r}, got {op!r}")
            value = self.literal()
            if value is None:
                raise InvalidInput(f"filter {self.text!r}: compare with NULL using IS NULL")
            return Cmp(column, op, value)
        return Not(f) if negated else f


def _like(column: str, pattern: Any, text: str) -> Filter:
    if not isinstance(pattern, str):
        raise InvalidInput(f"filter {text!r}: LIKE needs a string pattern")
    body = pattern.strip("%")
    if "_" in body or "%" in body or "\\" in body:
        raise InvalidInput(f"filter {text!r}: only 'p%', '%s' and '%c%' LIKE patterns are supported")
    starts, ends = pattern.startswith("%"), pattern.endswith("%")
    if starts and ends:
        return Like(column, "contains", body)
    if ends:
        return Like(column, "starts", body)
    if starts:
        return Like(column, "ends", body)
    return Cmp(column, "=", body)


def parse_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError as exc:
        raise InvalidInput(f"invalid DATE literal {text!r}; write e.g. DATE '2025-12-10'") from exc


def parse_timestamp(text: str) -> dt.datetime:
    """ISO-8601; a trailing Z or offset makes it absolute, otherwise it is read as UTC."""
    raw = text.strip().replace(" ", "T", 1)
    try:
        value = dt.datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError as exc:
        raise InvalidInput(f"invalid TIMESTAMP literal {text!r}; write e.g. TIMESTAMP '2025-12-10T10:00:00Z'") from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def parse_filter(text: str | None) -> Filter:
    """Parse a SQL filter (``=, !=, <, <=, >, >=, IN, BETWEEN, IS [NOT] NULL, LIKE, NOT, AND, OR``)."""
    if text is None or not text.strip():
        return TrueFilter()
    return _Parser(text).parse()


# -- rendering ---------------------------------------------------------------------------------


def _ident(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


def sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dt.datetime):
        utc = value.astimezone(dt.UTC) if value.tzinfo is not None else value
        return f"TIMESTAMP '{utc.replace(tzinfo=None).isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, int | float | decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return "'" + str(value).replace("'", "''") + "'"


def to_sql(f: Filter) -> str | None:
    """SQL text for a Lance scanner filter, or None for no filter."""
    if isinstance(f, TrueFilter):
        return None
    if isinstance(f, Cmp):
        if f.op == "<=>":
            return f"({_ident(f.column)} IS NOT DISTINCT FROM {sql_literal(f.value)})"
        return f"({_ident(f.column)} {f.op} {sql_literal(f.value)})"
    if isinstance(f, In):
        return f"({_ident(f.column)} IN ({', '.join(sql_literal(v) for v in f.values)}))"
    if isinstance(f, IsNull):
        return f"({_ident(f.column)} IS NULL)"
    if isinstance(f, Like):
        escaped = f.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = {"starts": f"{escaped}%", "ends": f"%{escaped}", "contains": f"%{escaped}%"}[f.kind]
        return f"({_ident(f.column)} LIKE {sql_literal(pattern)})"
    if isinstance(f, Not):
        inner = to_sql(f.child)
        return None if inner is None else f"(NOT {inner})"
    parts = [to_sql(c) for c in f.children]
    joiner = " AND " if isinstance(f, And) else " OR "
    if isinstance(f, Or) and any(p is None for p in parts):
        return None
    kept = [p for p in parts if p is not None]
    if not kept:
        return None
    return "(" + joiner.join(kept) + ")"


def columns_of(f: Filter) -> set[str]:
    if isinstance(f, Cmp | In | IsNull | Like):
        return {f.column}
    if isinstance(f, Not):
        return columns_of(f.child)
    if isinstance(f, And | Or):
        return set().union(*(columns_of(c) for c in f.children))
    return set()


def to_arrow_expression(f: Filter) -> Any:
    """A ``pyarrow.compute`` row predicate with SQL semantics (NULL is not a match)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(f, TrueFilter):
        return pc.scalar(True)
    if isinstance(f, Cmp):
        col = pc.field(f.column)
        if f.op == "<=>":
            if f.value is None:
                return col.is_null()
            return pc.coalesce(col == pc.scalar(f.value), pa.scalar(False))
        ops = {"=": col.__eq__, "!=": col.__ne__, "<": col.__lt__, "<=": col.__le__, ">": col.__gt__, ">=": col.__ge__}
        return ops[f.op](pc.scalar(f.value))
    if isinstance(f, In):
        col = pc.field(f.column)
        values = [v for v in f.values if v is not None]
        if not values:
            found = pc.scalar(False)
        elif len({type(v) for v in values}) == 1 and not isinstance(values[0], decimal.Decimal):
            found = pc.is_in(col, value_set=pa.array(values))
        else:  # numbers of mixed kinds: compare one by one, with Arrow's numeric casts
            if any(isinstance(v, decimal.Decimal) for v in values):
                values = [decimal.Decimal(v) if isinstance(v, int) else v for v in values]
            found = pc.scalar(False)
            for v in values:
                found = found | pc.coalesce(col == pc.scalar(v), pa.scalar(False))
        # SQL: NULL IN (...) is NULL, so that NOT IN does not match NULL either
        return pc.if_else(col.is_null(), pa.scalar(None, pa.bool_()), found)
    if isinstance(f, IsNull):
        return pc.field(f.column).is_null()
    if isinstance(f, Like):
        fn = {"starts": pc.starts_with, "ends": pc.ends_with, "contains": pc.match_substring}[f.kind]
        return fn(pc.field(f.column), pattern=f.text)
    if isinstance(f, Not):
        return ~to_arrow_expression(f.child)
    parts = [to_arrow_expression(c) for c in f.children]
    out = parts[0]
    for p in parts[1:]:
        out = (out & p) if isinstance(f, And) else (out | p)
    return out
