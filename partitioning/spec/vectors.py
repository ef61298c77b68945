"""Vector columns: fixed-size lists of float16/float32/float64 (issue 13).

A namespace column typed ``pa.list_(pa.float32(), d)`` holds vectors of dimension ``d``.
Writers accept any list of numbers (and Spark ML's ``VectorUDT``, which reaches Arrow
as a ``struct<type, size, indices, values>``) and turn it into the fixed-size list; a
row of another length is refused, NULL vectors stay NULL. Spark has no fixed-size list
and no half float, so reads hand Spark ``list<float32>`` / ``list<float64>``
(:func:`spark_facing_schema`).

The write protocol counts wrong lengths in the tasks (:func:`wrong_lengths`) and the
driver refuses the whole write with :func:`length_error`, so the count covers every row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import SchemaError

__all__ = [
    "as_lists",
    "cast_vectors",
    "is_ml_vector_type",
    "is_vector_type",
    "length_error",
    "spark_facing_schema",
    "spark_facing_type",
    "to_vectors",
    "vector_dimension",
    "wrong_lengths",
]

_FLOAT_TYPES = (pa.float16(), pa.float32(), pa.float64())
_ML_VECTOR_FIELDS = ("type", "size", "indices", "values")
_ML_DENSE = 1

Values: TypeAlias = "pa.Array | pa.ChunkedArray"


def is_vector_type(data_type: pa.DataType) -> bool:
    """True for ``pa.list_(float16|float32|float64, d)``, the vector column type."""
    return pa.types.is_fixed_size_list(data_type) and data_type.value_type in _FLOAT_TYPES


def vector_dimension(data_type: pa.DataType) -> int:
    """The dimension ``d`` of a vector column type (``ValueError`` for other types)."""
    if not is_vector_type(data_type):
        raise ValueError(f"{data_type} is not a vector type (a fixed-size list of float16/float32/float64)")
    return int(data_type.list_size)


def spark_facing_type(data_type: pa.DataType) -> pa.DataType:
    """What Spark reads a column as: a vector becomes ``list<float32|float64>``; others are unchanged."""
    if not is_vector_type(data_type):
        return data_type
    value = pa.float64() if data_type.value_type == pa.float64() else pa.float32()
    return pa.list_(pa.field("element", value, nullable=data_type.value_field.nullable))


def spark_facing_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every top-level vector column as :func:`spark_facing_type` (metadata kept)."""
    if not any(is_vector_type(t) for t in schema.types):
        return schema
    return pa.schema([f.with_type(spark_facing_type(f.type)) for f in schema], metadata=schema.metadata)


def is_ml_vector_type(data_type: pa.DataType) -> bool:
    """True for the Arrow form of Spark ML's ``VectorUDT``: ``struct<type, size, indices, values>``."""
    return pa.types.is_struct(data_type) and tuple(f.name for f in data_type) == _ML_VECTOR_FIELDS


def _densify(array: pa.StructArray) -> pa.Array:
    """Spark ML vectors (dense or sparse) as ``list<float64>``; NULL stays NULL."""
    kinds = pc.struct_field(array, "type")
    if not pc.any(pc.not_equal(kinds, _ML_DENSE)).as_py():
        return pc.struct_field(array, "values")
    rows: list[list[float] | None] = []
    for row in array.to_pylist():
        if row is None:
            rows.append(None)
        elif row["type"] == _ML_DENSE:
            rows.append(row["values"])
        else:
            dense = [0.0] * int(row["size"])
            for i, v in zip(row["indices"], row["values"], strict=True):
                dense[i] = v
            rows.append(dense)
    return pa.array(rows, pa.list_(pa.float64()))


def _per_chunk(values: Values, fn: Callable[[pa.Array], pa.Array]) -> Values:
    if isinstance(values, pa.ChunkedArray):
        chunks = [fn(c) for c in values.chunks]
        return pa.chunked_array(chunks, type=chunks[0].type) if chunks else values
    return fn(values)


def as_lists(values: Values, target: pa.DataType, column: str) -> Values:
    """``values`` as ``list<target's float type>``, any length (no check yet; NULL kept).

    Accepts lists, large lists and fixed-size lists of numbers, Spark ML vectors and an
    all-NULL column; anything else is refused naming the column."""
    value_type = target.value_type

    def convert(chunk: pa.Array) -> pa.Array:
        t = chunk.type
        if pa.types.is_null(t):
            return pa.nulls(len(chunk), pa.list_(value_type))
        if is_ml_vector_type(t):
            chunk = _densify(chunk)
            t = chunk.type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) or not (
            pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)
        ):
            raise SchemaError(f"column {column!r}: cannot store {t} in a vector column of type {target}")
        try:
            return chunk.cast(pa.list_(value_type), safe=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaError(f"column {column!r}: cannot cast {t} to {target}") from exc

    return _per_chunk(values, convert)


def wrong_lengths(values: Values, dimension: int) -> int:
    """How many non-NULL lists in ``values`` do not have ``dimension`` elements."""
    if len(values) == 0 or pa.types.is_null(values.type):
        return 0
    differs = pc.not_equal(pc.list_value_length(values), dimension)
    return int(pc.sum(differs.cast(pa.int64())).as_py() or 0)


def length_error(column: str, dimension: int, count: int) -> SchemaError:
    """The one-line error for ``count`` rows whose vector is not of ``dimension``."""
    rows = "1 row has" if count == 1 else f"{count} rows have"
    return SchemaError(f"column {column!r}: expected vectors of dimension {dimension}, {rows} another length")


def to_vectors(values: Values, target: pa.DataType, column: str) -> Values:
    """``values`` (every non-NULL one of ``target``'s dimension) as the vector type ``target``.

    Built by hand: pyarrow 26's list -> fixed-size list cast crashes the process on a
    chunk whose lists are all NULL (an empty child array)."""
    dimension = vector_dimension(target)

    def convert(chunk: pa.Array) -> pa.Array:
        if chunk.type == target:
            return chunk
        lists = as_lists(chunk, target, column)
        valid = lists.is_valid()
        mask = pc.invert(valid) if lists.null_count else None
        if mask is not None:
            lists = pc.if_else(valid, lists, pa.scalar([0] * dimension, lists.type))
        return pa.FixedSizeListArray.from_arrays(lists.flatten(), type=target, mask=mask)

    return _per_chunk(values, convert)


def cast_vectors(values: Values, target: pa.DataType, column: str) -> Values:
    """``values`` cast to the vector type ``target``, refusing wrong lengths (all counted)."""
    lists = as_lists(values, target, column)
    dimension = vector_dimension(target)
    bad = wrong_lengths(lists, dimension)
    if bad:
        raise length_error(column, dimension, bad)
    return to_vectors(lists, target, column)
