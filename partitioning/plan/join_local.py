"""The local join of one group: two in-memory Arrow tables joined as Spark's ``USING`` join does.

A storage-partitioned join (:mod:`partitioning.plan.join`) runs :func:`local_join` once per
group task, on the rows of that group's partition tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import InvalidInput
from partitioning.plan.join_columns import JOIN_TYPES

__all__ = ["local_join"]


_ARROW_JOIN_TYPE = {"inner": "inner", "left": "left outer", "right": "right outer", "full": "full outer"}
_LEFT_ROW = "__lance_join_left_row"
_RIGHT_ROW = "__lance_join_right_row"


def _any_null(table: pa.Table, keys: Iterable[str]) -> pa.Array:
    mask = pa.array(np.zeros(table.num_rows, dtype=bool))
    for k in keys:
        mask = pc.or_(mask, pc.is_null(table.column(k)).combine_chunks())
    return mask


def _comparable(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The key columns as Spark compares them in a join: floats with -0.0 as 0.0 and one NaN."""
    columns = []
    for k in keys:
        col = table.column(k)
        if pa.types.is_floating(col.type):
            nan = pa.scalar(float("nan"), col.type)
            col = pc.if_else(pc.is_nan(col), nan, pc.add(col, pa.scalar(0.0, col.type)))
        columns.append(col)
    return pa.Table.from_arrays(columns, names=list(keys))


def local_join(left: pa.Table, right: pa.Table, on: Sequence[str], how: str, output: pa.Schema) -> pa.Table:
    """SQL ``left JOIN right USING (on)`` of two in-memory tables, shaped as ``output``.

    ``output`` is :func:`join_output_schema`: the keys, the left non-key columns, then
    the right non-key columns, filled by position (so its names may repeat, or carry
    suffixes; a name on both sides is read from each side's own table). As in Spark, a
    key column is the left value (the right value for a right join) and, when that side
    has no row, the other side's.

    Rows with a NULL in any key never match (SQL semantics); they are split off before
    Arrow's hash join and emitted as unmatched rows by the outer joins that keep them, so
    the result does not depend on how Arrow compares NULL keys. Float keys are compared
    as Spark does (-0.0 equals 0.0, NaN equals NaN). Only the keys and a row number go
    through the hash join; every output column is gathered with ``take``, so non-key
    columns may be of any type (Arrow's join rejects nested non-key columns).
    """
    if how not in JOIN_TYPES:
        raise InvalidInput(f"unknown join type {how!r}; allowed: {', '.join(JOIN_TYPES)}")
    keys = list(on)
    left_rest = [c for c in left.column_names if c not in keys]
    right_rest = [c for c in right.column_names if c not in keys]
    lnull, rnull = _any_null(left, keys), _any_null(right, keys)
    lok, lbad = left.filter(pc.invert(lnull)), left.filter(lnull)
    rok, rbad = right.filter(pc.invert(rnull)), right.filter(rnull)
    lk = _comparable(lok, keys).append_column(_LEFT_ROW, pa.array(np.arange(lok.num_rows, dtype=np.int64)))
    rk = _comparable(rok, keys).append_column(_RIGHT_ROW, pa.array(np.arange(rok.num_rows, dtype=np.int64)))
    joined = lk.join(rk, keys=keys, join_type=_ARROW_JOIN_TYPE[how], coalesce_keys=True)
    lrows, rrows = lok.take(joined.column(_LEFT_ROW)), rok.take(joined.column(_RIGHT_ROW))
    first, second = (rrows, lrows) if how == "right" else (lrows, rrows)
    key_columns = [pc.coalesce(first.column(k), second.column(k)) for k in keys]
    pieces = [_assemble(key_columns, lrows.select(left_rest), rrows.select(right_rest), output)]
    no_left, no_right = lbad.select(left_rest).slice(0, 0), rbad.select(right_rest).slice(0, 0)
    if how in ("left", "full") and lbad.num_rows:
        pieces.append(_assemble([lbad.column(k) for k in keys], lbad.select(left_rest), no_right, output))
    if how in ("right", "full") and rbad.num_rows:
        pieces.append(_assemble([rbad.column(k) for k in keys], no_left, rbad.select(right_rest), output))
    return pa.concat_tables(pieces)


def _assemble(keys: Sequence[pa.ChunkedArray], left: pa.Table, right: pa.Table, output: pa.Schema) -> pa.Table:
    """Keys, left and right columns as ``output``; an empty side (0 rows) becomes NULLs."""
    n = len(keys[0]) if keys else 0
    columns: list[pa.ChunkedArray | pa.Array] = list(keys)
    for part in (left, right):
        if part.num_rows == 0 and n:
            columns += [pa.nulls(n, part.schema.field(i).type) for i in range(part.num_columns)]
        else:
            columns += [part.column(i) for i in range(part.num_columns)]
    casted = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, output, strict=True)]
    return pa.Table.from_arrays(casted, schema=output)
