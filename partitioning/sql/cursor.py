"""A cursor over the tokens of SQL filter text: lookahead, expectations, errors and the depth bound.

:class:`TokenCursor` is the lowest layer of the filter parser (:mod:`partitioning.sql.parse`):
it tokenizes the text (:func:`~partitioning.sql.tokens.tokenize`), looks at and consumes
tokens, skips balanced brackets, and raises one-line :class:`SqlSyntaxError` messages.
Nesting is bounded by :data:`MAX_DEPTH`, so a deep filter fails cleanly, not with a
RecursionError.
"""

from __future__ import annotations

from partitioning.sql.tokens import Dialect, SqlSyntaxError, Token, tokenize

__all__ = ["MAX_DEPTH", "TokenCursor"]

MAX_DEPTH = 200


class TokenCursor:
    """The position in a filter's tokens, and how far the parse has nested."""

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
