"""``expression`` partition fields, evaluated with DataFusion (SPEC-NOTES 13).

``col0``...``colK`` stand for the source columns in ``source_ids`` order. The
spec's ``murmur3`` and ``murmur3_multi`` are backed by this project's vectorized
Arrow murmur3, so expression fields hash exactly as the ``bucket`` transforms do.

The hashed bytes follow each argument's own type after casts (``murmur3(CAST(col0
AS INT))`` hashes 4 bytes). DataFusion's Python UDFs only have exact signatures and
coerce their arguments to them, so every call is renamed to a UDF of its own whose
signature is exactly its arguments' planned types (see :func:`find_calls`).

Nothing runs unless :func:`~partitioning.spec.expression_safety.check_expression` finds the
expression a pure, bounded scalar function of its row.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa
from datafusion import SessionContext, udf

from partitioning.errors import SpecError
from partitioning.spec import murmur3 as m3
from partitioning.spec.expression_safety import check_expression
from partitioning.sql.engine import clip, datafusion_line

_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))"""
    r"""|(?P<string>[Ee]'(?:[^'\\]|\\.|'')*(?:'|\Z)|'(?:[^']|'')*(?:'|\Z))"""
    r"""|(?P<quoted>"(?:[^"]|"")*(?:"|\Z))|(?P<word>[A-Za-z_][A-Za-z0-9_$]*)|(?P<other>.)""",
    re.DOTALL,
)


@dataclass(frozen=True)
class SqlCall:
    """One call ``name(arg, ...)`` in SQL text: where its name is and each argument's span."""

    name: str
    name_start: int
    name_end: int
    args: tuple[tuple[int, int], ...]


def _tokens(sql: str) -> list[tuple[str, str, int, int]]:
    """(kind, text, start, end) of each token, without spaces and comments."""
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "other"
        if kind not in ("space", "comment"):
            out.append((kind, m.group(), m.start(), m.end()))
    return out


def find_calls(sql: str, names: Sequence[str]) -> list[SqlCall]:
    """Every call of one of ``names`` in ``sql``, nested ones included.

    Names match as DataFusion resolves functions: unquoted ones case-insensitively,
    quoted ones exactly. Text in string literals, quoted identifiers and comments is
    not code. A call whose parentheses do not close is left for DataFusion to report.
    """
    tokens = _tokens(sql)
    calls = []
    for i, (kind, text, start, end) in enumerate(tokens):
        if kind == "word":
            name = text.lower()
        elif kind == "quoted":
            name = text[1:-1]
        else:
            continue
        if name not in names or i + 1 >= len(tokens) or tokens[i + 1][1] != "(":
            continue
        if i > 0 and tokens[i - 1][1] == ".":
            continue
        args = _arguments(tokens, i + 1)
        if args is not None:
            calls.append(SqlCall(name, start, end, args))
    return calls


def _arguments(tokens: list[tuple[str, str, int, int]], open_at: int) -> tuple[tuple[int, int], ...] | None:
    """The spans of the top-level arguments of the parenthesis at ``tokens[open_at]``."""
    depth = 0
    spans: list[tuple[int, int]] = []
    arg_start = tokens[open_at][3]
    for kind, text, start, end in tokens[open_at:]:
        if kind != "other":
            continue
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth == 0:
                if spans or tokens[open_at + 1][2] != start:
                    spans.append((arg_start, start))
                return tuple(spans)
        elif text == "," and depth == 1:
            spans.append((arg_start, start))
            arg_start = end
    return None


_HASHES: dict[str, Callable[..., pa.Array]] = {"murmur3": m3.murmur3, "murmur3_multi": m3.murmur3_multi}


def _source_batch(arrays: Sequence[pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(arrays), names=[f"col{i}" for i in range(len(arrays))])


class _Compiled:
    """A DataFusion context holding the expression with each hash call bound to exact argument types."""

    def __init__(self, expression: str, source_types: tuple[pa.DataType, ...]) -> None:
        self.source_types = source_types
        self.ctx = SessionContext()
        self.lock = threading.Lock()
        self.expression = self._bind_hash_calls(expression)

    def _bind_hash_calls(self, expression: str) -> str:
        """Rename each ``murmur3``/``murmur3_multi`` call, innermost first, to a UDF typed for its arguments."""
        if self.source_types:
            empty = _source_batch([pa.array([], t) for t in self.source_types])
            self.ctx.register_record_batches("src", [[empty]])
        try:
            bound = 0
            while calls := find_calls(expression, tuple(_HASHES)):
                call = max(calls, key=lambda c: c.name_start)
                texts = [expression[a:b] for a, b in call.args]
                types = [self._type_of(call.name, text) for text in texts]
                _check_arguments(call.name, types, texts)
                alias = f"__lp_{call.name}_{bound}"
                self.ctx.register_udf(udf(_HASHES[call.name], types, pa.int32(), "immutable", alias))
                expression = expression[: call.name_start] + alias + expression[call.name_end :]
                bound += 1
            return expression
        finally:
            if self.source_types:
                self.ctx.deregister_table("src")

    def _type_of(self, function: str, argument: str) -> pa.DataType:
        """The type DataFusion plans for ``argument`` over the source columns, without running it."""
        source = " FROM src" if self.source_types else ""
        try:
            field: pa.Field = self.ctx.sql(f"SELECT ({argument}\n) AS a{source}").schema().field("a")
        except Exception as exc:  # DataFusion raises plain Exception for planning errors
            raise SpecError(f"{function} argument {argument.strip()!r} is not valid: {datafusion_line(exc)}") from exc
        return field.type

    def run(self, arrays: Sequence[pa.Array]) -> pa.Array:
        batch = _source_batch(arrays) if arrays else None
        with self.lock:
            if batch is not None:
                self.ctx.register_record_batches("src", [[batch]])
                sql = f"SELECT ({self.expression}\n) AS v FROM src"
            else:
                sql = f"SELECT ({self.expression}\n) AS v"
            try:
                table = self.ctx.sql(sql).to_arrow_table()
            finally:
                if batch is not None:
                    self.ctx.deregister_table("src")
        column = table.column("v")
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _check_arguments(name: str, types: Sequence[pa.DataType], texts: Sequence[str]) -> None:
    if name == "murmur3" and len(types) != 1:
        raise SpecError(f"murmur3 takes exactly one argument, got {len(types)}")
    if not types:
        raise SpecError(f"{name} needs at least one argument")
    for t, text in zip(types, texts, strict=True):
        reason = None if pa.types.is_null(t) else m3.unhashable_reason(t)
        if reason is not None:
            raise SpecError(
                f"{name} argument {text.strip()!r} has type {t}, which cannot be hashed ({reason}); "
                f"hashable types: {m3.HASHABLE_TYPES}"
            )


@lru_cache(maxsize=256)
def _compiled(expression: str, source_types: tuple[pa.DataType, ...]) -> _Compiled:
    return _Compiled(expression, source_types)


def evaluate_expression(
    expression: str, arrays: Sequence[pa.Array | pa.ChunkedArray], result_type: pa.DataType
) -> pa.Array:
    """Evaluate ``expression`` over the source arrays and cast to ``result_type``.

    The expression is checked first (:func:`check_expression`, cached), so an expression
    from any source, a loaded spec included, is never run unless it is pure and bounded.
    """
    combined = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    types = tuple(a.type for a in combined)
    check_expression(expression, types)
    shown = clip(expression)
    try:
        compiled = _compiled(expression, types)
    except SpecError as exc:
        raise SpecError(f"expression {shown!r}: {exc}") from exc
    except RecursionError as exc:
        raise SpecError(f"expression {shown!r} is nested too deeply") from exc
    try:
        out = compiled.run(combined)
    except Exception as exc:  # DataFusion raises plain Exception for execution errors
        raise SpecError(f"expression {shown!r} failed: {datafusion_line(exc)}") from exc
    if len(combined) and len(out) != len(combined[0]):
        raise SpecError(f"expression {shown!r} is not a per-row expression")
    try:
        return out.cast(result_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SpecError(
            f"expression {shown!r} returns {out.type}, which cannot be cast to result_type {result_type}"
        ) from exc


def validate_expression(expression: str, source_types: Sequence[pa.DataType], result_type: pa.DataType) -> None:
    """Reject an expression that is not pure and bounded, does not parse, or fails on a NULL row."""
    check_expression(expression, source_types)
    nulls = [pa.nulls(1, t) for t in source_types]
    evaluate_expression(expression, nulls, result_type)


def evaluate_expression_scalar(
    expression: str, values: Sequence[object], types: Sequence[pa.DataType], result_type: pa.DataType
) -> object:
    """Evaluate an expression on one row of literals (used for pruning)."""
    arrays = [pa.array([v], type=t) for v, t in zip(values, types, strict=True)]
    return evaluate_expression(expression, arrays, result_type)[0].as_py()
