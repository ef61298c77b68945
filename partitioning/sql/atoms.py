"""The operands of SQL filter text: literals, columns, casts, function calls, CASE, INTERVAL, parentheses.

:class:`AtomParser` is the base of the filter parser (:mod:`partitioning.sql.parse`): it
reads one operand, which the expression grammar of its subclass combines with operators.
Literals keep their SQL type (typed literals such as ``DATE '...'`` and ``TIMESTAMP '...'``
are read in the dialect's time zone); what pruning cannot use (function calls, CASE,
INTERVAL, subqueries, TRY_CAST, lambdas) is skipped over and kept as an opaque
:class:`~partitioning.sql.nodes.Other` node.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

from partitioning.sql.cursor import TokenCursor
from partitioning.sql.nodes import Column, Expr, Literal, Other, cast_literal, number_literal
from partitioning.sql.timezones import local_to_instant, parse_date_text, parse_timestamp_text, resolve_zone

__all__ = ["AtomParser"]

_TYPED_LITERALS = ("date", "timestamp", "timestamp_ntz", "timestamp_ltz")
_STOP_WORDS = {"and", "or", "then", "else", "end", "when", "as", "from", "for", "escape", "asc", "desc"}


class AtomParser(TokenCursor, ABC):
    """Operands of filter expressions; the subclass supplies the grammar that combines them."""

    @abstractmethod
    def boolean(self) -> Expr:
        """A whole boolean expression (OR of ANDs), as inside parentheses or CAST."""

    @abstractmethod
    def value(self, min_bp: int) -> Expr:
        """A value expression whose infix operators bind tighter than ``min_bp``."""

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
