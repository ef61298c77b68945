"""``expression`` partition fields, evaluated with DataFusion (SPEC-NOTES 13).

``col0``...``colK`` stand for the source columns in ``source_ids`` order. The
spec's ``murmur3`` and ``murmur3_multi`` are registered as DataFusion UDFs backed
by this project's vectorized Arrow murmur3, so expression fields hash exactly as
the ``bucket`` transforms do.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from functools import lru_cache

import pyarrow as pa
from datafusion import SessionContext, udf

from partitioning import murmur3 as m3
from partitioning.errors import SpecError

_NON_DETERMINISTIC = re.compile(
    r"\b(random|now|uuid|current_date|current_time|current_timestamp|today|to_unixtime\s*\(\s*\))\b",
    re.IGNORECASE,
)
_local = threading.local()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Compiled:
    """A DataFusion context with the source table shape and the murmur3 UDFs registered."""

    def __init__(self, expression: str, source_types: tuple[pa.DataType, ...]) -> None:
        self.expression = expression
        self.source_types = source_types
        self.ctx = SessionContext()
        if source_types:
            self.ctx.register_udf(udf(m3.murmur3, [source_types[0]], pa.int32(), "immutable", "murmur3"))
            self.ctx.register_udf(udf(m3.murmur3_multi, list(source_types), pa.int32(), "immutable", "murmur3_multi"))
        self.lock = threading.Lock()

    def run(self, arrays: Sequence[pa.Array]) -> pa.Array:
        names = [f"col{i}" for i in range(len(arrays))]
        batch = pa.RecordBatch.from_arrays(list(arrays), names=names) if arrays else None
        with self.lock:
            if batch is not None:
                self.ctx.register_record_batches("src", [[batch]])
                sql = f"SELECT ({self.expression}) AS v FROM src"
            else:
                sql = f"SELECT ({self.expression}) AS v"
            try:
                table = self.ctx.sql(sql).to_arrow_table()
            finally:
                if batch is not None:
                    self.ctx.deregister_table("src")
        column = table.column("v")
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


@lru_cache(maxsize=256)
def _compiled(expression: str, source_types: tuple[pa.DataType, ...]) -> _Compiled:
    return _Compiled(expression, source_types)


def evaluate_expression(
    expression: str, arrays: Sequence[pa.Array | pa.ChunkedArray], result_type: pa.DataType
) -> pa.Array:
    """Evaluate ``expression`` over the source arrays and cast to ``result_type``."""
    combined = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    compiled = _compiled(expression, tuple(a.type for a in combined))
    try:
        out = compiled.run(combined)
    except Exception as exc:  # DataFusion raises plain Exception for execution errors
        raise SpecError(f"expression {expression!r} failed: {_first_line(exc)}") from exc
    if len(combined) and len(out) != len(combined[0]):
        raise SpecError(f"expression {expression!r} is not a per-row expression")
    try:
        return out.cast(result_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SpecError(
            f"expression {expression!r} returns {out.type}, which cannot be cast to result_type {result_type}"
        ) from exc


def validate_expression(expression: str, source_types: Sequence[pa.DataType], result_type: pa.DataType) -> None:
    """Reject an expression that is not deterministic, does not parse, or fails on a NULL row."""
    if not isinstance(expression, str) or not expression.strip():
        raise SpecError("expression must be a non-empty DataFusion SQL string")
    bad = _NON_DETERMINISTIC.search(expression)
    if bad:
        raise SpecError(f"expression {expression!r} uses {bad.group(1)!r}; partition expressions must be deterministic")
    for i in range(len(source_types), 10):
        if re.search(rf"\bcol{i}\b", expression):
            raise SpecError(
                f"expression {expression!r} refers to col{i} but only {len(source_types)} source column(s) are given"
            )
    nulls = [pa.nulls(1, t) for t in source_types]
    evaluate_expression(expression, nulls, result_type)


def evaluate_expression_scalar(
    expression: str, values: Sequence[object], types: Sequence[pa.DataType], result_type: pa.DataType
) -> object:
    """Evaluate an expression on one row of literals (used for pruning)."""
    arrays = [pa.array([v], type=t) for v, t in zip(values, types, strict=True)]
    return evaluate_expression(expression, arrays, result_type)[0].as_py()
