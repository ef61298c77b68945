"""The Arrow expressions partition pruning is built from, and its rules that span several fields.

Each term is an expression over the ``partition_field_*`` columns of ``__manifest`` that is True
for every partition table that may hold a matching row: literals checked against their column's
type (:class:`CannotPrune` when one does not fit), NULL-safe comparisons, balanced AND/OR trees.
:func:`time_range` turns a range on a timestamp or date into a tuple range over its leading
year/month/day/hour fields, and :func:`multi_bucket` maps equality literals on every source of a
multi-source field to its partition values. :mod:`partitioning.state.pruning` compiles a filter
out of them, one partition field at a time.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import PartitioningError
from partitioning.spec.expression import evaluate_expression_scalar
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import (
    DayTransform,
    HourTransform,
    MonthTransform,
    MultiBucketTransform,
    YearTransform,
)
from partitioning.spec.values import literal_fits
from partitioning.sql.filters import Cmp, Filter, In
from partitioning.storage.manifest import partition_column

__all__ = [
    "CannotPrune",
    "Expr",
    "all_of",
    "any_of",
    "coerce_literal",
    "column_of",
    "compare",
    "compare_eq",
    "literal",
    "multi_bucket",
    "not_null",
    "time_range",
]

_TIME_ORDER = (YearTransform, MonthTransform, DayTransform, HourTransform)
_MAX_COMBINATIONS = 256
Expr: TypeAlias = Any  # pyarrow.compute.Expression (pyarrow ships no type stubs)


class CannotPrune(Exception):
    """A literal that cannot be read as the column's type: the leaf keeps every partition."""


def coerce_literal(value: Any, t: pa.DataType) -> Any:
    """A bound literal checked against its column type (raises CannotPrune if it does not fit)."""
    if value is None:
        return None
    if not literal_fits(value, t):
        raise CannotPrune
    return value


def literal(value: Any, t: pa.DataType) -> pa.Scalar:
    """``value`` as an Arrow scalar of the partition column's type ``t``."""
    return pa.scalar(value, type=t)


def not_null(e: Expr) -> Expr:
    """NULL (unknown) comparisons of a partition value mean the partition cannot match."""
    return pc.coalesce(e, pa.scalar(False))


def compare(col: Expr, op: str, lit: pa.Scalar) -> Expr:
    return {"<": col < lit, "<=": col <= lit, ">": col > lit, ">=": col >= lit}[op]


def compare_eq(col: Expr, op: str, lit: pa.Scalar) -> Expr:
    return col == lit if op == "=" else compare(col, op, lit)


def all_of(parts: Sequence[Expr]) -> Expr:
    return _balanced(parts, lambda a, b: a & b)


def any_of(parts: Sequence[Expr]) -> Expr:
    return _balanced(parts, lambda a, b: a | b)


def _balanced(parts: Sequence[Expr], join: Any) -> Expr:
    """Parts joined as a balanced tree: a long left-deep chain overflows Arrow's stack."""
    level = list(parts)
    while len(level) > 1:
        paired = [join(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + level[len(paired) * 2 :]
    return level[0]


def column_of(pf: PartitionField) -> Expr:
    """The ``__manifest`` column holding ``pf``'s partition values."""
    return pc.field(partition_column(pf.field_id))


def time_range(fields: list[PartitionField], op: str, v: Any, t: pa.DataType) -> Expr | None:
    """A range on the source as a tuple range over leading (year, month, day, hour) fields."""
    by_kind = {type(pf.transform): pf for pf in fields if pf.transform is not None}
    leading: list[PartitionField] = []
    for kind in _TIME_ORDER:
        if kind not in by_kind:
            break
        leading.append(by_kind[kind])
    if not leading:
        return None
    values = [pf.transform.apply_scalar([v], [t]) for pf in leading]  # type: ignore[union-attr]
    columns = [column_of(pf) for pf in leading]
    types = [pa.int32()] * len(leading)
    # The literal's own period can hold matches on either side of it, so strict bounds
    # keep it, except where the period cannot hold a value beyond the literal.
    whole_value = isinstance(v, dt.date) and not isinstance(v, dt.datetime) and len(leading) >= 3
    if op == ">" and whole_value:
        op = ">"  # a date's (year, month, day) period holds that date only
    elif op in (">", ">="):
        op = ">="
    elif op == "<" and _starts_period(v, len(leading)):
        op = "<"
    else:
        op = "<="
    return _tuple_cmp(columns, values, types, op)


def _tuple_cmp(columns: Sequence[Expr], values: Sequence[Any], types: Sequence[pa.DataType], op: str) -> Expr:
    """Lexicographic ``(columns) op (values)`` for op in > >= < <=."""
    strict = {">": ">", ">=": ">", "<": "<", "<=": "<"}[op]
    out: Expr | None = None
    prefix: Expr | None = None
    for col, value, t in zip(columns, values, types, strict=True):
        lit = literal(value, t)
        step = (col > lit) if strict == ">" else (col < lit)
        term = step if prefix is None else (prefix & step)
        out = term if out is None else (out | term)
        eq = col == lit
        prefix = eq if prefix is None else (prefix & eq)
    assert out is not None and prefix is not None
    if op in (">=", "<="):
        out = out | prefix
    return not_null(out)


def _starts_period(v: Any, depth: int) -> bool:
    """Is ``v`` the first instant of its (year, month, day, hour)[:depth] period?"""
    if isinstance(v, dt.datetime):
        v = v.astimezone(dt.UTC) if v.tzinfo is not None else v
        parts = [v.month == 1, v.day == 1, v.hour == 0, (v.minute, v.second, v.microsecond) == (0, 0, 0)]
    elif isinstance(v, dt.date):
        parts = [v.month == 1, v.day == 1, True, True]
    else:
        return False
    return all(parts[depth - 1 :])


def multi_bucket(spec: PartitionSpec, schema: NamespaceSchema, children: Sequence[Filter]) -> list[Expr]:
    """Conditions on the multi_bucket (or multi-source expression) fields of ``spec`` whose every
    source has equality (or small IN) literals among ``children``, the terms of one AND."""
    literals: dict[str, list[Any]] = {}
    for c in children:
        if isinstance(c, Cmp) and c.op in ("=", "<=>") and c.value is not None:
            literals[c.column] = [c.value]
        elif isinstance(c, In):
            literals[c.column] = [v for v in c.values if v is not None]
    out = []
    for pf in spec.fields:
        if not isinstance(pf.transform, MultiBucketTransform) and not (
            pf.expression is not None and len(pf.source_ids) > 1
        ):
            continue
        sources = [schema.top_level_field_by_id(i) for i in pf.source_ids]
        if any(s is None or s.name not in literals for s in sources):
            continue
        try:
            choices = [_hash_inputs([coerce_literal(v, s.type) for v in literals[s.name]]) for s in sources]  # type: ignore[union-attr]
        except CannotPrune:
            continue
        combos = list(itertools.islice(itertools.product(*choices), _MAX_COMBINATIONS + 1))
        if len(combos) > _MAX_COMBINATIONS:
            continue
        types = [s.type for s in sources]  # type: ignore[union-attr]
        if pf.transform is not None:
            mapped = {pf.transform.apply_scalar(list(combo), types) for combo in combos}
        else:
            assert pf.expression is not None
            try:
                mapped = {
                    evaluate_expression_scalar(pf.expression, list(combo), types, pf.arrow_result_type(schema))
                    for combo in combos
                }
            except PartitioningError:
                continue
        mapped.discard(None)
        rt = pf.arrow_result_type(schema)
        out.append(not_null(pc.is_in(column_of(pf), value_set=pa.array(sorted(mapped, key=repr), type=rt))))
    return out


def _hash_inputs(values: list[Any]) -> list[Any]:
    """Values whose hashes a row equal to one of ``values`` may have: 0.0 also as -0.0."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, float) and math.isnan(v):
            raise CannotPrune  # NaN payloads hash differently
        out.append(v)
        if isinstance(v, float) and v == 0:
            out.append(-v)
    return out
