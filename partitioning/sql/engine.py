"""Applying a SQL filter to Arrow rows with DataFusion, the engine Lance's own filters use.

Spark-free maintenance (``delete_rows``, ``drop_partitions`` without a SparkSession)
applies its filter with DataFusion, so it accepts what DataFusion SQL accepts (functions,
arithmetic, CASE...) and reads it the way a Lance scan would: ``"x"`` is a column,
backslashes are plain characters, and a timestamp literal without a zone is UTC.

DataFusion parses and plans a left-deep chain of operators recursively: a few thousand
``OR`` terms take seconds and ten thousand overflow the native stack (SIGSEGV). So a
filter is first rewritten (:func:`balance_filter`): AND/OR chains become balanced trees
and pairs of leading ``NOT`` cancel, which changes no row's result under SQL's
three-valued logic. What still holds a long unbroken chain is refused in one line
(:data:`MAX_RUN_TOKENS`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import pyarrow as pa
from datafusion import SessionContext

from partitioning.errors import InvalidInput, first_line

__all__ = [
    "MAX_NESTING",
    "MAX_RUN_TOKENS",
    "ROW_INDEX",
    "SqlToken",
    "balance_filter",
    "clip",
    "datafusion_line",
    "matching_rows",
    "sql_tokens",
]

ROW_INDEX = "__lance_partitioned_row"
MAX_NESTING = 200
"""Parentheses, brackets and CASE...END a filter may nest (the project's filter parser's bound)."""
MAX_RUN_TOKENS = 2_000
"""Tokens DataFusion is handed between two separators (brackets, commas, CASE keywords):
about 1,000 chained operators, which it plans in well under a second."""

_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))"""
    r"""|(?P<string>[Ee]'(?:[^'\\]|\\.|'')*(?:'|\Z)|'(?:[^']|'')*(?:'|\Z))"""
    r"""|(?P<quoted>"(?:[^"]|"")*(?:"|\Z))|(?P<word>[A-Za-z_][A-Za-z0-9_$]*)"""
    r"""|(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"""
    r"""|(?P<op>->>|->|=>|::|<=|>=|<>|!=|\|\||:=)|(?P<other>.)""",
    re.DOTALL,
)
_OPEN = {"(": ")", "[": "]", "{": "}"}
_SEPARATORS = frozenset({",", "CASE", "WHEN", "THEN", "ELSE", "END"})
# Tokens whose presence at the top level of a filter means it is not a plain boolean
# expression this module understands; such a filter is passed on unchanged.
_OPAQUE_WORDS = frozenset({"SELECT", "WITH", "VALUES", "WHERE", "FROM"})
_OPAQUE_OPS = frozenset({"->", "->>", "=>", ":="})
_UNSURE_CHARS = frozenset({"$", "`", "#", "\\"})
_CLOSED = {
    "comment": re.compile(r"--[^\n]*|/\*(?:(?!/\*).)*?\*/", re.DOTALL),
    "string": re.compile(r"[Ee]'(?:[^'\\]|\\.|'')*'|'(?:[^']|'')*'", re.DOTALL),
    "quoted": re.compile(r'"(?:[^"]|"")*"', re.DOTALL),
}


class SqlToken(NamedTuple):
    """One token of SQL text: its kind, text and span (spaces and comments are dropped)."""

    kind: str
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text


def sql_tokens(sql: str) -> list[SqlToken]:
    """The tokens of ``sql`` in DataFusion's reading: standard strings, ``"quoted"`` names."""
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "other"
        if kind not in ("space", "comment"):
            out.append(SqlToken(kind, m.group(), m.start(), m.end()))
    return out


def _plainly_tokenized(sql: str) -> bool:
    """No comment, string or name is left open or nested, and no dialect-specific quoting
    is used: the tokens are exactly what DataFusion sees."""
    for m in _TOKEN.finditer(sql):
        text, kind = m.group(), m.lastgroup
        closed = _CLOSED.get(kind or "")
        if closed is not None and not closed.fullmatch(text):
            return False
        if (kind == "other" and text in _UNSURE_CHARS) or (kind == "string" and text[0] in "Ee" and "\\" in text):
            return False
    return True


def _closers(tokens: Sequence[SqlToken]) -> dict[int, int] | None:
    """Index of the token closing each bracket or CASE; None when they do not balance
    or nest deeper than :data:`MAX_NESTING`."""
    stack: list[tuple[int, str]] = []
    out: dict[int, int] = {}
    for i, t in enumerate(tokens):
        if t.kind == "other" and t.text in _OPEN:
            stack.append((i, _OPEN[t.text]))
        elif t.kind == "word" and t.upper == "CASE":
            stack.append((i, "END"))
        elif (t.kind == "other" and t.text in ")]}") or (t.kind == "word" and t.upper == "END"):
            if not stack or stack[-1][1] != t.upper:
                return None
            out[stack.pop()[0]] = i
        else:
            continue
        if len(stack) > MAX_NESTING:
            return None
    return None if stack else out


class _Balancer:
    def __init__(self, sql: str, tokens: Sequence[SqlToken], closers: dict[int, int]) -> None:
        self.sql = sql
        self.tokens = tokens
        self.words = [t.upper for t in tokens]
        self.closers = closers

    def text(self, lo: int, hi: int) -> str:
        return self.sql[self.tokens[lo].start : self.tokens[hi - 1].end]

    def scan(self, lo: int, hi: int) -> tuple[bool, list[int], list[int]]:
        """One pass over ``[lo, hi)`` outside brackets: whether it is opaque (a token after
        which AND/OR may not end an operand, as ``IS DISTINCT FROM y AND z`` reads ``y AND
        z``, or a subquery or lambda), and where its OR and AND operators are."""
        ors: list[int] = []
        ands: list[int] = []
        between, i = 0, lo
        while i < hi:
            word = self.words[i]
            if word in _OPAQUE_WORDS or word in _OPAQUE_OPS or word == ":":
                return True, [], []
            if word == "BETWEEN":
                between += 1
            elif word == "AND":
                if between:
                    between -= 1
                else:
                    ands.append(i)
            elif word == "OR":
                ors.append(i)
            i = self.closers.get(i, i) + 1
        return False, ors, ands

    def join(self, parts: list[tuple[int, int]], word: str) -> str:
        if len(parts) == 1:
            text, grouped = self.expression(*parts[0])
            return text if grouped else f"({text})"
        middle = len(parts) // 2
        return f"({self.join(parts[:middle], word)} {word} {self.join(parts[middle:], word)})"

    def expression(self, lo: int, hi: int) -> tuple[str, bool]:
        """The rewritten text of ``[lo, hi)`` and whether it is one parenthesized group."""
        negated, start, end, rescan = False, lo, hi, True
        while True:
            while self.words[lo] == "(" and self.closers.get(lo) == hi - 1 and hi - lo > 2:
                lo, hi, rescan = lo + 1, hi - 1, True
            if rescan:
                opaque, ors, ands = self.scan(lo, hi)
                if opaque:
                    return self.text(start, end), False
                for word, points in (("OR", ors), ("AND", ands)):
                    if points:
                        bounds = [lo - 1, *points, hi]
                        parts = [(a + 1, b) for a, b in itertools.pairwise(bounds)]
                        if any(a >= b for a, b in parts):
                            raise ValueError(f"empty {word} operand")
                        body = self.join(parts, word)
                        return (f"(NOT {body})", True) if negated else (body, True)
                rescan = False
            if self.words[lo] == "NOT" and self.tokens[lo].kind == "word" and hi - lo > 1:
                negated, lo = not negated, lo + 1
                continue
            return (f"(NOT ({self.text(lo, hi)}))", True) if negated else (self.text(lo, hi), False)


def balance_filter(sql: str) -> str:
    """``sql`` with its AND/OR chains as balanced trees and pairs of leading NOTs removed.

    Only the boolean structure outside brackets and CASE is rewritten; operands are kept
    as written, and so is any part this module does not fully understand (``IS DISTINCT
    FROM``, a subquery or a lambda outside brackets); a filter with unbalanced brackets or
    dialect-specific quoting is returned unchanged.
    """
    tokens = sql_tokens(sql)
    if not tokens or not _plainly_tokenized(sql):
        return sql
    closers = _closers(tokens)
    if closers is None:
        return sql
    balancer = _Balancer(sql, tokens, closers)
    if balancer.scan(0, len(tokens))[0]:
        return sql
    try:
        return balancer.expression(0, len(tokens))[0]
    except (ValueError, RecursionError):
        return sql


def longest_run(tokens: Sequence[SqlToken]) -> tuple[int, int]:
    """(length, index of its first token) of the longest run of tokens between separators."""
    best, best_at, run, run_at = 0, 0, 0, 0
    for i, t in enumerate(tokens):
        if (t.kind == "other" and t.text in "()[]{},") or (t.kind == "word" and t.upper in _SEPARATORS):
            run, run_at = 0, i + 1
            continue
        run += 1
        if run > best:
            best, best_at = run, run_at
    return best, best_at


def clip(text: str, limit: int = 120) -> str:
    """``text`` shortened to ``limit`` characters for an error line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def datafusion_line(exc: BaseException) -> str:
    """One line for a DataFusion error: its root cause when it is a "caused by" chain."""
    causes = re.split(r"\n\s*caused by\s*\n", str(exc))
    return first_line(Exception(causes[-1])) if len(causes) > 1 else first_line(exc)


def _utc_instants(table: pa.Table) -> pa.Table:
    """``table`` with zoned timestamp columns shown in UTC: the same instants, so that a
    zone-less literal reads as UTC and a literal with an offset as that instant (DataFusion
    would read both in the column's own zone)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz.upper() not in ("UTC", "+00:00"):
            table = table.set_column(
                i, f.with_type(pa.timestamp(f.type.unit, "UTC")), table.column(i).cast(pa.timestamp(f.type.unit, "UTC"))
            )
    return table


@lru_cache(maxsize=32)
def _prepared(filter_sql: str) -> tuple[str, int, str]:
    """The balanced filter, its longest run of tokens and the text where that run starts
    (cached: maintenance applies one filter to every candidate table)."""
    sql = balance_filter(filter_sql)
    tokens = sql_tokens(sql)
    run, at = longest_run(tokens)
    return sql, run, clip(sql[tokens[at].start :], 60) if run else ""


def matching_rows(table: pa.Table, filter_sql: str, *, what: str = "filter") -> list[int]:
    """Indexes of the rows of ``table`` for which ``filter_sql`` is TRUE (DataFusion SQL)."""
    sql, run, near = _prepared(filter_sql)
    if run > MAX_RUN_TOKENS:
        raise InvalidInput(
            f"{what} {clip(filter_sql)!r} holds a chain of {run} tokens without parentheses or commas near "
            f"{near!r}, more than the {MAX_RUN_TOKENS} DataFusion is given at once; split it into AND/OR "
            "terms or use IN (...)"
        )
    indexed = _utc_instants(table).append_column(ROW_INDEX, pa.array(range(table.num_rows), pa.int64()))
    ctx = SessionContext()
    ctx.register_record_batches("t", [indexed.to_batches() or [pa.RecordBatch.from_pylist([], indexed.schema)]])
    try:
        result = ctx.sql(f'SELECT "{ROW_INDEX}" FROM t WHERE ({sql}\n)').to_arrow_table()
    except Exception as exc:  # DataFusion raises plain Exception for planning errors
        raise InvalidInput(f"{what} {clip(filter_sql)!r}: {datafusion_line(exc)}") from exc
    return sorted(result.column(ROW_INDEX).to_pylist())
