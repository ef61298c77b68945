"""Tokens of SQL filter text, in Spark's or DataFusion's dialect (see :mod:`partitioning.sql.parse`).

Spark reads ``"x"`` as a string and processes backslash escapes in string literals
(unless the session says otherwise); DataFusion reads ``"x"`` as a column and keeps
backslashes. The token count is bounded by :data:`MAX_TOKENS`.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Any

from partitioning.errors import InvalidInput

__all__ = ["DECIMAL_CONTEXT", "MAX_TOKENS", "Dialect", "SqlSyntaxError", "Token", "tokenize"]

MAX_TOKENS = 200_000
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
    ansi: bool = True  # spark.sql.ansi.enabled: off, a string compared with another type may compare as text

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


_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:BD|bd|[LlSsYyDdFf])?(?![A-Za-z0-9_])")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = (
    "<=>", "!=", "<>", "<=", ">=", "==", "||", "->", "::", "<<", ">>",
    "=", "<", ">", "+", "-", "*", "/", "%", "&", "|", "^", "~", "!", "(", ")", ",", ".", "[", "]", ":", ";", "?",
)  # fmt: skip
_SIMPLE_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "\\": "\\"}


@dataclass(frozen=True)
class Token:
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


def tokenize(text: str, dialect: Dialect) -> list[Token]:
    toks: list[Token] = []
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
                toks.append(Token("bin", body, body))
                continue
            value = _string_value(body, c, escapes)
            if toks and toks[-1].kind == "str" and spark:  # Spark joins adjacent string literals
                toks[-1] = Token("str", toks[-1].text + " " + body, toks[-1].value + value)
            else:
                toks.append(Token("str", body, value))
            continue
        if c == '"':
            body, i = _read_quoted(text, i, '"', False)
            toks.append(Token("qident", body, body.replace('""', '"')))
            continue
        if c == "`":
            body, i = _read_quoted(text, i, "`", False)
            toks.append(Token("qident", body, body.replace("``", "`")))
            continue
        m = _NUMBER.match(text, i)
        if m and (c.isdigit() or c == "."):
            toks.append(Token("num", m.group(0)))
            i = m.end()
            continue
        m = _IDENT.match(text, i)
        if m:
            toks.append(Token("ident", m.group(0)))
            i = m.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                toks.append(Token("op", op))
                i += len(op)
                break
        else:
            raise SqlSyntaxError(f"unexpected character {c!r} at position {i}")
    toks.append(Token("eof", ""))
    return toks


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"
