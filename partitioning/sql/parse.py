"""A tolerant parser for SQL filter expressions, in Spark's or DataFusion's dialect.

It exists to decide pruning, never to apply a filter: the engine that applies the filter
(Spark's ``df.where``, or DataFusion inside Lance) parses it again itself. So the parser
only has to recognise the shapes pruning understands (``column op literal``, IN,
BETWEEN, LIKE, IS [NOT] NULL, NOT, AND, OR) and keep everything else as an opaque
:class:`Other` node, which pruning reads as "may match". Input it cannot tokenize or
parse raises :class:`SqlSyntaxError`; callers that only prune treat that as "keep every
partition".

Size is bounded: a filter may hold at most :data:`MAX_TOKENS` tokens and nest at most
:data:`~partitioning.sql.cursor.MAX_DEPTH` levels; long AND/OR chains are parsed iteratively into
flat nodes. Operands (literals, casts, function calls, CASE) are read by the base class
:class:`~partitioning.sql.atoms.AtomParser`.
"""

from __future__ import annotations

import decimal
from typing import Any

from partitioning.sql.atoms import AtomParser
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
)
from partitioning.sql.tokens import MAX_TOKENS, Dialect, SqlSyntaxError

__all__ = [
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

# -- parser -------------------------------------------------------------------------------------

_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}
# binding powers of infix value operators (higher binds tighter)
_INFIX = {
    "*": 70, "/": 70, "%": 70, "div": 70,
    "+": 60, "-": 60, "||": 60,
    "<<": 55, ">>": 55,
    "&": 50, "^": 45, "|": 40,
}  # fmt: skip


class _Parser(AtomParser):
    """The expression grammar: OR/AND/NOT chains, predicates, infix and unary operators."""

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


def parse_expression(text: str, dialect: Dialect | None = None) -> Expr:
    """Parse ``text``; raises :class:`SqlSyntaxError` (one line) when it cannot."""
    if not isinstance(text, str):
        raise SqlSyntaxError(f"a filter must be a string, got {type(text).__name__}")
    try:
        return _Parser(text, dialect or Dialect()).parse()
    except RecursionError as exc:
        raise SqlSyntaxError(f"filter nests too deeply to parse ({len(text)} characters)") from exc
