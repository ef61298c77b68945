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

import decimal
import re
from typing import Any

from partitioning.sql.nodes import (
    Between,
    Binary,
    BoolOp,
    Column,
    Expr,
    InList,
    Is,
    LikeOp,
    Literal,
    Other,
    Unary,
    cast_literal,
    number_literal,
)
from partitioning.sql.timezones import local_to_instant, parse_date_text, parse_timestamp_text, resolve_zone
from partitioning.sql.tokens import MAX_TOKENS, Dialect, SqlSyntaxError, Token, tokenize

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

MAX_DEPTH = 200


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
    def tok(self) -> Token:
        return self.toks[self.i]

    def word(self, offset: int = 0) -> str:
        t = self.toks[min(self.i + offset, len(self.toks) - 1)]
        return t.text.lower() if t.kind == "ident" else ""

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def advance(self) -> Token:
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


def parse_expression(text: str, dialect: Dialect | None = None) -> Expr:
    """Parse ``text``; raises :class:`SqlSyntaxError` (one line) when it cannot."""
    if not isinstance(text, str):
        raise SqlSyntaxError(f"a filter must be a string, got {type(text).__name__}")
    try:
        return _Parser(text, dialect or Dialect()).parse()
    except RecursionError as exc:
        raise SqlSyntaxError(f"filter nests too deeply to parse ({len(text)} characters)") from exc
