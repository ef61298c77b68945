"""Parsed SQL expressions: the nodes :mod:`partitioning.sql.parse` builds, and literal typing.

Literals keep their SQL type (``kind``): Spark types ``1.5`` as a decimal and ``1.5D``
or ``1e3`` as a double; DataFusion types any number with a point as a double.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from partitioning.sql.timezones import local_to_instant, parse_date_text, parse_timestamp_text, resolve_zone
from partitioning.sql.tokens import DECIMAL_CONTEXT, Dialect

__all__ = [
    "Between",
    "Binary",
    "BoolOp",
    "Column",
    "Expr",
    "InList",
    "Is",
    "LikeOp",
    "Literal",
    "Other",
    "Unary",
    "cast_literal",
    "number_literal",
]


# -- expression nodes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    parts: tuple[str, ...]


@dataclass(frozen=True)
class Literal:
    """``kind``: null, bool, int, decimal, double, string, date, timestamp (aware),
    timestamp_ntz (naive), binary."""

    value: Any
    kind: str


@dataclass(frozen=True)
class Other:
    """Anything pruning does not look into (functions, CASE, subqueries, arithmetic...)."""

    what: str


@dataclass(frozen=True)
class Unary:
    op: str  # "-", "+", "~", "not"
    arg: Expr


@dataclass(frozen=True)
class Binary:
    op: str  # comparisons, arithmetic, "||"
    left: Expr
    right: Expr


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class InList:
    arg: Expr
    items: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True)
class Between:
    arg: Expr
    low: Expr
    high: Expr
    negated: bool


@dataclass(frozen=True)
class LikeOp:
    op: str  # like | ilike | rlike
    arg: Expr
    pattern: Expr
    escape: str | None
    negated: bool


@dataclass(frozen=True)
class Is:
    arg: Expr
    what: str  # null | true | false | unknown | distinct
    negated: bool
    other: Expr | None = None  # for IS [NOT] DISTINCT FROM


Expr: TypeAlias = Column | Literal | Other | Unary | Binary | BoolOp | InList | Between | LikeOp | Is


def number_literal(text: str, dialect: Dialect) -> Literal:
    """A numeric token as Spark (or DataFusion) types it."""
    upper = text.upper()
    suffix = ""
    for s in ("BD", "L", "S", "Y", "D", "F"):
        if upper.endswith(s):
            suffix, text = s, text[: -len(s)]
            break
    has_point = "." in text
    has_exp = "e" in text.lower()
    if suffix in ("D", "F") or (has_exp and suffix != "BD"):
        return Literal(float(text), "double")
    if dialect.name == "datafusion" and has_point:
        return Literal(float(text), "double")
    if suffix == "BD" or has_point or has_exp:
        return Literal(decimal.Decimal(text), "decimal")
    value = int(text)
    if suffix:
        return Literal(value, "int")
    if dialect.name == "spark" and value >= 2**63:
        return Literal(decimal.Decimal(value), "decimal")
    return Literal(value, "int")


def cast_literal(arg: Expr, type_text: str, dialect: Dialect) -> Expr:
    """``CAST(literal AS type)`` folded to a literal where the result is certain; else Other."""
    if not isinstance(arg, Literal) or arg.value is None:
        return Literal(None, "null") if isinstance(arg, Literal) else Other("CAST")
    t = type_text.replace(" ", "").lower()
    v, kind = arg.value, arg.kind
    try:
        if t == "date" and kind == "string":
            value = parse_date_text(v)
            return Other("CAST") if value is None else Literal(value, "date")
        if t in ("timestamp", "timestamp_ltz") and kind == "string":
            parsed = parse_timestamp_text(v, None)
            if parsed is None:
                return Other("CAST")
            if parsed.tzinfo is None:
                parsed = local_to_instant(parsed, resolve_zone(dialect.zone))
            return Literal(parsed, "timestamp")
        if t == "timestamp_ntz" and kind == "string":
            parsed = parse_timestamp_text(v, None)
            if parsed is None or parsed.tzinfo is not None:
                return Other("CAST")
            return Literal(parsed, "timestamp_ntz")
        if t in ("double", "float", "real") and kind in ("int", "decimal", "double"):
            return Literal(float(v), "double") if t == "double" else Other("CAST")
        if t in ("double",) and kind == "string" and v.strip().lower() in ("nan", "inf", "-inf", "infinity"):
            return Literal(float(v.strip().lower().replace("infinity", "inf")), "double")
        m = re.fullmatch(r"decimal\((\d+)(?:,(\d+))?\)", t)
        if m and kind in ("int", "decimal"):
            precision, scale = int(m.group(1)), int(m.group(2) or 0)
            q = decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-scale), context=DECIMAL_CONTEXT)
            if q != decimal.Decimal(v) or len(q.as_tuple().digits) > precision:
                return Other("CAST")
            return Literal(q, "decimal")
        if t in ("bigint", "long", "int", "integer", "smallint", "short", "tinyint", "byte") and kind == "int":
            return arg
        if t in ("string", "varchar", "char") and kind == "string":
            return arg
    except (ValueError, ArithmeticError):
        return Other("CAST")
    return Other("CAST")
