"""A tolerant parser for SQL filter expressions, in Spark's or DataFusion's dialect.

It exists to decide pruning, never to apply a filter: the engine that applies the filter
(Spark's ``df.where``, or DataFusion inside Lance) parses it again itself. So the parser
only has to recognise the shapes pruning understands (``column op literal``, IN,
BETWEEN, LIKE, IS [NOT] NULL, NOT, AND, OR) and keep everything else as an opaque
:class:`Other` node, which pruning reads as "may match". Input it cannot tokenize or
parse raises :class:`SqlSyntaxError`; callers that only prune treat that as "keep every
partition".

Size is bounded: a filter may hold at most :data:`MAX_TOKENS` tokens and nest at most
:data:`MAX_DEPTH` levels; long AND/OR chains are parsed iteratively into flat nodes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from partitioning.errors import InvalidInput
from partitioning.timezones import local_to_instant, parse_date_text, parse_timestamp_text, resolve_zone

__all__ = [
    "MAX_DEPTH",
    "MAX_TOKENS",
    "Between",
    "Binary",
    "BoolOp",
    "Column",
    "Dialect",
    "Expr",
    "InList",
    "Is",
    "LikeOp",
    "Literal",
    "Other",
    "SqlSyntaxError",
    "Unary",
    "parse_expression",
]

MAX_TOKENS = 200_000
MAX_DEPTH = 200
DECIMAL_CONTEXT = decimal.Context(prec=200, Emax=999_999, Emin=-999_999)


class SqlSyntaxError(InvalidInput):
    """The text is not an expression this parser can read (or exceeds its bounds)."""


@dataclass(frozen=True)
class Dialect:
    """How literals and names are read: Spark SQL (with the session's settings) or DataFusion."""

    name: str = "spark"
    time_zone: str | None = "UTC"  # None: no session zone known; zone-less timestamps are refused
    escaped_string_literals: bool = False  # spark.sql.parser.escapedStringLiterals
    double_quoted_identifiers: bool = False  # spark.sql.ansi.doubleQuotedIdentifiers
    case_sensitive: bool = False  # spark.sql.caseSensitive
    timestamp_ntz_default: bool = False  # spark.sql.timestampType = TIMESTAMP_NTZ

    @classmethod
    def datafusion(cls, time_zone: str = "UTC") -> Dialect:
        return cls("datafusion", time_zone, True, True, False, False)

    @property
    def zone(self) -> str:
        """The zone of timestamps written without one; refused when none is known."""
        if self.time_zone is None:
            raise InvalidInput(
                "a timestamp without a time zone needs one here: write it with its zone "
                "(TIMESTAMP '2025-12-10 00:00:00Z' or '...+01:00') or set the option timeZone"
            )
        return self.time_zone


# -- expression nodes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    parts: tuple[str, ...]


@dataclass(frozen=True)
class Literal:
    """``kind``: null, bool, int, decimal, double, string, date, timestamp (aware),
    timestamp_ntz (naive), binary."""

    value: Any
    kind: str


@dataclass(frozen=True)
class Other:
    """Anything pruning does not look into (functions, CASE, subqueries, arithmetic...)."""

    what: str


@dataclass(frozen=True)
class Unary:
    op: str  # "-", "+", "~", "not"
    arg: Expr


@dataclass(frozen=True)
class Binary:
    op: str  # comparisons, arithmetic, "||"
    left: Expr
    right: Expr


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class InList:
    arg: Expr
    items: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True)
class Between:
    arg: Expr
    low: Expr
    high: Expr
    negated: bool


@dataclass(frozen=True)
class LikeOp:
    op: str  # like | ilike | rlike
    arg: Expr
    pattern: Expr
    escape: str | None
    negated: bool


@dataclass(frozen=True)
class Is:
    arg: Expr
    what: str  # null | true | false | unknown | distinct
    negated: bool
    other: Expr | None = None  # for IS [NOT] DISTINCT FROM


Expr: TypeAlias = Column | Literal | Other | Unary | Binary | BoolOp | InList | Between | LikeOp | Is

# -- tokens -------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:BD|bd|[LlSsYyDdFf])?(?![A-Za-z0-9_])")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = (
    "<=>", "!=", "<>", "<=", ">=", "==", "||", "->", "::", "<<", ">>",
    "=", "<", ">", "+", "-", "*", "/", "%", "&", "|", "^", "~", "!", "(", ")", ",", ".", "[", "]", ":", ";", "?",
)  # fmt: skip
_SIMPLE_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "\\": "\\"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, str, ident, qident, op, eof
    text: str
    value: Any = None
    prefix: str = ""  # string prefix (r, x, e)


def _string_value(body: str, quote: str, escapes: bool) -> str:
    """The value of a quoted literal's body: doubled quotes, and Spark's backslash escapes
    (``\\n``, ``\\uXXXX``, octal ``\\ooo``; ``\\%`` and ``\\_`` keep their backslash for LIKE)."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == quote and i + 1 < n and body[i + 1] == quote:
            out.append(quote)
            i += 2
        elif c == "\\" and escapes and i + 1 < n:
            nxt = body[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
            elif re.fullmatch(r"[0-3][0-7][0-7]", body[i + 1 : i + 4]):
                out.append(chr(int(body[i + 1 : i + 4], 8)))
                i += 4
            else:
                out.append("\\" + nxt if nxt in "%_" else _SIMPLE_ESCAPES.get(nxt, nxt))
                i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _read_quoted(text: str, start: int, quote: str, backslash: bool) -> tuple[str, int]:
    """The raw body of a quoted token starting at ``start`` (the quote) and the index after it."""
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if backslash and c == "\\":
            i += 2
            continue
        if c == quote:
            if i + 1 < n and text[i + 1] == quote:
                i += 2
                continue
            return text[start + 1 : i], i + 1
        i += 1
    raise SqlSyntaxError(f"unterminated {quote}-quoted text starting at position {start}")


def tokenize(text: str, dialect: Dialect) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    spark = dialect.name == "spark"
    while i < n:
        if len(toks) > MAX_TOKENS:
            raise SqlSyntaxError(f"filter is too long: more than {MAX_TOKENS} tokens")
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise SqlSyntaxError("unterminated /* comment")
            i = end + 2
            continue
        prefix = ""
        if c in "rRxXeE" and i + 1 < n and text[i + 1] in "'\"" and (i == 0 or not _is_word(text[i - 1])):
            prefix = c.lower()
            if prefix == "e" and spark:
                prefix = ""
            else:
                i += 1
                c = text[i]
        if c == "'" or (c == '"' and not (dialect.double_quoted_identifiers and not prefix)):
            escapes = (spark and not dialect.escaped_string_literals and prefix != "r") or prefix == "e"
            body, i = _read_quoted(text, i, c, escapes)
            if prefix == "x":
                toks.append(_Tok("bin", body, body))
                continue
            value = _string_value(body, c, escapes)
            if toks and toks[-1].kind == "str" and spark:  # Spark joins adjacent string literals
                toks[-1] = _Tok("str", toks[-1].text + " " + body, toks[-1].value + value)
            else:
                toks.append(_Tok("str", body, value))
            continue
        if c == '"':
            body, i = _read_quoted(text, i, '"', False)
            toks.append(_Tok("qident", body, body.replace('""', '"')))
            continue
        if c == "`":
            body, i = _read_quoted(text, i, "`", False)
            toks.append(_Tok("qident", body, body.replace("``", "`")))
            continue
        m = _NUMBER.match(text, i)
        if m and (c.isdigit() or c == "."):
            toks.append(_Tok("num", m.group(0)))
            i = m.end()
            continue
        m = _IDENT.match(text, i)
        if m:
            toks.append(_Tok("ident", m.group(0)))
            i = m.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                toks.append(_Tok("op", op))
                i += len(op)
                break
        else:
            raise SqlSyntaxError(f"unexpected character {c!r} at position {i}")
    toks.append(_Tok("eof", ""))
    return toks


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


def number_literal(text: str, dialect: Dialect) -> Literal:
    """A numeric token as Spark (or DataFusion) types it."""
    upper = text.upper()
    suffix = ""
    for s in ("BD", "L", "S", "Y", "D", "F"):
        if upper.endswith(s):
            suffix, text = s, text[: -len(s)]
            break
    has_point = "." in text
    has_exp = "e" in text.lower()
    if suffix in ("D", "F") or (has_exp and suffix != "BD"):
        return Literal(float(text), "double")
    if dialect.name == "datafusion" and has_point:
        return Literal(float(text), "double")
    if suffix == "BD" or has_point or has_exp:
        return Literal(decimal.Decimal(text), "decimal")
    value = int(text)
    if suffix:
        return Literal(value, "int")
    if dialect.name == "spark" and value >= 2**63:
        return Literal(decimal.Decimal(value), "decimal")
    return Literal(value, "int")


# -- parser -------------------------------------------------------------------------------------

_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}
# binding powers of infix value operators (higher binds tighter)
_INFIX = {
    "*": 70, "/": 70, "%": 70, "div": 70,
    "+": 60, "-": 60, "||": 60,
    "<<": 55, ">>": 55,
    "&": 50, "^": 45, "|": 40,
}  # fmt: skip
_PREDICATE_BP = 30
_TYPED_LITERALS = ("date", "timestamp", "timestamp_ntz", "timestamp_ltz")
_STOP_WORDS = {"and", "or", "then", "else", "end", "when", "as", "from", "for", "escape", "asc", "desc"}


class _Parser:
    def __init__(self, text: str, dialect: Dialect) -> None:
        self.text = text
        self.dialect = dialect
        self.toks = tokenize(text, dialect)
        self.i = 0
        self.depth = 0

    # token helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def word(self, offset: int = 0) -> str:
        t = self.toks[min(self.i + offset, len(self.toks) - 1)]
        return t.text.lower() if t.kind == "ident" else ""

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def advance(self) -> _Tok:
        t = self.tok
        if t.kind != "eof":
            self.i += 1
        return t

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.error(f"expected {op!r}")
        self.advance()

    def expect_word(self, word: str) -> None:
        if self.word() != word:
            raise self.error(f"expected {word.upper()}")
        self.advance()

    def error(self, what: str) -> SqlSyntaxError:
        near = self.tok.text or "the end"
        return SqlSyntaxError(f"cannot parse filter {self.text[:200]!r}: {what} near {near!r}")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SqlSyntaxError(f"filter nests deeper than {MAX_DEPTH} levels")

    # grammar
    def parse(self) -> Expr:
        e = self.boolean()
        if self.tok.kind != "eof":
            raise self.error("unexpected text")
        return e

    def boolean(self) -> Expr:
        return self._chain("or", self.conjunction)

    def conjunction(self) -> Expr:
        return self._chain("and", self.negation)

    def _chain(self, op: str, sub: Any) -> Expr:
        args = [sub()]
        while self.word() == op:
            self.advance()
            args.append(sub())
        return args[0] if len(args) == 1 else BoolOp(op, tuple(args))

    def negation(self) -> Expr:
        count = 0
        while self.word() == "not" or self.is_op("!"):
            self.advance()
            count += 1
        e = self.predicate()
        for _ in range(count % 2):
            e = Unary("not", e)
        return e

    def predicate(self) -> Expr:
        self.enter()
        try:
            left = self.value(0)
            while True:
                if self.tok.kind == "op" and self.tok.text in _COMPARISONS:
                    op = _COMPARISONS[self.advance().text]
                    left = Binary(op, left, self.value(0))
                    continue
                negated = False
                if self.word() == "not" and self.word(1) in ("in", "between", "like", "ilike", "rlike", "regexp"):
                    self.advance()
                    negated = True
                w = self.word()
                if w == "in":
                    self.advance()
                    left = self._in(left, negated)
                elif w == "between":
                    self.advance()
                    low = self.value(0)
                    self.expect_word("and")
                    left = Between(left, low, self.value(0), negated)
                elif w in ("like", "ilike", "rlike", "regexp"):
                    self.advance()
                    left = self._like(left, "rlike" if w == "regexp" else w, negated)
                elif w == "is":
                    self.advance()
                    left = self._is(left)
                else:
                    return left
        finally:
            self.depth -= 1

    def _in(self, left: Expr, negated: bool) -> Expr:
        self.expect_op("(")
        if self.word() in ("select", "with"):
            self._skip_to_close()
            return Other("IN (subquery)")
        items = [self.boolean()]
        while self.is_op(","):
            self.advance()
            items.append(self.boolean())
        self.expect_op(")")
        return InList(left, tuple(items), negated)

    def _like(self, left: Expr, op: str, negated: bool) -> Expr:
        if self.word() in ("any", "some", "all") and self.toks[self.i + 1].text == "(":
            self.advance()
            self.advance()
            self._skip_to_close()
            return Other(f"{op.upper()} ANY/ALL")
        pattern = self.value(0)
        escape = None
        if self.word() == "escape":
            self.advance()
            t = self.advance()
            if t.kind != "str" or len(t.value) != 1:
                raise self.error("ESCAPE needs a one-character string")
            escape = t.value
        return LikeOp(op, left, pattern, escape, negated)

    def _is(self, left: Expr) -> Expr:
        negated = False
        if self.word() == "not":
            self.advance()
            negated = True
        w = self.word()
        if w in ("null", "true", "false", "unknown"):
            self.advance()
            return Is(left, w, negated)
        if w == "distinct":
            self.advance()
            self.expect_word("from")
            return Is(left, "distinct", negated, self.value(0))
        raise self.error("expected NULL, TRUE, FALSE, UNKNOWN or DISTINCT FROM after IS")

    def value(self, min_bp: int) -> Expr:
        self.enter()
        try:
            left = self.unary()
            while True:
                t = self.tok
                op = t.text.lower() if t.kind == "op" or self.word() == "div" else ""
                bp = _INFIX.get(op)
                if bp is None or bp <= min_bp:
                    return left
                self.advance()
                right = self.value(bp)
                left = Binary(op, left, right)
        finally:
            self.depth -= 1

    def unary(self) -> Expr:
        if self.is_op("-", "+", "~"):
            op = self.advance().text
            self.enter()
            try:
                arg = self.unary()
            finally:
                self.depth -= 1
            if op == "-" and isinstance(arg, Literal) and arg.kind in ("int", "decimal", "double"):
                value = arg.value.copy_negate() if isinstance(arg.value, decimal.Decimal) else -arg.value
                return Literal(value, arg.kind)
            if op == "+" and isinstance(arg, Literal) and arg.kind in ("int", "decimal", "double"):
                return arg
            return Unary(op, arg)
        return self.postfix(self.primary())

    def postfix(self, e: Expr) -> Expr:
        while True:
            if self.is_op("::"):
                self.advance()
                type_text = self._type_text(stop_at_paren_close=False)
                e = cast_literal(e, type_text, self.dialect)
            elif self.is_op("["):
                self.advance()
                self._skip_balanced("[", "]")
                e = Other("subscript")
            elif self.is_op(".") and self.toks[self.i + 1].kind in ("ident", "qident"):
                self.advance()
                name = self.advance()
                e = Column((*e.parts, name.value or name.text)) if isinstance(e, Column) else Other("field access")
            else:
                return e

    def primary(self) -> Expr:
        t = self.tok
        if t.kind == "num":
            self.advance()
            return number_literal(t.text, self.dialect)
        if t.kind == "str":
            self.advance()
            return Literal(t.value, "string")
        if t.kind == "bin":
            self.advance()
            try:
                return Literal(bytes.fromhex(t.value if len(t.value) % 2 == 0 else "0" + t.value), "binary")
            except ValueError as exc:
                raise self.error("invalid hex in X'...'") from exc
        if t.kind == "qident":
            self.advance()
            return Column((t.value,))
        if self.is_op("("):
            return self._parenthesized()
        if t.kind != "ident":
            raise self.error("expected a value")
        w = t.text.lower()
        nxt = self.toks[self.i + 1]
        if w in _TYPED_LITERALS and nxt.kind == "str":
            self.advance()
            self.advance()
            return self._typed_literal(w, nxt.value)
        if w == "interval":
            return self._interval()
        if w in ("null", "true", "false") and not (nxt.kind == "op" and nxt.text == "("):
            self.advance()
            return Literal(None, "null") if w == "null" else Literal(w == "true", "bool")
        if w == "case":
            return self._case()
        if w in ("cast", "try_cast") and nxt.kind == "op" and nxt.text == "(":
            return self._cast(w)
        if w == "exists" and nxt.kind == "op" and nxt.text == "(":
            self.advance()
            self.advance()
            self._skip_to_close()
            return Other("EXISTS")
        if nxt.kind == "op" and nxt.text == "(":
            self.advance()
            self.advance()
            self._skip_to_close()
            while self.word() in ("over", "filter", "within", "ignore", "respect", "nulls"):
                self.advance()
                if self.word() in ("group", "nulls"):
                    self.advance()
                if self.is_op("("):
                    self.advance()
                    self._skip_to_close()
                elif self.tok.kind == "ident" and self.word() not in _STOP_WORDS:
                    self.advance()
            return Other(f"{w}(...)")
        if w in _STOP_WORDS or w in ("not", "in", "is", "like", "between"):
            raise self.error("expected a value")
        self.advance()
        if self.is_op("->"):
            self.advance()
            self.value(0)
            return Other("lambda")
        return Column((t.text,))

    def _parenthesized(self) -> Expr:
        self.advance()
        if self.word() in ("select", "with", "values"):
            self._skip_to_close()
            return Other("subquery")
        self.enter()
        try:
            items = [self.boolean()]
            while self.is_op(","):
                self.advance()
                items.append(self.boolean())
            self.expect_op(")")
        finally:
            self.depth -= 1
        if self.is_op("->"):
            self.advance()
            self.value(0)
            return Other("lambda")
        return items[0] if len(items) == 1 else Other("row")

    def _skip_to_close(self) -> None:
        self._skip_balanced("(", ")")

    def _skip_balanced(self, open_: str, close: str) -> None:
        """Skip tokens up to and including the ``close`` matching an already consumed ``open_``."""
        level = 1
        while level:
            t = self.advance()
            if t.kind == "eof":
                raise self.error(f"missing {close!r}")
            if t.kind == "op" and t.text in ("(", "["):
                level += 1
            elif t.kind == "op" and t.text in (")", "]"):
                level -= 1

    def _case(self) -> Expr:
        self.advance()
        level = 1
        while level:
            t = self.advance()
            if t.kind == "eof":
                raise self.error("CASE without END")
            w = t.text.lower() if t.kind == "ident" else ""
            if w == "case":
                level += 1
            elif w == "end":
                level -= 1
        return Other("CASE")

    def _interval(self) -> Expr:
        self.advance()
        units = r"(year|month|week|day|hour|minute|second|millisecond|microsecond)s?|to"
        consumed = 0
        while self.tok.kind in ("str", "num") or re.fullmatch(units, self.word()) or self.is_op("-", "+"):
            self.advance()
            consumed += 1
        if not consumed:
            raise self.error("INTERVAL needs a value")
        return Other("INTERVAL")

    def _type_text(self, *, stop_at_paren_close: bool) -> str:
        parts = []
        t = self.advance()
        if t.kind != "ident":
            raise self.error("expected a type name")
        parts.append(t.text.lower())
        if self.is_op("("):
            self.advance()
            inner = []
            while not self.is_op(")"):
                tok = self.advance()
                if tok.kind == "eof":
                    raise self.error("unterminated type")
                inner.append(tok.text)
            self.advance()
            parts.append("(" + "".join(inner) + ")")
        elif self.is_op("<"):
            self.advance()
            self._skip_balanced_angle()
            parts.append("<...>")
        while not stop_at_paren_close and self.word() in ("with", "local", "time", "zone"):
            parts.append(" " + self.advance().text.lower())
        return "".join(parts)

    def _skip_balanced_angle(self) -> None:
        level = 1
        while level:
            t = self.advance()
            if t.kind == "eof":
                raise self.error("missing '>'")
            if t.text == "<":
                level += 1
            elif t.text == ">":
                level -= 1
            elif t.text == ">>":
                level -= 2

    def _cast(self, fn: str) -> Expr:
        self.advance()
        self.advance()
        arg = self.boolean()
        self.expect_word("as")
        type_text = self._type_text(stop_at_paren_close=True)
        while not self.is_op(")"):
            if self.tok.kind == "eof":
                raise self.error("missing ')'")
            type_text += " " + self.advance().text.lower()
        self.advance()
        return cast_literal(arg, type_text, self.dialect) if fn == "cast" else Other("TRY_CAST")

    def _typed_literal(self, kind: str, text: str) -> Expr:
        if kind == "date":
            value = parse_date_text(text)
            return Other("DATE literal") if value is None else Literal(value, "date")
        ntz = kind == "timestamp_ntz" or (kind == "timestamp" and self.dialect.timestamp_ntz_default)
        if self.dialect.name == "datafusion" and kind == "timestamp":
            ntz = False
        parsed = parse_timestamp_text(text, None)
        if parsed is None:
            return Other("TIMESTAMP literal")
        if ntz:
            if parsed.tzinfo is not None:
                return Other("TIMESTAMP_NTZ literal with a zone")
            return Literal(parsed, "timestamp_ntz")
        if parsed.tzinfo is None:
            parsed = local_to_instant(parsed, resolve_zone(self.dialect.zone))
        return Literal(parsed, "timestamp")


def cast_literal(arg: Expr, type_text: str, dialect: Dialect) -> Expr:
    """``CAST(literal AS type)`` folded to a literal where the result is certain; else Other."""
    if not isinstance(arg, Literal) or arg.value is None:
        return Literal(None, "null") if isinstance(arg, Literal) else Other("CAST")
    t = type_text.replace(" ", "").lower()
    v, kind = arg.value, arg.kind
    try:
        if t == "date" and kind == "string":
            value = parse_date_text(v)
            return Other("CAST") if value is None else Literal(value, "date")
        if t in ("timestamp", "timestamp_ltz") and kind == "string":
            parsed = parse_timestamp_text(v, None)
            if parsed is None:
                return Other("CAST")
            if parsed.tzinfo is None:
                parsed = local_to_instant(parsed, resolve_zone(dialect.zone))
            return Literal(parsed, "timestamp")
        if t == "timestamp_ntz" and kind == "string":
            parsed = parse_timestamp_text(v, None)
            if parsed is None or parsed.tzinfo is not None:
                return Other("CAST")
            return Literal(parsed, "timestamp_ntz")
        if t in ("double", "float", "real") and kind in ("int", "decimal", "double"):
            return Literal(float(v), "double") if t == "double" else Other("CAST")
        if t in ("double",) and kind == "string" and v.strip().lower() in ("nan", "inf", "-inf", "infinity"):
            return Literal(float(v.strip().lower().replace("infinity", "inf")), "double")
        m = re.fullmatch(r"decimal\((\d+)(?:,(\d+))?\)", t)
        if m and kind in ("int", "decimal"):
            precision, scale = int(m.group(1)), int(m.group(2) or 0)
            q = decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-scale), context=DECIMAL_CONTEXT)
            if q != decimal.Decimal(v) or len(q.as_tuple().digits) > precision:
                return Other("CAST")
            return Literal(q, "decimal")
        if t in ("bigint", "long", "int", "integer", "smallint", "short", "tinyint", "byte") and kind == "int":
            return arg
        if t in ("string", "varchar", "char") and kind == "string":
            return arg
    except (ValueError, ArithmeticError):
        return Other("CAST")
    return Other("CAST")


def parse_expression(text: str, dialect: Dialect | None = None) -> Expr:
    """Parse ``text``; raises :class:`SqlSyntaxError` (one line) when it cannot."""
    if not isinstance(text, str):
        raise SqlSyntaxError(f"a filter must be a string, got {type(text).__name__}")
    try:
        return _Parser(text, dialect or Dialect()).parse()
    except RecursionError as exc:
        raise SqlSyntaxError(f"filter nests too deeply to parse ({len(text)} characters)") from exc


def literal_python(value: Any) -> tuple[Any, str]:
    """The (value, kind) of a Python value as a literal (used for Spark's pushed filters)."""
    if value is None:
        return None, "null"
    if isinstance(value, bool):
        return value, "bool"
    if isinstance(value, int):
        return value, "int"
    if isinstance(value, float):
        return value, "double"
    if isinstance(value, decimal.Decimal):
        return value, "decimal"
    if isinstance(value, str):
        return value, "string"
    if isinstance(value, bytes | bytearray):
        return bytes(value), "binary"
    if isinstance(value, dt.datetime):
        return value, "timestamp" if value.tzinfo is not None else "timestamp_ntz"
    if isinstance(value, dt.date):
        return value, "date"
    return value, "other"
