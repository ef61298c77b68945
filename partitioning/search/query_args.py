"""A search's arguments checked, each in one line: the vector column, the query vectors, counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from partitioning.errors import InvalidInput, SchemaError, first_line
from partitioning.spec.vectors import is_vector_type, vector_dimension

__all__ = [
    "DEFAULT_METRIC",
    "DEFAULT_REFINE_FACTOR",
    "DISTANCE",
    "METRICS",
    "output_columns",
    "positive",
    "query_matrix",
    "resolve_vector_column",
    "vector_columns",
]

DISTANCE = "_distance"
METRICS = ("l2", "cosine", "dot")
DEFAULT_METRIC = "l2"


def output_columns(schema: pa.Schema, columns: Sequence[str] | None, added: str, what: str) -> tuple[str, ...]:
    """The columns a search returns (None: all), besides ``added`` (its ``what``, which no
    column of the namespace may be named)."""
    output = tuple(schema.names) if columns is None else tuple(columns)
    for c in output:
        if c not in schema.names:
            raise SchemaError(f"unknown column {c!r} in columns; columns are: {', '.join(schema.names)}")
    if added in output:
        raise InvalidInput(f"column {added!r} is the search's {what}; the namespace cannot have one")
    return output


def vector_columns(schema: pa.Schema) -> list[str]:
    """The namespace's vector columns (fixed-size lists of floats), in schema order."""
    return [f.name for f in schema if is_vector_type(f.type)]


def resolve_vector_column(schema: pa.Schema, column: str | None) -> tuple[str, int]:
    """``(column, dimension)``; ``None`` means the namespace's only vector column."""
    vectors = vector_columns(schema)
    if column is None:
        if len(vectors) == 1:
            return vectors[0], vector_dimension(schema.field(vectors[0]).type)
        if not vectors:
            raise SchemaError("the namespace has no vector column (a fixed-size list of float16/float32/float64)")
        raise InvalidInput(f"the namespace has several vector columns; pass column= one of: {', '.join(vectors)}")
    if column not in schema.names:
        raise SchemaError(f"unknown column {column!r}; columns are: {', '.join(schema.names)}")
    t = schema.field(column).type
    if not is_vector_type(t):
        hint = f"; vector columns are: {', '.join(vectors)}" if vectors else ""
        raise SchemaError(
            f"column {column!r} is {t}, not a vector column (a fixed-size list of float16/float32/float64){hint}"
        )
    return column, vector_dimension(t)


def query_matrix(vectors: Any, column: str, dimension: int) -> np.ndarray:
    """Query vectors as an ``(n, dimension)`` float32 matrix (one vector is ``n = 1``)."""
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"query vector for column {column!r} is not a list of numbers: {first_line(exc)}") from exc
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        got = matrix.shape[-1] if matrix.ndim else 0
        raise InvalidInput(f"query vector has dimension {got}, but column {column!r} has dimension {dimension}")
    if not np.isfinite(matrix).all():
        raise InvalidInput(f"query vector for column {column!r} holds NaN or infinite values")
    return matrix


# re-rank 10k index candidates per partition by exact distance (lancedb's refine_factor)
DEFAULT_REFINE_FACTOR = 10


def positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
