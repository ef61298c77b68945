"""Which partition expressions may run: size bounds, the function allow-list, and a check of the parsed tree.

An expression must be a pure scalar function of its row (:func:`check_expression`): it is
parsed with DataFusion's SQL parser and may hold only ``col0..colK``, literals, casts,
CASE, operators and the deterministic scalar functions of :data:`ALLOWED_FUNCTIONS`.
Window and aggregate functions, subqueries, table functions, volatile functions and
functions whose result can be far larger than their input are refused, and so is an
expression above :data:`MAX_EXPRESSION_CHARS` characters, :data:`MAX_EXPRESSION_TOKENS`
tokens, :data:`MAX_EXPRESSION_NODES` nodes or :data:`MAX_EXPRESSION_DEPTH` levels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import pyarrow as pa
from datafusion import SessionContext, udf

from partitioning.errors import SpecError
from partitioning.sql.engine import clip, datafusion_line, sql_tokens

__all__ = [
    "ALLOWED_FUNCTIONS",
    "MAX_EXPRESSION_CHARS",
    "MAX_EXPRESSION_DEPTH",
    "MAX_EXPRESSION_NESTING",
    "MAX_EXPRESSION_NODES",
    "MAX_EXPRESSION_TOKENS",
    "MAX_FIXED_SIZE",
    "MAX_PAD_LENGTH",
    "check_expression",
]

MAX_EXPRESSION_CHARS = 10_000
MAX_EXPRESSION_TOKENS = 2_000
MAX_EXPRESSION_NESTING = 32
"""Parentheses, brackets and CASE...END an expression may nest in its text."""
MAX_EXPRESSION_NODES = 1_000
MAX_EXPRESSION_DEPTH = 100
"""Levels of the parsed expression tree (a chain ``a + b + ...`` of N terms has N)."""
MAX_PAD_LENGTH = 1_024
MAX_FIXED_SIZE = 4_096

ALLOWED_FUNCTIONS = frozenset(
    """
    murmur3 murmur3_multi
    abs acos acosh asin asinh atan atan2 atanh cbrt ceil cos cosh cot degrees exp floor gcd isnan iszero lcm ln
    log log10 log2 nanvl pi pow power radians round signum sin sinh sqrt tan tanh trunc
    coalesce greatest least ifnull nullif nvl nvl2
    ascii bit_length btrim char_length character_length chr concat concat_ws contains digest ends_with
    find_in_set initcap instr left length lower lpad ltrim md5 octet_length position regexp_count regexp_instr
    regexp_like regexp_match reverse right rpad rtrim sha224 sha256 sha384 sha512 split_part starts_with strpos
    substr substr_index substring substring_index to_hex translate trim upper
    date_bin date_format date_part date_trunc datepart datetrunc from_unixtime make_date make_time to_char
    to_date to_time to_timestamp to_timestamp_micros to_timestamp_millis to_timestamp_nanos to_timestamp_seconds
    to_unixtime
    arrow_cast arrow_try_cast array_element array_extract array_length cardinality element_at get_field
    list_element list_extract list_length make_array make_list named_struct struct
    """.split()
)
"""Deterministic scalar functions a partition expression may call (DataFusion names)."""

_VOLATILE = frozenset(
    "current_date current_time current_timestamp file_row_index input_file_name localtime localtimestamp now "
    "rand random today uuid version".split()
)
_TABLE_FUNCTIONS = frozenset("generate_series range unnest".split())
_UNBOUNDED = frozenset(
    "array_repeat list_repeat array_resize list_resize repeat replace regexp_replace encode overlay levenshtein "
    "factorial".split()
)
_PADS = frozenset({"lpad", "rpad"})
_CASTS = frozenset({"arrow_cast", "arrow_try_cast"})
_LEAVES = frozenset({"Column", "Literal"})
_OPERATORS = frozenset(
    "Alias BinaryExpr Between Case Cast TryCast InList Like ILike SimilarTo RLike Not Negative IsNull IsNotNull "
    "IsTrue IsFalse IsUnknown IsNotTrue IsNotFalse IsNotUnknown".split()
)
_REFUSED = {
    "AggregateFunction": "an aggregate function",
    "WindowFunction": "a window function",
    "ScalarSubquery": "a subquery",
    "InSubquery": "a subquery",
    "Exists": "a subquery (EXISTS)",
    "Unnest": "the table function unnest",
    "Placeholder": "a parameter placeholder",
    "ScalarVariable": "a session variable",
    "Wildcard": "a wildcard",
}
_HASH_NAMES = ("murmur3", "murmur3_multi")
_COLUMN = re.compile(r"col(\d+)")
_FIXED_SIZE = re.compile(r"FixedSize\w*\(\s*(\d+)")


def _scan_text(expression: str, n_sources: int) -> None:
    """Bounds on the text, checked before DataFusion sees it (its parser recurses natively)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise SpecError(
            f"expression {clip(expression)!r} has {len(expression)} characters, "
            f"more than the {MAX_EXPRESSION_CHARS} allowed"
        )
    tokens = sql_tokens(expression)
    if len(tokens) > MAX_EXPRESSION_TOKENS:
        raise SpecError(
            f"expression {clip(expression)!r} has {len(tokens)} tokens, more than the {MAX_EXPRESSION_TOKENS} allowed"
        )
    depth = 0
    for t in tokens:
        word = t.text.lower() if t.kind == "word" else ""
        if t.text in ("(", "[", "{") or word == "case":
            depth += 1
            if depth > MAX_EXPRESSION_NESTING:
                raise SpecError(
                    f"expression {clip(expression)!r} nests brackets or CASE deeper than "
                    f"{MAX_EXPRESSION_NESTING} levels"
                )
        elif t.text in (")", "]", "}") or word == "end":
            depth -= 1
        elif word == "select":
            raise SpecError(f"expression {clip(expression)!r} holds a subquery (SELECT); {_PURE}")
        elif word.startswith("__lp_"):
            raise SpecError(f"expression {clip(expression)!r} uses the reserved name {t.text!r}")
        elif (m := _COLUMN.fullmatch(word)) and int(m.group(1)) >= n_sources:
            raise SpecError(
                f"expression {clip(expression)!r} refers to {t.text} but only {n_sources} source column(s) are given"
            )


_PURE = "a partition expression must be a pure scalar function of col0..colN"


def _function_problem(name: str, args: Sequence[Any]) -> str | None:
    """Why a call of ``name`` with these parsed arguments is refused, or None."""
    if name in _VOLATILE:
        return f"the volatile function {name}(); partition expressions must be deterministic"
    if name in _TABLE_FUNCTIONS:
        return f"the table function {name}; {_PURE}"
    if name in _UNBOUNDED:
        return f"{name}, whose result size or running time is not bounded by its input's size; {_PURE}"
    if name not in ALLOWED_FUNCTIONS:
        return (
            f"the function {name}, which is not on the allow-list of deterministic scalar functions "
            "(partitioning.spec.expression_safety.ALLOWED_FUNCTIONS)"
        )
    if name in _PADS:
        length = _literal(args[1]) if len(args) > 1 else None
        if not isinstance(length, int) or isinstance(length, bool) or length > MAX_PAD_LENGTH:
            return f"{name} with a length that is not an integer literal of at most {MAX_PAD_LENGTH}"
    if name in _CASTS:
        target = _literal(args[1]) if len(args) > 1 else None
        big = _FIXED_SIZE.search(target) if isinstance(target, str) else None
        if not isinstance(target, str) or (big is not None and int(big.group(1)) > MAX_FIXED_SIZE):
            return f"{name} to a type that is not a string literal with fixed sizes of at most {MAX_FIXED_SIZE}"
    return None


def _literal(expr: Any) -> Any:
    if expr.variant_name() != "Literal":
        return None
    return expr.python_value().as_py()


def _walk(root: Any, n_sources: int) -> None:
    """Check the parsed tree iteratively: node kinds, functions, columns, size and depth."""
    stack = [(root, 1)]
    nodes = 0
    while stack:
        expr, depth = stack.pop()
        nodes += 1
        if nodes > MAX_EXPRESSION_NODES:
            raise SpecError(f"has more than {MAX_EXPRESSION_NODES} nodes")
        if depth > MAX_EXPRESSION_DEPTH:
            raise SpecError(f"nests deeper than {MAX_EXPRESSION_DEPTH} levels (a long operator chain counts each term)")
        kind = expr.variant_name()
        if kind in _LEAVES:
            if kind == "Column":
                name = expr.to_variant().name()
                m = _COLUMN.fullmatch(name)
                if m is None or int(m.group(1)) >= n_sources:
                    raise SpecError(f"refers to column {name!r}; only col0..col{n_sources - 1} are allowed")
            continue
        if kind in _REFUSED:
            shown = expr.schema_name().split("(", 1)[0] or kind
            raise SpecError(f"uses {_REFUSED[kind]} ({clip(shown, 60)}); {_PURE}")
        args = expr.rex_call_operands()
        if kind == "ScalarFunction":
            problem = _function_problem(expr.rex_call_operator().lower(), args)
            if problem is not None:
                raise SpecError(f"uses {problem}")
        elif kind not in _OPERATORS:
            raise SpecError(f"uses a {kind} expression; {_PURE}")
        stack.extend((a, depth + 1) for a in args)


def _placeholder_hash(*arrays: pa.Array) -> pa.Array:
    return pa.nulls(len(arrays[0]) if arrays else 0, pa.int32())


@lru_cache(maxsize=256)
def _checked(expression: str, source_types: tuple[pa.DataType, ...]) -> None:
    _scan_text(expression, len(source_types))
    ctx = SessionContext()
    for name in _HASH_NAMES:
        ctx.register_udf(udf(_placeholder_hash, [pa.int64()], pa.int32(), "immutable", name))
    types = source_types or (pa.null(),)
    names = [f"col{i}" for i in range(len(source_types))] or ["__lp_none"]
    try:
        empty = pa.RecordBatch.from_arrays([pa.array([], t) for t in types], names=names)
        ctx.register_record_batches("src", [[empty]])
        parsed = ctx.table("src").parse_sql_expr(expression)
    except Exception as exc:  # DataFusion raises plain Exception for parse and planning errors
        raise SpecError(f"expression {clip(expression)!r} is not valid DataFusion SQL: {datafusion_line(exc)}") from exc
    try:
        _walk(parsed, len(source_types))
    except SpecError as exc:
        raise SpecError(f"expression {clip(expression)!r} {exc}") from exc


def check_expression(expression: str, source_types: Sequence[pa.DataType]) -> None:
    """Refuse (one-line :class:`SpecError`) an expression that is not a pure, bounded scalar
    function of ``col0..colK`` (module docstring); does not evaluate it."""
    if not isinstance(expression, str) or not expression.strip():
        raise SpecError("expression must be a non-empty DataFusion SQL string")
    try:
        _checked(expression, tuple(source_types))
    except RecursionError as exc:
        raise SpecError(f"expression {clip(expression)!r} is nested too deeply to check") from exc
