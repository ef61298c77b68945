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

Here each filter node is compiled, field by field; the expressions it is built from, and
the rules spanning several fields (time ranges, multi-source buckets), are in
:mod:`partitioning.state.pruning_terms`.
"""

from __future__ import annotations

import decimal
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import PartitioningError
from partitioning.spec.expression import evaluate_expression_scalar
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import IdentityTransform, TruncateTransform
from partitioning.sql.filters import (
    And,
    Approx,
    Cmp,
    Computed,
    Const,
    Filter,
    In,
    IsNull,
    Like,
    Not,
    Opaque,
    Or,
    TrueFilter,
    like_prefix,
    size_of,
)
from partitioning.sql.tokens import DECIMAL_CONTEXT
from partitioning.state.pruning_terms import (
    CannotPrune,
    Expr,
    all_of,
    any_of,
    coerce_literal,
    column_of,
    compare,
    compare_eq,
    literal,
    multi_bucket,
    not_null,
    time_range,
)

__all__ = ["partition_condition"]

MAX_PRUNED_NODES = 2_000


class _Compiler:
    """Compiles filters into conditions on the partition columns of one spec version."""

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
            raise CannotPrune from exc

    # -- compile -----------------------------------------------------------------------------
    def compile(self, f: Filter) -> Expr | None:
        """An expression true for partitions that may match, or None for "all may match"."""
        if isinstance(f, TrueFilter | Opaque | Computed):
            return None
        if isinstance(f, Const):
            return None if f.value is True else pc.scalar(False)
        if isinstance(f, Approx):
            return self.compile(f.child)
        if isinstance(f, And):
            parts = [self.compile(c) for c in f.children]
            parts.extend(multi_bucket(self.spec, self.schema, f.children))
            kept = [p for p in parts if p is not None]
            return None if not kept else all_of(kept)
        if isinstance(f, Or):
            parts = [self.compile(c) for c in f.children]
            if any(p is None for p in parts):
                return None
            return any_of([p for p in parts if p is not None])
        try:
            return self._leaf(f)
        except CannotPrune:
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
            col, rt = column_of(pf), self._rtype(pf)
            t = pf.transform
            if f.op == "=":
                conds.append(not_null(col == literal(self._value(pf, v, src.type), rt)))
            elif f.op == "!=" and isinstance(t, IdentityTransform):
                conds.append(not_null(col != literal(v, rt)))
            elif f.op in ("<", "<=", ">", ">=") and isinstance(t, IdentityTransform):
                conds.append(not_null(compare(col, f.op, literal(v, rt))))
            elif f.op in ("<", "<=", ">", ">=") and isinstance(t, TruncateTransform):
                # truncate is monotone (toward zero for numbers, a prefix for strings)
                bound = literal(t.apply_scalar([v], [src.type]), rt)
                conds.append(not_null(col >= bound if f.op in (">", ">=") else col <= bound))
        if f.op in ("<", "<=", ">", ">="):
            time = time_range(fields, f.op, v, src.type)
            if time is not None:
                conds.append(time)
        return all_of(conds) if conds else None

    def _float_cmp(self, op: str, v: float, t: pa.DataType, fields: list[PartitionField]) -> Expr | None:
        """Spark's float order: NaN equals NaN and is above every number; -0.0 equals 0.0."""
        conds: list[Expr] = []
        for pf in fields:
            col = column_of(pf)
            if isinstance(pf.transform, IdentityTransform):
                wide = col.cast(pa.float64())
                nan = pc.coalesce(pc.is_nan(wide), pa.scalar(False))
                if math.isnan(v):
                    cond = {"=": nan, "!=": ~nan, "<": ~nan, "<=": wide.is_valid(), ">": pc.scalar(False), ">=": nan}
                    conds.append(not_null(cond[op] & wide.is_valid()))
                    continue
                lit = pa.scalar(v, pa.float64())
                base = not_null(wide != lit) | nan if op == "!=" else not_null(compare_eq(wide, op, lit))
                conds.append(base | nan if op in (">", ">=") else base)
            elif op == "=" and not math.isnan(v):
                hashed = {self._value(pf, x, t) for x in ([v, -v] if v == 0 else [v])}  # 0.0 == -0.0 in a set
                hashed.discard(None)
                rt = self._rtype(pf)
                conds.append(not_null(pc.is_in(col, value_set=pa.array(sorted(hashed, key=repr), type=rt))))
        return all_of(conds) if conds else None

    def _in(self, f: In) -> Expr | None:
        src, fields = self._fields_of(f.column)
        if src is None or not fields:
            return None
        values = [coerce_literal(v, src.type) for v in f.values if v is not None]
        if pa.types.is_floating(src.type):
            parts = [self._float_cmp("=", v, src.type, fields) for v in values]
            if not parts:
                return pc.scalar(False)
            return None if any(p is None for p in parts) else any_of([p for p in parts if p is not None])
        conds = []
        for pf in fields:
            mapped = {self._value(pf, v, src.type) for v in values}
            mapped.discard(None)
            rt = self._rtype(pf)
            conds.append(not_null(pc.is_in(column_of(pf), value_set=pa.array(sorted(mapped, key=repr), type=rt))))
        return all_of(conds) if conds else None

    def _null(self, column: str, *, is_null: bool) -> Expr | None:
        _, fields = self._fields_of(column)
        conds = [column_of(pf).is_null() if is_null else column_of(pf).is_valid() for pf in fields]
        return all_of(conds) if conds else None

    def _like(self, f: Like) -> Expr | None:
        if f.kind == "pattern":
            prefix = like_prefix(f.text)
            if not prefix:
                return None
            f = Like(f.column, "starts", prefix)
        src, fields = self._fields_of(f.column)
        if src is None or not isinstance(coerce_literal(f.text, src.type), str):
            return None
        conds = []
        for pf in fields:
            col, t = column_of(pf), pf.transform
            if isinstance(t, IdentityTransform):
                fn = {"starts": pc.starts_with, "ends": pc.ends_with, "contains": pc.match_substring}[f.kind]
                conds.append(not_null(fn(col, pattern=f.text)))
            elif isinstance(t, TruncateTransform) and f.kind == "starts":
                if len(f.text) >= t.width:
                    conds.append(not_null(col == literal(f.text[: t.width], self._rtype(pf))))
                else:
                    conds.append(not_null(pc.starts_with(col, pattern=f.text)))
        return all_of(conds) if conds else None

    def _not_null_safe_equal(self, f: Cmp) -> Expr | None:
        """``NOT (c <=> v)`` is TRUE for NULL ``c``: identity partitions other than ``v``, NULL included."""
        if f.value is None:
            return self._null(f.column, is_null=False)
        src, fields = self._fields_of(f.column)
        ident = [pf for pf in fields if isinstance(pf.transform, IdentityTransform)]
        if src is None or not ident:
            return None
        v = coerce_literal(f.value, src.type)
        return all_of([pc.coalesce(column_of(pf) != literal(v, self._rtype(pf)), pa.scalar(True)) for pf in ident])

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
        return all_of([not_null(~inner & column_of(pf).is_valid()) for pf in ident])


def partition_condition(f: Filter, spec: PartitionSpec, schema: NamespaceSchema) -> Expr | None:
    """For one spec version: an expression over manifest columns, None meaning "keep all".

    ``f`` must be bound (:func:`partitioning.sql.binding.bind`).
    """
    if size_of(f) > MAX_PRUNED_NODES:
        return None  # keeping every table is sound; Arrow cannot evaluate expressions this large
    with decimal.localcontext(DECIMAL_CONTEXT):
        return _Compiler(spec, schema).compile(f)
