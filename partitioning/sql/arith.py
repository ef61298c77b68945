"""Integer arithmetic compared in a filter, evaluated exactly as Spark evaluates it.

``(id div 60) % 100 = 0`` or ``a * 2 + b > 7`` is a :class:`~partitioning.sql.filters.Computed`
leaf when both sides are in a grammar whose every value Spark computes plainly: integer
columns and integer literals, ``+``, ``-``, ``*``, unary ``-``, and ``div`` / ``%`` by a
literal other than 0 and -1 (so nothing divides by zero and nothing overflows there).
Spark's types are kept, since an overflow depends on them: a column has its own type, a
literal is INT when it fits (else BIGINT), ``+ - * %`` take the wider operand's type and
``div`` BIGINT. With ``spark.sql.ansi.enabled`` off an overflow wraps, as Arrow's unchecked
kernels do, and Spark's optimizer only makes rewrites that keep wrapped values (it
reassociates ``+`` and ``*``, unwraps casts). With ANSI on an overflow raises, but whether
it is reached depends on those rewrites (``n * 2 > 3000000000`` is folded to FALSE before
``n * 2`` could overflow), so under ANSI only ``div`` and ``%`` by such literals, which
never overflow, are taken. A literal with a type suffix (``1L``) is refused: the parser
keeps its value, not its type.

:func:`arrow_operands` gives both sides as Arrow expressions with Spark's values;
:func:`lance_sql` renders, for a Lance scan, the leaves that cannot overflow (``div`` and
``%`` only: DataFusion truncates and takes the dividend's sign as Java does), and nothing
else.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.sql.filters import Computed, Filter, Opaque
from partitioning.sql.nodes import Binary, Column, Expr, Literal, Unary

__all__ = ["SUFFIXED", "arrow_operands", "bind_computed", "computed", "lance_sql"]

MAX_NODES = 32
SUFFIXED = re.compile(r"(?i)\d(?:y|s|l|bd|d|f)\b")
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_OPS = ("+", "-", "*", "div", "%")
_WRAPPING = {"+": "add", "-": "subtract", "*": "multiply"}
_COMPARE = ("=", "!=", "<", "<=", ">", ">=")
_INT_NAMES = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT"}


def computed(e: Binary) -> Computed | None:
    """The comparison ``e`` as a :class:`Computed` leaf when it is in the grammar and does
    arithmetic (a plain ``column op literal`` is a ``Cmp``); else None."""
    if e.op not in _COMPARE or not (_arithmetic(e.left) or _arithmetic(e.right)):
        return None
    counted = [0]
    if not (_in_grammar(e.left, counted) and _in_grammar(e.right, counted)):
        return None
    return Computed(e.left, e.op, e.right)


def _arithmetic(e: Expr) -> bool:
    return isinstance(e, Binary | Unary)


def _in_grammar(e: Expr, counted: list[int]) -> bool:
    counted[0] += 1
    if counted[0] > MAX_NODES:
        return False
    if isinstance(e, Column):
        return len(e.parts) == 1
    if isinstance(e, Literal):
        return _int_literal(e)
    if isinstance(e, Unary):
        return e.op == "-" and _in_grammar(e.arg, counted)
    if isinstance(e, Binary) and e.op in _OPS:
        if e.op in ("div", "%") and not (_int_literal(e.right) and e.right.value not in (0, -1)):  # type: ignore[union-attr]
            return False
        return _in_grammar(e.left, counted) and _in_grammar(e.right, counted)
    return False


def _int_literal(e: Expr) -> bool:
    return isinstance(e, Literal) and e.kind == "int" and -(2**63) <= e.value < 2**63


def bind_computed(f: Computed, schema: pa.Schema, resolve: Any, *, spark: bool, ansi: bool) -> Filter:
    """``f`` with its columns spelled as the schema spells them (``resolve``); Opaque when a
    column is not an integer, the dialect is not Spark's, or ANSI mode is on and a step may
    overflow (``+ - *`` or unary ``-``)."""
    if not spark:
        return Opaque("arithmetic")
    if ansi and not (_overflow_free(f.left) and _overflow_free(f.right)):
        return Opaque("arithmetic that may overflow, under ANSI mode")

    def named(e: Expr) -> Expr:
        if isinstance(e, Column):
            name = resolve(e.parts[0])
            if schema.field(name).type not in _INTS:
                raise _NotIntegers(name)
            return Column((name,))
        if isinstance(e, Unary):
            return Unary(e.op, named(e.arg))
        if isinstance(e, Binary):
            return Binary(e.op, named(e.left), named(e.right))
        return e

    try:
        return Computed(named(f.left), f.op, named(f.right))
    except _NotIntegers as exc:
        return Opaque(f"arithmetic on {exc.args[0]}")


def _overflow_free(e: Expr) -> bool:
    if isinstance(e, Binary):
        return e.op in ("div", "%") and _overflow_free(e.left) and _overflow_free(e.right)
    return not isinstance(e, Unary)


class _NotIntegers(Exception):
    """A column of the arithmetic is not an integer column."""


def arrow_operands(f: Computed, schema: pa.Schema) -> tuple[Any, Any]:
    """``f``'s two sides as Arrow expressions of one type, with Spark's values (NULL where
    Spark's are); the caller compares them with ``f.op``."""
    (lt, left), (rt, right) = _arrow(f.left, schema), _arrow(f.right, schema)
    kind = _wider(lt, rt)
    return _cast(left, lt, kind), _cast(right, rt, kind)


def _arrow(e: Expr, schema: pa.Schema) -> tuple[pa.DataType, Any]:
    if isinstance(e, Column):
        return schema.field(e.parts[0]).type, pc.field(e.parts[0])
    if isinstance(e, Literal):
        kind = pa.int32() if -(2**31) <= e.value < 2**31 else pa.int64()
        return kind, pc.scalar(pa.scalar(e.value, kind))
    if isinstance(e, Unary):
        kind, value = _arrow(e.arg, schema)
        return kind, pc.Expression._call("negate", [value])  # wraps, as legacy mode does
    assert isinstance(e, Binary)
    (lt, left), (rt, right) = _arrow(e.left, schema), _arrow(e.right, schema)
    if e.op == "div":
        # a literal divisor other than 0 and -1: truncated division cannot overflow
        return pa.int64(), pc.Expression._call("divide", [_cast(left, lt, pa.int64()), _cast(right, rt, pa.int64())])
    kind = _wider(lt, rt)
    left, right = _cast(left, lt, kind), _cast(right, rt, kind)
    if e.op == "%":
        # a - (a div b) * b, in the operands' type: no step can overflow for such a divisor
        quotient = pc.Expression._call("divide", [left, right])
        return kind, pc.Expression._call("subtract", [left, pc.Expression._call("multiply", [quotient, right])])
    return kind, pc.Expression._call(_WRAPPING[e.op], [left, right])


def _wider(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    return max(a, b, key=_INTS.index)


def _cast(value: Any, kind: pa.DataType, to: pa.DataType) -> Any:
    return value if kind == to else value.cast(to)


def lance_sql(f: Computed, columns: dict[str, str] | None) -> str | None:
    """DataFusion SQL for ``f`` when no step of it can overflow (only ``div`` and ``%`` by
    literals) and every column is in the dataset (``columns``: namespace name to the
    dataset's); else None."""
    try:
        return f"({_lance(f.left, columns)} {f.op} {_lance(f.right, columns)})"
    except _NotRendered:
        return None


class _NotRendered(Exception):
    """Part of the expression is not rendered for Lance."""


def _lance(e: Expr, columns: dict[str, str] | None) -> str:
    if isinstance(e, Column):
        name = e.parts[0]
        if columns is not None:
            if name not in columns:
                raise _NotRendered
            name = columns[name]
        return "`" + name.replace("`", "``") + "`"
    if isinstance(e, Literal):
        return f"CAST({e.value} AS BIGINT)"
    if isinstance(e, Binary) and e.op in ("div", "%"):
        return f"({_lance(e.left, columns)} {'/' if e.op == 'div' else '%'} {_lance(e.right, columns)})"
    raise _NotRendered
