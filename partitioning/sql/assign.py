"""``SET column = expression`` evaluated in Arrow exactly as Spark evaluates it, or not at all.

An update whose rows the driver holds (:mod:`pipelines.write.small`) need not hand them to
Spark when every new value is one Spark would compute identically here. :func:`assignments`
accepts a small grammar where Spark's answer is plain to reproduce, and refuses the rest
(returns None; the update then asks Spark):

- a literal (a number, a string, TRUE/FALSE, NULL) or a column of the table;
- ``+``, ``-``, ``*`` and unary ``-`` over integer columns and integer literals, computed in
  a type never wider than Spark's (the wider operand; a literal is INT when it fits) with
  overflow checked;
- the same over DOUBLE columns with integer, decimal or double literals and INT/DOUBLE
  columns (Spark casts the other operand to DOUBLE; IEEE arithmetic is the same);
- ``||`` of strings (NULL if either side is NULL, as Spark's ``concat``).

Division, functions, casts, decimals, floats, dates and timestamps are refused. The value
is then stored in its column: unchanged when its type is the column's, widened when an
integer goes into a wider integer or an INT (or narrower) into a DOUBLE. Whatever might
differ from Spark at run time (an overflow, which ANSI mode raises and legacy mode wraps;
a NULL in a non-nullable column; a narrowing store) raises :class:`NotExact`, and the
caller asks Spark instead, which gives its own answer or error.
"""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import PartitioningError
from partitioning.sql.nodes import Binary, Column, Expr, Literal, Unary
from partitioning.sql.parse import parse_expression
from partitioning.sql.tokens import Dialect, SqlSyntaxError

__all__ = ["NotExact", "assigned", "assignments", "lance_assignments"]

MAX_NODES = 64
_SUFFIXED = re.compile(r"(?i)\d(?:y|s|l|bd|d|f)\b")

_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_ARITHMETIC = {"+": "add_checked", "-": "subtract_checked", "*": "multiply_checked"}
_DOUBLE_ARITHMETIC = {"+": "add", "-": "subtract", "*": "multiply"}


class NotExact(PartitioningError):
    """These rows' new values might not be Spark's (an overflow, a NULL a column refuses):
    the caller computes them with Spark."""


Value = Callable[[pa.Table], pa.Array | pa.ChunkedArray | pa.Scalar]


class _Refused(Exception):
    """The expression is outside the grammar."""


def assignments(
    set: Mapping[str, str], schema: pa.Schema, dialect: Dialect, *, inputs: pa.Schema | None = None
) -> Callable[[pa.Table], dict[str, Any]] | None:
    """A function from rows to the new value of each column of ``set`` (a column of
    ``schema``, where it is stored); None when an expression is outside the grammar. The
    expressions read ``inputs``' columns (default: ``schema``'s), a qualified name ``a.b``
    reading the column named ``"a.b"``. The function raises :class:`NotExact` when a value
    might not be Spark's."""
    if dialect.name != "spark":
        return None
    reads = inputs if inputs is not None else schema
    compiler = _Compiler(reads, dialect, qualified=inputs is not None)
    compiled: dict[str, Value] = {}
    try:
        for name, text in set.items():
            if _SUFFIXED.search(text):
                return None  # 1Y, 1S, 1L...: the parser keeps the value, not Spark's type
            kind, value = compiler.compile(parse_expression(text, dialect), depth=0)
            compiled[name] = _stored(kind, value, schema.field(name))
    except (_Refused, SqlSyntaxError, KeyError):
        return None

    def apply(rows: pa.Table) -> dict[str, Any]:
        new = {name: _as_array(value(rows), rows.num_rows, schema.field(name)) for name, value in compiled.items()}
        for name, column in new.items():
            if not schema.field(name).nullable and column.null_count:
                raise NotExact(f"a NULL for the non-nullable column {name!r}")
        return new

    return apply


def lance_assignments(
    set: Mapping[str, str], schema: pa.Schema, dialect: Dialect, columns: Mapping[str, str]
) -> dict[str, str] | None:
    """The DataFusion SQL of each ``set`` expression for Lance's own ``update`` on one
    partition table (``columns``: namespace column -> the table's column), when DataFusion
    computes exactly Spark's value; else None.

    A narrower grammar than :func:`assignments`: DataFusion wraps an integer overflow where
    Spark's ANSI mode raises, so integer arithmetic is refused. Kept: literals and columns
    stored in their own type (an integer literal in range of an integer column, any number
    literal in a DOUBLE column, NULL in a nullable column), ``+ - *`` and unary ``-`` in
    DOUBLE (IEEE, the other operand an integer column or a number literal made DOUBLE first,
    as Spark does), ``||`` of strings (NULL when either side is)."""
    if dialect.name != "spark":
        return None
    renderer = _LanceRenderer(schema, dialect, columns)
    out: dict[str, str] = {}
    try:
        for name, text in set.items():
            if _SUFFIXED.search(text) or name not in columns:
                return None
            out[columns[name]] = renderer.stored(parse_expression(text, dialect), schema.field(name))
    except (_Refused, SqlSyntaxError, KeyError):
        return None
    return out


class _LanceRenderer:
    def __init__(self, schema: pa.Schema, dialect: Dialect, columns: Mapping[str, str]) -> None:
        self.schema, self.columns = schema, columns
        self.compiler = _Compiler(schema, dialect, qualified=False)

    def stored(self, expr: Expr, field: pa.Field) -> str:
        target = field.type
        if isinstance(expr, Literal) and expr.kind == "null":
            if not field.nullable:
                raise _Refused
            return f"CAST(NULL AS {_sql_type(target)})"
        if isinstance(expr, Literal) and expr.kind == "int" and target in _INTS:
            bits = 8 * target.byte_width
            if not -(2 ** (bits - 1)) <= expr.value < 2 ** (bits - 1):
                raise _Refused
            return f"CAST({expr.value} AS {_sql_type(target)})"
        kind, sql = self.render(expr, 0)
        if kind == target or (kind is _DECIMAL_LITERAL and target == pa.float64()):
            return sql
        if kind in _INTS and target == pa.float64() and isinstance(expr, Literal):
            return _double(float(expr.value))
        if kind == pa.string() and pa.types.is_large_string(target):
            return sql
        raise _Refused

    def render(self, expr: Expr, depth: int) -> tuple[Any, str]:
        if depth > MAX_NODES:
            raise _Refused
        if isinstance(expr, Column):
            name = self.compiler._column(expr)
            kind = self.schema.field(name).type
            if name not in self.columns or not (kind in _INTS or kind in (pa.float64(), pa.string(), pa.bool_())):
                raise _Refused
            return kind, "`" + self.columns[name].replace("`", "``") + "`"
        if isinstance(expr, Literal):
            return self._literal(expr)
        if isinstance(expr, Unary) and expr.op == "-":
            kind, sql = self.render(expr.arg, depth + 1)
            if kind != pa.float64():
                raise _Refused
            return kind, f"(- {sql})"
        if isinstance(expr, Binary) and expr.op in _DOUBLE_ARITHMETIC:
            (lk, ls), (rk, rs) = self.render(expr.left, depth + 1), self.render(expr.right, depth + 1)
            if pa.float64() not in (lk, rk) or not all(
                k == pa.float64() or k in _INTS or k is _DECIMAL_LITERAL for k in (lk, rk)
            ):
                raise _Refused
            return pa.float64(), f"({_as_double(lk, ls)} {expr.op} {_as_double(rk, rs)})"
        if isinstance(expr, Binary) and expr.op == "||":
            (lk, ls), (rk, rs) = self.render(expr.left, depth + 1), self.render(expr.right, depth + 1)
            if lk != pa.string() or rk != pa.string():
                raise _Refused
            return pa.string(), f"({ls} || {rs})"
        raise _Refused

    @staticmethod
    def _literal(expr: Literal) -> tuple[Any, str]:
        kind, value = _literal(expr)
        if kind is None:
            raise _Refused  # an untyped NULL inside an expression
        scalar = value(pa.table({}))
        if kind == pa.string():
            text = scalar.as_py()
            if "\x00" in text:
                raise _Refused
            return kind, "'" + text.replace("'", "''") + "'"
        if kind == pa.bool_():
            return kind, "TRUE" if scalar.as_py() else "FALSE"
        if kind in _INTS:
            return kind, f"CAST({scalar.as_py()} AS {_sql_type(kind)})"
        return kind, _double(scalar.as_py())  # a double, or a decimal as its double (Spark's cast)


_SQL_TYPES = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT"}


def _sql_type(kind: pa.DataType) -> str:
    if kind in _SQL_TYPES:
        return _SQL_TYPES[kind]
    if kind == pa.float64():
        return "DOUBLE"
    if kind == pa.bool_():
        return "BOOLEAN"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "STRING"
    raise _Refused


def _double(value: float) -> str:
    """A DOUBLE literal DataFusion reads as exactly ``value`` (parsed from its shortest repr)."""
    if not math.isfinite(value):
        raise _Refused
    return f"CAST('{value!r}' AS DOUBLE)"


def _as_double(kind: Any, sql: str) -> str:
    return sql if kind == pa.float64() or kind is _DECIMAL_LITERAL else f"CAST({sql} AS DOUBLE)"


def assigned(rows: pa.Table, new: Mapping[str, Any]) -> pa.Table:
    """``rows`` with the columns in ``new`` replaced."""
    for name, column in new.items():
        rows = rows.set_column(rows.schema.get_field_index(name), name, column)
    return rows


class _Compiler:
    def __init__(self, schema: pa.Schema, dialect: Dialect, qualified: bool) -> None:
        self.schema, self.dialect, self.qualified = schema, dialect, qualified

    def compile(self, expr: Expr, depth: int) -> tuple[Any, Value]:
        """(Spark's result type, or None for an untyped NULL; the value)."""
        if depth > MAX_NODES:
            raise _Refused
        if isinstance(expr, Column):
            name = self._column(expr)
            return self.schema.field(name).type, lambda rows: rows.column(name)
        if isinstance(expr, Literal):
            return _literal(expr)
        if isinstance(expr, Unary) and expr.op == "-":
            kind, value = self.compile(expr.arg, depth + 1)
            if kind in _INTS:
                return kind, lambda rows: _checked("negate_checked", value(rows))
            if kind == pa.float64():
                return kind, lambda rows: pc.negate(value(rows))
            raise _Refused
        if isinstance(expr, Binary) and expr.op in _ARITHMETIC:
            return self._arithmetic(expr, depth)
        if isinstance(expr, Binary) and expr.op == "||":
            (lk, lv), (rk, rv) = self.compile(expr.left, depth + 1), self.compile(expr.right, depth + 1)
            if not all(
                isinstance(k, pa.DataType) and (pa.types.is_string(k) or pa.types.is_large_string(k)) for k in (lk, rk)
            ):
                raise _Refused
            return pa.string(), lambda rows: pc.binary_join_element_wise(
                _cast(lv(rows), pa.string()), _cast(rv(rows), pa.string()), "", null_handling="emit_null"
            )
        raise _Refused

    def _column(self, expr: Column) -> str:
        # qualified (source.x, target.x) where the inputs are, plain otherwise: a name the other
        # way is a struct field or an ambiguous column to Spark
        if len(expr.parts) != (2 if self.qualified else 1) or any("." in p for p in expr.parts):
            raise _Refused
        name = ".".join(expr.parts)
        if name in self.schema.names:
            return name
        if self.dialect.case_sensitive:
            raise _Refused
        found = [n for n in self.schema.names if n.lower() == name.lower()]
        if len(found) != 1:
            raise _Refused
        return found[0]

    def _arithmetic(self, expr: Binary, depth: int) -> tuple[Any, Value]:
        (lk, lv), (rk, rv) = self.compile(expr.left, depth + 1), self.compile(expr.right, depth + 1)
        if lk in _INTS and rk in _INTS:
            kind = max(lk, rk, key=_INTS.index)
            name = _ARITHMETIC[expr.op]
            return kind, lambda rows: _checked(name, _cast(lv(rows), kind), _cast(rv(rows), kind))
        if pa.float64() in (lk, rk) and all(k == pa.float64() or k in _INTS or k is _DECIMAL_LITERAL for k in (lk, rk)):
            # Spark casts the other operand to DOUBLE; a long rounds to the nearest double there as here
            name = _DOUBLE_ARITHMETIC[expr.op]
            return pa.float64(), lambda rows: getattr(pc, name)(_to_double(lv(rows)), _to_double(rv(rows)))
        raise _Refused


# the kind of a decimal literal, which the grammar takes only beside a DOUBLE (as its double value)
_DECIMAL_LITERAL: Any = object()


def _literal(expr: Literal) -> tuple[Any, Value]:
    value = expr.value
    if expr.kind == "null":
        return None, lambda rows: pa.scalar(None)
    if expr.kind == "bool":
        return pa.bool_(), lambda rows: pa.scalar(bool(value))
    if expr.kind == "string":
        return pa.string(), lambda rows: pa.scalar(value, pa.string())
    if expr.kind == "double" and math.isfinite(value):  # Spark refuses a literal beyond DOUBLE's range
        return pa.float64(), lambda rows: pa.scalar(float(value), pa.float64())
    if expr.kind == "int":
        if -(2**31) <= value < 2**31:
            return pa.int32(), lambda rows: pa.scalar(value, pa.int32())
        if -(2**63) <= value < 2**63:
            return pa.int64(), lambda rows: pa.scalar(value, pa.int64())
        raise _Refused
    if expr.kind == "decimal" and isinstance(value, decimal.Decimal) and _decimal_literal(value):
        # correctly rounded, as Java's BigDecimal.doubleValue; a decimal has no -0
        as_double = float(value) + 0.0
        return _DECIMAL_LITERAL, lambda rows: pa.scalar(as_double, pa.float64())
    raise _Refused


def _decimal_literal(value: decimal.Decimal) -> bool:
    """A decimal literal Spark types as DECIMAL(p, s) with p <= 38 (as BigDecimal counts them)."""
    if not value.is_finite():
        return False
    _, digits, exponent = value.as_tuple()
    scale = max(0, -int(exponent))
    precision = max(len(digits), scale) if int(exponent) <= 0 else len(digits) + int(exponent)
    return precision <= 38


def _stored(kind: Any, value: Value, field: pa.Field) -> Value:
    """``value`` as its column stores it, where that cannot lose anything."""
    target = field.type
    if kind is None:
        return lambda rows: pa.nulls(rows.num_rows, target)
    if kind is _DECIMAL_LITERAL:
        raise _Refused
    if kind == target or (kind == pa.string() and pa.types.is_large_string(target)):
        return lambda rows: _cast(value(rows), target)
    if kind in _INTS and target in _INTS and _INTS.index(kind) <= _INTS.index(target):
        return lambda rows: _cast(value(rows), target)
    if kind in _INTS[:3] and target == pa.float64():
        return lambda rows: _cast(value(rows), target)
    raise _Refused


def _checked(name: str, *args: Any) -> Any:
    try:
        return getattr(pc, name)(*args)
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise NotExact(f"{name}: {exc}") from exc


def _cast(value: Any, kind: pa.DataType) -> Any:
    if value.type == kind:
        return value
    return pc.cast(value, kind)


def _to_double(value: Any) -> Any:
    # an int64 rounds to the nearest double, as Java's (double) cast does
    return value if value.type == pa.float64() else pc.cast(value, pa.float64(), safe=False)


def _as_array(value: Any, length: int, field: pa.Field) -> pa.ChunkedArray | pa.Array:
    if isinstance(value, pa.Scalar):
        return pa.repeat(value.cast(field.type), length) if value.is_valid else pa.nulls(length, field.type)
    return value
