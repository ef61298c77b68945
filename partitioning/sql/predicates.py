"""Spark's pushed predicates, as the JVM layer sends them, read into :mod:`partitioning.sql.filters`.

The Java scan builder (``java/lance_partitioned/Predicates.java``) writes each of Spark's
V2 predicates as JSON: ``{"op": name, "children": [...]}`` with a column as
``{"col": ["a", "b"]}`` and a literal as ``{"lit": <value>, "type": <Spark type name>}``
(the value in Spark's internal form: days for a date, microseconds for a timestamp, a
decimal or a binary as text). Literals are typed exactly, so nothing here guesses a zone
or a precision. What this module does not know becomes :class:`~partitioning.sql.filters.Opaque`:
it prunes nothing and is left to Spark.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from typing import Any

from partitioning.errors import InvalidInput
from partitioning.sql.filters import And, Cmp, Const, Filter, In, IsNull, Like, Not, Opaque, Or, TrueFilter, conjunction

__all__ = ["decode_literal", "from_json", "predicates_from_json"]

_CMP = {"=": "=", "<>": "!=", "<=>": "<=>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_LIKE = {"STARTS_WITH": "starts", "ENDS_WITH": "ends", "CONTAINS": "contains"}
_EPOCH = dt.datetime(1970, 1, 1)
_MAX_DEPTH = 64


def predicates_from_json(text: str | None) -> Filter:
    """The conjunction of a JSON list of predicates (None or empty: no filter)."""
    if not text:
        return TrueFilter()
    try:
        nodes = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"pushed predicates are not JSON: {exc}") from exc
    if not isinstance(nodes, list):
        raise InvalidInput("pushed predicates must be a JSON list")
    return conjunction([from_json(n) for n in nodes])


def from_json(node: Any, depth: int = 0) -> Filter:
    """One predicate node; :class:`Opaque` for anything not understood."""
    if depth > _MAX_DEPTH or not isinstance(node, Mapping):
        return Opaque("a predicate")
    op = node.get("op")
    children = node.get("children") or []
    if not isinstance(children, list):
        return Opaque(str(op))
    if op == "ALWAYS_TRUE":
        return TrueFilter()
    if op == "ALWAYS_FALSE":
        return Const(False)
    if op in ("AND", "OR"):
        parts = tuple(from_json(c, depth + 1) for c in children)
        return And(parts) if op == "AND" else Or(parts)
    if op == "NOT" and len(children) == 1:
        return Not(from_json(children[0], depth + 1))
    column = _column(children[0]) if children else None
    if column is None:
        return Opaque(str(op))
    if op in ("IS_NULL", "IS_NOT_NULL") and len(children) == 1:
        return IsNull(column) if op == "IS_NULL" else Not(IsNull(column))
    values = [_literal(c) for c in children[1:]]
    if any(v is _NOT_A_LITERAL for v in values):
        return Opaque(str(op))
    if op in _CMP and len(values) == 1:
        return Cmp(column, _CMP[op], values[0])
    if op == "IN" and values:
        return In(column, tuple(values))
    if op in _LIKE and len(values) == 1 and isinstance(values[0], str):
        return Like(column, _LIKE[op], values[0])
    return Opaque(str(op))


def _column(node: Any) -> str | None:
    if not isinstance(node, Mapping) or "col" not in node:
        return None
    parts = node["col"]
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], str):
        return None  # nested fields are left to Spark
    return parts[0]


class _NotALiteral:
    pass


_NOT_A_LITERAL = _NotALiteral()


def _literal(node: Any) -> Any:
    if not isinstance(node, Mapping) or "lit" not in node or "type" not in node:
        return _NOT_A_LITERAL
    try:
        return decode_literal(node["lit"], str(node["type"]))
    except (ValueError, TypeError, decimal.InvalidOperation, OverflowError):
        return _NOT_A_LITERAL


def decode_literal(value: Any, type_name: str) -> Any:
    """A Spark literal in its internal form, as the Python value :mod:`partitioning.sql.binding` takes."""
    if value is None:
        return None
    t = type_name.lower()
    if t in ("byte", "short", "integer", "long", "tinyint", "smallint", "int", "bigint"):
        return int(value)
    if t in ("float", "double"):
        return float(value)  # "NaN", "Infinity" and "-Infinity" arrive as text
    if t == "boolean":
        return bool(value)
    if t == "string" or t.startswith("string collate") or t.startswith("char") or t.startswith("varchar"):
        return str(value)
    if t == "binary":
        return base64.b64decode(str(value))
    if t == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
    if t == "timestamp":
        return (_EPOCH + dt.timedelta(microseconds=int(value))).replace(tzinfo=dt.UTC)
    if t == "timestamp_ntz":
        return _EPOCH + dt.timedelta(microseconds=int(value))
    if t.startswith("decimal"):
        return decimal.Decimal(str(value))
    raise ValueError(f"literal of type {type_name}")


def columns_in(nodes: Sequence[Any]) -> set[str]:
    """Top-level columns the JSON predicates name."""
    out: set[str] = set()

    def walk(n: Any, depth: int) -> None:
        if depth > _MAX_DEPTH or not isinstance(n, Mapping):
            return
        column = _column(n)
        if column is not None:
            out.add(column)
        for c in n.get("children") or []:
            walk(c, depth + 1)

    for node in nodes:
        walk(node, 0)
    return out
