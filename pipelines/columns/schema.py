"""Spark schemas <-> namespace schemas (JsonArrowSchema with field ids).

Spark types map to Arrow as SPEC-NOTES 7 lists: TimestampType is
``timestamp[us, tz=UTC]`` and TimestampNTZType is ``timestamp[us]``, so every
Spark atomic type round-trips Spark -> JSON -> Spark unchanged.

Vector columns (:mod:`partitioning.spec.vectors`) read as Spark ``array<float>`` (float16 and
float32 vectors) or ``array<double>``. Spark has no fixed-size array, so a namespace made
from a Spark schema never has a vector column: ``array<float>`` becomes a variable list
(and a Spark ML ``VectorUDT`` column ``list<float64>``) unless an explicit Arrow schema
says ``pa.list_(pa.float32(), d)``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkTypeError
from pyspark.sql import types as T
from pyspark.sql.pandas import types as _pandas_types

from partitioning.errors import SchemaError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.schema import NamespaceSchema, check_widening
from partitioning.spec.vectors import spark_facing_schema

__all__ = [
    "from_arrow_schema",
    "from_arrow_type",
    "is_ml_vector",
    "merge_spark_schema",
    "namespace_schema_from_spark",
    "spark_schema",
    "spark_to_arrow_schema",
    "to_arrow_schema",
    "to_arrow_type",
]

# TimestampType as timestamp[us, tz=UTC]: PySpark 4.2+ takes ``timezone="UTC"``, 4.0/4.1 ``timestamp_utc=True``.
_UTC: dict[str, Any] = (
    {"timezone": "UTC"}
    if "timezone" in inspect.signature(_pandas_types.to_arrow_type).parameters
    else {"timestamp_utc": True}
)


def to_arrow_type(data_type: T.DataType, **kwargs: Any) -> pa.DataType:
    """PySpark's ``to_arrow_type`` with timestamps in UTC, on every supported PySpark."""
    return _pandas_types.to_arrow_type(data_type, **_UTC, **kwargs)


def to_arrow_schema(schema: T.StructType, **kwargs: Any) -> pa.Schema:
    """PySpark's ``to_arrow_schema`` with timestamps in UTC, on every supported PySpark."""
    return _pandas_types.to_arrow_schema(schema, **_UTC, **kwargs)


def from_arrow_type(arrow: pa.DataType) -> T.DataType:
    """PySpark's ``from_arrow_type``, a timestamp without a zone as TIMESTAMP_NTZ (PySpark's
    default only from 4.2)."""
    return _pandas_types.from_arrow_type(arrow, prefer_timestamp_ntz=True)


def from_arrow_schema(arrow: pa.Schema) -> T.StructType:
    """PySpark's ``from_arrow_schema``, a timestamp without a zone as TIMESTAMP_NTZ."""
    return _pandas_types.from_arrow_schema(arrow, prefer_timestamp_ntz=True)


def is_ml_vector(data_type: T.DataType) -> bool:
    """True for Spark ML's (or MLlib's) ``VectorUDT``, without importing ``pyspark.ml``."""
    return isinstance(data_type, T.UserDefinedType) and type(data_type).__name__ == "VectorUDT"


def spark_to_arrow_schema(struct: T.StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema, naming the column of any unsupported type.

    A ``VectorUDT`` column maps to ``list<float64>`` (its values; the dimension is unknown)."""
    fields = []
    for f in struct.fields:
        if is_ml_vector(f.dataType):
            fields.append(pa.field(f.name, pa.list_(pa.float64()), nullable=f.nullable))
            continue
        try:
            arrow_type = to_arrow_type(f.dataType, error_on_duplicated_field_names_in_struct=True)
        except (PySparkTypeError, TypeError, ValueError) as exc:
            raise SchemaError(
                f"column {f.name!r}: Spark type {f.dataType.simpleString()} cannot be stored in a Lance namespace"
            ) from exc
        fields.append(pa.field(f.name, arrow_type, nullable=f.nullable))
    return pa.schema(fields)


def namespace_schema_from_spark(struct: T.StructType) -> NamespaceSchema:
    """A new namespace schema for a Spark schema, with field ids assigned from 0.

    ``array<float>`` stays a variable-length list: a Spark schema carries no vector
    dimension, so pass an Arrow schema with ``pa.list_(pa.float32(), d)`` for a vector column.
    """
    return NamespaceSchema.from_arrow(spark_to_arrow_schema(struct))


def spark_schema(schema: NamespaceSchema | pa.Schema) -> T.StructType:
    """The Spark schema of a namespace schema (field-id metadata dropped; vectors as arrays)."""
    arrow = schema.plain if isinstance(schema, NamespaceSchema) else schema
    return from_arrow_schema(spark_facing_schema(arrow))


def merge_spark_schema(struct: T.StructType, ns: PartitionedNamespace) -> PartitionedNamespace:
    """Add ``struct``'s new columns to ``ns`` and widen the columns it holds wider types of."""
    arrow = spark_to_arrow_schema(struct)
    current = ns.namespace_schema.arrow
    new = [f.with_nullable(True) for f in arrow if f.name not in current.names]
    if new:
        ns.add_columns(new)
    for f in arrow:
        if f.name not in current.names:
            continue
        old = current.field(f.name).type
        if old == f.type:
            continue
        try:
            check_widening(f.name, old, f.type)
        except SchemaError:
            continue
        ns.widen_column(f.name, f.type)
    return ns.refresh()
