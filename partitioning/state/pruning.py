"""Partition pruning on ``__manifest`` (SPEC-NOTES 14): which tables may hold matching rows.

A filter (in negation normal form) is compiled, per spec version, into an Arrow
expression over the ``partition_field_*`` columns that is True for every partition
table that *may* hold a matching row. Each leaf becomes a necessary condition on
partition values; anything that cannot be translated becomes True. So pruning is
sound by construction: it may keep too much, never too little. The filter itself
is always applied to the rows read (the residual).

The filter must come from :func:`partitioning.sql.binding.bind`: negation normal form, with
literals of their column's type. Floats follow Spark: NaN equals NaN and is above every
number (identity partition values are normalised to one NaN and 0.0); a bucket of
0.0 may hold -0.0 (its hash differs), and NaN rows may hash anywhere.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
from collections.abc import Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import PartitioningError
from partitioning.spec.expression import evaluate_expression_scalar
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema, field_id_of
from partitioning.spec.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    MultiBucketTransform,
    TruncateTransform,
    YearTransform,
)
from partitioning.sql.filters import (
    And,
    Approx,
    Cmp,
    Const,
    Filter,
    In,
    IsNull,
    Like,
    Not,
    Opaque,
    Or,
    TrueFilter,
    size_of,
)
from partitioning.sql.tokens import DECIMAL_CONTEXT
from partitioning.storage.manifest import partition_column

__all__ = ["partition_condition"]

_TIME_ORDER = (YearTransform, MonthTransform, DayTransform, HourTransform)
_MAX_COMBINATIONS = 256
MAX_PRUNED_NODES = 2_000
Expr: TypeAlias = Any  # pyarrow.compute.Expression (pyarrow ships no type stubs)


class _CannotPrune(Exception):
    """A literal that cannot be read as the column's type: the leaf keeps every partition."""


def coerce_literal(value: Any, t: pa.DataType) -> Any:
    """A bound literal checked against its column type (raises _CannotPrune if it does not fit)."""
    if value is None:
        return None
    ok = (
        (pa.types.is_timestamp(t) and isinstance(value, dt.datetime) and (value.tzinfo is None) == (t.tz is None))
        or (pa.types.is_date(t) and isinstance(value, dt.date) and not isinstance(value, dt.datetime))
        or (pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool))
        or (pa.types.is_decimal(t) and isinstance(value, decimal.Decimal))
        or (pa.types.is_floating(t) and isinstance(value, float))
        or ((pa.types.is_string(t) or pa.types.is_large_string(t)) and isinstance(value, str))
        or (pa.types.is_boolean(t) and isinstance(value, bool))
        or ((pa.types.is_binary(t) or pa.types.is_large_binary(t)) and isinstance(value, bytes))
    )
    if not ok:
        raise _CannotPrune
    return value


def _lit(value: Any, t: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, type=t)


def _not_null(e: Expr) -> Expr:
    """NULL (unknown) comparisons of a partition value mean the partition cannot match."""
    return pc.coalesce(e, pa.scalar(False))


def _tuple_cmp(columns: Sequence[Expr], values: Sequence[Any], types: Sequence[pa.DataType], op: str) -> Expr:
    """Lexicographic ``(columns) op (values)`` for op in > >= < <=."""
    strict = {">": ">", ">=": ">", "<": "<", "<=": "<"}[op]
    out: Expr | None = None
    prefix: Expr | None = None
    for col, value, t in zip(columns, values, types, strict=True):
        lit = _lit(value, t)
        step = (col > lit) if strict == ">" else (col < lit)
        term = step if prefix is None else (prefix & step)
        out = term if out is None else (out | term)
        eq = col == lit
        prefix = eq if prefix is None else (prefix & eq)
    assert out is not None and prefix is not None
    if op in (">=", "<="):
        out = out | prefix
    return _not_null(out)


class _Compiler:
    def __init__(self, spec: PartitionSpec, schema: NamespaceSchema) -> None:
        self.spec = spec
        self.schema = schema

    # -- helpers ---------------------------------------------------------------------------
    def _source(self, column: str) -> pa.Field | None:
        idx = self.schema.arrow.get_field_index(column)
        return self.schema.arrow.field(idx) if idx >= 0 else None

    def _fields_of(self, column: str) -> tuple[pa.Field | None, list[PartitionField]]:
        src = self._source(column)
        if src is None:
            return None, []
        sid = field_id_of(src)
        return src, [f for f in self.spec.fields if f.source_ids == (sid,)]

    def _col(self, pf: PartitionField) -> Expr:
        return pc.field(partition_column(pf.field_id))

    def _rtype(self, pf: PartitionField) -> pa.DataType:
        return pf.arrow_result_type(self.schema)

    def _value(self, pf: PartitionField, v: Any, t: pa.DataType) -> Any:
        """The partition value a source value ``v`` maps to."""
        if pf.transform is not None:
            return pf.transform.apply_scalar([v], [t])
        assert pf.expression is not None
        try:
            return evaluate_expression_scalar(pf.expression, [v], [t], self._rtype(pf))
        except PartitioningError as exc:
            raise _CannotPrune from exc

    # -- compile -----------------------------------------------------------------------------
    def compile(self, f: Filter) -> Expr | None:
        """An expression true for partitions that may match, or None for "all may match"."""
        if isinstance(f, TrueFilter | Opaque):
            return None
        if isinstance(f, Const):
            return None if f.value is True else pc.scalar(False)
        if isinstance(f, Approx):
            return self.compile(f.child)
        if isinstance(f, And):
            parts = [self.compile(c) for c in f.children]
            parts.extend(self._multi_bucket(f.children))
            kept = [p for p in parts if p is not None]
            return None if not kept else _and(kept)
        if isinstance(f, Or):
            parts = [self.compile(c) for c in f.children]
            if any(p is None for p in parts):
                return None
            return _or([p for p in parts if p is not None])
        try:
            return self._leaf(f)
        except _CannotPrune:
            return None

    def _leaf(self, f: Filter) -> Expr | None:
        if isinstance(f, Cmp):
            if f.op == "<=>":
                return self._leaf(IsNull(f.column)) if f.value is None else self._leaf(Cmp(f.column, "=", f.value))
            return self._cmp(f)
        if isinstance(f, In):
            return self._in(f)
        if isinstance(f, IsNull):
            return self._null(f.column, is_null=True)
        if isinstance(f, Like):
            return self._like(f)
        if isinstance(f, Not):
            if isinstance(f.child, IsNull):
                return self._null(f.child.column, is_null=False)
            if isinstance(f.child, Cmp) and f.child.op == "<=>":
                return self._not_null_safe_equal(f.child)
            return self._negated(f.child)
        return None

    def _cmp(self, f: Cmp) -> Expr | None:
        src, fields = self._fields_of(f.column)
        if src is None or not fields:
            return None
        v = coerce_literal(f.value, src.type)
        if pa.types.is_floating(src.type):
            return self._float_cmp(f.op, v, src.type, fields)
        conds: list[Expr] = []
        for pf in fields:
            col, rt = self._col(pf), self._rtype(pf)
            t = pf.transform
            if f.op == "=":
                conds.append(_not_null(col == _lit(self._value(pf, v, src.type), rt)))
            elif f.op == "!=" and isinstance(t, IdentityTransform):
                conds.append(_not_null(col != _lit(v, rt)))
            elif f.op in ("<", "<=", ">", ">=") and isinstance(t, IdentityTransform):
                conds.append(_not_null(_compare(col, f.op, _lit(v, rt))))
            elif f.op in ("<", "<=", ">", ">=") and isinstance(t, TruncateTransform):
                # truncate is monotone (toward zero for numbers, a prefix for strings)
                bound = _lit(t.apply_scalar([v], [src.type]), rt)
                conds.append(_not_null(col >= bound if f.op in (">", ">=") else col <= bound))
        if f.op in ("<", "<=", ">", ">="):
            time = self._time_range(fields, f.op, v, src.type)
            if time is not None:
                conds.append(time)
        return _and(conds) if conds else None

    def _float_cmp(self, op: str, v: float, t: pa.DataType, fields: list[PartitionField]) -> Expr | None:
        """Spark's float order: NaN equals NaN and is above every number; -0.0 equals 0.0."""
        conds: list[Expr] = []
        for pf in fields:
            col = self._col(pf)
            if isinstance(pf.transform, IdentityTransform):
                wide = col.cast(pa.float64())
                nan = pc.coalesce(pc.is_nan(wide), pa.scalar(False))
                if math.isnan(v):
                    cond = {"=": nan, "!=": ~nan, "<": ~nan, "<=": wide.is_valid(), ">": pc.scalar(False), ">=": nan}
                    conds.append(_not_null(cond[op] & wide.is_valid()))
                    continue
                lit = pa.scalar(v, pa.float64())
                base = _not_null(wide != lit) | nan if op == "!=" else _not_null(_compare_eq(wide, op, lit))
                conds.append(base | nan if op in (">", ">=") else base)
            elif op == "=" and not math.isnan(v):
                hashed = {self._value(pf, x, t) for x in ([v, -v] if v == 0 else [v])}  # 0.0 == -0.0 in a set
                hashed.discard(None)
                rt = self._rtype(pf)
                conds.append(_not_null(pc.is_in(col, value_set=pa.array(sorted(hashed, key=repr), type=rt))))
        return _and(conds) if conds else None

    def _time_range(self, fields: list[PartitionField], op: str, v: Any, t: pa.DataType) -> Expr | None:
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
        columns = [self._col(pf) for pf in leading]
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

    def _in(self, f: In) -> Expr | None:
        src, fields = self._fields_of(f.column)
        if src is None or not fields:
            return None
        values = [coerce_literal(v, src.type) for v in f.values if v is not None]
        if pa.types.is_floating(src.type):
            parts = [self._float_cmp("=", v, src.type, fields) for v in values]
            if not parts:
                return pc.scalar(False)
            return None if any(p is None for p in parts) else _or([p for p in parts if p is not None])
        conds = []
        for pf in fields:
            mapped = {self._value(pf, v, src.type) for v in values}
            mapped.discard(None)
            rt = self._rtype(pf)
            conds.append(_not_null(pc.is_in(self._col(pf), value_set=pa.array(sorted(mapped, key=repr), type=rt))))
        return _and(conds) if conds else None

    def _null(self, column: str, *, is_null: bool) -> Expr | None:
        _, fields = self._fields_of(column)
        conds = [self._col(pf).is_null() if is_null else self._col(pf).is_valid() for pf in fields]
        return _and(conds) if conds else None

    def _like(self, f: Like) -> Expr | None:
        if f.kind == "pattern":
            prefix = _literal_prefix(f.text)
            if not prefix:
                return None
            f = Like(f.column, "starts", prefix)
        src, fields = self._fields_of(f.column)
        if src is None or not isinstance(coerce_literal(f.text, src.type), str):
            return None
        conds = []
        for pf in fields:
            col, t = self._col(pf), pf.transform
            if isinstance(t, IdentityTransform):
                fn = {"starts": pc.starts_with, "ends": pc.ends_with, "contains": pc.match_substring}[f.kind]
                conds.append(_not_null(fn(col, pattern=f.text)))
            elif isinstance(t, TruncateTransform) and f.kind == "starts":
                if len(f.text) >= t.width:
                    conds.append(_not_null(col == _lit(f.text[: t.width], self._rtype(pf))))
                else:
                    conds.append(_not_null(pc.starts_with(col, pattern=f.text)))
        return _and(conds) if conds else None

    def _not_null_safe_equal(self, f: Cmp) -> Expr | None:
        """``NOT (c <=> v)`` is TRUE for NULL ``c``: identity partitions other than ``v``, NULL included."""
        if f.value is None:
            return self._null(f.column, is_null=False)
        src, fields = self._fields_of(f.column)
        ident = [pf for pf in fields if isinstance(pf.transform, IdentityTransform)]
        if src is None or not ident:
            return None
        v = coerce_literal(f.value, src.type)
        return _and([pc.coalesce(self._col(pf) != _lit(v, self._rtype(pf)), pa.scalar(True)) for pf in ident])

    def _negated(self, child: Filter) -> Expr | None:
        """NOT IN / NOT LIKE on identity fields; anything else keeps every partition."""
        column = getattr(child, "column", None)
        if column is None:
            return None
        _, fields = self._fields_of(column)
        ident = [pf for pf in fields if isinstance(pf.transform, IdentityTransform)]
        if not ident:
            return None
        if isinstance(child, In) and any(v is None for v in child.values):
            return pc.scalar(False)  # x NOT IN (..., NULL) is never TRUE
        inner = self._leaf(child)
        if inner is None:
            return None
        return _and([_not_null(~inner & self._col(pf).is_valid()) for pf in ident])

    def _multi_bucket(self, children: Sequence[Filter]) -> list[Expr]:
        """multi_bucket fields whose every source has equality (or small IN) literals in this AND."""
        literals: dict[str, list[Any]] = {}
        for c in children:
            if isinstance(c, Cmp) and c.op in ("=", "<=>") and c.value is not None:
                literals[c.column] = [c.value]
            elif isinstance(c, In):
                literals[c.column] = [v for v in c.values if v is not None]
        out = []
        for pf in self.spec.fields:
            if not isinstance(pf.transform, MultiBucketTransform) and not (
                pf.expression is not None and len(pf.source_ids) > 1
            ):
                continue
            sources = [self.schema.top_level_field_by_id(i) for i in pf.source_ids]
            if any(s is None or s.name not in literals for s in sources):
                continue
            try:
                choices = [_hash_inputs([coerce_literal(v, s.type) for v in literals[s.name]]) for s in sources]  # type: ignore[union-attr]
            except _CannotPrune:
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
                        evaluate_expression_scalar(pf.expression, list(combo), types, self._rtype(pf))
                        for combo in combos
                    }
                except PartitioningError:
                    continue
            mapped.discard(None)
            out.append(
                _not_null(pc.is_in(self._col(pf), value_set=pa.array(sorted(mapped, key=repr), type=self._rtype(pf))))
            )
        return out


def _hash_inputs(values: list[Any]) -> list[Any]:
    """Values whose hashes a row equal to one of ``values`` may have: 0.0 also as -0.0."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, float) and math.isnan(v):
            raise _CannotPrune  # NaN payloads hash differently
        out.append(v)
        if isinstance(v, float) and v == 0:
            out.append(-v)
    return out


def _literal_prefix(pattern: str) -> str:
    """The plain text a backslash-escaped LIKE pattern starts with."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c in "%_":
            break
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _compare_eq(col: Expr, op: str, lit: pa.Scalar) -> Expr:
    return col == lit if op == "=" else _compare(col, op, lit)


def _compare(col: Expr, op: str, lit: pa.Scalar) -> Expr:
    return {"<": col < lit, "<=": col <= lit, ">": col > lit, ">=": col >= lit}[op]


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


def _balanced(parts: Sequence[Expr], join: Any) -> Expr:
    """Parts joined as a balanced tree: a long left-deep chain overflows Arrow's stack."""
    level = list(parts)
    while len(level) > 1:
        paired = [join(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + level[len(paired) * 2 :]
    return level[0]


def _and(parts: Sequence[Expr]) -> Expr:
    return _balanced(parts, lambda a, b: a & b)


def _or(parts: Sequence[Expr]) -> Expr:
    return _balanced(parts, lambda a, b: a | b)


def partition_condition(f: Filter, spec: PartitionSpec, schema: NamespaceSchema) -> Expr | None:
    """For one spec version: an expression over manifest columns, None meaning "keep all".

    ``f`` must be bound (:func:`partitioning.sql.binding.bind`).
    """
    if size_of(f) > MAX_PRUNED_NODES:
        return None  # keeping every table is sound; Arrow cannot evaluate expressions this large
    with decimal.localcontext(DECIMAL_CONTEXT):
        return _Compiler(spec, schema).compile(f)
